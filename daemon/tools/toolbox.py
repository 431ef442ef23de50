"""What the trunk and the forks are offered: the work tools assembled once, then narrowed.

Every tool is declared in the module of its kind (files, run, fetch, MCP) and registered in
one registry guarded by the permission policy; the trunk's and the forks' registries are
subsets of it named by `[tools] trunk` / `fork` (names or globs), so a tool has one
declaration and one policy wherever it is offered.
"""

from __future__ import annotations

from dataclasses import replace

from daemon.paths import Home
from daemon.settings import Settings
from daemon.tools.fetch_tool import fetch_tools
from daemon.tools.files import file_tools
from daemon.tools.registry import Tool
from daemon.tools.run import run_tools
from daemon.tools.workspace import Workspace


def work_tools(home: Home, settings: Settings) -> list[Tool]:
    """The built-in work tools (files, run, fetch_url), configured for this home."""
    tools: list[Tool] = []
    tools += file_tools(Workspace.for_home(home, settings), settings)
    tools += run_tools(Workspace.for_home(home, settings), settings, home=home.root)
    tools += fetch_tools(settings)
    # Everything a work tool returns comes from outside the conversation.
    return [replace(t, untrusted=True) for t in tools]
