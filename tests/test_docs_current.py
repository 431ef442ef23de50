"""The docs' generated tables match the code, their links resolve, and the check notices when not.

`scripts/gen_docs.py` renders the command table from the CLI parsers and the hook table from
`daemon.events.HOOKS`; when a command, an option or a hook changes, this test fails and says
how to regenerate.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gen_docs.py"


def gen_docs(*args: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def check(root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return gen_docs("--check", root=root)


def test_generated_docs_are_current_and_links_resolve() -> None:
    result = check()
    assert result.returncode == 0, result.stderr


def test_readme_keeps_the_two_commands_on_its_first_screen() -> None:
    first_screen = (REPO / "README.md").read_text(encoding="utf-8").splitlines()[:40]
    fenced = {line.strip() for line in first_screen if line.startswith("./scripts/")}
    assert {"./scripts/run-daemon.sh", "./scripts/test.sh"} <= fenced
    assert "./scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    (tmp_path / "bench").mkdir()
    shutil.copy(REPO / "bench" / "README.md", tmp_path / "bench" / "README.md")
    # Links out of the docs (config/, scripts/) resolve against the real repository.
    for name in ("config", "scripts", "systemd", "tests", ".ci"):
        (tmp_path / name).symlink_to(REPO / name)
    # Current for the code as it is now, so each test below sees only the drift it makes.
    assert gen_docs(root=tmp_path).returncode == 0
    return tmp_path


def test_a_stale_table_is_reported_with_the_command_to_regenerate(docs_copy: Path) -> None:
    assert check(docs_copy).returncode == 0
    readme = docs_copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `reverie journal"))
    readme.write_text(text.replace(row + "\n", ""), encoding="utf-8")

    result = check(docs_copy)

    assert result.returncode == 1
    assert "README.md" in result.stderr
    assert "scripts/gen_docs.py" in result.stderr


def test_a_stale_hook_table_is_reported(docs_copy: Path) -> None:
    page = docs_copy / "docs" / "architecture.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("| `woke` | observer | 5 s", "| `woke` | gate | 5 s"), "utf-8")

    result = check(docs_copy)

    assert result.returncode == 1
    assert "docs/architecture.md" in result.stderr


def test_broken_links_and_unlisted_pages_are_reported(docs_copy: Path) -> None:
    (docs_copy / "docs" / "orphan.md").write_text(
        "# Orphan\n\nSee [memory](memory.md#no-such-heading) and [gone](gone.md).\n", "utf-8"
    )

    result = check(docs_copy)

    assert result.returncode == 1
    assert "README.md does not link to docs/orphan.md" in result.stderr
    assert "link memory.md#no-such-heading: no heading with that anchor" in result.stderr
    assert "link gone.md: no such file" in result.stderr


def test_an_undocumented_error_code_is_reported(docs_copy: Path) -> None:
    page = docs_copy / "docs" / "protocol.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("`spend_cap`", "the spend cap code"), "utf-8")

    result = check(docs_copy)

    assert result.returncode == 1
    assert "error code `spend_cap`" in result.stderr
