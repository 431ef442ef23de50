"""Configuration: shipped TOML defaults, a home's own `reverie.toml`, environment overrides.

Layering (later wins): the embedded `config/reverie.toml` → `<home>/reverie.toml` →
`--config FILE` → environment (`REVERIE_*` for a few scalars, the API keys by name).
Secrets never have to live in a file: each provider names the environment variable that
holds its key, and systemd credentials (`$CREDENTIALS_DIRECTORY/<name>`) are read too.

Size: one section class per system, side by side, so every setting is found in one place
(each is documented in config/reverie.toml).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from daemon.errors import ReverieError
from daemon.paths import shipped_dir


class ConfigError(ReverieError):
    """A configuration problem, phrased as one line a person can act on."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class AgentSettings(_Section):
    name: str = "Reverie"
    max_tool_steps: int = Field(12, ge=1, le=100)
    turn_timeout_s: float = Field(600.0, gt=0)
    shutdown_grace_s: float = Field(8.0, gt=0, le=60)
    tool_output_max_chars: int = Field(16_000, ge=256)
    compaction_threshold: float = Field(0.8, gt=0.1, lt=1.0)
    history_max_messages: int = Field(400, ge=4)
    # Replayed history is bounded by the model's window; at least this many recent turns stay whole.
    history_min_turns: int = Field(6, ge=1)
    # When the model stays unreachable the message stays queued; retry after this, doubling.
    unavailable_retry_s: float = Field(5.0, gt=0)
    unavailable_retry_max_s: float = Field(300.0, gt=0)


class RoleModel(_Section):
    provider: Literal["auto", "anthropic", "openai", "offline"] = "auto"
    model: str = "claude-sonnet-4-5"
    max_tokens: int = Field(4096, ge=16)
    context_window: int = Field(200_000, ge=1024)
    temperature: float | None = None
    essential: bool = False


class ModelsSettings(_Section):
    trunk: RoleModel = RoleModel(essential=True)
    summariser: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=2048)
    recall_planner: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=512)
    recall_synthesis: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=1024)
    delegate: RoleModel = RoleModel()
    dreams: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=2048)
    heartbeat: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=512)


class AnthropicSettings(_Section):
    api_key_env: str = "ANTHROPIC_API_KEY"
    base_url: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(4, ge=0, le=10)
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    prompt_caching: bool = True
    exact_token_counts: bool = False


class OpenAISettings(_Section):
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(300.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    connect_timeout_s: float = Field(10.0, gt=0)
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(8.0, ge=0)


class ProvidersSettings(_Section):
    anthropic: AnthropicSettings = AnthropicSettings()
    openai: OpenAISettings = OpenAISettings()


class Price(_Section):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(0.0, ge=0)
    cache_write: float = Field(0.0, ge=0)


def _default_prices() -> dict[str, Price]:
    return {
        "claude-opus-4-1": Price(input=15.0, output=75.0, cache_read=1.5, cache_write=18.75),
        "claude-sonnet-4-5": Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
        "claude-haiku-4-5": Price(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25),
    }


class SpendSettings(_Section):
    daily_cap_usd: float = Field(10.0, ge=0)
    # Non-essential work (heartbeat, dreams) stops once today's spend reaches this fraction.
    non_essential_fraction: float = Field(0.8, gt=0, le=1)
    prices: dict[str, Price] = Field(default_factory=_default_prices)


class ChatSettings(_Section):
    socket: str | None = None
    max_frame_bytes: int = Field(1_048_576, ge=1024)
    client_queue_frames: int = Field(1024, ge=16)
    allow_uids: list[int] = Field(default_factory=list)


class StoreSettings(_Section):
    checkpoint_interval_s: float = Field(300.0, gt=0)
    busy_timeout_ms: int = Field(5000, ge=0)


class StorageSettings(_Section):
    """Where the memory store lives: the home's SQLite file, or a PostgreSQL server (pgvector)."""

    # Empty: SQLite beside the home. "postgresql://user@host:5432/db": that server; its
    # password comes from REVERIE_STORAGE_PASSWORD, PGPASSWORD, ~/.pgpass or the systemd
    # credential `reverie-storage-password`, never from this file.
    url: str = ""
    # The agent's schema on the server; empty: the [agent] name.
    namespace: str = ""
    # The most memory the server may use to build the vector index (`maintenance_work_mem`
    # for that one statement): a graph that fits builds several times faster than one that
    # spills to disk. It takes only what the vectors need — ~2.7 GB at 1M memories of 384
    # dimensions — so this is a ceiling; lower it on a server short of memory.
    index_build_memory: str = "2GB"  # = daemon.store.postgres.DEFAULT_BUILD_MEMORY

    @field_validator("index_build_memory")
    @classmethod
    def _memory_size(cls, v: str) -> str:
        if not re.fullmatch(r"\d+\s*(kB|MB|GB|TB)", v.strip()):
            raise ValueError(f"{v!r} is not a size PostgreSQL reads, such as '512MB' or '2GB'")
        return v.strip()

    @field_validator("url")
    @classmethod
    def _server_url(cls, v: str) -> str:
        if v and (problem := server_url_problem(v)):
            raise ValueError(problem)
        return v


def server_url_problem(url: str) -> str | None:
    """Why `url` cannot name the store's server (not postgresql://, or it holds a password), or None."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        return f"{url!r} is not a postgresql://user@host/db URL"
    if parts.password or "password=" in parts.query:
        return (
            "the URL holds a password: put it in REVERIE_STORAGE_PASSWORD, PGPASSWORD, "
            "~/.pgpass or the systemd credential reverie-storage-password instead"
        )
    return None


class MemorySettings(_Section):
    embedder: Literal["auto", "none", "minilm", "local", "api", "hash"] = "auto"
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


class LayerBudget(_Section):
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


class ContextSettings(_Section):
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


class TopicPoint(_Section):
    top_n: int = Field(ge=0)
    min_score: float = Field(ge=0)


class TopicsSettings(_Section):
    matrix: str = "PERSONALITY_MATRIX.md"
    persist_turns: int = Field(3, ge=0)
    system_prompt: TopicPoint = TopicPoint(top_n=3, min_score=1)
    recall_persona: TopicPoint = TopicPoint(top_n=2, min_score=1)
    summary_persona: TopicPoint = TopicPoint(top_n=2, min_score=2)
    watch: bool = True


class SchedulerSettings(_Section):
    nightly_sleep: str = Field("03:30", pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    timezone: str | None = None

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (use an IANA name such as 'Europe/London')"
            ) from None
        return value


class NoticesSettings(_Section):
    # "22:00-07:00" in scheduler.timezone; empty: no quiet hours.
    quiet_hours: str = Field("", pattern=r"^$|^([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d$")
    # A desktop notification per notice: the text is appended as the last argument (no shell).
    notify_command: list[str] = Field(default_factory=list)
    notify_timeout_s: float = Field(10.0, gt=0, le=120)
    greeting: bool = True
    # HEARTBEAT.md's instructions are checked on the journal heartbeat (one model call each),
    # at most once in this many minutes.
    checklist: bool = True
    checklist_minutes: float = Field(60.0, gt=0)

    @field_validator("quiet_hours")
    @classmethod
    def _a_window(cls, value: str) -> str:
        if value and value[:5] == value[6:]:
            raise ValueError(f"quiet hours {value!r} start and end at the same time")
        return value


class ScheduleSettings(_Section):
    """Schedules the agent keeps for the person (`schedule`, `reverie schedule`)."""

    # Schedules active or waiting for approval at once; adding one more is refused.
    max_schedules: int = Field(5000, ge=1)
    # The time of day a phrase that names a day but no time means ("tomorrow", "every monday").
    default_time: str = Field("09:00", pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    # The shortest repetition "every N minutes/hours" may ask for.
    min_interval_minutes: float = Field(5.0, gt=0)
    # A firing later than this after its due time is marked late (by how much) in its notice.
    late_after_s: float = Field(60.0, ge=0)
    # A repeating schedule missed while the daemon was down fires once at start (never more);
    # false: it waits for its next regular time. A missed one-off always fires once, late.
    catch_up: bool = True


class ForkRetention(_Section):
    # Fork transcripts older than this are archived or pruned (0 = never by age).
    max_age_days: float = Field(30.0, ge=0)
    # When sessions/forks/ (live transcripts) grows past this, the oldest go first (0 = no limit).
    max_total_mb: float = Field(200.0, ge=0)
    # "archive": gzip into sessions/forks/archive/ (recall_session still finds the summary);
    # "prune": delete the transcript (its summary and lineage row stay).
    action: Literal["archive", "prune"] = "archive"


class DelegateSettings(_Section):
    enabled: bool = True
    # Deepest fork: the trunk is depth 0; a session at max_depth is not offered `delegate`.
    max_depth: int = Field(3, ge=0, le=8)
    # `delegate` calls of one model step that run at the same time (the rest wait their turn).
    max_parallel: int = Field(3, ge=1, le=16)
    # A fork with no model output and no tool activity for this long is stopped (partial kept).
    inactivity_timeout_s: float = Field(120.0, gt=0)
    # Hard ceiling on one fork tree (a trunk's `delegate` call and everything under it); keep it
    # under agent.turn_timeout_s so the trunk gets the partial result before its own turn times out.
    tree_timeout_s: float = Field(480.0, gt=0)
    # Tokens (input + output) one fork tree may use across all its forks.
    token_budget: int = Field(400_000, ge=1000)
    # Model steps one fork may take before it must finish.
    max_tool_steps: int = Field(20, ge=1, le=200)
    retention: ForkRetention = ForkRetention()


class SleepSettings(_Section):
    """The sleep cycle; its nightly time and time zone are `scheduler.nightly_sleep` / `timezone`."""

    nightly: bool = True
    # The nightly start is moved later by a random amount up to this, so it is not clockwork.
    jitter_minutes: float = Field(20.0, ge=0, le=240)
    # A failing phase is retried this many times, waiting retry_base_s, doubling, then skipped.
    phase_retries: int = Field(2, ge=0, le=10)
    retry_base_s: float = Field(30.0, ge=0)
    retry_max_s: float = Field(600.0, ge=0)
    # Wind-down: after `compaction_approaching` the trunk is told it is tired; the cycle starts at
    # the end of the first turn it finishes, or anyway once the context reaches hard_threshold
    # of the window or wind_down_turns turns have ended since the note.
    hard_threshold: float = Field(0.92, gt=0.1, le=1.0)
    wind_down_turns: int = Field(3, ge=1, le=50)
    # WAKE.md: the longest letter (tokens) and how many memories are pulled into its weaving.
    wake_tokens: int = Field(600, ge=100, le=4000)
    wake_memories: int = Field(8, ge=0, le=50)
    # A cycle that ran within this many hours is not repeated by the nightly schedule.
    min_gap_hours: float = Field(6.0, ge=0)

    # --- maintenance and dreams (issue 10, part B) ---
    # Session summaries (and chunks of unsummarised sessions) older than this are folded
    # into one summary per month; the sources stay, linked to it.
    fold_after_days: int = Field(30, ge=1)
    # An explicit fact of trusted origin whose importance reaches this is pinned in FACTS.md.
    promote_min_importance: float = Field(0.9, ge=0, le=1)
    # A fact about a dated plan is retired this many days after its last date has passed.
    retire_after_days: int = Field(7, ge=0)
    # VACUUM when at least this fraction of the database's pages is free (else only checkpoint).
    vacuum_min_free_fraction: float = Field(0.1, ge=0, le=1)
    # Dreams: at most this many revisions per night; a revision deleting more than this
    # fraction of a file's lines is rejected.
    dreams_max_revisions: int = Field(3, ge=0)
    dreams_max_delete_fraction: float = Field(0.5, gt=0, le=1)
    # How much recent material (summaries, facts) a dream reads, in tokens.
    dreams_material_tokens: int = Field(6000, ge=200)
    # --- end of maintenance and dreams ---
    # Mining: the day's sessions read for facts said in passing (the dreams model when there
    # is a key, extractive rules offline); at most this many messages a night, in batches of
    # this many tokens for the model.
    mining: bool = True
    mining_max_messages: int = Field(5000, ge=1)
    mining_batch_tokens: int = Field(6000, ge=500)
    # Promotion by use: a mined fact recalled this many times (or tagged important) is pinned
    # in FACTS.md when it is the person's word (proposed when the agent's, never when a
    # tool's), at most max_promoted mined facts pinned at once.
    promote_min_uses: int = Field(5, ge=1)
    max_promoted: int = Field(20, ge=0)


class ThreadsSettings(_Section):
    """Open threads (promises, unanswered questions, dated plans): how long one stays open."""

    # An open thread nobody resolved expires, with a note, after this many days.
    expire_days: int = Field(14, ge=1, le=3650)


class JournalSettings(_Section):
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


_TRUNK_TOOLS = [
    "remember",
    "correct",
    "retract",
    "recall",
    "recall_session",
    "remember_session",
    "add_journal_entry",
    "list_journal_entries",
    "journal_status",
    "delegate",
    "schedule",
    "list_schedules",
    "cancel_schedule",
    "read_file",
    "list_files",
    "search_files",
]


class RunSettings(_Section):
    """The `run` tool: a shell command in the sandbox."""

    # "auto": bubblewrap when installed, else `run` is off unless allow_unsandboxed.
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    # Without a sandbox `run` is off unless this says, explicitly, that it may run bare.
    allow_unsandboxed: bool = False
    network: bool = False
    timeout_s: float = Field(120.0, gt=0)
    max_timeout_s: float = Field(900.0, gt=0)
    cpu_seconds: int = Field(300, ge=1)
    memory_mb: int = Field(2048, ge=64)
    output_max_chars: int = Field(30_000, ge=256)
    # Processes and threads a command may have at once (0: no limit); docs/tools.md says how
    # it holds for a daemon run as root and as its own user.
    max_processes: int = Field(256, ge=0)
    # Environment variables passed through to the command (never keys or tokens).
    env: list[str] = Field(default_factory=lambda: ["PATH", "LANG", "LC_ALL", "TERM", "TZ"])


class FetchSettings(_Section):
    """The `fetch_url` tool: public http(s) pages as readable text."""

    timeout_s: float = Field(20.0, gt=0)
    max_bytes: int = Field(2_000_000, ge=1024)
    max_chars: int = Field(40_000, ge=256)
    max_redirects: int = Field(5, ge=0, le=20)
    # Hosts (names, addresses or CIDR ranges) exempt from the private-address guard.
    allow_hosts: list[str] = Field(default_factory=list)


class ToolsSettings(_Section):
    """Who is offered which tools (names or globs), and the work tools' limits."""

    # The trunk reads and delegates; forks do the work (a fork never gets more than its
    # parent allows: a nested fork's set is its parent's set at most).
    trunk: list[str] = Field(default_factory=lambda: list(_TRUNK_TOOLS))
    fork: list[str] = Field(default_factory=lambda: ["*"])
    run: RunSettings = RunSettings()
    fetch: FetchSettings = FetchSettings()


class WorkspaceSettings(_Section):
    """Where the file tools and `run` may act: <home>/workspace, plus any roots listed."""

    roots: list[str] = Field(default_factory=list)
    read_max_bytes: int = Field(262_144, ge=1024)
    write_max_bytes: int = Field(2_000_000, ge=1024)


class PermissionRule(_Section):
    # A tool name or glob ("run", "mcp__github__*").
    tool: str
    # A glob matched against the tool's subject (a command, a path, a URL); "*" = any call.
    match: str = "*"
    decision: Literal["allow", "ask", "deny"]


class PermissionsSettings(_Section):
    """Per tool allow / ask / deny with argument patterns; deny wins over ask over allow."""

    rules: list[PermissionRule] = Field(default_factory=list)
    # An `ask` nobody answers within this long is a no.
    approval_timeout_s: float = Field(120.0, gt=0)


class McpServer(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    # Streamable HTTP instead of a command.
    url: str | None = None
    enabled: bool = True
    # The decision for this server's tools when no [[permissions.rules]] entry matches:
    # a default, and per tool name.
    permission: Literal["allow", "ask", "deny"] = "ask"
    tools: dict[str, Literal["allow", "ask", "deny"]] = Field(default_factory=dict)
    call_timeout_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of command or url")
        return self


class McpSettings(_Section):
    servers: list[McpServer] = Field(default_factory=list)
    # A stdio server that dies is restarted after restart_base_s, doubling up to restart_max_s.
    restart_base_s: float = Field(1.0, gt=0)
    restart_max_s: float = Field(60.0, gt=0)
    start_timeout_s: float = Field(20.0, gt=0)

    @model_validator(mode="after")
    def _unique_names(self) -> McpSettings:
        # A server's name is its tools' namespace: two servers of one name would share it.
        names = [server.name for server in self.servers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"MCP server names must be unique; repeated: {', '.join(twice)}")
        return self


@dataclass(frozen=True, kw_only=True)
class ListenAddress:
    """Where a listener binds: a TCP host and port, or a Unix socket path."""

    host: str = ""
    port: int = 0
    path: str = ""

    @classmethod
    def parse(cls, text: str) -> ListenAddress:
        """Read "HOST:PORT", "[V6]:PORT" or an absolute path; raise `ValueError` saying why not."""
        text = text.strip()
        if text.startswith("/"):
            return cls(path=text)
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"{text!r} is neither HOST:PORT (e.g. 127.0.0.1:8765) nor an absolute Unix socket path"
            )
        return cls(host=host.removeprefix("[").removesuffix("]"), port=int(port))

    @property
    def loopback(self) -> bool:
        if self.path:
            return True  # a Unix socket is reachable only on this machine
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name that could resolve anywhere

    def __str__(self) -> str:
        if self.path:
            return self.path
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class WebSettings(_Section):
    """The local web console (`daemon.web`): off unless asked for, on loopback unless allowed."""

    enabled: bool = False
    # "HOST:PORT" (a loopback address unless allow_remote), or an absolute Unix socket path.
    listen: str = "127.0.0.1:8765"
    allow_remote: bool = False
    # Host header names the console answers besides the listen address's own (a proxy's name).
    hosts: list[str] = Field(default_factory=list)

    @property
    def address(self) -> ListenAddress:
        return ListenAddress.parse(self.listen)

    @model_validator(mode="after")
    def _loopback_unless_allowed(self) -> WebSettings:
        address = ListenAddress.parse(self.listen)  # ValueError: a readable config error
        if not address.loopback and not self.allow_remote:
            raise ValueError(
                f"web.listen {self.listen!r} is not a loopback address: the console would be "
                "reachable from other machines; use 127.0.0.1, ::1 or a Unix socket path, or set "
                "web.allow_remote = true if you mean it"
            )
        return self


# Keys that would put a Matrix secret in the TOML: refused, the token lives elsewhere.
_MATRIX_SECRET_KEYS = ("access_token", "token", "password")


class MatrixSettings(_Section):
    """The Matrix channel (`daemon.channels.matrix`): one bot account, off unless turned on.

    The bot's access token is never in the TOML: `REVERIE_MATRIX_TOKEN` in the environment,
    the systemd credential `reverie-matrix-token`, or the file `token_file` names.
    """

    enabled: bool = False
    # The homeserver's client-server API base URL, e.g. "https://matrix.example.org".
    homeserver: str = ""
    # The bot's own Matrix ID, e.g. "@reverie:example.org".
    user_id: str = ""
    # A file holding the bot's access token (mode 0600), when not in the environment/credential.
    token_file: str = ""
    # Room IDs ("!abc:example.org") the bot answers in; invites to other rooms are ignored.
    rooms: list[str] = Field(default_factory=list)
    # Matrix IDs allowed to talk to it as the person; everyone else is ignored and logged.
    allow: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_here(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _MATRIX_SECRET_KEYS:
                if key in data:
                    raise ValueError(
                        f"channels.matrix.{key} is refused: a secret does not belong in the "
                        "config file; put the access token in REVERIE_MATRIX_TOKEN, the systemd "
                        "credential reverie-matrix-token, or a 0600 file named by token_file"
                    )
        return data

    @model_validator(mode="after")
    def _complete_when_enabled(self) -> MatrixSettings:
        if not self.enabled:
            return self
        if not re.match(r"^https?://[^/\s]+", self.homeserver):
            raise ValueError(
                f"channels.matrix.homeserver {self.homeserver!r} is not an http(s) URL"
            )
        if not re.match(r"^@[^:\s]+:\S+$", self.user_id):
            raise ValueError(f"channels.matrix.user_id {self.user_id!r} is not a Matrix ID")
        for room in self.rooms:
            # Room versions before 12 read "!id:server"; version 12 drops the server part.
            if not re.match(r"^![^\s:]+(:\S+)?$", room):
                raise ValueError(f"channels.matrix.rooms: {room!r} is not a room ID (!id:server)")
        for who in self.allow:
            if not re.match(r"^@[^:\s]+:\S+$", who):
                raise ValueError(f"channels.matrix.allow: {who!r} is not a Matrix ID")
        if not self.rooms or not self.allow:
            raise ValueError("channels.matrix needs at least one room and one allowed Matrix ID")
        return self


class ChannelsSettings(_Section):
    """Doors to the same conversation besides the socket (docs/channels.md)."""

    matrix: MatrixSettings = MatrixSettings()


class LogSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class Settings(_Section):
    agent: AgentSettings = AgentSettings()
    models: ModelsSettings = ModelsSettings()
    providers: ProvidersSettings = ProvidersSettings()
    spend: SpendSettings = SpendSettings()
    chat: ChatSettings = ChatSettings()
    store: StoreSettings = StoreSettings()
    storage: StorageSettings = StorageSettings()
    memory: MemorySettings = MemorySettings()
    context: ContextSettings = ContextSettings()
    topics: TopicsSettings = TopicsSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    notices: NoticesSettings = NoticesSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    delegate: DelegateSettings = DelegateSettings()
    sleep: SleepSettings = SleepSettings()
    journal: JournalSettings = JournalSettings()
    threads: ThreadsSettings = ThreadsSettings()
    tools: ToolsSettings = ToolsSettings()
    workspace: WorkspaceSettings = WorkspaceSettings()
    permissions: PermissionsSettings = PermissionsSettings()
    mcp: McpSettings = McpSettings()
    web: WebSettings = WebSettings()
    channels: ChannelsSettings = ChannelsSettings()
    log: LogSettings = LogSettings()


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except PermissionError:
        raise ConfigError(f"config file {path} is not readable (permission denied)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, expected a TOML file") from None


def _describe(error: dict[str, Any], sources: str) -> str:
    loc = ".".join(str(p) for p in error["loc"])
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        return f"config: unknown key '{loc}' (in {sources}); check the spelling against the configuration reference"
    shown = repr(value) if not isinstance(value, dict) else "a table"
    msg = str(error["msg"]).removeprefix("Value error, ")
    return f"config: '{loc}' = {shown} is invalid: {msg[:1].lower() + msg[1:]} (in {sources})"


_ENV_SCALARS: dict[str, tuple[str, ...]] = {
    "REVERIE_LOG_LEVEL": ("log", "level"),
    "REVERIE_LOG_FORMAT": ("log", "format"),
    "REVERIE_SOCKET": ("chat", "socket"),
    "REVERIE_TRUNK_PROVIDER": ("models", "trunk", "provider"),
    "REVERIE_TRUNK_MODEL": ("models", "trunk", "model"),
    "REVERIE_ANTHROPIC_BASE_URL": ("providers", "anthropic", "base_url"),
    "REVERIE_EMBEDDER": ("memory", "embedder"),
    "REVERIE_DAILY_CAP_USD": ("spend", "daily_cap_usd"),
}


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for var, path in _ENV_SCALARS.items():
        if var in environ and environ[var] != "":
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = environ[var]
    return out


def load_settings(
    home: Path | None,
    config_file: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Load and validate settings; raise `ConfigError` with one actionable line."""
    env = dict(os.environ if environ is None else environ)
    sources = ["embedded defaults"]
    data = _read_toml(shipped_dir() / "reverie.toml")
    if home is not None and (home / "reverie.toml").exists():
        data = _merge(data, _read_toml(home / "reverie.toml"))
        sources.append(str(home / "reverie.toml"))
    if config_file is not None:
        data = _merge(data, _read_toml(config_file))
        sources.append(str(config_file))
    overrides = _env_overrides(env)
    if overrides:
        data = _merge(data, overrides)
        sources.append("environment")
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(_describe(dict(first), " + ".join(sources[1:]) or sources[0])) from None


def secret(name: str, environ: dict[str, str] | None = None) -> str | None:
    """Read a secret by name: the environment first, then systemd credentials."""
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value:
        return value.strip()
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if cred_dir:
        for candidate in (name, name.lower()):
            path = Path(cred_dir) / candidate
            if path.is_file():
                return path.read_text().strip() or None
    return None
