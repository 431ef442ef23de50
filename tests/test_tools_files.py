"""The file tools on real files: reading, listing, searching (ripgrep and the Python search),
writing and editing inside the workspace, and every way out of it refused."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.paths import Home
from daemon.settings import AgentSettings, Settings, WorkspaceSettings
from daemon.tools.files import file_tools
from daemon.tools.registry import ToolContext, ToolOutcome, ToolRegistry
from daemon.tools.toolbox import work_tools
from daemon.tools.tree import LIST_MAX_ENTRIES, SEARCH_MAX_MATCHES
from daemon.tools.workspace import Workspace
from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env

pytestmark = pytest.mark.anyio

CTX = ToolContext(session_id="s-files", turn_id="t-files")
SEARCHES = pytest.mark.parametrize("use_ripgrep", [True, False], ids=["ripgrep", "python"])


def _settings(**workspace: Any) -> Settings:
    return Settings(workspace=WorkspaceSettings(**workspace))


class Bench:
    """A workspace under tmp_path, a directory outside it, and the tools over the workspace."""

    def __init__(self, tmp_path: Path, settings: Settings, *, use_ripgrep: bool = True) -> None:
        self.root = (tmp_path / "ws").resolve()
        self.root.mkdir(parents=True)
        self.outside = (tmp_path / "outside").resolve()
        self.outside.mkdir(parents=True)
        (self.outside / "secret.txt").write_text("the outside secret\n")
        self.workspace = Workspace((self.root,))
        self.registry = ToolRegistry(settings.agent.tool_output_max_chars)
        for tool in file_tools(self.workspace, settings, use_ripgrep=use_ripgrep):
            self.registry.register(tool)

    def put(self, rel: str, content: str | bytes) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    async def call(self, name: str, **args: Any) -> ToolOutcome:
        with anyio.fail_after(30):
            return await self.registry.call(name, args, CTX)

    async def ok(self, name: str, **args: Any) -> str:
        out = await self.call(name, **args)
        assert not out.is_error, out.content
        return out.content

    async def error(self, name: str, **args: Any) -> str:
        out = await self.call(name, **args)
        assert out.is_error, out.content
        return out.content

    async def preview(self, name: str, **args: Any) -> str:
        tool = self.registry.get(name)
        assert tool is not None and tool.preview is not None
        with anyio.fail_after(30):
            return await tool.preview(CTX, args)


@pytest.fixture
def bench(tmp_path: Path) -> Bench:
    return Bench(tmp_path, _settings())


def _repository(b: Bench) -> None:
    """A tree with nested .gitignore files, a negation, a .git directory and a binary file."""
    b.put(".gitignore", "build/\n*.log\n")
    b.put("src/.gitignore", "!keep.log\nsecret.txt\n")
    b.put(".git/config", "needle in the git config\n")
    b.put("a.txt", "needle at the top\nnothing here\n")
    b.put("build/out.py", "needle in the build\n")
    b.put("x.log", "needle in a log\n")
    b.put("src/b.py", "first\nNeedle in b\nneedle again in b\n")
    b.put("src/keep.log", "needle kept by negation\n")
    b.put("src/secret.txt", "needle ignored below\n")
    b.put("src/sub/c.py", "needle in c\n")
    b.put("src/sub/e.log", "needle in a nested log\n")
    b.put("src/blob.bin", b"needle\x00binary needle\n")


# --- read_file ---------------------------------------------------------------------------


async def test_read_file_numbers_lines_like_cat_n(bench: Bench) -> None:
    bench.put("notes/herons.txt", "alpha\nbeta\n\tgamma\n")
    out = await bench.ok("read_file", path="notes/herons.txt")
    assert out == "     1\talpha\n     2\tbeta\n     3\t\tgamma"
    # An absolute path inside the workspace is the same file.
    assert await bench.ok("read_file", path=str(bench.root / "notes/herons.txt")) == out


async def test_read_file_line_range_says_where_it_is(bench: Bench) -> None:
    bench.put("five.txt", "".join(f"line {i}\n" for i in range(1, 6)))
    out = await bench.ok("read_file", path="five.txt", start_line=2, end_line=3)
    assert out == "     2\tline 2\n     3\tline 3\n[lines 2-3 of 5]"
    tail = await bench.ok("read_file", path="five.txt", start_line=4)
    assert tail == "     4\tline 4\n     5\tline 5\n[lines 4-5 of 5]"
    assert "past the end" in await bench.error("read_file", path="five.txt", start_line=9)
    assert "before start_line" in await bench.error(
        "read_file", path="five.txt", start_line=3, end_line=2
    )


async def test_read_file_refuses_binary_and_undecodable_files(bench: Bench) -> None:
    bench.put("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    bench.put("latin.txt", "café\n".encode("latin-1"))
    assert "binary file" in await bench.error("read_file", path="image.png")
    assert "not UTF-8 text" in await bench.error("read_file", path="latin.txt")


async def test_read_file_over_the_size_limit_asks_for_a_range(tmp_path: Path) -> None:
    b = Bench(tmp_path, _settings(read_max_bytes=1024))
    b.put("big.txt", "".join(f"row {i:04d} {'x' * 40}\n" for i in range(200)))
    refusal = await b.error("read_file", path="big.txt")
    assert "over the 1024-byte read limit" in refusal and "start_line" in refusal
    part = await b.ok("read_file", path="big.txt", start_line=10, end_line=15)
    assert part.splitlines()[0] == f"    10\trow 0009 {'x' * 40}"
    assert part.endswith("[lines 10-15 of 200]")
    too_many = await b.error("read_file", path="big.txt", start_line=1, end_line=100)
    assert "more than the 1024-byte read limit" in too_many and "fewer lines" in too_many


async def test_read_file_stops_at_a_whole_line_within_the_output_limit(tmp_path: Path) -> None:
    b = Bench(tmp_path, Settings(agent=AgentSettings(tool_output_max_chars=600)))
    b.put("long.txt", "".join(f"entry number {i}\n" for i in range(1, 101)))
    out = await b.ok("read_file", path="long.txt")
    rows = out.splitlines()
    last = int(rows[-2].split("\t")[0])
    assert rows[-2] == f"{last:6}\tentry number {last}"
    assert rows[-1] == (
        f"[stopped at line {last} of 100: the output limit; continue with start_line={last + 1}]"
    )
    assert len(out) <= 600


async def test_read_file_directory_and_missing_file_are_errors(bench: Bench) -> None:
    bench.put("dir/inner.txt", "x\n")
    assert "is a directory" in await bench.error("read_file", path="dir")
    assert "does not exist" in await bench.error("read_file", path="nowhere.txt")


async def test_read_file_of_an_empty_file(bench: Bench) -> None:
    bench.put("empty.txt", "")
    assert await bench.ok("read_file", path="empty.txt") == "(empty.txt is empty)"


async def test_a_line_longer_than_the_read_limit_is_cut_never_held(tmp_path: Path) -> None:
    b = Bench(tmp_path, _settings(read_max_bytes=4096))
    line_bytes = 24 * 1024 * 1024
    with (b.root / "wide.txt").open("wb") as fh:
        fh.write("é".encode() + b"x" * (line_bytes - 3) + b"y\n")
        fh.write(b"second line\n")
    tracemalloc.start()
    try:
        out = await b.ok("read_file", path="wide.txt", start_line=1, end_line=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    rows = out.splitlines()
    assert rows[0].startswith("     1\té" + "x" * 100)
    assert f"[line 1 is {line_bytes} bytes, over the 4096-byte read limit: only its first " in out
    assert rows[-1] == "[lines 1-1 of 2]"
    # Read in blocks: a block and the kept start of the line, never the 24 MiB line.
    assert peak < 4 * 1024 * 1024, f"{peak} bytes allocated at the peak"
    # The line after it is read as usual, and asking for both is refused as too much.
    assert await b.ok("read_file", path="wide.txt", start_line=2) == (
        "     2\tsecond line\n[lines 2-2 of 2]"
    )
    assert "ask for fewer lines" in await b.error("read_file", path="wide.txt", start_line=1)


async def test_a_cut_line_ends_on_a_whole_character(tmp_path: Path) -> None:
    b = Bench(tmp_path, _settings(read_max_bytes=1024))
    # 1023 ASCII bytes, then a two-byte character straddling the limit.
    b.put("accent.txt", "a" * 1023 + "é" * 600 + "\n")
    out = await b.ok("read_file", path="accent.txt", end_line=1)
    assert out.splitlines()[0] == "     1\t" + "a" * 1023
    assert "[line 1 is 2223 bytes, over the 1024-byte read limit: only its first 1024" in out


# --- list_files --------------------------------------------------------------------------


async def test_list_files_respects_nested_gitignore_and_hides_git(bench: Bench) -> None:
    _repository(bench)
    (bench.root / "etc_link").symlink_to("/etc")
    out = await bench.ok("list_files")
    assert out.splitlines() == [
        ".gitignore",
        "a.txt",
        "etc_link@",
        "src/",
        "src/.gitignore",
        "src/b.py",
        "src/blob.bin",
        "src/keep.log",
        "src/sub/",
        "src/sub/c.py",
    ]


async def test_list_files_of_a_subdirectory_applies_the_gitignore_above_it(bench: Bench) -> None:
    _repository(bench)
    out = await bench.ok("list_files", path="src")
    # `*.log` from the root's .gitignore hides src/sub/e.log; src's own negation keeps keep.log.
    assert out.splitlines() == [
        "src/.gitignore",
        "src/b.py",
        "src/blob.bin",
        "src/keep.log",
        "src/sub/",
        "src/sub/c.py",
    ]


async def test_list_files_glob(bench: Bench) -> None:
    _repository(bench)
    assert (await bench.ok("list_files", pattern="*.py")).splitlines() == [
        "src/b.py",
        "src/sub/c.py",
    ]
    assert (await bench.ok("list_files", path="src", pattern="sub/*.py")).splitlines() == [
        "src/sub/c.py"
    ]
    assert "matches '*.rs'" in await bench.ok("list_files", pattern="*.rs")


@SEARCHES
async def test_a_search_through_a_line_of_megabytes_never_holds_it(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    b.put("huge.txt", "needle " + "x" * (16 * 1024 * 1024) + "\nneedle two\n")
    b.put("small.txt", "a needle\n")
    tracemalloc.start()
    try:
        out = await b.ok("search_files", pattern="needle")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.splitlines() == [
        "huge.txt:1:needle " + "x" * 293 + "…",
        "huge.txt:2:needle two",
        "small.txt:1:a needle",
    ]
    assert peak < 8 * 1024 * 1024, f"{peak} bytes allocated at the peak"


@SEARCHES
async def test_names_with_control_characters_are_written_out(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    b.put("a\nb.txt", "needle\n")
    b.put("c\x1b[2Jd/e\tf.txt", "needle\n")
    b.put("plain.txt", "needle\n")
    # One entry a line: a line break in a name cannot pass for a second entry.
    assert (await b.ok("list_files")).splitlines() == [
        "a\\x0ab.txt",
        "c\\x1b[2Jd/",
        "c\\x1b[2Jd/e\\x09f.txt",
        "plain.txt",
    ]
    assert (await b.ok("search_files", pattern="needle")).splitlines() == [
        "a\\x0ab.txt:1:needle",
        "c\\x1b[2Jd/e\\x09f.txt:1:needle",
        "plain.txt:1:needle",
    ]
    # The file itself is reached by its real name.
    assert await b.ok("read_file", path="a\nb.txt") == "     1\tneedle"


async def test_list_files_caps_the_entries_and_says_how_many_more(bench: Bench) -> None:
    for i in range(LIST_MAX_ENTRIES + 37):
        bench.put(f"many/f{i:04d}.txt", "")
    rows = (await bench.ok("list_files", path="many")).splitlines()
    assert len(rows) == LIST_MAX_ENTRIES + 1
    assert rows[-1] == "… and 37 more entries (narrow with path or pattern)"


# --- search_files ------------------------------------------------------------------------


@SEARCHES
async def test_search_files_finds_lines_gitignore_respected(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    _repository(b)
    out = await b.ok("search_files", pattern="needle")
    assert out.splitlines() == [
        "a.txt:1:needle at the top",
        "src/b.py:3:needle again in b",
        "src/keep.log:1:needle kept by negation",
        "src/sub/c.py:1:needle in c",
    ]
    # The binary file, the ignored files and .git are never searched.
    sub = await b.ok("search_files", pattern="needle", path="src", ignore_case=True)
    assert sub.splitlines() == [
        "src/b.py:2:Needle in b",
        "src/b.py:3:needle again in b",
        "src/keep.log:1:needle kept by negation",
        "src/sub/c.py:1:needle in c",
    ]
    assert (await b.ok("search_files", pattern=r"in \w$", glob="*.py")).splitlines() == [
        "src/b.py:2:Needle in b",
        "src/b.py:3:needle again in b",
        "src/sub/c.py:1:needle in c",
    ]
    assert await b.ok("search_files", pattern="needle", path="src/sub/c.py") == (
        "src/sub/c.py:1:needle in c"
    )
    assert await b.ok("search_files", pattern="absent-word") == "(no matches)"


@SEARCHES
async def test_a_fifo_in_the_workspace_blocks_no_tool(tmp_path: Path, use_ripgrep: bool) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    b.put("a.txt", "needle\n")
    os.mkfifo(b.root / "pipe")
    # Opening a FIFO for reading waits for a writer forever: it is listed, never read.
    assert await b.ok("search_files", pattern="needle") == "a.txt:1:needle"
    assert (await b.ok("list_files")).splitlines() == ["a.txt", "pipe"]
    assert "not a regular file" in await b.error("read_file", path="pipe")
    assert "not a regular file" in await b.error(
        "edit_file", path="pipe", old_string="a", new_string="b"
    )
    assert "not a regular file" in await b.error("write_file", path="pipe", content="b")


async def test_ripgrep_and_python_search_give_the_same_output(tmp_path: Path) -> None:
    assert shutil.which("rg"), "ripgrep is installed in this environment"
    rg = Bench(tmp_path / "rg", _settings(), use_ripgrep=True)
    py = Bench(tmp_path / "py", _settings(), use_ripgrep=False)
    for b in (rg, py):
        _repository(b)
        b.put("src/wide.txt", "needle " + "w" * 1000 + "\n")
        b.put("src/crlf.txt", "needle\r\nnext needle\r\n")
        b.put("src/latin.txt", "caf\xe9 needle\n".encode("latin-1"))
    for args in (
        {"pattern": "needle"},
        {"pattern": "NEEDLE", "ignore_case": True, "path": "src"},
        {"pattern": "e{2}", "glob": "src/*.txt"},
    ):
        assert await rg.ok("search_files", **args) == await py.ok("search_files", **args)
    wide = await py.ok("search_files", pattern="wwww")
    assert wide == "src/wide.txt:1:needle " + "w" * 293 + "…"


async def test_search_files_uses_ripgrep_when_installed(tmp_path: Path) -> None:
    # Look-behind is Python's syntax, not ripgrep's: which engine ran shows in the answer.
    rg = Bench(tmp_path / "rg", _settings(), use_ripgrep=True)
    py = Bench(tmp_path / "py", _settings(), use_ripgrep=False)
    for b in (rg, py):
        b.put("a.txt", "ab\n")
    assert "look-around" in await rg.error("search_files", pattern="(?<=a)b")
    assert await py.ok("search_files", pattern="(?<=a)b") == "a.txt:1:ab"


@SEARCHES
async def test_search_files_invalid_regex_is_a_clear_error(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    b.put("a.txt", "text\n")
    assert "invalid regular expression 'nee(dle'" in await b.error(
        "search_files", pattern="nee(dle"
    )
    # Even with nothing to search, a bad pattern is reported, not "no matches".
    (b.root / "a.txt").unlink()
    assert "invalid regular expression" in await b.error("search_files", pattern="nee(dle")


@SEARCHES
async def test_search_files_caps_the_matches(tmp_path: Path, use_ripgrep: bool) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    b.put("many.txt", "hit\n" * (SEARCH_MAX_MATCHES + 50))
    rows = (await b.ok("search_files", pattern="hit")).splitlines()
    assert len(rows) == SEARCH_MAX_MATCHES + 1
    assert rows[0] == "many.txt:1:hit" and rows[-2] == f"many.txt:{SEARCH_MAX_MATCHES}:hit"
    assert rows[-1] == "… and 50 more matches; narrow the pattern, path or glob"
    # Far past the cap the search stops early and says so.
    b.put("many.txt", "hit\n" * (SEARCH_MAX_MATCHES * 12))
    rows = (await b.ok("search_files", pattern="hit")).splitlines()
    assert rows[-1] == f"… more than {SEARCH_MAX_MATCHES} matches; narrow the pattern, path or glob"


@SEARCHES
async def test_listing_and_search_stop_at_whole_lines_within_the_output_limit(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(
        tmp_path,
        Settings(agent=AgentSettings(tool_output_max_chars=1000)),
        use_ripgrep=use_ripgrep,
    )
    for i in range(100):
        b.put(f"logbook/entry-{i:03d}.txt", f"heron sighting number {i}\n")
    listing = await b.ok("list_files", path="logbook")
    rows = listing.splitlines()
    assert len(listing) <= 1000 and rows[0] == "logbook/entry-000.txt"
    assert rows[-1] == f"… and {100 - (len(rows) - 1)} more entries (narrow with path or pattern)"
    found = await b.ok("search_files", pattern="heron")
    rows = found.splitlines()
    assert len(found) <= 1000 and rows[0] == "logbook/entry-000.txt:1:heron sighting number 0"
    assert all(r.endswith(f"number {i}") for i, r in enumerate(rows[:-1]))
    assert rows[-1] == (
        f"… and {100 - (len(rows) - 1)} more matches; narrow the pattern, path or glob"
    )


# --- write_file --------------------------------------------------------------------------


async def test_write_file_creates_the_file_and_its_directories(bench: Bench) -> None:
    out = await bench.ok("write_file", path="notes/2026/herons.md", content="# Herons\nseven\n")
    assert (bench.root / "notes/2026/herons.md").read_text() == "# Herons\nseven\n"
    assert out.startswith("wrote 15 bytes to notes/2026/herons.md (created)")
    assert "--- /dev/null\n+++ b/notes/2026/herons.md\n" in out
    assert "+# Herons\n+seven\n" in out


async def test_write_file_replaces_atomically_and_keeps_the_mode(bench: Bench) -> None:
    path = bench.put("script.sh", "echo one\n")
    path.chmod(0o751)
    inode = path.stat().st_ino
    out = await bench.ok("write_file", path="script.sh", content="echo two\n")
    assert path.read_text() == "echo two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    # A new inode: the old file was replaced whole, never rewritten in place.
    assert path.stat().st_ino != inode
    assert sorted(p.name for p in bench.root.iterdir()) == ["script.sh"]
    assert out.startswith("wrote 9 bytes to script.sh (replaced)")
    assert "--- a/script.sh\n+++ b/script.sh\n" in out
    assert "-echo one\n+echo two\n" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
async def test_edit_file_keeps_the_owner_of_someone_elses_file(bench: Bench) -> None:
    path = bench.put("theirs.txt", "mine? no\n")
    os.chown(path, 4321, 4322)
    await bench.ok("edit_file", path="theirs.txt", old_string="mine? no", new_string="theirs")
    assert path.read_text() == "theirs\n"
    assert (path.stat().st_uid, path.stat().st_gid) == (4321, 4322)


async def test_write_file_new_file_mode_follows_the_umask(bench: Bench) -> None:
    await bench.ok("write_file", path="plain.txt", content="x\n")
    old = os.umask(0)
    os.umask(old)
    assert stat.S_IMODE((bench.root / "plain.txt").stat().st_mode) == 0o666 & ~old


async def test_write_file_refusals(tmp_path: Path) -> None:
    b = Bench(tmp_path, _settings(write_max_bytes=1024))
    b.put("dir/inner.txt", "x\n")
    assert "is a directory" in await b.error("write_file", path="dir", content="x")
    assert "names a directory" in await b.error("write_file", path="newdir/", content="x")
    too_big = await b.error("write_file", path="big.txt", content="y" * 2000)
    assert "2000 bytes, over the 1024-byte write limit" in too_big
    assert not (b.root / "big.txt").exists()
    b.put("afile", "x\n")
    assert "could not write" in await b.error("write_file", path="afile/child.txt", content="x")


async def test_write_file_preview_is_the_diff_and_writes_nothing(bench: Bench) -> None:
    bench.put("keep.txt", "one\ntwo\n")
    diff = await bench.preview("write_file", path="keep.txt", content="one\n2\n")
    assert diff == "--- a/keep.txt\n+++ b/keep.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
    assert (bench.root / "keep.txt").read_text() == "one\ntwo\n"
    new = await bench.preview("write_file", path="fresh.txt", content="hello")
    assert new == (
        "--- /dev/null\n+++ b/fresh.txt\n@@ -0,0 +1 @@\n+hello\n\\ No newline at end of file\n"
    )
    assert not (bench.root / "fresh.txt").exists()


# --- edit_file ---------------------------------------------------------------------------


async def test_edit_file_replaces_one_exact_occurrence_and_returns_the_diff(bench: Bench) -> None:
    path = bench.put("src/app.py", "def main():\n    count = 7\n    return count\n")
    path.chmod(0o700)
    out = await bench.ok(
        "edit_file", path="src/app.py", old_string="count = 7", new_string="count = 8"
    )
    assert path.read_text() == "def main():\n    count = 8\n    return count\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert out == (
        "edited src/app.py at line 2\n\n"
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,3 +1,3 @@\n def main():\n"
        "-    count = 7\n+    count = 8\n     return count\n"
    )


async def test_edit_file_not_found_or_ambiguous_is_an_error(bench: Bench) -> None:
    path = bench.put("twice.txt", "x = 1\ny = 2\nx = 1\n")
    missing = await bench.error("edit_file", path="twice.txt", old_string="z = 3", new_string="")
    assert "old_string was not found in twice.txt" in missing
    twice = await bench.error("edit_file", path="twice.txt", old_string="x = 1", new_string="x")
    assert "occurs 2 times in twice.txt" in twice and "add surrounding lines" in twice
    same = await bench.error("edit_file", path="twice.txt", old_string="y", new_string="y")
    assert "nothing to change" in same
    assert path.read_text() == "x = 1\ny = 2\nx = 1\n"
    # With context the same text is unique.
    await bench.ok(
        "edit_file", path="twice.txt", old_string="y = 2\nx = 1", new_string="y = 2\nx = 5"
    )
    assert path.read_text() == "x = 1\ny = 2\nx = 5\n"


async def test_edit_file_preview_is_the_same_diff_without_writing(bench: Bench) -> None:
    path = bench.put("notes.md", "heron\negret\n")
    args = {"path": "notes.md", "old_string": "egret", "new_string": "stork"}
    preview = await bench.preview("edit_file", **args)
    assert path.read_text() == "heron\negret\n"
    out = await bench.ok("edit_file", **args)
    assert out.endswith(preview) and "-egret\n+stork\n" in preview
    # A preview of a call that could not be done raises, so nobody is asked about it.
    with pytest.raises(Exception, match="not found"):
        await bench.preview("edit_file", **args)


async def test_edit_file_refuses_binary_and_oversized_results(tmp_path: Path) -> None:
    b = Bench(tmp_path, _settings(write_max_bytes=1024))
    b.put("blob.bin", b"abc\x00def")
    assert "binary file" in await b.error(
        "edit_file", path="blob.bin", old_string="abc", new_string="x"
    )
    b.put("small.txt", "seed\n")
    grown = await b.error("edit_file", path="small.txt", old_string="seed", new_string="z" * 2000)
    assert "over the 1024-byte write limit" in grown
    assert (b.root / "small.txt").read_text() == "seed\n"


async def test_edit_file_quoting_crlf_lines_as_read_keeps_the_crlf_endings(bench: Bench) -> None:
    path = bench.put("dos.txt", b"one\r\ntwo\r\nthree\r\n")
    shown = await bench.ok("read_file", path="dos.txt")
    assert shown == "     1\tone\n     2\ttwo\n     3\tthree"
    await bench.ok("edit_file", path="dos.txt", old_string="one\ntwo", new_string="one\n2\nzwei")
    assert path.read_bytes() == b"one\r\n2\r\nzwei\r\nthree\r\n"


# --- ways out of the workspace ---------------------------------------------------------------


def _escapes(b: Bench) -> None:
    (b.root / "etc_link").symlink_to("/etc")
    (b.root / "out_link").symlink_to(b.outside / "secret.txt")
    (b.root / "out_dir").symlink_to(b.outside)
    (b.root / "dangling_out").symlink_to(b.outside / "planted.txt")


READ_ESCAPES = [
    "../outside/secret.txt",
    "{outside}/secret.txt",
    "etc_link/hostname",
    "out_link",
    "out_dir/secret.txt",
]
DIR_ESCAPES = ["..", "../outside", "{outside}", "/etc", "etc_link", "out_dir"]
WRITE_ESCAPES = [
    "../outside/secret.txt",
    "{outside}/secret.txt",
    "../outside/new.txt",
    "out_link",
    "out_dir/secret.txt",
    "dangling_out",
]


@pytest.mark.parametrize("path", READ_ESCAPES)
async def test_read_file_refuses_paths_out_of_the_workspace(bench: Bench, path: str) -> None:
    _escapes(bench)
    out = await bench.error("read_file", path=path.format(outside=bench.outside))
    assert "outside the workspace" in out and "secret" not in out.split("refused")[-1]


@pytest.mark.parametrize("path", DIR_ESCAPES)
async def test_list_files_refuses_directories_out_of_the_workspace(bench: Bench, path: str) -> None:
    _escapes(bench)
    out = await bench.error("list_files", path=path.format(outside=bench.outside))
    assert "outside the workspace" in out


@SEARCHES
@pytest.mark.parametrize("path", DIR_ESCAPES + READ_ESCAPES)
async def test_search_files_refuses_paths_out_of_the_workspace(
    tmp_path: Path, path: str, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    _escapes(b)
    out = await b.error("search_files", pattern="secret|root", path=path.format(outside=b.outside))
    assert "outside the workspace" in out


@SEARCHES
async def test_symlinks_that_stay_inside_keep_working(tmp_path: Path, use_ripgrep: bool) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    b.put("real/notes/herons.txt", "seven herons\n")
    (b.root / "rel").symlink_to("real/notes")
    (b.root / "abs").symlink_to(b.root / "real")
    (b.root / "file_link").symlink_to("real/notes/herons.txt")
    (b.root / "real" / "up").symlink_to("../real/notes")
    for path in ("rel/herons.txt", "abs/notes/herons.txt", "file_link", "real/up/herons.txt"):
        assert await b.ok("read_file", path=path) == "     1\tseven herons", path
    # `..` steps back along the walk: through rel (real/notes), .. is real.
    assert await b.ok("read_file", path="rel/../notes/herons.txt") == "     1\tseven herons"
    assert (await b.ok("list_files", path="rel")).splitlines() == ["real/notes/herons.txt"]
    assert await b.ok("search_files", pattern="herons", path="abs") == (
        "real/notes/herons.txt:1:seven herons"
    )
    # A write through a link inside changes the file it leads to, and the link stays.
    out = await b.ok("write_file", path="file_link", content="eight herons\n")
    assert out.startswith("wrote 13 bytes to real/notes/herons.txt (replaced)")
    assert (b.root / "file_link").is_symlink()
    assert (b.root / "real/notes/herons.txt").read_text() == "eight herons\n"
    await b.ok("write_file", path="rel/new/deeper.txt", content="made\n")
    assert (b.root / "real/notes/new/deeper.txt").read_text() == "made\n"
    await b.ok("edit_file", path="abs/notes/herons.txt", old_string="eight", new_string="nine")
    assert (b.root / "real/notes/herons.txt").read_text() == "nine herons\n"


async def test_a_symlink_loop_is_an_error_not_a_hang(bench: Bench) -> None:
    (bench.root / "loop_a").symlink_to("loop_b")
    (bench.root / "loop_b").symlink_to("loop_a")
    for tool, args in (
        ("read_file", {}),
        ("list_files", {}),
        ("search_files", {"pattern": "x"}),
        ("write_file", {"content": "x"}),
    ):
        assert "Too many levels of symbolic links" in await bench.error(
            tool, path="loop_a/x", **args
        )


@SEARCHES
async def test_links_out_are_not_followed_inside_the_workspace(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, _settings(), use_ripgrep=use_ripgrep)
    _escapes(b)
    b.put("inside.txt", "an inside secret\n")
    assert await b.ok("search_files", pattern="secret") == "inside.txt:1:an inside secret"
    assert (await b.ok("list_files")).splitlines() == [
        "dangling_out@",
        "etc_link@",
        "inside.txt",
        "out_dir@",
        "out_link@",
    ]


# Through the link to /etc, cases that would fail without writing were the guard gone (/etc
# is a directory; the old string is not in its hostname), so a red check leaves /etc alone.
WRITE_CASES = [(tool, path) for tool in ("write_file", "edit_file") for path in WRITE_ESCAPES] + [
    ("write_file", "etc_link"),
    ("edit_file", "etc_link/hostname"),
]


@pytest.mark.parametrize(("tool", "path"), WRITE_CASES)
async def test_writes_out_of_the_workspace_are_refused(bench: Bench, tool: str, path: str) -> None:
    _escapes(bench)
    args: dict[str, Any] = {"path": path.format(outside=bench.outside)}
    if tool == "write_file":
        args["content"] = "planted\n"
    else:
        args |= {"old_string": "the outside secret", "new_string": "planted"}
    out = await bench.error(tool, **args)
    assert "outside the workspace" in out
    with pytest.raises(Exception, match="outside the workspace"):
        await bench.preview(tool, **args)
    assert sorted(p.name for p in bench.outside.iterdir()) == ["secret.txt"]
    assert (bench.outside / "secret.txt").read_text() == "the outside secret\n"


# --- declaration and wiring ----------------------------------------------------------------


def test_the_file_tools_declare_their_policy(tmp_path: Path) -> None:
    tools = {t.name: t for t in file_tools(Workspace((tmp_path,)), Settings())}
    assert sorted(tools) == ["edit_file", "list_files", "read_file", "search_files", "write_file"]
    for name in ("read_file", "list_files", "search_files"):
        assert tools[name].concurrent and tools[name].permission == "allow"
        assert tools[name].preview is None
    for name in ("write_file", "edit_file"):
        assert not tools[name].concurrent and tools[name].permission == "ask"
        assert tools[name].preview is not None
    assert {t.subject for t in tools.values()} == {"path"}


async def test_work_tools_offer_the_file_tools_over_the_home_workspace(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.workspace_dir.mkdir(parents=True)
    (home.workspace_dir / "hello.txt").write_text("hello from the workspace\n")
    registry = ToolRegistry()
    for tool in work_tools(home, Settings()):
        registry.register(tool)
    with anyio.fail_after(10):
        out = await registry.call("read_file", {"path": "hello.txt"}, CTX)
    assert not out.is_error and "     1\thello from the workspace" in out.content


# --- through the real daemon ---------------------------------------------------------------

DAEMON_CONFIG = FAKE_API_CONFIG

FORK_FRAMING = "You are in focused task mode. Your objective is: "
HERON_NOTES = "Spring log: seven grey herons at the north shore, fishing in pairs.\n"


def _tool_results(req: RecordedRequest) -> list[str]:
    out = []
    for message in req.body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "".join(b.get("text", "") for b in inner if isinstance(b, dict))
                out.append(str(inner))
    return out


def _is_fork(req: RecordedRequest) -> bool:
    first = (req.body.get("messages") or [{}])[0].get("content")
    text = first if isinstance(first, str) else json.dumps(first)
    return FORK_FRAMING in text


def test_a_fork_reads_a_workspace_file_through_the_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "workspace" / "notes").mkdir(parents=True)
    (home / "reverie.toml").write_text(DAEMON_CONFIG)
    (home / "workspace" / "notes" / "herons.txt").write_text(HERON_NOTES)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool("delegate", {"task": "Count the herons in notes/herons.txt"}),
            Planned.tool("read_file", {"path": "notes/herons.txt"}),
            Planned.tool(
                "task_complete",
                {"summary": "The log counts seven herons.", "outcome": "success"},
            ),
            Planned.reply("Seven herons, says the log."),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                c.send({"type": "message", "text": "How many herons are in my notes?"})
                frames = c.recv_until(lambda f: f["type"] == "done", limit=5000)
        finally:
            d.stop()
        requests = fake.message_requests
    assert "Seven herons, says the log." in frames[-1]["text"]
    forks = [r for r in requests if _is_fork(r)]
    trunk = [r for r in requests if not _is_fork(r)]
    assert len(forks) == 2 and len(trunk) == 2
    # The fork's next request carries the file, numbered, as read_file's result.
    read = [t for t in _tool_results(forks[1]) if "herons.txt" in t or "Spring log" in t]
    assert read and f"     1\t{HERON_NOTES.strip()}" in read[0]
    # The trunk hears the fork's digest, not the file.
    assert "seven grey herons" not in json.dumps(trunk[1].body)


def test_a_fork_reads_three_files_and_edits_one_the_trunk_gets_only_the_digest(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    notes = home / "workspace" / "notes"
    notes.mkdir(parents=True)
    # The person allowed edits in this home; reading needs no rule.
    (home / "reverie.toml").write_text(
        DAEMON_CONFIG
        + '\n[permissions]\nrules = [{ tool = "edit_file", match = "notes/*", decision = "allow" }]\n'
    )
    texts = {
        "north.txt": "North shore: four grey herons standing in the reeds.\n",
        "south.txt": "South shore: two herons and a kingfisher on the jetty.\n",
        "tally.txt": "Total herons: unknown\n",
    }
    for name, text in texts.items():
        (notes / name).write_text(text)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool("delegate", {"task": "Tally the herons in notes/ and write the total"}),
            Planned(tool_calls=tuple(("read_file", {"path": f"notes/{n}"}) for n in sorted(texts))),
            Planned.tool(
                "edit_file",
                {
                    "path": "notes/tally.txt",
                    "old_string": "Total herons: unknown",
                    "new_string": "Total herons: 6",
                },
            ),
            Planned.tool(
                "task_complete",
                {
                    "summary": "Six herons in all; notes/tally.txt now says so.",
                    "outcome": "success",
                },
            ),
            Planned.reply("Six herons, and the tally is written down."),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                c.send({"type": "message", "text": "Tally my heron notes, please."})
                frames = c.recv_until(lambda f: f["type"] == "done", limit=5000)
        finally:
            d.stop()
        requests = fake.message_requests
    assert "Six herons, and the tally is written down." in frames[-1]["text"]
    assert (notes / "tally.txt").read_text() == "Total herons: 6\n"
    forks = [r for r in requests if _is_fork(r)]
    trunk = [r for r in requests if not _is_fork(r)]
    assert len(forks) == 3 and len(trunk) == 2
    read = "\n".join(_tool_results(forks[1]))
    for text in texts.values():
        assert f"     1\t{text.strip()}" in read
    edited = "\n".join(_tool_results(forks[2]))
    assert "edited notes/tally.txt at line 1" in edited
    assert "-Total herons: unknown\n+Total herons: 6" in edited
    # The trunk's next request holds the fork's digest and none of the files' text.
    trunk_body = json.dumps(trunk[1].body)
    assert "Six herons in all" in trunk_body
    for text in (*texts.values(), "Total herons: 6"):
        assert text.strip() not in trunk_body
