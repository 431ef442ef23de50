"""Run `reverie` with crash handlers at named fault points: the crash tests' daemon.

`python -m tests.faults POINT[,POINT…] ARGS…` installs, for each point (`daemon.faults.POINTS`),
a handler that ends the process at once with status 137 (as a SIGKILL would: no cleanup, no
flush), then runs `reverie ARGS…`. Only the test harness starts the daemon this way; the
daemon itself reads no environment variable or setting that could make it crash.
"""

from __future__ import annotations

import os
import sys

from daemon.faults import install

CRASH_STATUS = 137


def crash() -> None:
    os._exit(CRASH_STATUS)


def main(argv: list[str]) -> int:
    points, *args = argv
    for point in points.split(","):
        install(point, crash)
    from daemon.cli import main as reverie

    return reverie(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
