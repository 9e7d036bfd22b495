"""Where a request the engine enqueues goes: a retry, a duplicate, or an admission.

Every request Scrapy's engine hands the scheduler (``enqueue_request``,
through :meth:`WorkerFrontier.offer`) is sorted here before anything is
sent: a retry of a URL this worker holds leased (its lease's ticket rides in
the request's meta) goes back as a release of that lease, not as a new URL;
a link this worker offered lately is a duplicate at once, without asking
Redis (:mod:`.recent`; with inlink priority on, a bare fingerprint that
raises the queued URL all the same); anything else goes through the intake
(:mod:`.intake`, the one place that refuses) and, admitted, into the sync's
next batch (:mod:`.sync`). The worker's frontier (:mod:`.worker`) owns the
parts used here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.frontier.values import Admission, Limits
from crawler.lease import TICKET_META, Ticket
from crawler.sitemaps import LASTMOD_META
from crawler.urls import ParamStripper, canonical_host_key, url_fingerprint, url_forms

if TYPE_CHECKING:
    from scrapy import Request, Spider

    from crawler.scheduling.intake import Intake
    from crawler.scheduling.leases import LeaseTable
    from crawler.scheduling.recent import RecentOffers
    from crawler.scheduling.sync import Sync


class Offers:
    """Sorts the requests the engine enqueues (see the module docstring)."""

    def __init__(self, spider: Spider, stripper: ParamStripper, limits: Limits, stats: Any,
                 leases: LeaseTable, recent: RecentOffers, intake: Intake, sync: Sync) -> None:
        self.spider = spider
        self.stripper = stripper
        self.limits = limits
        self.stats = stats
        self.leases = leases
        self.recent = recent
        self.intake = intake
        self.sync = sync

    def __call__(self, request: Request) -> bool:
        """Whether ``request`` was taken: a retry released, or a URL to admit."""
        forms = url_forms(request.url, self.stripper)
        sent, canon = forms if forms is not None else (None, None)
        ticket = request.meta.pop(TICKET_META, None)
        token = ticket.token if isinstance(ticket, Ticket) else None
        if token is not None and self.leases.is_retry(token, canon):
            self.sync.release(self.leases.retry(request, token))
            return True
        if request.dont_filter and token is None:
            self.intake.dont_filter(request)
        if (token is None and canon is not None and self.recent.known(canon)
                and LASTMOD_META not in request.meta):  # (its lastmod is Redis's to weigh)
            self.stats.inc_value("frontier/offered")
            self.sync.count_duplicates(1, local=True)
            if self.limits.inlink_boost:  # a link all the same: it raises the URL
                host = canonical_host_key(canon)
                self.sync.admit(Admission(canon, host, url_fingerprint(canon), ""))
            return False
        admission = self.intake.admission(request, sent, canon, self.spider)
        if admission is None:
            return False
        self.stats.inc_value("frontier/offered")
        if token is None and canon is not None:  # a redirect target is no link: not kept
            self.recent.offered(canon)
        self.sync.admit(admission)
        return True
