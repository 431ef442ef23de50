"""A small MCP server written with the official SDK, for tests that start it as a real process.

Tools: `echo`, `add`, `read_note`, `slow` (sleeps, then answers), `fail` (the tool reports
an error), `crash` (the process exits mid-call, as a server that dies would), `picture` (an
image and a text block), `env` (the value of one environment variable, or "<unset>"), `pid`
(the server's process id) and `learn` (adds a tool named by its argument and tells the
client its tools changed).

Every start appends the server's pid to the file named by `MCP_FAKE_PIDFILE` (when set),
so a test can find the process to kill and count restarts.

Runs over stdio by default; ``--http PORT`` serves streamable HTTP on 127.0.0.1 instead.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("fake-notes", log_level="WARNING")

# A 1x1 transparent PNG, padded so its size is visible in a summary.
_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
) + bytes(2048)


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
async def slow(seconds: float = 30.0) -> str:
    """Wait `seconds`, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def read_note(path: str) -> str:
    """Read the note at `path`."""
    return f"the note at {path}"


@server.tool()
def fail(reason: str = "no such note") -> str:
    """Fail with `reason`."""
    raise ToolError(reason)


@server.tool()
def crash() -> str:
    """Exit the server process mid-call."""
    os._exit(3)


@server.tool(structured_output=False)
def picture() -> list[object]:
    """An image with a caption."""
    return ["a caption", Image(data=_PNG, format="png")]


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable in the server's process."""
    return os.environ.get(name, "<unset>")


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
async def learn(name: str, ctx: Context) -> str:
    """Add a tool called `name` (it answers with its own name) and announce the change."""

    def learned() -> str:
        return f"I am {name}"

    server.add_tool(learned, name=name, description=f"A tool learned at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"learned {name}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on PORT")
    args = parser.parse_args()
    pidfile = os.environ.get("MCP_FAKE_PIDFILE")
    if pidfile:
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()}\n")
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")
    sys.exit(0)


if __name__ == "__main__":
    main()
