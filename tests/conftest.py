"""Shared fixtures. Async tests run under anyio's pytest plugin on asyncio."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Real model requests are blocked in tests: no key, and the offline provider is the default.
os.environ.pop("ANTHROPIC_API_KEY", None)
os.environ.pop("OPENAI_API_KEY", None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home_dir(tmp_path: Path) -> Path:
    """A fresh, scaffolded home directory."""
    from daemon.paths import Home

    home = Home(tmp_path / "home")
    home.ensure()
    return home.root
