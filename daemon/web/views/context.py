"""The Context page: the last turns' context by layer, and one turn explained.

A turn's numbers (tokens per layer, what was cut and why, how topics scored) are the report
the trunk recorded when the turn ran (`turn_reports`). Its blocks are what `reverie context`
shows: the context assembled again for the turn's message — the memories it recalls today,
each with the layer that brought it and why that layer holds it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.context.assembler import LAYER_ORDER
from daemon.memory.text import content_words
from daemon.store.console import ConsoleQueries

if TYPE_CHECKING:
    from daemon.services import Services

# Why a memory is in each layer, in the person's words.
LAYER_REASONS = {
    "discipline": "how to read memory: the rules every turn carries",
    "persona": "who the agent is: the persona files, always loaded",
    "profile": "about the person: profile facts are always in context",
    "wake": "written at the last wake-up, or a fact pinned in FACTS.md: always loaded",
    "reflection": "the agent's own reflection from its last dream: data, not instructions",
    "themes": "a recent theme across sessions",
    "recollections": "a recent session summary or fact, carried across sessions",
    "time": "the current date and time",
    "handover": "the trunk's model changed: a letter for the new model, until its first turn",
    "threads": "an open promise, unanswered question or plan with a date: shown until resolved",
    "topics": "a topic addendum whose words matched the message",
    "journal": "the newest journal digest, then the week before it a line a day: recent work",
    "recall": "recalled for this message by search over all memory (best first)",
    "knowledge": "the person's KNOWLEDGE.md: whole, or the sections this message asks about",
}

# Layers whose text is the agent's own instructions, not memory (their examples are not blocks).
NOT_MEMORY = frozenset({"discipline", "persona", "time", "topics"})
_MEMORY = re.compile(r"<memory ([^>]*)>\n?(.*?)\n?</memory>", re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True, kw_only=True)
class TurnRow:
    turn_id: str
    session_id: str
    ts: str
    total: int
    layers: dict[str, int]
    prompt: str


def _layers(report: dict[str, Any]) -> dict[str, int]:
    rows = report.get("layers") if isinstance(report, dict) else None
    out = {name: 0 for name in LAYER_ORDER}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and row.get("name") in out:
            out[str(row["name"])] = int(row.get("tokens", 0))
    return out


def _report(raw: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


async def _prompts(services: Services, turn_ids: list[str]) -> dict[str, str]:
    """Each turn's message from the person (the first user message of the turn)."""
    return await ConsoleQueries(services.db).prompts(turn_ids)


async def recent_turns(services: Services, *, limit: int = 30) -> list[TurnRow]:
    """The last `limit` turns, oldest first, with their context tokens per layer."""
    rows = await ConsoleQueries(services.db).recent_turn_reports(limit)
    prompts = await _prompts(services, [r.turn_id for r in rows])
    return [
        TurnRow(
            turn_id=r.turn_id,
            session_id=r.session_id,
            ts=r.ts,
            total=r.context_tokens,
            layers=_layers(_report(r.report)),
            prompt=prompts.get(r.turn_id, ""),
        )
        for r in reversed(rows)
    ]


def memories_in(text: str, *, prompt: str = "") -> list[dict[str, Any]]:
    """The memory blocks in a layer's text: their marker's attributes, their text, and the
    message's content words each shares (what automatic recall's relevance floor reads)."""
    asked = set(content_words(prompt))
    out = []
    for m in _MEMORY.finditer(text):
        attrs: dict[str, Any] = dict(_ATTR.findall(m.group(1)))
        body = m.group(2).strip()
        shared = [w for w in dict.fromkeys(content_words(body)) if w in asked]
        out.append({**attrs, "text": body, "shared": shared})
    return out


async def turn_detail(services: Services, turn_id: str) -> dict[str, Any] | None:
    """One turn: its recorded report, its message, and its blocks assembled again (None: unknown)."""
    queries = ConsoleQueries(services.db)
    row = await queries.turn_report(turn_id)
    if row is None:
        return None
    report = _report(row.report)
    prompt = (await _prompts(services, [turn_id])).get(turn_id, "")
    previous = await queries.reply_before(row.session_id, turn_id)
    await services.counter.loaded()  # counted as its turn was: with the vocabulary
    assembled = await services.assembler.assemble(prompt, previous_reply=previous)
    names = [r["name"] for r in assembled.report["layers"] if r["tokens"]]
    blocks = []
    for name, block in zip(names, assembled.blocks, strict=True):
        blocks.append(
            {
                "layer": name,
                "why": LAYER_REASONS.get(name, ""),
                "tokens": next(
                    r["tokens"] for r in assembled.report["layers"] if r["name"] == name
                ),
                "memories": [] if name in NOT_MEMORY else memories_in(block.text, prompt=prompt),
                "text": block.text,
            }
        )
    return {
        "turn_id": row.turn_id,
        "session_id": row.session_id,
        "ts": row.ts,
        "total": row.context_tokens,
        "prompt": prompt,
        "layers": report.get("layers") or [],
        "budget": report.get("budget"),
        "topics": (report.get("topics") or {}).get("scores") or [],
        "notes": report.get("notes") or [],
        "rejected": report.get("rejected_contributions") or [],
        "now_total": assembled.total_tokens,
        "blocks": blocks,
    }
