"""The systems of what the agent does: its tools (one registry under one permission guard),
the delegator of forks, the trunk, and the sleep cycle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from daemon.agent.loop import AgentLoop
from daemon.agent.trunk import Trunk
from daemon.delegate.fork import Delegator
from daemon.journal import JournalHeartbeat
from daemon.journal.tools import journal_tools
from daemon.memory.system import MemorySystem
from daemon.models.roles import ModelRoles
from daemon.schedule.store import ScheduleStore
from daemon.schedule.tools import schedule_tools
from daemon.sleep.cycle import SleepCycle
from daemon.sleep.phases import Phase
from daemon.tokens import TokenCounter
from daemon.tools.approvals import Approvals, PermissionGuard
from daemon.tools.mcp import McpServers
from daemon.tools.policy import PermissionPolicy, SavedApprovals
from daemon.tools.registry import ToolRegistry
from daemon.tools.toolbox import work_tools
from daemon.tools.workspace import Workspace
from daemon.wiring.core import Core

SleepPhases = Callable[[Trunk], Sequence[Phase]]


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    """The tools as wired: the trunk's set, and what owns or guards them."""

    # The trunk's tools (`tools.trunk` of every tool); the forks have `tools.fork` of theirs.
    tools: ToolRegistry
    mcp: McpServers
    approvals: Approvals
    delegator: Delegator
    schedules: ScheduleStore


def permission_guard(core: Core, approvals: Approvals) -> PermissionGuard:
    """The one permission policy every tool call passes, asking the person through `approvals`."""
    s = core.settings
    workspace = Workspace.for_home(core.home, s)
    return PermissionGuard(
        policy=PermissionPolicy(
            s.permissions.rules,
            saved=SavedApprovals.for_home(core.home),
            workspace=workspace,
        ),
        approvals=approvals,
        timeout_s=s.permissions.approval_timeout_s,
        workspace=workspace,
        clock=core.clock,
        # Often enough that a fork waiting on the person is never taken for a silent one.
        keepalive_s=s.delegate.inactivity_timeout_s / 4,
    )


async def open_tools(
    core: Core,
    roles: ModelRoles,
    counter: TokenCounter,
    memory: MemorySystem,
    journal: JournalHeartbeat,
) -> Toolkit:
    """Every tool once, in one registry; the trunk and the forks are offered subsets of it, each
    guarded by the one permission policy (subsets keep the guard)."""
    s = core.settings
    # MCP servers come up in the background; their tools join as each server answers.
    mcp = await core.stack.enter_async_context(McpServers(core.home, s.mcp, core.clock))
    approvals = Approvals()
    guard = permission_guard(core, approvals)
    everything = ToolRegistry(s.agent.tool_output_max_chars, guard=guard)
    for tool in [*memory.tools(), *journal_tools(journal), *work_tools(core.home, s)]:
        everything.register(tool)
    everything.add_source(mcp)
    delegator = await core.stack.enter_async_context(
        Delegator(
            home=core.home,
            db=core.db,
            roles=roles,
            bus=core.bus,
            clock=core.clock,
            counter=counter,
            settings=s,
            base_tools=everything.subset(s.tools.fork),
        )
    )
    for tool in delegator.tools_for(0):
        everything.register(tool)
    # After the forks' set was taken: a fork never sets schedules (the trunk does).
    schedules = ScheduleStore(
        core.db, clock=core.clock, zone=core.zone, settings=s.schedule, bus=core.bus
    )
    for tool in schedule_tools(schedules, guard=guard):
        everything.register(tool)
    return Toolkit(
        tools=everything.subset(s.tools.trunk),
        mcp=mcp,
        approvals=approvals,
        delegator=delegator,
        schedules=schedules,
    )


async def open_trunk(
    core: Core, roles: ModelRoles, tools: ToolRegistry, counter: TokenCounter
) -> Trunk:
    """The trunk, answering through the agent loop with the trunk's tools."""
    s = core.settings
    loop = AgentLoop(
        roles=roles,
        tools=tools,
        bus=core.bus,
        clock=core.clock,
        counter=counter,
        max_tool_steps=s.agent.max_tool_steps,
        history_max_messages=s.agent.history_max_messages,
        history_min_turns=s.agent.history_min_turns,
        compaction_threshold=s.agent.compaction_threshold,
        context_window=s.models.trunk.context_window,
        max_parallel_tools=s.delegate.max_parallel,
    )
    return await core.stack.enter_async_context(
        Trunk(
            home=core.home,
            db=core.db,
            loop=loop,
            clock=core.clock,
            turn_timeout_s=s.agent.turn_timeout_s,
            retry_base_s=s.agent.unavailable_retry_s,
            retry_max_s=s.agent.unavailable_retry_max_s,
        )
    )


async def open_sleep(
    core: Core, roles: ModelRoles, memory: MemorySystem, trunk: Trunk, phases: SleepPhases
) -> SleepCycle:
    """The sleep cycle (entered after the trunk and before it serves, so an interrupted cycle
    holds the trunk before it answers anything)."""
    return await core.stack.enter_async_context(
        SleepCycle(
            home=core.home,
            settings=core.settings,
            db=core.db,
            models=roles,
            bus=core.bus,
            clock=core.clock,
            memory=memory,
            trunk=trunk,
            lifecycle=core.lifecycle,
            phases=list(phases(trunk)),
        )
    )
