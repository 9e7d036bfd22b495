"""``scrapy acl``: the Redis ACL line of a least-privilege frontier user.

::

    scrapy acl worker --user crawl-worker --password-file /etc/broadcrawl/worker-pw
    scrapy acl reader --user crawl-reader --password-file /etc/broadcrawl/reader-pw

prints one ``user ...`` line for the Redis ``aclfile`` (or, after ``ACL
SETUSER``, the same words): the keys of the spider's frontier (every crawl
id) and seed list, and only the commands that role sends
(:mod:`crawler.frontier.acl`). The password goes in as its SHA-256, so the
printed line holds no secret; without ``--password-file`` it holds a
placeholder to replace. ``--cluster`` (or ``REDIS_CLUSTER``) adds what a
Cluster client asks of the nodes. Nothing connects to Redis.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.frontier.acl import ROLES, acl_line, key_patterns


class Command(ScrapyCommand):
    """The ``scrapy acl`` command (see the module docstring)."""

    requires_project = True
    requires_crawler_process = False

    def syntax(self) -> str:
        return "worker|reader [--user NAME] [--password-file FILE] [--cluster]"

    def short_desc(self) -> str:
        return "Print the Redis ACL rule of a least-privilege frontier worker or reader"

    def long_desc(self) -> str:
        return (
            "worker: every command scrapy crawl and the frontier's changing operator commands "
            "send; reader: what scrapy frontier status, hosts, dead, crawls and host NAME "
            "send. Both on the spider's frontier keys (FRONTIER_NAMESPACE, every crawl id) "
            "and seed list (REDIS_START_URLS_KEY) only. Put the line in the Redis aclfile "
            "and turn the default user off. The password is read from --password-file (its "
            "first line) and printed only as its SHA-256."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group(title="ACL Options")
        group.add_argument("--spider", default="broad", metavar="NAME",
                           help="spider whose frontier the user may use (default broad)")
        group.add_argument("--user", metavar="NAME", help="the user's name (default: "
                           "broadcrawl-worker or broadcrawl-reader)")
        group.add_argument("--password-file", metavar="FILE",
                           help="the user's password, first line of FILE")
        group.add_argument("--cluster", action="store_true",
                           help="for a Redis Cluster (default: the REDIS_CLUSTER setting)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1 or args[0] not in ROLES:
            raise UsageError(f"give one role: {' or '.join(ROLES)}")
        settings = self.settings
        assert settings is not None
        password = None
        if opts.password_file:
            try:
                password = Path(opts.password_file).read_text().splitlines()[0].strip()
            except (OSError, UnicodeDecodeError, IndexError):
                print(f"--password-file {opts.password_file}: cannot read a password from it",
                      file=sys.stderr)
                self.exitcode = 1
                return
        namespace = settings.get("FRONTIER_NAMESPACE", "frontier:%(spider)s") % {
            "spider": opts.spider}
        start_urls = settings.get("REDIS_START_URLS_KEY", "")
        patterns = key_patterns(namespace, start_urls % {"name": opts.spider} or None)
        print(acl_line(opts.user or f"broadcrawl-{args[0]}", args[0], patterns, password,
                       cluster=opts.cluster or settings.getbool("REDIS_CLUSTER")))
