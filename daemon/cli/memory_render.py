"""Print the memory commands' results (standard library only).

Both paths — the running daemon over the socket and the direct path over the database — hand
these functions the same JSON-shaped data, so their output is the same byte for byte.
"""

from __future__ import annotations

import json
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, TextIO


def search_results(
    items: Sequence[Mapping[str, Any]], *, as_json: bool, batch: bool, query: str, out: TextIO
) -> None:
    """Print one query's results: a JSON array, or a readable ranked list."""
    if as_json:
        out.write(json.dumps(items, ensure_ascii=False) + "\n")
        if batch:
            out.flush()
        return
    if batch:
        out.write(f"# {query}\n")
    if not items:
        out.write("(no memories match)\n")
    # Below the relevance floor a result shares almost nothing with the question: shown after
    # the others, one short line each, so nobody takes it for an answer.
    strong = [item for item in items if not item.get("below_floor")]
    weak = [item for item in items if item.get("below_floor")]
    if weak and not strong:
        out.write("(no memory matches well: the closest share almost nothing with the question)\n")
    for rank, item in enumerate(strong + weak, 1):
        if strong and weak and item is weak[0]:
            out.write(
                f"-- below the relevance floor ({len(weak)}): weak matches, sharing almost"
                " nothing with the question --\n"
            )
        ts = item.get("ts")
        when = ts[:10] if ts else "?"
        text = " ".join(str(item["text"]).split())
        match = f"match {item['relevance']:>3}" if "relevance" in item else f"{item['score']:.4f}"
        out.write(f"{rank:>2}. [{item['kind']} {match}] {when} {item['id']}\n")
        if item.get("below_floor"):
            out.write(f"    {text[:100]}{'…' if len(text) > 100 else ''}\n")
            continue
        out.write(f"    {text[:300]}{'…' if len(text) > 300 else ''}\n")
        ids = item.get("message_ids") or []
        if ids:
            out.write(f"    messages: {', '.join(ids[:8])}{' …' if len(ids) > 8 else ''}\n")


def import_counts(counts: Mapping[str, Any], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(counts) + "\n")
        return
    out.write(
        f"imported {counts['messages']} messages in {counts['sessions']} sessions "
        f"({counts['already_present']} already present), {counts['chunks']} new chunks, "
        f"{counts['summaries']} summaries; embeddings: {counts['embeddings']}; {counts['seconds']:.1f}s\n"
    )


def remember_result(data: Mapping[str, Any], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
    elif data["status"] in ("stored", "corrected"):
        out.write(f"{data['message']}: {data['text']}\n")
    else:
        out.write(f"{data['message']}\n")


def recall_answer(data: Mapping[str, Any], *, as_json: bool, out: TextIO) -> None:
    """Print a recall: `data` is the result's JSON with the rendered answer under `text`."""
    if as_json:
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        out.write(f"{data['text']}\n")


class ImportProgress:
    """Report an import's progress: a bar on a terminal, JSON lines for scripts, else nothing.

    Events are dicts `{"phase": "read"|"record"|"embed"|"summarise", "done": n, "total": m}`.
    JSON lines go to stderr (stdout keeps the one counts object); the bar redraws at most ten
    times a second and is cleared when the import ends.
    """

    def __init__(
        self, *, as_json: bool, enabled: bool = True, stream: TextIO | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.as_json = as_json and enabled
        self.bar = enabled and not as_json and self.stream.isatty()
        self._last = 0.0
        self._drawn = False

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            self.stream.write(
                json.dumps(
                    {"progress": event["phase"], "done": event["done"], "total": event["total"]}
                )
                + "\n"
            )
            self.stream.flush()
        elif self.bar:
            now = time.monotonic()
            final = event["done"] >= event["total"]
            if not final and now - self._last < 0.1:
                return
            self._last = now
            total = max(1, int(event["total"]))
            frac = min(1.0, int(event["done"]) / total)
            filled = int(frac * 30)
            self.stream.write(
                f"\r{event['phase']:<9} [{'#' * filled}{'.' * (30 - filled)}] {event['done']}/{event['total']} {frac:4.0%}\x1b[K"
            )
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False
