"""Crawl reports: what a crawl did, host by host and seed by seed.

Each worker tallies what its downloader saw (:mod:`~crawler.reports.tally`,
fed by :mod:`crawler.middlewares.report`); the tallies of every worker of a
crawl meet in the frontier (:mod:`crawler.frontier.reports`), so a report
covers the whole crawl whichever machine writes it; :mod:`~crawler.reports.write`
turns them, with what the frontier still holds, into CSV and JSON files for
tools and one self-contained HTML page for people.
"""
