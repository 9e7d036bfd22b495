"""A simulated web on loopback for crawler tests.

``Web`` (model.py) is the deterministic ground truth, ``SimWebServer``
(server.py) serves it as an HTTP forward proxy, ``SimWebProcess``
(process.py) runs that server in a subprocess, and ``Ledger`` (ledger.py)
analyses what the server saw.
"""

from .ledger import Ledger
from .model import PAGE_MODES, ROBOTS_MODES, HostSpec, Link, Web
from .process import SimWebProcess

__all__ = ["PAGE_MODES", "ROBOTS_MODES", "HostSpec", "Ledger", "Link", "SimWebProcess", "Web"]
