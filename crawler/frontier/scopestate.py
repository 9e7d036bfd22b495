"""The crawl's scope, shared by every worker through Redis.

Each worker knows its own seeds; a fleet fed partitioned seed files must
still agree on where the crawl may go, or a worker would drop the links to
another worker's sites. So what a seed covers (its registered domain, host
name and SURT prefix: :meth:`crawler.scope.rules.Scope.add_seed`) goes to a
set, and each form new to the set to a log (``lua/scope_add.lua``, one slot:
``{ns/scope}``); every worker reads the log from its own offset, a batch a
second, and widens its scope with what others added. (A link off scope found
before another worker's seeds came is held for a while, not dropped:
crawler/middlewares/scope.py.)

An operator's change of the mode, hops or rules (``scrapy frontier scope``)
goes in the same log, as ``x:`` and the rules' JSON (``x:`` alone: back to
each worker's settings), and in ``{ns/scope}:rules`` to be shown: every
worker puts it in force at its next read, within a second, and a worker
started later finds it in the log too (the key is only what the command
shows).
"""

from __future__ import annotations

from typing import Any

from crawler.frontier.keys import Keys
from crawler.frontier.store import script_source
from crawler.scope.rules import Rules, Scope

#: A log entry that is an operator's rules (``x:`` + JSON), not a seed's form.
RULES_ENTRY = "x:"

#: Forms read from the log at most per call.
READ_MAX = 10_000


class SharedScope:
    """The scope's seed forms in Redis: add this worker's, read everyone's."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = [keys.scope_forms(), keys.scope_log()]
        self._add = client.register_script(script_source("scope_add"))
        #: How many entries of the log this worker has read.
        self.offset = 0

    async def add(self, forms: list[str]) -> int:
        """Add ``forms``; returns how many were new to the crawl."""
        if not forms:
            return 0
        return int(await self._add(keys=self.keys, args=forms))

    async def news(self) -> list[str]:
        """The forms added since the last call (by any worker, this one included)."""
        entries = await self.client.lrange(self.keys[1], self.offset,
                                           self.offset + READ_MAX - 1)
        self.offset += len(entries)
        return [e.decode() if isinstance(e, bytes) else e for e in entries]


def rules_in(entries: list[str]) -> tuple[list[str], list[Rules | None]]:
    """The log's entries apart: the seeds' forms, and the operator's rules in
    the order they came (None: back to the settings). Rules that cannot be
    read are skipped (:class:`crawler.scope.rules.ScopeError` is the caller's
    to log, from :func:`read_rules`)."""
    forms: list[str] = []
    rules: list[Rules | None] = []
    for entry in entries:
        if not entry.startswith(RULES_ENTRY):
            forms.append(entry)
            continue
        body = entry[len(RULES_ENTRY):]
        try:
            rules.append(Rules.parse(body) if body else None)
        except ValueError:
            continue
    return forms, rules


def read_rules(client: Any, keys: Keys) -> Rules | None:
    """The operator's rules in force (None: each worker's settings)."""
    raw = client.get(keys.scope_rules())
    return Rules.parse(raw.decode()) if raw else None


def write_rules(client: Any, keys: Keys, rules: Rules | None) -> None:
    """Put ``rules`` in force for every worker (None: back to their settings)."""
    pipe = client.pipeline(transaction=False)  # (workers read the log's copy, not the key)
    if rules is None:
        pipe.delete(keys.scope_rules())
        pipe.rpush(keys.scope_log(), RULES_ENTRY)
    else:
        pipe.set(keys.scope_rules(), rules.json())
        pipe.rpush(keys.scope_log(), RULES_ENTRY + rules.json())
    pipe.execute()


def scope_in_force(client: Any, keys: Keys, own: Rules) -> tuple[Scope, bool]:
    """The scope every worker decides by now (a blocking client): the operator's
    rules if set, else ``own`` (the reader's settings), with every seed's
    forms; and whether the rules are the operator's."""
    operator = read_rules(client, keys)
    return scope_with_forms(client, keys, operator or own), operator is not None


def scope_with_forms(client: Any, keys: Keys, rules: Rules) -> Scope:
    """A scope deciding by ``rules``, with every seed's forms (a blocking client)."""
    scope = Scope()
    scope.use(rules)
    for form in client.sscan_iter(keys.scope_forms(), count=1000):
        scope.add_form(form.decode())
    return scope
