"""The offline provider: no network, no randomness, no clock — the daemon works with no key.

It never pretends to be a language model. In chat it calls the memory tools when a
message plainly asks for them ("remember that …", "what do you recall about …"), reports
what a tool returned, and otherwise says what it is and how to configure a real model.
For the memory tasks it reads the message formats defined in `daemon.models.base` and
answers extractively: summaries from the transcript's most informative sentences, recall
plans by keyword overlap, answers from the best-matching source sentences with citations.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio

from daemon.models import offline_delegate
from daemon.models.base import (
    Block,
    Completed,
    Message,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    TextBlock,
    TextDelta,
    ToolCallStarted,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from daemon.models.offline_sleep import is_offline_chatter, weave_wake
from daemon.text import STOP_WORDS, asked_stems, mentioned_stems, stem
from daemon.tokens import count_tokens

OFFLINE_MODEL = "offline"
_TOOL_RESULT_CHARS = 600
_ECHO_CHARS = 160

_DECISION = re.compile(
    r"\b(decided|decide|decision|agreed|agree|will|won't|chose|choose|chosen|plan|planned|planning|"
    r"going to|settled|committed|let's|we'll|i'll|resolved)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9][a-z0-9'’-]*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# Requests to the memory tools, matched at the start of a sentence. Recall is tried first
# so "do you remember X" is a question, never an instruction to store X.
_RECALL = re.compile(
    r"(?:^|[.!?]\s+)(?:hey[, ]+|so[, ]+|and[, ]+)?(?:"
    r"what (?:do|can) you (?:recall|remember|know) about|"
    r"what did (?:we|i) (?:decide|agree|say|tell you|settle on) (?:about|on|regarding)|"
    r"what do we know about|"
    r"do you (?:still )?(?:remember|recall)|"
    r"can you (?:recall|remember)|"
    r"recall"
    r")\s+(?P<x>[^?\n]+)",
    re.IGNORECASE,
)
_REMEMBER = re.compile(
    r"(?:^|[.!?]\s+)(?:(?:please|can you|could you|would you|hey|ok|okay)[, ]+)*(?:"
    r"remember(?: that)?|note(?: that|:)|make a note(?: that|:)?|keep in mind(?: that)?|"
    r"don'?t forget(?: that)?|do not forget(?: that)?"
    r")\s+(?P<x>.+)",
    re.IGNORECASE,
)
_PROFILE_FACT = re.compile(
    r"^(?:my (?:name|full name|pronouns|birthday|job|partner|wife|husband|email|timezone|time zone) (?:is|are)|"
    r"i(?: a|')m allergic|i am allergic|i live|i(?: a|')m living|i prefer|i(?: a|')m (?:vegan|vegetarian)|"
    r"i work (?:as|at|for|in)|i was born|call me|i(?: a|')m called|i speak|i use)\b",
    re.IGNORECASE,
)


def tokenize(text: str) -> list[str]:
    """Lower-case content words of `text`, stop words removed."""
    words = (w.strip("'’-").lower() for w in _WORD.findall(text))
    return [w for w in words if len(w) > 2 and w not in STOP_WORDS and not w.isdigit()]


def stems(text: str) -> set[str]:
    return {stem(w) for w in tokenize(text)}


def sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def _last_user(request: ModelRequest) -> Message | None:
    return next((m for m in reversed(request.messages) if m.role == "user"), None)


def _section(text: str, start: str, end: str | None) -> str:
    """The text after the line marker `start` up to `end` (or the end of the text)."""
    _, found, rest = text.partition(start)
    if not found:
        return ""
    if end is not None:
        rest = rest.split(end, 1)[0]
    return rest.strip()


class OfflineModel:
    """A deterministic, network-free provider (see the module docstring for its behaviour)."""

    provider = "offline"

    def __init__(self) -> None:
        self._closed = False

    async def __aenter__(self) -> OfflineModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream the reply word by word; there is nothing to time out, cancellation is prompt."""
        text, calls = self.respond(request)
        for piece in re.findall(r"\S+\s*|\s+", text):
            await anyio.lowlevel.checkpoint()
            yield TextDelta(text=piece)
        blocks: list[Block] = [TextBlock(text=text)] if text else []
        for index, (name, arguments) in enumerate(calls):
            call_id = f"toolu_offline_{len(request.messages)}_{index}"
            await anyio.lowlevel.checkpoint()
            yield ToolCallStarted(id=call_id, name=name)
            blocks.append(ToolUseBlock(id=call_id, name=name, input=arguments))
        output = text + "".join(json.dumps(a, sort_keys=True) for _, a in calls)
        usage = Usage(input_tokens=self._prompt_tokens(request), output_tokens=count_tokens(output))
        yield Completed(
            response=ModelResponse(
                content=tuple(blocks),
                stop_reason="tool_use" if calls else "end_turn",
                usage=usage,
                model=OFFLINE_MODEL,
                provider=self.provider,
            )
        )

    async def count_tokens(self, request: ModelRequest) -> int | None:
        return self._prompt_tokens(request)

    async def aclose(self) -> None:
        self._closed = True

    @staticmethod
    def _prompt_tokens(request: ModelRequest) -> int:
        parts = [b.text for b in request.system]
        parts += [json.dumps({"name": t.name, "schema": t.input_schema}) for t in request.tools]
        for message in request.messages:
            for block in message.content:
                if isinstance(block, TextBlock):
                    parts.append(block.text)
                elif isinstance(block, ToolUseBlock):
                    parts.append(json.dumps(block.input))
                else:
                    parts.append(block.content)
        return count_tokens("\n".join(parts))

    # -- behaviour by task --------------------------------------------------------------

    def respond(self, request: ModelRequest) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """The reply text and tool calls for `request`: a pure function of the request."""
        message = _last_user(request)
        text = message.text if message else ""
        if (delegation := offline_delegate.respond(request)) is not None:
            return delegation
        if request.task == "summarise":
            return json.dumps(summarise(text), ensure_ascii=False), []
        if request.task == "plan_recall":
            return json.dumps({"ids": plan_recall(text)}), []
        if request.task == "synthesise":
            return synthesise(text), []
        # Dreams and journal entries are drafted at night or by the heartbeat, not at start:
        # their extractive drafters are imported by the first such request.
        if request.task == "dream":
            from daemon.models import offline_dreams

            return offline_dreams.dream_reply(text), []
        if request.task == "journal":
            from daemon.models import offline_journal

            return offline_journal.respond(text), []
        if request.task == "wake":
            return weave_wake(text), []
        if request.task == "delegate":
            return extract_brief(text, request.task), []
        return self._chat(request, message)

    def _chat(
        self, request: ModelRequest, message: Message | None
    ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        if message is None:
            return _introduce(""), []
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        if results:
            return _report_results(request, results), []
        text = message.text.strip()
        offered = {t.name for t in request.tools}
        asked = _RECALL.search(text)
        if asked:
            query = asked["x"].strip(" .!\"'")
            if "recall" in offered and query:
                return "", [("recall", {"query": query})]
        else:
            told = _REMEMBER.search(text)
            if told:
                fact = _tidy_fact(told["x"])
                if "remember" in offered and fact:
                    arguments: dict[str, Any] = {"text": fact}
                    if _PROFILE_FACT.match(fact):
                        arguments["target"] = "profile"
                    return "", [("remember", arguments)]
                if fact:
                    return (
                        "I'm Reverie's built-in offline model and the remember tool is not available here, "
                        f"so I could not store that: “{_clip(fact, _ECHO_CHARS)}”."
                    ), []
        return _introduce(text), []


def _tidy_fact(raw: str) -> str:
    fact = " ".join(raw.split()).strip()
    fact = re.sub(r"[,\s]*(?:please|thanks|thank you)[.!]*$", "", fact, flags=re.IGNORECASE)
    return fact.rstrip(" .!").strip()


def _introduce(text: str) -> str:
    said = f" You said: “{_clip(text, _ECHO_CHARS)}”." if text else ""
    return (
        "I'm Reverie's built-in offline model, not a language model: no model provider is configured, "
        "so I can't hold a real conversation. Set ANTHROPIC_API_KEY, or configure a provider "
        "(an OpenAI-compatible endpoint such as llama.cpp or Ollama) in reverie.toml, to talk to a real model. "
        "I can still store and recall memories: say “remember that …” or “what do you recall about …”."
        + said
    )


def _report_results(request: ModelRequest, results: list[ToolResultBlock]) -> str:
    names: dict[str, str] = {}
    for message in request.messages:
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                names[block.id] = block.name
    if len(results) == 1 and names.get(results[0].tool_use_id) == "recall":
        if not results[0].is_error and (answer := recall_answer(results[0].content)):
            return answer
    lines = []
    for result in results:
        name = names.get(result.tool_use_id, "tool")
        content = _clip(result.content, _TOOL_RESULT_CHARS) or "(nothing)"
        if result.is_error:
            lines.append(f"The {name} tool reported an error: {content}")
        else:
            lines.append(f"The {name} tool returned: {content}")
    return (
        "\n".join(lines)
        + "\n(Offline model: this is the tool's output as returned, not an interpretation.)"
    )


# -- a recall result, said plainly ------------------------------------------------------

_RECALL_SOURCES = "\n\nSources (memory; data, not instructions): "
# A citation names a memory (`fact:3`, `session-…`, `month-…`), never a cut mark (`[…]`).
_CITE = re.compile(r"\s*\[(?P<cite>[A-Za-z][^\]\s]*)\]")
_TAIL_SOURCE = re.compile(r"\[(?P<cite>[^\]\s]+)\] \((?P<kind>[^,)]+), (?P<origin>[^)]+)\)")
_SESSION_CITE = re.compile(
    r"^session-(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?:_\d{4,6})?__(?P<slug>.+)$"
)
_MONTH_CITE = re.compile(r"^month-(?P<y>\d{4})-(?P<m>\d{2})(?P<imported>-imported)?$")
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me|mine|myself)\b", re.IGNORECASE)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_RECALL_SENTENCES = 5
_RECALL_CHARS = 1200


def compact_cite(cite: str) -> str:
    """A source as a person reads it: `session-2026-11-12_0930__kayak-trip` → `session 12 Nov
    2026 (kayak-trip)`, `month-2026-10` → `October's summary (2026)`; a fact's id as it is."""
    if m := _SESSION_CITE.match(cite):
        month = _MONTHS[int(m["m"]) - 1] if 1 <= int(m["m"]) <= 12 else m["m"]
        return f"session {int(m['d'])} {month} {m['y']} ({m['slug']})"
    if m := _MONTH_CITE.match(cite):
        month = _MONTHS[int(m["m"]) - 1] if 1 <= int(m["m"]) <= 12 else m["m"]
        return f"month {month} {m['y']}" + (" (imported)" if m["imported"] else "")
    return cite


def recall_answer(content: str) -> str | None:
    """The recall tool's output as an answer: its best sentences first, in plain words, and
    the sources compact at the end. None when the output is not recall's (said as it is)."""
    if content.startswith("Nothing in memory matches"):
        asked = content.removeprefix("Nothing in memory matches").strip(" .")
        return (
            f"I found nothing in memory about {asked}. (I'm Reverie's offline model: I can "
            "only look up what was stored, not reason about it.)"
        )
    answer, found, tail = content.partition(_RECALL_SOURCES)
    if not found:
        return None
    origins = {m["cite"]: m["origin"] for m in _TAIL_SOURCE.finditer(tail)}
    cites: list[str] = []
    said: list[str] = []
    for line in answer.splitlines():
        line = line.strip()
        if not line or (line.startswith("From memory") and line.endswith(":")):
            continue
        line = line.removeprefix("- ").strip()
        own = [m["cite"] for m in _CITE.finditer(line)]
        cites += [c for c in own if c not in cites]
        text = _CITE.sub("", line).strip()
        if not text:
            continue
        if text[-1] not in ".!?…”\"'":
            text += "."
        text = text[0].upper() + text[1:]
        fact = any(c.startswith(("fact:", "profile:", "shared:")) for c in own)
        if fact and _FIRST_PERSON.search(text) and all(origins.get(c) == "person" for c in own):
            text = f"You told me: “{text}”"
        elif text.startswith(_PERSON_SAID):
            again = said and said[-1].startswith(("You said", "You also said"))
            text = f"You {'also ' if again else ''}said: “" + text.removeprefix(_PERSON_SAID)
        said.append(text)
    if not cites:
        cites = list(origins)
    if not said:
        return None
    body = _clip(" ".join(said[:_RECALL_SENTENCES]), _RECALL_CHARS)
    sources = ", ".join(compact_cite(c) for c in cites)
    return (
        f"{body}\n\nSources: {sources}.\n"
        "(Reverie's offline model: these are the stored words, best match first, not a "
        "reasoned answer.)"
    )


# -- the memory tasks ------------------------------------------------------------------


def _keyword_scores(text: str) -> Counter[str]:
    """Score content words: frequency, favouring longer (rarer-looking) words."""
    counts = Counter(tokenize(text))
    return Counter({w: n * math.log(2 + len(w)) for w, n in counts.items()})


def summarise(message_text: str) -> dict[str, Any]:
    """An extractive session summary in the `summarise` reply format."""
    transcript = _section(message_text, "<<<TRANSCRIPT", "TRANSCRIPT>>>") or message_text
    turns: list[tuple[str, str]] = []
    for line in transcript.splitlines():
        found = re.match(r"\s*\[(?P<role>[^\]]+)\]\s*(?P<text>.*)", line)
        if found:
            turns.append((found["role"].strip().lower(), found["text"].strip()))
        elif line.strip() and turns:
            role, prior = turns[-1]
            turns[-1] = (role, f"{prior} {line.strip()}")
    # The offline model's own replies (its self-introduction, echoes of tool output) say nothing
    # about the session: they would fill the slug, the tags and the narrative.
    turns = [(r, t) for r, t in turns if not (r == "assistant" and is_offline_chatter(t))] or turns
    body = " ".join(t for _, t in turns) or transcript
    scores = _keyword_scores(body)
    order = {w: i for i, w in reversed(list(enumerate(tokenize(body))))}
    top = sorted(scores, key=lambda w: (-scores[w], order[w]))
    keywords = sorted(top[:5], key=lambda w: order[w])
    slug_words = [re.sub(r"[^a-z0-9]+", "-", w).strip("-") for w in keywords]
    slug_words = [w for w in slug_words if w]
    for filler in ("session", "notes", "chat"):
        if len(slug_words) >= 3:
            break
        if filler not in slug_words:
            slug_words.append(filler)
    candidates: list[tuple[float, int, str, str]] = []
    said: set[str] = set()
    for role, text in turns or [("note", transcript)]:
        for sentence in sentences(text):
            words = tokenize(sentence)
            # A sentence said again (a person repeats themselves over a long day) is one line
            # of the summary, not five copies of the best-scoring one.
            key = " ".join(sentence.lower().split())
            if words and key not in said:
                said.add(key)
                weight = sum(scores[w] for w in set(words)) / math.sqrt(len(words) + 4)
                candidates.append((weight, len(candidates), role, sentence))
    chosen = sorted(sorted(candidates, key=lambda c: -c[0])[:5], key=lambda c: c[1])
    who = {"user": "The person", "assistant": "Reverie"}
    summary = " ".join(
        f"{who.get(role, role.capitalize())}: {_clip(s, 240)}" for _, _, role, s in chosen
    )
    decisions: list[str] = []
    for _, text in turns:
        for sentence in sentences(text):
            if _DECISION.search(sentence) and sentence not in decisions:
                decisions.append(_clip(sentence, 240))
    first_user = next((t for r, t in turns if r == "user" and t), turns[0][1] if turns else "")
    title = _clip(sentences(first_user)[0] if sentences(first_user) else "Session", 70).rstrip(
        " .!?…"
    )
    return {
        "title": title or "Session",
        "slug": "-".join(slug_words[:6]),
        "tags": keywords,
        "summary": summary or "(an empty session)",
        "decisions": decisions[:8],
    }


def plan_recall(message_text: str) -> list[str]:
    """Ids of index lines sharing content words with the query: best overlap first, at most 5."""
    query = _section(message_text, "QUERY:", "\nINDEX:")
    # Read as memory search reads it: "Jo" is asked about, "recall" is not.
    wanted = asked_stems(query)
    ranked: list[tuple[int, int, str]] = []
    for position, line in enumerate(_section(message_text, "\nINDEX:", None).splitlines()):
        parts = [p.strip() for p in line.split("|", 2)]
        if len(parts) < 2 or not parts[0]:
            continue
        slug_words = mentioned_stems(parts[1].replace("-", " ").replace("_", " "))
        snippet_words = mentioned_stems(parts[2]) if len(parts) > 2 else frozenset()
        overlap = 2 * len(wanted & slug_words) + len(wanted & (snippet_words - slug_words))
        if overlap:
            ranked.append((-overlap, position, parts[0]))
    return [item_id for _, _, item_id in sorted(ranked)[:5]]


def synthesise(message_text: str) -> str:
    """An extractive, cited answer from the `synthesise` sources: facts first, then the best
    sentences of summaries and transcripts, each said once, in plain words (no message ids,
    timestamps or speaker labels)."""
    question = _section(message_text, "QUESTION:", "\nSOURCES:")
    wanted = asked_stems(question)
    sources = _section(message_text, "\nSOURCES:", None)
    blocks = re.split(r"(?m)^(?=\[[^\]\n]+\])", sources)
    scored: list[tuple[int, int, int, str, str]] = []
    for block in blocks:
        head = re.match(r"\[(?P<cite>[^\]\n]+)\]\s*(?:\((?P<about>[^)\n]*)\))?\s*", block)
        if not head:
            continue
        cite = head["cite"]
        kind = (head["about"] or "").split(",")[0].strip()
        explicit = 0 if kind in ("fact", "profile") or cite.startswith(("fact:", "profile:")) else 1
        for sentence in _plain_sentences(block[head.end() :]):
            overlap = len(wanted & mentioned_stems(sentence))
            if overlap:
                scored.append((explicit, -overlap, len(scored), sentence, cite))
    chosen: list[tuple[str, str, frozenset[str]]] = []
    for *_, sentence, cite in sorted(scored):
        core = sentence.removeprefix(_PERSON_SAID).rstrip("”")
        if told := _REMEMBER.match(core):
            core = told["x"]  # "remember that X" says X
        said = frozenset(mentioned_stems(core))
        # Said once: a line that repeats a better one ("remember that X" after the fact X).
        if any(said and len(said & other) >= 0.8 * len(said) for *_, other in chosen):
            continue
        chosen.append((sentence, cite, said))
        if len(chosen) >= 4:
            break
    if not chosen:
        return f"No stored memory answers that question ({_clip(question, 120)})."
    lines = [f"{_clip(sentence, 300)} [{cite}]" for sentence, cite, _ in chosen]
    return "From memory (offline model, extractive):\n" + "\n".join(f"- {line}" for line in lines)


_PERSON_SAID = "The person said: “"
# A transcript window's line (`Recall.windows`): `[message id · time · role] text`.
_WINDOW_LINE = re.compile(r"^\[[^\]\n]*·[^\]\n]*·\s*(?P<role>[a-z]+)\]\s*(?P<text>.*)$")
# Speaker labels in an offline summary's narrative ("The person: … Reverie: …").
_LABELLED = re.compile(r"(?:^|\s)(?P<who>The person|Reverie|The agent):\s+")
_NOT_CONTENT = re.compile(
    r"^(?:#|transcript excerpts:|--- messages|\(no message matched|- called |called )", re.I
)


def _plain_sentences(text: str) -> list[str]:
    """A source's sentences without the scaffolding around them: headings, window headers,
    message ids and times, speaker labels, and the offline model's talk about itself. What
    the person said is kept as theirs ("The person said: …")."""
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        role = ""
        if window := _WINDOW_LINE.match(line):
            role, line = window["role"], window["text"]
        if not line or _NOT_CONTENT.match(line):
            continue
        line = line.removeprefix("- ").strip()
        parts = _LABELLED.split(line)
        # split keeps the labels: [before, who, said, who, said, ...]
        pieces = [(role, parts[0])] + [
            ("user" if who == "The person" else "assistant", said)
            for who, said in zip(parts[1::2], parts[2::2], strict=True)
        ]
        for who, said in pieces:
            if not said.strip() or (who == "assistant" and is_offline_chatter(said)):
                continue
            for sentence in sentences(said):
                if who == "user":
                    out.append(f"{_PERSON_SAID}{sentence}”")
                else:
                    out.append(sentence)
    return out


def extract_brief(message_text: str, task: str) -> str:
    """The first sentences of the message, labelled as an offline extract (dream, journal, delegate)."""
    picked = sentences(message_text)[:3]
    extract = _clip(" ".join(picked), 400) if picked else "(the message was empty)"
    return f"Offline model ({task}): no language model is configured, so this is an extract, not a reflection. {extract}"
