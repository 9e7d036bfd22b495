"""What a crawl learns about each site from the pages it fetched.

Two kinds of knowledge, both per host and both kept in the frontier so that
every worker shares them (``crawler/frontier/sitefacts.py``):

- **URL equivalence** (:mod:`.variants`): a query parameter that never
  changes the page served on a host is noise there, and URLs differing only
  in it are one page.
- **Traps** (:mod:`.traps`): a URL pattern whose pages keep coming back
  alike is generated, and the rest of it is not worth a request.

The modules here are pure decisions; :mod:`.worker` is the worker's side
(a cache of the rules, the observations sent in batches).
"""
