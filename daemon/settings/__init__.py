"""Configuration: shipped TOML defaults, a home's own `reverie.toml`, environment overrides.

Layering (later wins): the embedded `config/reverie.toml` → `<home>/reverie.toml` →
`--config FILE` → environment (`REVERIE_*` for a few scalars, the API keys by name); the
layers are read by `daemon.config_sources` and validated here. Each system's section lives
beside its neighbours (`core`, `memory`, `rhythm`, `work`, `doors`), each setting documented
in config/reverie.toml; every name is imported from `daemon.settings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from daemon.config_sources import ConfigError, read_layers, secret, server_url_problem
from daemon.settings.core import (
    AgentSettings,
    AnthropicSettings,
    ChatSettings,
    LogSettings,
    ModelsSettings,
    OpenAISettings,
    Price,
    ProvidersSettings,
    RoleModel,
    Section,
    SpendSettings,
    StorageSettings,
    StoreSettings,
)
from daemon.settings.doors import ChannelsSettings, ListenAddress, MatrixSettings, WebSettings
from daemon.settings.memory import (
    ContextSettings,
    JournalSettings,
    LayerBudget,
    MemorySettings,
    ThreadsSettings,
    TopicPoint,
    TopicsSettings,
)
from daemon.settings.rhythm import (
    NoticesSettings,
    SchedulerSettings,
    ScheduleSettings,
    SleepSettings,
)
from daemon.settings.work import (
    DelegateSettings,
    FetchSettings,
    ForkRetention,
    McpServer,
    McpSettings,
    PermissionRule,
    PermissionsSettings,
    RunSettings,
    ToolsSettings,
    WorkspaceSettings,
)

__all__ = [
    "AgentSettings",
    "AnthropicSettings",
    "ChannelsSettings",
    "ChatSettings",
    "ConfigError",
    "ContextSettings",
    "DelegateSettings",
    "FetchSettings",
    "ForkRetention",
    "JournalSettings",
    "LayerBudget",
    "ListenAddress",
    "LogSettings",
    "MatrixSettings",
    "McpServer",
    "McpSettings",
    "MemorySettings",
    "ModelsSettings",
    "NoticesSettings",
    "OpenAISettings",
    "PermissionRule",
    "PermissionsSettings",
    "Price",
    "ProvidersSettings",
    "RoleModel",
    "RunSettings",
    "ScheduleSettings",
    "SchedulerSettings",
    "Section",
    "Settings",
    "SleepSettings",
    "SpendSettings",
    "StorageSettings",
    "StoreSettings",
    "ThreadsSettings",
    "ToolsSettings",
    "TopicPoint",
    "TopicsSettings",
    "WebSettings",
    "WorkspaceSettings",
    "load_settings",
    "secret",
    "server_url_problem",
]


class Settings(Section):
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


def _describe(error: dict[str, Any], sources: str) -> str:
    loc = ".".join(str(p) for p in error["loc"])
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        return f"config: unknown key '{loc}' (in {sources}); check the spelling against the configuration reference"
    shown = repr(value) if not isinstance(value, dict) else "a table"
    msg = str(error["msg"]).removeprefix("Value error, ")
    return f"config: '{loc}' = {shown} is invalid: {msg[:1].lower() + msg[1:]} (in {sources})"


def load_settings(
    home: Path | None,
    config_file: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Load and validate settings; raise `ConfigError` with one actionable line."""
    data, sources = read_layers(home, config_file, environ)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(_describe(dict(first), " + ".join(sources[1:]) or sources[0])) from None
