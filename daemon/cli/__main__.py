"""`python -m daemon.cli`: the `reverie` program (tests and benches start the daemon this way)."""

import sys

from daemon.cli import main

sys.exit(main())
