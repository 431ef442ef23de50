"""Sections of what the agent keeps: memory, the context's layers, topics, threads, the journal."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from daemon.settings.core import Section


class MemorySettings(Section):
    embedder: Literal["auto", "none", "minilm", "e5", "local", "api", "hash"] = "auto"
    embed_model: str = "all-MiniLM-L6-v2"
    embed_batch: int = Field(32, ge=1)
    api_embed_url: str | None = None
    api_embed_key_env: str = "REVERIE_EMBED_API_KEY"
    auto_recall: bool = True
    auto_recall_min: int = Field(3, ge=0)
    auto_recall_max: int = Field(6, ge=0)
    auto_recall_tokens: int = Field(1500, ge=0)
    recall_max_bytes: int = Field(6000, ge=512)
    planner_index_tokens: int = Field(6000, ge=200)
    search_hops: int = Field(2, ge=1, le=2)
    summary_transcript_tokens: int = Field(12_000, ge=500)
    near_duplicate_threshold: float = Field(0.9, gt=0, le=1)
    chunk_messages: int = Field(6, ge=1)
    # A fact neither recalled nor said again for this many days weighs stale_weight in
    # automatic recall's ranking (it is never deleted).
    stale_after_days: int = Field(60, ge=1)
    stale_weight: float = Field(0.7, gt=0, le=1)
    # A fact that replaced another this recently is shown with "(changed from X on DATE)".
    change_note_days: int = Field(30, ge=0)


class LayerBudget(Section):
    target: int = Field(ge=0)
    cap: int = Field(ge=0)


def _default_layers() -> dict[str, LayerBudget]:
    return {
        "discipline": LayerBudget(target=250, cap=400),
        "persona": LayerBudget(target=1500, cap=4000),
        "profile": LayerBudget(target=500, cap=800),
        "wake": LayerBudget(target=600, cap=1000),
        "themes": LayerBudget(target=300, cap=500),
        "recollections": LayerBudget(target=700, cap=1000),
        "recall": LayerBudget(target=1000, cap=1500),
        "topics": LayerBudget(target=800, cap=1500),
        "journal": LayerBudget(target=300, cap=700),
        "time": LayerBudget(target=30, cap=60),
        "away": LayerBudget(target=100, cap=140),
        "threads": LayerBudget(target=250, cap=400),
        "handover": LayerBudget(target=600, cap=900),
        "reflection": LayerBudget(target=150, cap=200),
        "knowledge": LayerBudget(target=400, cap=600),
    }


class ContextSettings(Section):
    total_budget: int = Field(8000, ge=500)
    layers: dict[str, LayerBudget] = Field(default_factory=_default_layers)
    themes_count: int = Field(5, ge=0)
    recollection_summaries: int = Field(4, ge=0)
    recollection_facts: int = Field(4, ge=0)
    profile_facts: int = Field(20, ge=0)
    # The newest entries of the latest daily digest shown in the journal layer.
    journal_entries: int = Field(10, ge=0)
    # Days of the journal the journal layer reaches back over: the newest digest in full, the
    # earlier days of this many a line or two each (1: the newest digest alone).
    journal_days: int = Field(7, ge=1)
    include_neurology: bool = False

    @field_validator("layers", mode="before")
    @classmethod
    def _complete_layers(cls, value: Any) -> Any:
        # A home that tunes one layer must not lose the others' budgets.
        if not isinstance(value, dict):
            return value
        known = _default_layers()
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(
                f"unknown context layer(s) {unknown}; known layers are {sorted(known)}"
            )
        merged: dict[str, Any] = {k: v.model_dump() for k, v in known.items()}
        for name, budget in value.items():
            merged[name] = {**merged[name], **budget} if isinstance(budget, dict) else budget
        return merged


class TopicPoint(Section):
    top_n: int = Field(ge=0)
    min_score: float = Field(ge=0)


class TopicsSettings(Section):
    matrix: str = "PERSONALITY_MATRIX.md"
    persist_turns: int = Field(3, ge=0)
    system_prompt: TopicPoint = TopicPoint(top_n=3, min_score=1)
    recall_persona: TopicPoint = TopicPoint(top_n=2, min_score=1)
    summary_persona: TopicPoint = TopicPoint(top_n=2, min_score=2)
    watch: bool = True


class ThreadsSettings(Section):
    """Open threads (promises, unanswered questions, dated plans): how long one stays open."""

    # An open thread nobody resolved expires, with a note, after this many days.
    expire_days: int = Field(14, ge=1, le=3650)


class JournalSettings(Section):
    """The journal heartbeat: structured entries of what happened, a daily digest, redaction."""

    heartbeat_minutes: float = Field(20.0, gt=0)
    max_entries_per_day: int = Field(200, ge=1)
    # The transcript shown to the heartbeat model for one entry (the newest part is kept).
    entry_input_tokens: int = Field(3000, ge=200)
    # One entry as written (summary and lists together); longer answers are clipped.
    entry_tokens: int = Field(400, ge=50)
    # At shutdown the model gets this long; after it the extractive entry is written instead.
    shutdown_model_s: float = Field(3.0, gt=0, le=30)
    # The journal layer is never cut below this by the context's total budget.
    context_reserved_tokens: int = Field(250, ge=0)
    redact_defaults: bool = True
    # Extra regular expressions whose matches are masked before anything is written.
    redact_patterns: list[str] = Field(default_factory=list)

    @field_validator("redact_patterns")
    @classmethod
    def _compile(cls, value: list[str]) -> list[str]:
        import re

        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"redact pattern {pattern!r} is not a valid regular expression ({exc})"
                ) from None
        return value
