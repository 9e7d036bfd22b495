"""A test web that is real at the network level: DNS on loopback, one address per host.

Beside ``tests/simweb`` (one proxy answering every name, for scale and
faults), this web proves what depends on the network itself: names answered
by a DNS server on 127.0.0.1 (:mod:`tests.realweb.dns`), hosts on their own
loopback addresses (127.0.0.0/8 and ``::1``), HTTP and HTTPS with a test CA.

``Web``/``Host``/``Page`` (spec.py) describe a web, ``RealWebProcess``
(process.py) runs it in a subprocess (server.py, control.py, listen.py),
and ``Ledger`` (ledger.py) answers questions about the requests it saw.
"""

from .dns import Name
from .ledger import Ledger, Request
from .process import RealWebProcess
from .spec import (
    Host,
    Page,
    Web,
    links_to,
    page,
    redirect,
    shared_hosting,
    to_https,
    web_of,
)

__all__ = ["Host", "Ledger", "Name", "Page", "RealWebProcess", "Request", "Web", "links_to",
           "page", "redirect", "shared_hosting", "to_https", "web_of"]
