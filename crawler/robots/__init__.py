"""robots.txt per RFC 9309: parsing and matching rules, fetching, and the crawl policy."""
