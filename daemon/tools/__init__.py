"""Tools: the registry every session calls through, the work tools, MCP servers and the policy.

`registry` declares tools once and runs them; the work tools (files, `run`, `fetch_url`) act
inside the workspace roots; `policy` and `approvals` decide whether a call may run; `mcp`
brings in the tools of configured MCP servers; `toolbox` assembles what the trunk and the
forks are each offered.
"""
