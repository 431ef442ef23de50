"""The memory commands shared by the CLI's two paths: through the running daemon, or direct.

`args`, `render` and `forward` import only the standard library, so a `reverie memory search`
that a running daemon can answer costs a process start and one socket round trip; `ops` holds
the operations both paths run over a memory system, and `service` exposes them as socket
commands inside the daemon.
"""
