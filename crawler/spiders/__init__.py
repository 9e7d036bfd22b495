"""Spiders of the crawler; ``broad`` is the one most users run."""
