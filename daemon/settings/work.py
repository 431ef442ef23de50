"""Sections of the agent's work: delegation, the tools and their limits, permissions, MCP."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from daemon.settings.core import Section


class ForkRetention(Section):
    # Fork transcripts older than this are archived or pruned (0 = never by age).
    max_age_days: float = Field(30.0, ge=0)
    # When sessions/forks/ (live transcripts) grows past this, the oldest go first (0 = no limit).
    max_total_mb: float = Field(200.0, ge=0)
    # "archive": gzip into sessions/forks/archive/ (recall_session still finds the summary);
    # "prune": delete the transcript (its summary and lineage row stay).
    action: Literal["archive", "prune"] = "archive"


class DelegateSettings(Section):
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


class RunSettings(Section):
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


class FetchSettings(Section):
    """The `fetch_url` tool: public http(s) pages as readable text."""

    timeout_s: float = Field(20.0, gt=0)
    max_bytes: int = Field(2_000_000, ge=1024)
    max_chars: int = Field(40_000, ge=256)
    max_redirects: int = Field(5, ge=0, le=20)
    # Hosts (names, addresses or CIDR ranges) exempt from the private-address guard.
    allow_hosts: list[str] = Field(default_factory=list)


class ToolsSettings(Section):
    """Who is offered which tools (names or globs), and the work tools' limits."""

    # The trunk reads and delegates; forks do the work (a fork never gets more than its
    # parent allows: a nested fork's set is its parent's set at most).
    trunk: list[str] = Field(default_factory=lambda: list(_TRUNK_TOOLS))
    fork: list[str] = Field(default_factory=lambda: ["*"])
    run: RunSettings = RunSettings()
    fetch: FetchSettings = FetchSettings()


class WorkspaceSettings(Section):
    """Where the file tools and `run` may act: <home>/workspace, plus any roots listed."""

    roots: list[str] = Field(default_factory=list)
    read_max_bytes: int = Field(262_144, ge=1024)
    write_max_bytes: int = Field(2_000_000, ge=1024)


class PermissionRule(Section):
    # A tool name or glob ("run", "mcp__github__*").
    tool: str
    # A glob matched against the tool's subject (a command, a path, a URL); "*" = any call.
    match: str = "*"
    decision: Literal["allow", "ask", "deny"]


class PermissionsSettings(Section):
    """Per tool allow / ask / deny with argument patterns; deny wins over ask over allow."""

    rules: list[PermissionRule] = Field(default_factory=list)
    # An `ask` nobody answers within this long is a no.
    approval_timeout_s: float = Field(120.0, gt=0)


class McpServer(Section):
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


class McpSettings(Section):
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
