"""How to tell that a library's code is still what ours expects, without running it.

:mod:`crawler.compat` relies on private Scrapy and Twisted names and tries
each of them before a crawl starts. Most of its tries are the same few
questions about someone else's code: does this module still have that name,
does this function's code still read that attribute, does this class's
``__init__`` still set it, does this function still take these parameters.
Those questions, and :class:`Probe` (a named try that reports what changed),
know nothing of Scrapy or Twisted and name no private name: they are here, so
that ``compat`` holds only what is about the private names themselves.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from types import CodeType, ModuleType
from typing import Any


class Probe:
    """One private name, and how to tell it is still what the code expects:
    each of ``tests`` raises when it changed."""

    def __init__(self, name: str, *tests: Callable[[], object]) -> None:
        self.name = name
        self.tests = tests

    def problem(self) -> str | None:
        """What changed (the first test that failed, and why), or None."""
        try:
            for test in self.tests:
                test()
        except Exception as e:
            return f"{self.name}: {type(e).__name__}: {e}"
        return None


def optional_module(name: str) -> ModuleType | None:
    """The module ``name``, or None when it cannot be imported (a probe says so later,
    with every other problem, rather than a bare ImportError at import time)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def attribute(module: ModuleType | None, module_name: str, name: str) -> Any:
    """``module.name``; raises, saying which is missing, when either is."""
    if module is None:
        raise ImportError(f"no module {module_name}")
    if not hasattr(module, name):
        raise AttributeError(f"{module_name} has no {name}")
    return getattr(module, name)


def callables(module: ModuleType | None, module_name: str, *names: str) -> None:
    """That ``module`` has each of ``names``, and each is callable."""
    for name in names:
        if not callable(attribute(module, module_name, name)):
            raise TypeError(f"{name} is not callable")


def names_read(func: Any) -> set[str]:
    """The attribute and global names a function's code reads or writes (nested code too)."""
    names: set[str] = set()
    codes: list[CodeType] = [inspect.unwrap(func).__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return names


def reads(func: Any, *names: str) -> None:
    """That ``func``'s code still uses each of ``names``."""
    if missing := [n for n in names if n not in names_read(func)]:
        raise AttributeError(f"{func.__qualname__} no longer uses {', '.join(missing)}")


def a_method_reads(cls: type, *names: str) -> bool:
    """Whether a function of ``cls``'s own reads each of ``names`` (e.g. an
    attribute and the method called on it)."""
    return any(inspect.isfunction(func) and set(names) <= names_read(func)
               for func in vars(cls).values())


def sets_in_init(cls: type, *names: str) -> None:
    """That ``cls`` (or a base) sets ``names`` in ``__init__``: attributes of instances only."""
    found: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if inspect.isfunction(init):
            found |= names_read(init)
    if missing := [n for n in names if n not in found]:
        raise AttributeError(f"{cls.__name__}.__init__ sets no {', '.join(missing)}")


def takes(func: Any, *params: str) -> None:
    """That ``func`` takes ``params`` first, and nothing else without a default."""
    got = list(inspect.signature(func).parameters)
    if got[:len(params)] != list(params) or any(
            p.default is inspect.Parameter.empty
            for p in list(inspect.signature(func).parameters.values())[len(params):]):
        raise TypeError(f"takes ({', '.join(got)}), not ({', '.join(params)})")


def accepts(func: Any, *names: str) -> None:
    """That ``func`` (a class: its constructor) takes each of ``names`` by name."""
    if missing := set(names) - set(inspect.signature(func).parameters):
        raise TypeError(f"takes no {', '.join(sorted(missing))}")
