"""The file tools' fixed output limits, read by their declarations (`daemon.tools.files`, what
the model is told) and by their implementation (`daemon.tools.tree`, what it does), so the
declarations need not import the implementation when the daemon starts."""

from __future__ import annotations

# A listing shows this many entries, then says how many more there are.
LIST_MAX_ENTRIES = 500
# A search shows this many matching lines, each cut to this many characters.
SEARCH_MAX_MATCHES = 200
SEARCH_LINE_CHARS = 300
