"""Small text statistics: words, counts, slugs and a report."""

__version__ = "0.1.0"
