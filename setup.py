"""Egg builds for scrapyd: ``scrapyd-deploy`` runs ``python setup.py bdist_egg``.

Everything else comes from ``pyproject.toml``, which setuptools reads here
too (and which ``pip install`` uses through the same backend): the metadata,
the ``crawler`` packages only (``tests``, ``bench`` and ``docs`` stay out),
the frontier's Lua scripts as package data, the ``scrapy`` entry point
naming the settings module, which scrapyd's runner reads from the egg, and
the ``scrapy.commands`` entry points (``scrapy frontier``, ``warc``,
``partition`` in any project that installed broadcrawl, the add-on's too).
Do not repeat those here: setuptools ignores ``setup()`` arguments for
fields that ``pyproject.toml`` declares.

The egg is zip-safe: package data is read with ``pkgutil.get_data``, never
through ``__file__``, so it works from the zipped egg that scrapyd activates
(tests/test_scrapyd.py imports the project from a built egg to check).
"""

from setuptools import setup

setup(zip_safe=True)
