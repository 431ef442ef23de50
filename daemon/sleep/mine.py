"""The mining phase of sleep: facts said in passing become facts, and facts in use are promoted.

- **mine**: the trunk and fork sessions are read from where the last mining stopped (a
  durable cursor per session, `fact_mining`) for durable facts — with the dreams model when
  it is a real one (`daemon.memory.mining.MINING_PROMPT`, its answer through the JSON-schema'd
  `record_facts` tool), with the extractive rules offline, when the spend cap forbids the
  call, or when the call fails. Each line carries whose word it is: the person's message in
  the trunk is "person"; a fork's brief and the agent's replies are "agent"; a reply in a
  turn that read a tool's result, and the result itself, are "tool" (docs/trust.md). Each
  fact goes through `FactStore.record_mined`: confirmed when known, a change when it has the
  key of a known fact and another value, left out when nearly a duplicate, else stored.
- **promote**: a mined fact recalled at least `promote_min_uses` times, or tagged important,
  moves into FACTS.md's pinned block when it is the person's word; the agent's is proposed
  for the person to confirm; tool text never is. At most `max_promoted` mined facts are
  pinned at once.

Every change is recorded in the cycle's change set before it is made, so `reverie sleep
show` lists it and a revert undoes it. Safe to run again after a crash: facts already stored
are confirmed rather than stored twice, and the cursor moves only after the facts are written.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

import anyio

from daemon.log import get_logger
from daemon.memory.api import UNTRUSTED_ORIGINS
from daemon.memory.facts import Fact, FactStore, MinedOutcome, local_timezone, normalise
from daemon.memory.mining import (
    MAX_MINED_CHARS,
    Line,
    MinedFact,
    mine_lines,
    person_sentences,
    resolve_plan_dates,
)
from daemon.memory.mining_model import (
    MINING_PROMPT,
    RECORD_FACTS,
    ModelFacts,
    parse_model_facts,
    render_material,
)
from daemon.memory.rows import iso, parse_iso
from daemon.memory.slots import (
    restated,
    says_change,
    sentence_words,
    slot_anchors,
    value_shape,
    values_of_shape,
)
from daemon.memory.text import content_words, parse_json_reply
from daemon.models.base import Message, ModelError, SpendCapReached, SystemBlock
from daemon.sleep.changes import ChangeSet, pin_holds
from daemon.sleep.maintenance import PIN_TAGS, sync_pins
from daemon.sleep.phases import PhaseContext, PhaseReport
from daemon.store.fact_mining import FactMiningRepo, UnminedMessage
from daemon.store.pins import Pin, PinsRepo
from daemon.tokens import count_tokens

log = get_logger("sleep.mining")


class MiningPhase:
    """Mine the day's sessions for facts, promote facts in use (see the module docstring)."""

    name = "mining"
    optional = True

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        changes = ChangeSet.open(ctx.db, ctx.cycle_id, clock=ctx.clock)
        mined: dict[str, Any] = {"read": 0, "by": "nothing to read", "outcomes": []}
        if ctx.settings.sleep.mining:
            mined = await mine(ctx, changes)
        promoted = await promote_by_use(ctx, changes)
        outcomes: list[dict[str, str]] = mined["outcomes"]
        counts: dict[str, int] = defaultdict(int)
        for o in outcomes:
            counts[o["status"]] += 1
        parts: list[str] = []
        if mined["read"]:
            parts.append(
                f"read {mined['read']} message(s) ({mined['by']}): {counts['stored']} fact(s) "
                f"mined, {counts['superseded']} changed, {counts['confirmed']} confirmed"
            )
        if promoted["pinned"] or promoted["proposed"]:
            parts.append(
                f"promoted by use: {len(promoted['pinned'])} pinned"
                + (f" ({', '.join(promoted['pinned'])})" if promoted["pinned"] else "")
                + f", {len(promoted['proposed'])} proposed"
            )
        idle = not (
            counts["stored"] or counts["superseded"] or promoted["pinned"] or promoted["proposed"]
        )
        return PhaseReport(
            phase=self.name,
            changed="; ".join(parts) or "nothing new to mine",
            details={"mined": mined, "promoted": promoted},
            files=(str(ctx.home.facts_file),) if promoted["written"] else (),
            nothing_changed=idle,
        )


# --- reading ---------------------------------------------------------------------------------


def _tool_turns(path: str) -> tuple[set[str], list[dict[str, Any]]]:
    """The turns of a transcript that read a tool's result, and those results."""
    turns: set[str] = set()
    results: list[dict[str, Any]] = []
    try:
        with Path(path).open(encoding="utf-8") as fh:
            for raw in fh:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue  # a torn line: the transcript reader reports it elsewhere
                if isinstance(obj, dict) and obj.get("type") == "tool_result":
                    turns.add(str(obj.get("turn_id") or ""))
                    results.append(obj)
    except OSError:
        pass  # no transcript file (an index-only session): no tool turns known
    return turns, results


async def read_lines(ctx: PhaseContext) -> tuple[list[Line], dict[str, int]]:
    """The messages since the cursor, each with whose word it is; and the new cursor."""
    rows = await FactMiningRepo(ctx.db).unmined(ctx.settings.sleep.mining_max_messages)
    by_session: dict[str, list[UnminedMessage]] = defaultdict(list)
    for row in rows:
        by_session[row.session_id].append(row)
    lines: list[Line] = []
    cursor: dict[str, int] = {}
    for sid, msgs in by_session.items():
        cursor[sid] = max(r.seq for r in msgs)
        kind, path = msgs[0].kind, msgs[0].transcript_path
        turns, results = await anyio.to_thread.run_sync(_tool_turns, path)
        read_turns = {r.turn_id for r in msgs if r.turn_id}
        for row in msgs:
            ts = parse_iso(row.ts)
            if ts is None:
                continue
            if row.role == "user":
                origin = "person" if kind == "trunk" else "agent"
            elif row.role == "assistant":
                origin = "tool" if row.turn_id and row.turn_id in turns else "agent"
            else:
                origin = "tool"
            lines.append(Line(session=sid, id=row.msg_id, ts=ts, role=row.role,
                              origin=origin, text=row.content))  # fmt: skip
        for res in results:
            ts = parse_iso(str(res.get("ts") or ""))
            if ts is None or str(res.get("turn_id") or "") not in read_turns:
                continue
            lines.append(Line(session=sid, id=f"tool:{res.get('call_id')}", ts=ts, role="tool",
                              origin="tool", text=str(res.get("content") or "")))  # fmt: skip
    lines.sort(key=lambda line: (line.ts, line.session))
    return lines, cursor


# --- mining ------------------------------------------------------------------------------------


def _batches(material: list[str], lines: list[Line], budget: int) -> list[list[int]]:
    out: list[list[int]] = [[]]
    used = 0
    for i, text in enumerate(material):
        cost = count_tokens(text)
        if out[-1] and used + cost > budget:
            out.append([])
            used = 0
        out[-1].append(i)
        used += cost
    return [b for b in out if b]


async def _by_model(ctx: PhaseContext, lines: list[Line], tz: tzinfo) -> ModelFacts:
    """Ask the dreams model for the facts of `lines`, a batch at a time."""
    material = render_material(lines, tz)
    result = ModelFacts()
    for batch in _batches(material, lines, ctx.settings.sleep.mining_batch_tokens):
        shown = [lines[i] for i in batch]
        prompt = (
            "<<<MATERIAL\n" + "\n".join(material[i] for i in batch) + "\nMATERIAL>>>\n\n"
            "Record the durable facts in this material with the record_facts tool."
        )
        request = ctx.models.request(
            "dreams",
            messages=[Message.user(prompt)],
            system=[SystemBlock(text=MINING_PROMPT)],
            tools=(RECORD_FACTS,),
            task="dream",
        )
        response = await ctx.models.complete(request, session_id=ctx.session_id)
        calls = [c for c in response.tool_calls if c.name == RECORD_FACTS.name]
        data: Any = calls[0].input if calls else parse_json_reply(response.text)
        got = parse_model_facts(data, shown, tz)
        result.facts.extend(got.facts)
        result.dropped += got.dropped
    return result


async def mine(ctx: PhaseContext, changes: ChangeSet) -> dict[str, Any]:
    """Read the sessions since the cursor, store what they state, move the cursor."""
    lines, cursor = await read_lines(ctx)
    if not lines:
        return {"read": 0, "by": "nothing to read", "outcomes": []}
    tz = local_timezone(ctx.settings)
    by = "rules"
    facts: list[MinedFact] = []
    dropped = 0
    if ctx.models.provider_kind("dreams") != "offline":
        try:
            await ctx.models.check_cap("dreams")
            got = await _by_model(ctx, lines, tz)
            facts, dropped, by = got.facts, got.dropped, "the dreams model"
        except SpendCapReached as exc:
            by = f"rules: the spend cap applies ({exc})"
        except ModelError as exc:
            log.warning("mining: the model failed; the rules read the sessions", error=str(exc))
            by = f"rules: the model failed ({exc})"
    if not by.startswith("the dreams model"):
        facts = mine_lines(lines, tz)
    store = ctx.memory.facts
    # Whatever read the lines, a known slot said again with another value is a change.
    facts = with_slot_changes(facts, await said_again(store, lines, tz))
    outcomes: list[dict[str, str]] = []
    async with store.rendering_once():
        for fact in facts:
            outcome = await record(store, fact, changes, night=ctx.started_at)
            outcomes.append(
                {"status": outcome.status, "id": outcome.id, "old_id": outcome.old_id or ""}
            )

    await FactMiningRepo(ctx.db).advance(cursor, at=iso(ctx.clock.now()))
    log.info("sessions mined", messages=len(lines), facts=len(facts), by=by, dropped=dropped)
    return {"read": len(lines), "by": by, "dropped": dropped, "outcomes": outcomes}


_STATEMENT = re.compile(r"[^.!?\n]+[.!?]*")


def _statements(text: str) -> list[str]:
    """The line's sentences that state something (not split at ";": "book club dropped X; we're
    onto Y" is one change)."""
    out = []
    for m in _STATEMENT.finditer(text):
        s = " ".join(m.group(0).split())
        if s and person_sentences(s):
            out.append(s)
    return out


def _slots(fact: Fact) -> list[tuple[str, frozenset[str], bool]]:
    """(value, subject words, old value must be named) for each value a current fact holds.

    A keyed fact holds its value under its subject's words. A fact without a key holds the
    names, weekdays, dates and numbers in its text, under its other content words; a change of
    one of those must name it (nothing else ties the sentence to that fact). A told fact, too,
    changes only by a sentence that names its old value: the person asked to keep it.
    """
    if fact.attribute.startswith(("feeling about", "choice between")):
        return []  # a taste's value is a verb of feeling ("love"), not a value said again
    if fact.key and (fact.value or fact.replaced):
        # A stand-in whose new value was unclear still tells the old one it replaced.
        value = fact.value or fact.replaced
        return [(value, slot_anchors(fact.subject, fact.attribute), not fact.mined)]
    if fact.key:
        return []
    found: list[str] = []
    for shape in ("date", "weekday", "number", "name"):
        for start, value in values_of_shape(fact.text, shape):
            if start == 0 and shape == "name":
                continue  # a sentence's first word ("Last week …", "Thanks") is no name
            if value_shape(value) == shape and value not in found:
                found.append(value)
    if not found:
        return []
    words = " ".join(found).lower()
    anchors = frozenset(w for w in content_words(fact.text) if len(w) > 3 and w not in words)
    return [(value, anchors, True) for value in found]


async def said_again(store: FactStore, lines: list[Line], tz: tzinfo) -> list[MinedFact]:
    """Changes of current facts that the person's later sentences state in any construction
    (`daemon.memory.mining.restated`): each supersedes the fact it names; when the new value
    cannot be told, the person's sentence stands in for it, marked uncertain — so a value the
    person has since replaced is never left standing alone as current."""
    await store.load()
    # Newest first: of several facts about one thing (this week's meetup, last month's), a
    # sentence of change speaks of the latest.
    current = sorted(
        (f for f in store.facts(target="memory") if f.active),
        key=lambda f: f.valid_since,
        reverse=True,
    )
    slots = {f.id: _slots(f) for f in current}
    out: list[MinedFact] = []
    taken: set[str] = set()
    for line in lines:
        if line.role != "user":
            continue
        for sentence in _statements(line.text):
            if not says_change(sentence):
                continue  # most sentences: one test each, not one per fact
            words = sentence_words(sentence)
            # One sentence changes one fact of a thing: "the meetup moves from Graz to Porto"
            # names Porto too, which an older meetup may hold; that one did not change.
            changed: list[frozenset[str]] = []
            for fact in current:
                if fact.id in taken or fact.valid_since >= line.ts or line.id in fact.message_ids:
                    continue
                for value, anchors, old_required in slots[fact.id]:
                    if not any(a in words or f"{a}s" in words for a in anchors):
                        continue
                    if any(anchors & done for done in changed):
                        continue
                    said = restated(sentence, value=value, anchors=anchors, avoid=fact.text,
                                    old_required=old_required)  # fmt: skip
                    if said is None:
                        continue
                    taken.add(fact.id)  # one change of a fact a night: the next night reads on
                    changed.append(anchors)
                    out.append(
                        MinedFact(
                            text=resolve_plan_dates(
                                sentence[:1].upper() + sentence[1:], line.ts.astimezone(tz)
                            )[:MAX_MINED_CHARS],
                            kind="change",
                            origin=line.origin,
                            session=line.session,
                            message_ids=(line.id,),
                            said_at=line.ts,
                            subject=fact.subject,
                            attribute=fact.attribute,
                            value=said.value,
                            replaces=value,
                            supersedes=fact.id,
                            uncertain=not said.value,
                        )
                    )
                    break
    return out


def with_slot_changes(facts: list[MinedFact], slot: list[MinedFact]) -> list[MinedFact]:
    """The night's facts with the slot changes (`said_again`) joined in, in the order said.

    A sentence both read gives one fact: what the rules (or the model) made of it — its key and
    value — that also supersedes the fact the slot change names ("the offsite got relocated to
    Trieste (it was Bergen)" is (offsite, where) = Trieste, and it replaces "they told us the
    offsite will be in Bergen", which had no key).
    """
    left = list(slot)
    out: list[MinedFact] = []
    for fact in facts:
        text = normalise(fact.text)
        same = next(
            (c for c in left if set(c.message_ids) & set(fact.message_ids)
             and text and text in normalise(c.text)),
            None,
        )  # fmt: skip
        if same is not None and not fact.supersedes:
            left.remove(same)
            fact = replace(
                fact, supersedes=same.supersedes, replaces=fact.replaces or same.replaces
            )
            if not fact.key:
                fact = replace(fact, subject=same.subject, attribute=same.attribute,
                               value=same.value, uncertain=same.uncertain)  # fmt: skip
        out.append(fact)
    out.extend(left)
    return sorted(out, key=lambda f: f.said_at)


async def record(
    store: FactStore, fact: MinedFact, changes: ChangeSet, *, night: datetime
) -> MinedOutcome:
    """Store one mined fact and record what it changed in the cycle's change set.

    A fact this night already wrote before a crash is found again as "confirmed": its change
    is recorded then (recording is idempotent), so the change set misses nothing it made.
    """
    outcome = await store.record_mined(fact)
    status, new_id, old_id = outcome.status, outcome.id, outcome.old_id
    known = store.get(outcome.id)
    if status == "confirmed" and known is not None and known.mined and known.created_at >= night:
        status, old_id = ("superseded" if known.supersedes else "stored"), known.supersedes
    after: dict[str, Any] = {
        "id": new_id, "text": fact.text, "origin": fact.origin, "session": fact.session,
        "message_ids": list(fact.message_ids),
    }  # fmt: skip
    if status == "stored":
        await changes.record("fact_mined", new_id, before=None, after=after,
                             note=f"{fact.origin}: {fact.text[:200]}")  # fmt: skip
    elif status == "superseded" and old_id:
        old = store.get(old_id)
        before = {"id": old_id, "text": old.text if old else ""}
        # The message that said the change: the first of the lines the new value rests on.
        by = fact.message_ids[0] if fact.message_ids else ""
        after["changed_by"] = {"session": fact.session, "message_id": by,
                               "said_at": iso(fact.said_at)}  # fmt: skip
        await changes.record("fact_superseded", old_id, before=before, after=after,
                             note=f"{before['text'][:100]} → {fact.text[:100]} "
                                  f"(said in {fact.session}, message {by})")  # fmt: skip
    return outcome


# --- promotion by use ------------------------------------------------------------------------


async def promote_by_use(ctx: PhaseContext, changes: ChangeSet) -> dict[str, Any]:
    """Pin the mined facts in steady use (the person's word), propose the agent's; bounded."""
    store = ctx.memory.facts
    await store.load()
    await ctx.memory.index.uses.flush()  # the last turn's uses count tonight
    cfg = ctx.settings.sleep
    pins = PinsRepo(ctx.db)
    pinned = await pins.pinned_ids()
    held = await pin_holds(ctx.db)
    room = cfg.max_promoted - sum(1 for f in store.facts() if f.mined and f.id in pinned)
    uses = await FactMiningRepo(ctx.db).fact_uses()
    wanted = [
        f
        for f in store.facts()
        if f.mined
        and f.id not in pinned
        and f.pin_proposed_at is None
        and (f.id not in held or (f.pin_confirmed_at and f.pin_confirmed_at > held[f.id]))
        and (uses.get(f.id, 0) >= cfg.promote_min_uses or PIN_TAGS & set(f.tags))
    ]
    wanted.sort(key=lambda f: (-uses.get(f.id, 0), f.created_at))
    out: dict[str, Any] = {"pinned": [], "proposed": [], "refused": [], "written": False}
    now = iso(ctx.clock.now())
    for fact in wanted:
        n = uses.get(fact.id, 0)
        reason = f"recalled {n} time(s)" if n >= cfg.promote_min_uses else "tagged important"
        if fact.origin in UNTRUSTED_ORIGINS:
            out["refused"].append(fact.id)  # tool or imported text is never pinned
        elif fact.origin != "person":
            if await store.propose_pin(fact.id, reason=f"mined fact {reason}"):
                out["proposed"].append(fact.id)
        elif room > 0:
            await changes.record("fact_promoted", fact.id, before=None,
                                 after={"id": fact.id, "reason": reason}, note=reason)  # fmt: skip
            await pins.save(added=[Pin(fact.id, f"promoted by use: {reason}")], removed=[], at=now)
            out["pinned"].append(fact.id)
            room -= 1
    if out["pinned"]:
        synced = await sync_pins(store, db=ctx.db, home=ctx.home, settings=ctx.settings,
                                 clock=ctx.clock, score=False)  # fmt: skip
        out["written"] = bool(synced["written"])
    return out
