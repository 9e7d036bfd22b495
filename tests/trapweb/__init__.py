"""A test web of noise parameters, misleading canonicals and crawler traps.

``TrapWeb`` (model.py) is the deterministic ground truth; it is served by the
simulated web's own server (``tests.simweb.server``) through ``TrapWebProcess``
(process.py), and the server's ledger is read with ``tests.simweb.Ledger``.
"""

from .model import KINDS, PARAM_POOL, TRAP_KINDS, Page, TrapWeb
from .process import TrapWebProcess

__all__ = ["KINDS", "PARAM_POOL", "TRAP_KINDS", "Page", "TrapWeb", "TrapWebProcess"]
