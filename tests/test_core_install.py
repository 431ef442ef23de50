"""The package installs with its core dependencies alone and `fetch_url` extracts a page.

The check itself is scripts/check_core_install.py, a step of its own in .ci/run (a fresh venv
and a full pip install take a minute or more, too long for the default run); this runs it
under pytest for `-m slow`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_core_only_install_fetches_an_html_page() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_core_install.py")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fetch_url extracted the article in a core-only install" in done.stdout


def test_ci_runs_the_core_install_check() -> None:
    steps = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert ".venv/bin/python scripts/check_core_install.py" in steps
