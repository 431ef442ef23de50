"""`ReverieError`: the one root every error the daemon raises on purpose derives from.

Each system keeps its own error classes (a `FactError`, a `WhenError`, a `ModelError` …) and
their standard bases where a caller relies on them (`ValueError` for bad input); all of them
are also `ReverieError`s, so a boundary that must tell the daemon's own refusals from a bug
can catch exactly those (`tests/test_errors.py` fails on an error class that is not one).
"""

from __future__ import annotations


class ReverieError(Exception):
    """An error the daemon raises on purpose, with a message meant for a person to read."""
