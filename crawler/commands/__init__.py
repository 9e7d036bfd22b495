"""Custom ``scrapy`` commands of the crawler."""
