"""A crawl's scope: where it may go (rules.py), decided before the frontier."""
