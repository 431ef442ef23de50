"""`reverie status [--json]`: the daemon's state, from the daemon or, when it is down, the store.

The fields are `daemon.status`'s; this module asks for them and prints them.
"""

from __future__ import annotations

import json
import time

# A running daemon's status is printed by `daemon.cli.forward` before anything heavy is
# imported: this module's top level stays standard library only (tests/test_memory_cli_daemon.py counts).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any

    from daemon.paths import Home
    from daemon.status_offline import StatusSettings


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "status", parents=[common], help="state, trunk session, context use, next sleep, spend"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_status)


async def cmd_status(args: argparse.Namespace) -> int:
    from daemon.chat.client import ChatError, command
    from daemon.cli.locate import socket_for
    from daemon.cli.support import CommandError, config_file, resolve_home, unwritable
    from daemon.status_offline import offline_status
    from daemon.store.errors import is_database_error

    home = resolve_home(args)
    view = status_settings(home, config_file(args))
    sock = socket_for(home, view.socket)
    data: dict[str, Any] | None = None
    if sock.exists():
        try:
            data = await command(sock, "status", timeout=10.0)
        except ChatError:
            pass
    if data is None:
        try:
            data = await offline_status(home, view)
        except Exception as exc:
            if not (isinstance(exc, OSError) or is_database_error(exc)):
                raise
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            reason = unwritable(home.root)
            raise CommandError(
                f"cannot read {home.db_file}: {why}" + (f" ({reason})" if reason else "")
            ) from None
    print_status(data, as_json=args.json)
    return 0


def status_settings(home: Home, cfg: Path | None) -> StatusSettings:
    """The settings status shows, read from the configuration's layers when they set only
    what `StatusSettings.read` can vouch for; validated whole by `daemon.settings` otherwise
    (whose error, for a configuration that is wrong, ends the command as any other's does)."""
    from daemon.cli.support import CommandError, load_config
    from daemon.config_sources import ConfigError, read_layers
    from daemon.status_offline import StatusSettings

    try:
        data, _ = read_layers(home.root, cfg)
    except ConfigError as exc:
        raise CommandError(str(exc), code=2) from None
    return StatusSettings.read(data) or StatusSettings.of(load_config(home, cfg))


def print_status(data: dict[str, Any], *, as_json: bool, out: Any = None) -> None:
    """What `reverie status` prints, the same from the forwarder and the direct path."""
    text = json.dumps(data, indent=2, default=str) if as_json else render(data)
    print(text, file=out)


def status_line(info: dict[str, Any]) -> str:
    """`handover:     anthropic:a → anthropic:b on 2026-11-28 (letter delivered …)`."""
    on = str(info.get("at", ""))[:10]
    state = (
        "letter waits for the first turn"
        if info.get("pending")
        else f"letter delivered {str(info.get('delivered_at') or '')[:16].replace('T', ' ')}"
    )
    line = f"handover:     {info['from']} → {info['to']} on {on} ({state})"
    before, after = info.get("exam_before"), info.get("exam_after")
    if before or after:
        b = f"{before['score']:g}" if before else "none"
        a = f"{after['score']:g}" if after else "not yet"
        line += f" · self-exam {b} on the old model, {a} on the new"
    return line


def render(status: dict[str, Any]) -> str:
    """A short human-readable status."""
    lines = [
        *_state_lines(status),
        *_trunk_lines(status),
        *_hands_lines(status),
        *_context_lines(status),
        *_sleep_lines(status),
        *_time_lines(status),
    ]
    if "vector_search" in status:
        search = (
            f"hybrid (embedder {status.get('embedder')})"
            if status.get("vector_search")
            else "lexical only (no embedder installed)"
        )
        lines.append(f"search:       {search}")
    lines.extend(_resource_lines(status.get("resources")))
    spend = status.get("spend")
    if spend:
        lines.append(
            f"spend today:  ${spend['cost_usd']:.4f} of ${spend['cap_usd']:.2f} cap · {spend['calls']} calls · cache hit {spend['cache_hit_rate']:.0%}"
        )
    if status.get("note"):
        lines.append(f"note:         {status['note']}")
    if not status.get("running"):
        from daemon.chat.link import START_HINT

        lines.append(f"daemon:       not running; {START_HINT}")
    return "\n".join(lines)


def _state_lines(status: dict[str, Any]) -> list[str]:
    """The lifecycle state and the store."""
    state = f"{status.get('state')}{'' if status.get('running') else ' (daemon not running)'}"
    if status.get("phase"):
        state += f" · phase {status['phase']}"
    if status.get("state_since"):
        state += f" · since {status['state_since']}"
    lines = [f"state:        {state}"]
    if status.get("store"):
        lines.append(f"store:        {status['store']}")
    return lines


def _trunk_lines(status: dict[str, Any]) -> list[str]:
    """The trunk session, its model, and what holds its turns (the model or the disk away)."""
    lines: list[str] = []
    trunk = status.get("trunk") or {}
    if trunk:
        lines.append(
            f"trunk:        {trunk.get('session_id')} ({trunk.get('messages', 0)} messages)"
        )
        if trunk.get("provider"):
            lines.append(f"model:        {trunk.get('provider')}:{trunk.get('model')}")
        if status.get("handover"):
            lines.append(status_line(status["handover"]))
        waiting = trunk.get("waiting_for_model")
        if waiting:
            retry = f" · next try {waiting['next_retry']}"
            tries, kept = waiting["attempts"], waiting["queued"]
            lines.append(
                f"model down:   unreachable since {waiting['since']} ({tries} attempt{'' if tries == 1 else 's'}; "
                f"last error: {waiting['error']})"
            )
            lines.append(
                f"              {kept} message{'' if kept == 1 else 's'} kept, answered when it is back{retry}"
            )
        storage = trunk.get("storage_down")
        if storage:
            free = storage.get("free_bytes")
            room = f"; {free:,} bytes free" if isinstance(free, int) else ""
            lines.append(
                f"storage:      refusing writes since {storage['since']} ({storage['error']}{room})"
            )
            kept = storage["queued"]
            lines.append(
                f"              {kept} message{'' if kept == 1 else 's'} kept, answered when space is back;"
                " new messages refused"
            )
        if trunk.get("busy") or trunk.get("queued") or trunk.get("held"):
            if trunk.get("current_turn"):
                doing = f"turn {trunk['current_turn']}"
            elif waiting:
                doing = "waiting for the model"
            else:
                doing = "paused" if trunk.get("held") else "starting the next turn"
            held = " · held" if trunk.get("held") else ""
            lines.append(f"working:      {doing} · {trunk.get('queued', 0)} queued{held}")
    return lines


def _hands_lines(status: dict[str, Any]) -> list[str]:
    """Forks, MCP servers, the console and the Matrix channel."""
    lines: list[str] = []
    forks = status.get("forks")
    if forks and (forks.get("running") or forks.get("by_status")):
        done = ", ".join(
            f"{n} {k}" for k, n in sorted(forks.get("by_status", {}).items()) if k != "running"
        )
        lines.append(
            f"forks:        {forks.get('running', 0)} running"
            + (f" · so far: {done}" if done else "")
        )
    for i, server in enumerate(status.get("mcp") or []):
        lines.append(("mcp:          " if i == 0 else " " * 14) + _mcp_line(server))
    web = status.get("web")
    if web:
        shown = web.get("url") if web.get("state") == "listening" else web.get("error")
        lines.append(f"console:      {web.get('state')} · {shown or web.get('listen')}")
    if status.get("matrix"):
        lines.extend(_matrix_lines(status["matrix"]))
    return lines


def _context_lines(status: dict[str, Any]) -> list[str]:
    """The context window's use and the last turn's layers."""
    lines: list[str] = []
    ctx = status.get("context") or {}
    if ctx.get("used_tokens") is not None and ctx.get("window_tokens"):
        lines.append(
            f"context:      {ctx['used_tokens']:,} / {ctx['window_tokens']:,} tokens ({ctx.get('fraction', 0):.1%})"
        )
    last = ctx.get("last_turn")
    if last and last.get("layers"):
        parts = ", ".join(f"{k} {v}" for k, v in last["layers"].items() if v)
        lines.append(f"last turn:    {last.get('context_tokens', 0):,} system tokens ({parts})")
    return lines


def _sleep_lines(status: dict[str, Any]) -> list[str]:
    """The next, running and last sleep, and the self-exam."""
    lines: list[str] = []
    if "next_sleep" in status:
        lines.append(
            f"next sleep:   {status.get('next_sleep') or 'not scheduled (sleep cycle not installed)'}"
        )
    sleep = status.get("sleep") or {}
    if sleep.get("running"):
        run = sleep["running"]
        lines.append(
            f"sleeping:     {run['cycle_id']} ({run['reason']}) · phase {run.get('phase') or 'wind_down'}"
        )
    if sleep.get("wind_down"):
        wd = sleep["wind_down"]
        lines.append(
            f"winding down: context at {wd['fraction']:.0%}; sleeping at the end of a turn"
        )
    if sleep.get("last"):
        last = sleep["last"]
        early = " · woke early" if last.get("woke_early") else ""
        deferred = f" · deferred {', '.join(last['deferred'])}" if last.get("deferred") else ""
        lines.append(
            f"last sleep:   {last.get('finished_at') or 'unfinished'} ({last['reason']}){early}{deferred}"
        )
    exam = status.get("self_exam")
    if exam:
        lines.append(_exam_line(exam))
    return lines


def _time_lines(status: dict[str, Any]) -> list[str]:
    """The heartbeat, the journal, other jobs and the schedules."""
    lines: list[str] = []
    if "last_heartbeat" in status:
        result = (
            f" ({status['last_heartbeat_result']})"
            if status.get("last_heartbeat_result") and status.get("last_heartbeat")
            else ""
        )
        if status.get("next_heartbeat"):
            lines.append(
                f"heartbeat:    last {status.get('last_heartbeat') or 'none yet'}{result}, next {status.get('next_heartbeat')}"
            )
        elif not status.get("running"):
            lines.append(f"heartbeat:    last {status.get('last_heartbeat') or 'never'}{result}")
        else:
            lines.append("heartbeat:    off (nothing keeps a journal in this build)")
    journal = status.get("journal") or {}
    if journal.get("last_entry"):
        today = (
            f" · {journal['entries_today']} today"
            if journal.get("entries_today") is not None
            else ""
        )
        lines.append(f"journal:      last entry {journal['last_entry']}{today}")
    for name, job in (status.get("jobs") or {}).items():
        if name in ("heartbeat", "nightly_sleep", "schedules"):
            continue
        last = job.get("last_run") or "never"
        outcome = f" ({job['last_status']})" if job.get("last_status") else ""
        lines.append(f"job {name + ':':<9} last {last}{outcome}, next {job.get('next_run')}")
    schedules = status.get("schedules")
    if schedules and (schedules.get("next") or schedules.get("pending")):
        waiting = (
            f" · {schedules['pending']} awaiting your approval" if schedules.get("pending") else ""
        )
        lines.append(f"schedules:    {schedules.get('active', 0)} active{waiting}")
        for item in schedules.get("next") or []:
            lines.append(f"  next:       {item['when']}  {item['kind']}: {item['text'][:80]}")
    return lines


def _exam_line(exam: dict[str, Any]) -> str:
    """`self-exam:    92 (was 100) · 11/12 found · trend ██▇ 100 100 92 · missed: my dentist → …`."""
    was = f" (was {exam['previous']:g})" if exam.get("previous") is not None else ""
    misses = exam.get("misses") or []
    found = f"{exam['questions'] - len(misses)}/{exam['questions']} found"
    trend = " ".join(f"{s:g}" for s in exam.get("trend") or [])
    line = f"self-exam:    {exam['score']:g}{was} · {found} · trend {exam.get('spark', '')} {trend}"
    if misses:
        line += f" · missed: {misses[0]}" + (
            f" (+{len(misses) - 1} more)" if len(misses) > 1 else ""
        )
    return line


def _resource_lines(res: dict[str, Any] | None) -> list[str]:
    """`resources:  RSS 131 MB (after start 122, after the last sleep 125) · 16 fds · …`."""
    if not res:
        return []
    marks = [f"after start {res['at_start']['rss_mb']:.0f}"] if res.get("at_start") else []
    if res.get("after_sleep"):
        marks.append(f"after the last sleep {res['after_sleep']['rss_mb']:.0f}")
    shown = f" ({', '.join(marks)})" if marks else ""
    store = (
        f" · database {res['db_mb']:.1f} MB + WAL {res['wal_mb']:.1f} MB"
        if res.get("db_mb") or res.get("wal_mb")  # a new home's file is a page or two
        else ""
    )
    kids = res.get("children", 0)
    lines = [
        f"resources:    RSS {res['rss_mb']:.0f} MB{shown} · {res.get('fds', 0)} open files · "
        f"{kids} child process{'' if kids == 1 else 'es'}{store}"
    ]
    lines.extend(f"  warning:    {w}" for w in res.get("warnings") or [])
    return lines


def _matrix_lines(mx: dict[str, Any]) -> list[str]:
    """`matrix:       away · retry in 8 s (backoff 8 s, 3 failures) · ConnectError: …`."""
    state, head = mx.get("state"), f"matrix:       {mx.get('state')} · {mx.get('user_id')}"
    if state == "connected":
        head += (
            f" · {mx.get('rooms', 0)} room(s) · {mx.get('taken', 0)} taken, "
            f"{mx.get('ignored', 0)} ignored, {mx.get('replies_sent', 0)} replies, "
            f"{mx.get('notices_sent', 0)} notices sent"
        )
    if mx.get("backoff_s") is not None:
        left = max(0.0, float(mx.get("retry_at") or 0) - time.time())
        head += (
            f" · retry in {left:.0f} s (backoff {mx['backoff_s']:.0f} s, "
            f"{mx.get('failures', 0)} failures)"
        )
    lines = [head + (f" · {mx['detail']}" if mx.get("detail") else "")]
    e2ee = mx.get("e2ee") or {}
    if e2ee.get("ed25519"):
        rooms, held = len(e2ee.get("rooms") or []), e2ee.get("waiting_for_keys", 0)
        lines.append(
            f"              e2ee on · device {e2ee.get('device_id')} · ed25519 {e2ee['ed25519']}"
            f" · {rooms} encrypted room(s)"
            + (f" · {held} waiting for their key" if held else "")
            + (f" · {e2ee['problem']}" if e2ee.get("problem") else "")
        )
    for room in mx.get("encrypted_rooms") or []:
        lines.append(f"              refused {room}: end-to-end encrypted (docs/channels.md)")
    return lines


def _mcp_line(server: dict[str, Any]) -> str:
    """One MCP server: `notes up · 9 tools · 1 restart · last error: …`."""
    tools, restarts = server.get("tools", 0), server.get("restarts", 0)
    line = f"{server.get('name')} {server.get('state')} · {tools} tool{'' if tools == 1 else 's'}"
    if restarts:
        line += f" · {restarts} restart{'' if restarts == 1 else 's'}"
    if server.get("last_error"):
        line += f" · last error: {server['last_error']}"
    return line
