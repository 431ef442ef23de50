#!/usr/bin/env bash
# Set up (first time) and run the default test suite. Extra arguments go to pytest,
# e.g. `scripts/test.sh -m slow` for the slow quality runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
# systemd-analyze verifies the shipped units (Debian's systemd package provides it).
if ! command -v systemd-analyze >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null) \
    || echo "test: could not install systemd; unit verification will be skipped" >&2
fi
exec .venv/bin/python -m pytest "$@"
