"""Benchmarks of the crawler, each run side by side with a baseline in one process.

Every benchmark is ``python -m bench.NAME`` (``--quick`` for a smoke run,
``--runs N`` for more repetitions, ``--json PATH`` for ``bench.run_all``), and
``python -m bench.run_all`` runs them all and rewrites ``bench/README.md``.
Nothing here sends a packet outside 127.0.0.0/8: crawls reach their hosts
through a loopback proxy and resolve every name to 127.0.0.1.
"""
