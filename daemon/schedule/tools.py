"""The agent's schedule tools: `schedule`, `list_schedules`, `cancel_schedule`.

Who asked is the turn's origin (`ctx.extras["origin"]`, see `daemon.agent.provenance`): a
turn that has only the person's word makes a "person" schedule; one that has read text a tool
brought in (a page, a file, a fork's findings) makes a "tool" schedule — stored `pending`, and
the person is asked through the approvals guard (an `approval` frame, as for any `ask` tool).
A yes activates it; a no declines it; nobody connected or no answer leaves it pending until
`reverie schedule approve ID`. A rule or a saved "always" answer for `schedule` in the
permission policy counts as the person's yes. A time phrase that cannot be resolved is a tool
error that says what is understood — never a guess; so is a `what` whose first words continue
the time (`when` "tomorrow", `what` "at 10 buy honey jars"). The result says how the time was
read, as `reverie schedule add` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Self, TypedDict, get_args

from daemon.chat import args as wire
from daemon.schedule.store import KINDS, NoSuchSchedule, Schedule, ScheduleError, ScheduleStore
from daemon.tools.approvals import PermissionGuard
from daemon.tools.registry import Tool, ToolContext, ToolError

SCHEDULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "when": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "When, in the person's time zone: an ISO time ('2026-12-24T18:00') or a "
            "phrase — 'in 20 minutes', 'at 18:30', 'tomorrow at 9', 'next monday at 10', "
            "'every day at 7', 'every weekday at 8:00', 'every monday', "
            "'on the first of each month', 'every 2 hours'. The whole time goes here, none of "
            "it in `what`.",
        },
        "what": {
            "type": "string",
            "minLength": 1,
            "maxLength": 2000,
            "description": "For a reminder: the text the person is sent. For a task: what to do "
            "(a fork does it then, with the forks' tools, and its result is sent to the person).",
        },
        "kind": {
            "type": "string",
            "enum": list(KINDS),
            "description": "reminder (default; costs no model call) or task (run by a fork).",
        },
    },
    "required": ["when", "what"],
    "additionalProperties": False,
}

CANCEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "description": "The schedule's id (s-…).",
        }
    },
    "required": ["id"],
    "additionalProperties": False,
}

LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "all": {
            "type": "boolean",
            "description": "Also the schedules that ended (done, cancelled, declined).",
        }
    },
    "additionalProperties": False,
}


def requester(ctx: ToolContext) -> str:
    """Whose word a schedule made in this call rests on: person, agent, or tool."""
    origin = str(ctx.extras.get("origin", "agent"))
    return origin if origin in ("person", "agent", "tool") else "tool"


def _apart_for_the_model(when: str, what: str) -> str:
    return f"put the whole time in `when` ({when!r}) and only the rest in `what` ({what!r})"


def made_line(made: Schedule) -> str:
    """What was scheduled and how its time was read: 's-… for Sun 29 Nov 10:00 GMT
    ("tomorrow at 10") — "buy honey jars"'."""
    kind = "" if made.kind == "reminder" else f" ({made.kind})"
    return f'{made.id}{kind} for {made.read_as} — "{made.text}"'


def schedule_tools(store: ScheduleStore, *, guard: PermissionGuard | None = None) -> list[Tool]:
    """The three tools over `store`; `guard` asks the person about a schedule untrusted text proposed."""

    async def schedule(ctx: ToolContext, args: dict[str, Any]) -> str:
        by = requester(ctx)
        try:
            made = await store.add(
                str(args["when"]),
                str(args["what"]),
                kind=str(args.get("kind") or "reminder"),
                requested_by=by,
                session_id=ctx.session_id,
                hint=_apart_for_the_model,
            )
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        line = made_line(made)
        if made.status == "active":
            return f"scheduled {line}"
        refusal = await _ask_person(made.id, tool, ctx, args)
        if refusal is None:
            await store.approve(made.id)
            return f"scheduled (the person approved it) {line}"
        if "declined" in refusal:
            await store.decline(made.id)
            return f"not scheduled: the person declined {made.id}"
        return (
            f"{made.id} is stored as pending and will not fire until the person approves it "
            f"(`reverie schedule approve {made.id}`): it was proposed after reading text from a "
            f"tool, and {refusal}"
        )

    async def _ask_person(
        schedule_id: str, tool_: Tool, ctx: ToolContext, args: dict[str, Any]
    ) -> str | None:
        if guard is None:
            return "no one could be asked"
        why = f"schedule {schedule_id} was proposed after reading text from a tool"
        return await guard.confirm(tool_, args, ctx, why)

    async def list_schedules(ctx: ToolContext, args: dict[str, Any]) -> str:
        found = await store.listing(include_ended=bool(args.get("all")))
        if not found:
            return "no schedules" + ("" if args.get("all") else " kept")
        return "\n".join(s.line(store.zone) for s in found)

    async def cancel_schedule(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            done = await store.cancel(str(args["id"]))
        except NoSuchSchedule as exc:
            raise ToolError(f"{exc} (list_schedules shows the ids)") from None
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        return f"cancelled {done.id}: {done.kind} {done.text!r}"

    tool = Tool(
        name="schedule",
        description=(
            "Keep a reminder or a task for the person at a time, once or repeating (resolved in "
            "their time zone). A reminder is sent to them as is; a task is done by a fork then and "
            "its result sent to them. Returns the schedule's id and when it fires; an unclear time "
            "is an error — ask the person rather than guess."
        ),
        input_schema=SCHEDULE_SCHEMA,
        handler=schedule,
        output_origin=None,
        permission="allow",
        subject="when",
        # Waiting on the person's approval may take the whole approval timeout.
        timeout_s=900.0,
    )
    return [
        tool,
        Tool(
            name="list_schedules",
            description="The schedules kept for the person: id, next time, how it repeats, what.",
            input_schema=LIST_SCHEMA,
            handler=list_schedules,
            output_origin="agent",
            concurrent=True,
        ),
        Tool(
            name="cancel_schedule",
            description="Cancel a schedule by its id (it never fires again).",
            input_schema=CANCEL_SCHEMA,
            handler=cancel_schedule,
            output_origin=None,
        ),
    ]


ScheduleAction = Literal["list", "add", "cancel", "approve", "decline"]
ACTIONS: tuple[ScheduleAction, ...] = get_args(ScheduleAction)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleRequest:
    """`reverie schedule …` as a request: list, add, cancel, approve or decline.

    `add` takes the command line's `words` (the time is read from their start) or a `when`
    and its `text` given apart; `task` makes a task of it, else a reminder. `list` shows the
    ended schedules too with `all`. The others name the schedule by `id`.
    """

    action: ScheduleAction = "list"
    all: bool = False
    task: bool = False
    words: tuple[str, ...] | None = None
    when: str = ""
    text: str = ""
    id: str = ""

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        """Raises `ScheduleError` (a ValueError: the daemon's `bad_args`) for the person."""
        try:
            action = wire.string("schedule", args, "action") or "list"
            when, text = (
                wire.string("schedule", args, "when"),
                wire.string("schedule", args, "text"),
            )
            schedule_id = wire.string("schedule", args, "id") or ""
            ended, task = (
                wire.boolean("schedule", args, "all"),
                wire.boolean("schedule", args, "task"),
            )
        except ValueError as exc:
            raise ScheduleError(str(exc)) from None
        if action not in ACTIONS:
            raise ScheduleError(f"unknown schedule action {action!r} (one of {', '.join(ACTIONS)})")
        words = args.get("words") if action == "add" else None
        if action == "add":
            if words is not None:
                if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                    raise ScheduleError("words must be a list of strings")
            elif when is None or text is None:
                raise ScheduleError("say when (a string) and the text (a string)")
        return cls(
            action=action,
            all=ended,
            task=task,
            words=None if words is None else tuple(words),
            when=when or "",
            text=text or "",
            id=schedule_id,
        )


class ScheduleListed(TypedDict):
    """`list`: each schedule (`Schedule.to_json` with `when`, how it reads) and the text."""

    schedules: list[dict[str, Any]]
    text: str


class ScheduleChanged(TypedDict):
    """`add`, `cancel`, `approve`, `decline`: the schedule as it is now and its line;
    `add` also says what was scheduled and how the time was read (`echo`)."""

    schedule: dict[str, Any]
    text: str
    echo: NotRequired[str]


ScheduleResult = ScheduleListed | ScheduleChanged


async def schedule_command(store: ScheduleStore, args: Mapping[str, Any]) -> dict[str, Any]:
    """`reverie schedule …` on a store from its JSON arguments (the CLI's direct path), as
    the daemon answers it. Raises `ScheduleError` (a ValueError) with a message for the person."""
    return dict(await answer_schedule(store, ScheduleRequest.from_args(args)))


async def answer_schedule(store: ScheduleStore, request: ScheduleRequest) -> ScheduleResult:
    """The `schedule` socket command, and the CLI's direct path, on a store. Raises
    `ScheduleError` (a ValueError: the daemon's `bad_args`) with a message for the person."""
    if request.action == "list":
        found = await store.listing(include_ended=request.all)
        return {
            "schedules": [{**s.to_json(), "when": s.when_text(store.zone)} for s in found],
            "text": "\n".join(s.line(store.zone) for s in found),
        }
    if request.action == "add":
        kind = "task" if request.task else "reminder"
        if request.words is not None:
            made = await store.add_words(list(request.words), kind=kind, requested_by="person")
        else:
            made = await store.add(request.when, request.text, kind=kind, requested_by="person")
        return {"schedule": made.to_json(), "text": made.line(store.zone), "echo": made_line(made)}
    try:
        if request.action == "cancel":
            made = await store.cancel(request.id)
        elif request.action == "approve":
            made = await store.approve(request.id)
        else:
            made = await store.decline(request.id)
    except NoSuchSchedule as exc:
        raise ScheduleError(f"{exc} (`reverie schedule list` shows the ids)") from None
    return {"schedule": made.to_json(), "text": made.line(store.zone)}
