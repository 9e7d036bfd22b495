"""A test web that is real at the network level: DNS on loopback, one address per host.

Beside ``tests/simweb`` (one proxy answering every name, for scale and
faults), this web proves what depends on the network itself: names answered
by a DNS server on 127.0.0.1 (:mod:`tests.realweb.dns`), hosts on their own
loopback addresses (127.0.0.0/8 and ``::1``), HTTP and HTTPS with a test CA.
"""
