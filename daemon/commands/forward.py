"""Hand `memory search | import`, `remember` and `recall` to the running daemon (standard library only).

`reverie` calls `forward(argv)` before it imports anything heavy. When the command is one of
these four and a daemon listens on the home's socket, the command is sent there (where the
embedding model and the vector matrix are warm), the reply is printed exactly as the direct
path prints it, and the exit code is returned. Otherwise — another command, `--help`, no
socket, a daemon too old to know the command — it returns None and the CLI runs the command
itself over the database. A refusal by the daemon prints `reverie: <why>` and exits 1, as the
direct path does. `memory import` opens the file here, with the person's rights, and passes it
open with the command (`SCM_RIGHTS`); the daemon never opens a path a client names.
"""

from __future__ import annotations

import _socket  # `socket` wraps it in enums and selectors: ~4 ms of a forwarded command
import itertools
import os
import sys

from daemon.commands import args as spec
from daemon.commands import render, wire

# `typing` and `pathlib` cost ~10 ms of a ~50 ms forwarded command: annotations only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any, NoReturn, TextIO

CONNECT_TIMEOUT_S = 5.0
# A search whose daemon must first load the embedding model may take a few seconds.
SEARCH_TIMEOUT_S = 300.0

# The forwarded commands and their argument definitions.
COMMANDS: dict[str, Any] = {
    "memory": {"search": spec.SEARCH, "import": spec.IMPORT},
    "remember": spec.REMEMBER,
    "recall": spec.RECALL,
}


class _NotOurs(Exception):
    """The command line is not one the fast path handles; the full CLI takes it."""


class DaemonGone(Exception):
    """The daemon stopped answering mid-command."""


def command_word(argv: list[str]) -> str | None:
    """The subcommand named on the line (skipping `--home X`/`--config X` before it)."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--home", "--config"):
            skip = True
        elif not token.startswith("-"):
            return token
    return None


def _parser(word: str | None) -> argparse.ArgumentParser:
    """The argparse parser of the one command `word` names (building all four costs ~4 ms).

    Only for command lines the quick parser leaves to it: importing argparse (and `re`, `enum`
    and `gettext` with it) costs ~5 ms of a forwarded command.
    """
    import argparse

    if word not in COMMANDS:
        raise _NotOurs(f"not a forwarded command: {word}")

    class _Formatter(argparse.HelpFormatter):
        """A fixed width: the default asks `shutil` for the terminal's; nothing here prints help."""

        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=100)

    class _Parser(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("formatter_class", _Formatter)
            super().__init__(*args, **kwargs)

        def error(self, message: str) -> NoReturn:
            raise _NotOurs(message)

        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            raise _NotOurs(message or "")

    parser = _Parser(prog="reverie", add_help=False)
    common = _Parser(add_help=False)
    for p in (parser, common):
        p.add_argument("--home", default=argparse.SUPPRESS)
        p.add_argument("--config", default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    if word == "memory":
        memory = sub.add_parser("memory", parents=[common], add_help=False)
        msub = memory.add_subparsers(dest="memory_command", parser_class=_Parser)
        for name in ("search", "import"):
            spec.add_arguments(
                msub.add_parser(name, parents=[common], add_help=False), COMMANDS[word][name]
            )
    else:
        spec.add_arguments(sub.add_parser(word, parents=[common], add_help=False), COMMANDS[word])
    return parser


class _Args:
    """A parsed command line: what `argparse.Namespace` would hold, as attributes."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def quick_parse(argv: list[str]) -> dict[str, Any] | None:
    """Parse a forwarded command line without argparse, or None to leave it to argparse.

    Reads the same argument definitions (`daemon.commands.args`) and accepts only what argparse
    reads the same way: exact option names (no abbreviations), `--opt VALUE` or `--opt=VALUE`
    with a value not starting with `-`, positionals not starting with `-`, valid choices and
    numbers. Anything else (`--`, a prefix, a negative number, an error to report) goes to
    argparse, so both give the same values and the same errors.
    """
    values: dict[str, Any] = {}
    ready = False  # the command's arguments are known
    path: list[str] = []
    options: dict[str, dict[str, Any]] = {}
    positionals: list[tuple[str, dict[str, Any]]] = []
    groups: dict[str, str] = {}
    tokens = iter(argv)
    for token in tokens:
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in ("--home", "--config"):
            value = inline if eq else next(tokens, None)
            if value is None or value.startswith("-"):
                return None
            values[name[2:]] = value
        elif not token.startswith("-"):
            if not ready:
                path.append(token)
                table = _spec_at(path)
                if table is None:
                    return None
                if isinstance(table, tuple):
                    ready = True
                    for flags, keywords in table:
                        dest = keywords.get("dest") or flags[0].lstrip("-").replace("-", "_")
                        arg = {**keywords, "dest": dest}
                        if flags[0].startswith("-"):
                            options.update({flag: arg for flag in flags})
                        else:
                            positionals.append((dest, arg))
                        unset = False if arg.get("action") == "store_true" else None
                        default = keywords.get("default", unset)
                        values[dest] = list(default) if isinstance(default, list) else default
            elif positionals:
                values[positionals.pop(0)[0]] = token
            else:
                return None  # one positional too many: argparse's error
        elif ready and name in options:
            arg = options[name]
            action = arg.get("action", "store")
            if action == "store_true":
                if eq:
                    return None
                values[arg["dest"]] = True
                continue
            value = inline if eq else next(tokens, None)
            if value is None or value.startswith("-"):
                return None
            if "type" in arg:
                try:
                    value = arg["type"](value)
                except ValueError:
                    return None
            if "choices" in arg and value not in arg["choices"]:
                return None
            group = arg.get("group")
            if group is not None:
                if groups.setdefault(group, arg["dest"]) != arg["dest"]:
                    return None  # two of a mutually exclusive group
            if action == "append":
                values[arg["dest"]] = [*(values[arg["dest"]] or []), value]
            else:
                values[arg["dest"]] = value
        else:
            return None
    if not ready or any(arg.get("nargs") != "?" for _, arg in positionals):
        return None  # no command, or a required positional missing
    values["command"] = path[0]
    if path[0] == "memory":
        values["memory_command"] = path[1]
    return values


def _spec_at(path: list[str]) -> Any:
    """The argument definitions `path` names, a dict of subcommands, or None."""
    table: Any = COMMANDS
    for word in path:
        if not isinstance(table, dict) or word not in table:
            return None
        table = table[word]
    return table


def _home(args: argparse.Namespace) -> str:
    raw = getattr(args, "home", None)
    env = os.environ
    if raw:
        path = os.path.expanduser(raw)
    elif env.get("REVERIE_HOME"):
        path = os.path.expanduser(env["REVERIE_HOME"])
    elif env.get("STATE_DIRECTORY"):
        path = env["STATE_DIRECTORY"].split(":")[0]
    else:
        path = os.path.join(os.getcwd(), "var")
    return os.path.realpath(path)


def socket_path(home: str, config: str | None) -> str | None:
    """Resolve the socket the way the settings do (home TOML → --config → environment).

    Returns None when a configuration file cannot be read: the full CLI then reports it.
    """
    configured: str | None = None
    for path in (
        os.path.join(home, "reverie.toml"),
        os.path.expanduser(config) if config else None,
    ):
        if path is None or not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            return None
        if not any(
            "socket" in line and not line.lstrip().startswith("#") for line in text.splitlines()
        ):
            continue  # nothing here can set it: spare the TOML parser's import
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
        chat = data.get("chat")
        if isinstance(chat, dict) and isinstance(chat.get("socket"), str) and chat["socket"]:
            configured = chat["socket"]
    configured = os.environ.get("REVERIE_SOCKET") or configured
    if configured:
        return os.path.join(home, os.path.expanduser(configured))  # an absolute path stays as it is
    if os.environ.get("RUNTIME_DIRECTORY"):
        return os.path.join(os.environ["RUNTIME_DIRECTORY"].split(":")[0], "reverie.sock")
    return os.path.join(home, "run", "reverie.sock")


class DaemonLink:
    """One blocking connection to the daemon: newline-delimited JSON frames."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self._ids = itertools.count(1)
        self.hello: dict[str, Any] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DaemonLink | None:
        """Connect and read the greeting; None when no daemon answers there."""
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(path))
            link = cls(sock)
            hello = link.recv()
        except (OSError, ValueError, DaemonGone):
            sock.close()
            return None
        if hello.get("type") != "hello":
            sock.close()
            return None
        link.hello = hello
        return link

    def close(self) -> None:
        self.sock.close()

    def recv(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise DaemonGone("the daemon closed the connection before answering")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        frame = wire.loads(line)
        if not isinstance(frame, dict):
            raise ValueError("the daemon sent a frame that is not an object")
        return frame

    def command(
        self,
        name: str,
        args: dict[str, Any],
        *,
        timeout: float | None,
        on_progress: Any = None,
        file: int | None = None,
    ) -> dict[str, Any]:
        """Send a command; return its `result` or `error` frame (progress frames go to `on_progress`).

        `file`, an open descriptor, goes with the frame for the daemon to read.
        """
        cid = f"cli-{next(self._ids)}"
        self.sock.settimeout(timeout)
        frame: dict[str, Any] = {"type": "command", "name": name, "args": args, "id": cid}
        if file is None:
            self.sock.sendall((wire.dumps(frame) + "\n").encode())
        else:
            frame["files"] = 1
            data = (wire.dumps(frame) + "\n").encode()
            passed = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, file.to_bytes(4, sys.byteorder))]
            sent = self.sock.sendmsg([data], passed)
            self.sock.sendall(data[sent:])
        while True:
            frame = self.recv()
            if frame.get("id") != cid:
                continue  # state broadcasts and the like
            kind = frame.get("type")
            if kind == "progress" and on_progress is not None:
                on_progress(frame.get("data") or {})
            elif kind in ("result", "error"):
                return frame


class _Fallback(Exception):
    """The daemon does not know the command; run it directly instead."""


def _answer(frame: dict[str, Any]) -> Any:
    if frame["type"] == "result":
        return frame.get("data")
    if frame.get("code") == "unknown_command":
        raise _Fallback
    raise spec.UsageError(str(frame.get("message") or "the daemon refused the command"))


def _search(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    queries = spec.search_queries(args)
    options = spec.search_options(args)
    batch = args.batch is not None
    for start in range(0, len(queries), spec.BATCH_QUERIES):
        part = queries[start : start + spec.BATCH_QUERIES]
        data = _answer(
            link.command("memory_search", {"queries": part, **options}, timeout=SEARCH_TIMEOUT_S)
        )
        for query, items in zip(part, data["results"], strict=True):
            render.search_results(items, as_json=args.json, batch=batch, query=query, out=out)
    return 0


def _import(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    path = spec.import_file(args)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise spec.UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    progress = render.ImportProgress(as_json=args.json, enabled=not args.no_progress)
    request = {
        "name": os.path.basename(path),
        "summarise": bool(args.summarise),
        "no_embed": bool(args.no_embed),
    }
    try:
        frame = link.command("memory_import", request, timeout=None, on_progress=progress, file=fd)
        counts = _answer(frame)
    finally:
        os.close(fd)
        progress.close()
    render.import_counts(counts, as_json=args.json, out=out)
    return 0


def _remember(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    data = _answer(link.command("remember", spec.remember_request(args), timeout=None))
    render.remember_result(data, as_json=args.json, out=out)
    return 0


def _recall(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    data = _answer(link.command("recall", {"query": spec.recall_query(args)}, timeout=None))
    render.recall_answer(data, as_json=args.json, out=out)
    return 0


def forward(argv: list[str], out: TextIO | None = None) -> int | None:
    """Run a memory command through the running daemon; None when the CLI should run it itself."""
    if any(a in ("-h", "--help") for a in argv):
        return None
    values = quick_parse(argv)
    if values is not None:
        args: Any = _Args(values)
    else:
        try:
            args = _parser(command_word(argv)).parse_args(argv)
        except _NotOurs:
            return None
    if args.command == "memory":
        run = {"search": _search, "import": _import}.get(args.memory_command or "")
    else:
        run = {"remember": _remember, "recall": _recall}.get(args.command or "")
    if run is None:
        return None
    home = _home(args)
    path = socket_path(home, getattr(args, "config", None))
    if path is None or not os.path.exists(path):
        return None
    link = DaemonLink.open(path)
    if link is None:
        return None
    stream = out or sys.stdout
    try:
        return run(link, args, stream)
    except _Fallback:
        return None
    except spec.UsageError as exc:
        print(f"reverie: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except (DaemonGone, OSError, ValueError) as exc:
        print(f"reverie: lost the daemon mid-command ({exc}); run it again", file=sys.stderr)
        return 1
    finally:
        link.close()
