"""The memory commands' daemon side, and the work both of their paths share.

`ops` holds the operations the CLI's direct path and the daemon both run over a memory system;
`types` their requests and results; `service` exposes them as socket commands inside the
daemon. The command lines, the forwarder
and the printing are the CLI's (`daemon.cli.memory`, `daemon.cli.forward`). This package
module itself imports nothing, so the forwarder reads the limit below for a process start's
price.
"""

# Queries sent to the daemon per command frame (and embedded per batch on the direct path).
BATCH_QUERIES = 256
