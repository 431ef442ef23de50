"""Sections of the daemon itself: the agent, its models and providers, spend, chat, the store, logs."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.config_sources import server_url_problem


class Section(BaseModel):
    """A settings table: unknown keys refused, values validated (defaults too), never changed."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class AgentSettings(Section):
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


class RoleModel(Section):
    provider: Literal["auto", "anthropic", "openai", "offline"] = "auto"
    model: str = "claude-sonnet-4-5"
    max_tokens: int = Field(4096, ge=16)
    context_window: int = Field(200_000, ge=1024)
    temperature: float | None = None
    essential: bool = False


class ModelsSettings(Section):
    trunk: RoleModel = RoleModel(essential=True)
    summariser: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=2048)
    recall_planner: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=512)
    recall_synthesis: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=1024)
    delegate: RoleModel = RoleModel()
    dreams: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=2048)
    heartbeat: RoleModel = RoleModel(model="claude-haiku-4-5", max_tokens=512)


class AnthropicSettings(Section):
    api_key_env: str = "ANTHROPIC_API_KEY"
    base_url: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(4, ge=0, le=10)
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    prompt_caching: bool = True
    exact_token_counts: bool = False


class OpenAISettings(Section):
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(300.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    connect_timeout_s: float = Field(10.0, gt=0)
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(8.0, ge=0)


class ProvidersSettings(Section):
    anthropic: AnthropicSettings = AnthropicSettings()
    openai: OpenAISettings = OpenAISettings()


class Price(Section):
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


class SpendSettings(Section):
    daily_cap_usd: float = Field(10.0, ge=0)
    # Non-essential work (heartbeat, dreams) stops once today's spend reaches this fraction.
    non_essential_fraction: float = Field(0.8, gt=0, le=1)
    prices: dict[str, Price] = Field(default_factory=_default_prices)


class ChatSettings(Section):
    socket: str | None = None
    max_frame_bytes: int = Field(1_048_576, ge=1024)
    client_queue_frames: int = Field(1024, ge=16)
    allow_uids: list[int] = Field(default_factory=list)


class StoreSettings(Section):
    checkpoint_interval_s: float = Field(300.0, gt=0)
    busy_timeout_ms: int = Field(5000, ge=0)


class StorageSettings(Section):
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


class LogSettings(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
