#!/usr/bin/env bash
# Set up (first time) and run the daemon in the foreground on its embedded defaults.
# No API key needed: without ANTHROPIC_API_KEY the built-in offline model answers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh core
exec .venv/bin/reverie run "$@"
