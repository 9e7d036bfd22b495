"""WARC output: what was exchanged with a server, archived as ISO 28500 records.

- :mod:`crawler.warc.exchange` - one request and its response as received
  (the unit everything else archives);
- :mod:`crawler.warc.records` - warcio records for an exchange (request,
  response, revisit, warcinfo) and the payload digest;
- :mod:`crawler.warc.files` - rotating ``.warc.gz`` files with a CDXJ index
  each, ``.open`` while written;
- :mod:`crawler.warc.openwarc` - the one file being written: locked, each
  record and its index line written both or neither, synced and renamed;
- :mod:`crawler.warc.recovery` - completing a dead writer's ``.open`` file;
- :mod:`crawler.warc.cdxj` - SURT keys, index lines and lookups by URL;
- :mod:`crawler.warc.writer` - the writer thread behind a bounded queue and
  the crawl-wide digest index (revisits across workers).
"""
