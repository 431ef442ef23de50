"""Reading inside the workspace: a file's lines in bounded blocks, through the walked descriptor.

A file is read `READ_BLOCK_BYTES` at a time and only the lines asked for are kept, so a line of
any length costs at most the read limit: a longer one is cut at a whole character, with a note.
"""

from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass

from daemon.tools.registry import ToolError
from daemon.tools.workspace import Opened, Workspace

# A file is binary when its first bytes hold a NUL (git and ripgrep decide the same way).
_SNIFF_BYTES = 8192
# A file is read this many bytes at a time; only the lines asked for are kept.
READ_BLOCK_BYTES = 1 << 20


def opened_fd(opened: Opened) -> int:
    assert opened.fd is not None
    return opened.fd


def is_binary(head: bytes) -> bool:
    return b"\0" in head


def _decode(data: bytes, shown: str, offset: int, *, cut: bool) -> str:
    try:
        if cut:
            # A line cut at the read limit may end inside a character: that half is left out.
            return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (byte {offset + exc.start} cannot be decoded); "
            "read_file shows text files only"
        ) from None


def _numbered(lines: list[str], first: int, limit: int) -> tuple[list[str], int]:
    """Lines as `cat -n` shows them, as many whole lines as fit in `limit` characters."""
    out: list[str] = []
    used = 0
    for offset, line in enumerate(lines):
        row = f"{first + offset:6}\t{line}"
        if used + len(row) + 1 > limit:
            if not out:
                # One line longer than everything allowed: show its start and say so.
                keep = max(0, limit - 80)
                out.append(row[:keep] + f"…[line cut: {len(row) - keep} more characters]")
                return out, 1
            break
        out.append(row)
        used += len(row) + 1
    return out, len(out)


@dataclass
class _Range:
    """What a bounded read of lines start..end found."""

    lines: list[bytearray]  # the lines asked for, each at most the read limit, no newline
    lengths: list[int]  # each one's whole length in bytes
    total: int  # how many lines the file has


def _read_range(fd: int, shown: str, start: int, end: int | None, max_bytes: int) -> _Range:
    """Lines start..end (1-based, inclusive), reading `fd` READ_BLOCK_BYTES at a time.

    Memory stays within `max_bytes` plus a block whatever the file holds: a line longer than
    `max_bytes` keeps only its first `max_bytes` (the rest is counted, never kept), and lines
    past `max_bytes` together are refused with a request for fewer.
    """
    found = _Range([], [], 0)
    kept = 0
    line = 1  # the line the next byte belongs to
    begun = False  # a byte (or the newline) of `line` has been seen
    while block := os.read(fd, READ_BLOCK_BYTES):
        if b"\0" in block:
            raise ToolError(f"{shown} is a binary file; read_file shows text files only")
        at = 0
        while at < len(block):
            if end is not None and line > end:
                # Past the range: only the count of lines is still wanted.
                line += block.count(b"\n", at)
                begun = not block.endswith(b"\n")
                break
            newline = block.find(b"\n", at)
            stop = len(block) if newline < 0 else newline
            if line >= start and (end is None or line <= end):
                if not begun:
                    found.lines.append(bytearray())
                    found.lengths.append(0)
                piece = block[at:stop]
                found.lengths[-1] += len(piece)
                room = max_bytes - len(found.lines[-1])
                if len(found.lines) > 1 and kept + len(piece) > max_bytes:
                    last = end if end is not None else "the end"
                    raise ToolError(
                        f"lines {start}-{last} of {shown} are more than the {max_bytes}-byte "
                        "read limit; ask for fewer lines"
                    )
                found.lines[-1] += piece[:room]
                kept += min(len(piece), room)
            begun = True
            if newline < 0:
                break
            line += 1
            begun = False
            at = newline + 1
    found.total = line if begun else line - 1
    return found


def _range_text(
    found: _Range, shown: str, start: int, max_bytes: int
) -> tuple[list[str], list[str]]:
    """The lines as text, and a note for each one cut at the read limit."""
    texts: list[str] = []
    notes: list[str] = []
    offset = 0
    for number, (raw, length) in enumerate(zip(found.lines, found.lengths, strict=True), start):
        cut = length > len(raw)
        text = _decode(bytes(raw), shown, offset, cut=cut)
        offset += len(raw)
        if cut:
            notes.append(
                f"[line {number} is {length} bytes, over the {max_bytes}-byte read limit: "
                f"only its first {len(raw)} bytes were read]"
            )
        texts.append(text.removesuffix("\r"))
    return texts, notes


def read_text_file(
    workspace: Workspace,
    path: str,
    *,
    start_line: int | None,
    end_line: int | None,
    max_bytes: int,
    max_chars: int,
) -> str:
    """The file's lines numbered like `cat -n`; refusals say what to ask for instead."""
    with workspace.open(path) as opened:
        return _read_opened(
            opened_fd(opened),
            workspace.show(opened.path),
            start_line=start_line,
            end_line=end_line,
            max_bytes=max_bytes,
            max_chars=max_chars,
        )


def _read_opened(
    fd: int,
    shown: str,
    *,
    start_line: int | None,
    end_line: int | None,
    max_bytes: int,
    max_chars: int,
) -> str:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory; list it with list_files")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file")
    head = os.pread(fd, _SNIFF_BYTES, 0)
    if is_binary(head):
        raise ToolError(
            f"{shown} is a binary file ({st.st_size} bytes); read_file shows text files only"
        )
    start = start_line or 1
    if end_line is not None and end_line < start:
        raise ToolError(f"end_line ({end_line}) is before start_line ({start})")
    ranged = start_line is not None or end_line is not None
    if not ranged and st.st_size > max_bytes:
        raise ToolError(
            f"{shown} is {st.st_size} bytes, over the {max_bytes}-byte read limit; read it in "
            "parts with start_line and end_line (for example start_line=1, end_line=400)"
        )
    found = _read_range(fd, shown, start, end_line, max_bytes)
    if found.total == 0:
        return f"({shown} is empty)"
    if start > found.total:
        raise ToolError(f"{shown} has {found.total} lines; start_line {start} is past the end")
    lines, notes = _range_text(found, shown, start, max_bytes)
    # Room for the notes that say where the output stopped.
    rows, shown_count = _numbered(lines, start, max_chars - 300)
    last = start + shown_count - 1
    if shown_count < len(lines):
        notes.append(
            f"[stopped at line {last} of {found.total}: the output limit; continue with "
            f"start_line={last + 1}]"
        )
    elif ranged and (start > 1 or last < found.total):
        notes.append(f"[lines {start}-{last} of {found.total}]")
    return "\n".join(rows + notes)
