"""Approvals over Matrix: a question of a turn that came through Matrix is put to its room.

The channel is attached to the approvals as one of the person's clients (`ApprovalDoor`).
An `approval` frame of a Matrix turn becomes an `m.notice` in that turn's room (summary,
preview, time limit); the allowed sender's next `yes`/`no`/`always` there answers it instead
of reaching the trunk. A question settled without the person (timeout, nobody) is closed with
a notice. Questions of socket turns are not ours: `send` says False and their client is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from daemon.channels.matrix_store import Reply
from daemon.chat.protocol import ApprovalAnswer
from daemon.log import get_logger
from daemon.tools.approvals import ApprovalRefused, Approvals

log = get_logger("matrix")

PREVIEW_CHARS = 2000

ANSWERS: dict[str, ApprovalAnswer] = {
    "yes": "yes",
    "y": "yes",
    "no": "no",
    "n": "no",
    "always": "always",
}


def answer_word(text: str) -> ApprovalAnswer | None:
    """The approval answer a message is, if it is one."""
    return ANSWERS.get(text.strip().lower().rstrip(".!"))


class RoomApprovals:
    """The questions each room is asked now, and the door the approvals send them through."""

    def __init__(
        self,
        approvals: Approvals | None,
        *,
        turn_room: Mapping[str, str],
        queue: Callable[[Reply], None],
    ) -> None:
        self.approvals = approvals
        self._turn_room = turn_room
        self._queue = queue
        self._asking: dict[str, str] = {}
        self.door = ApprovalDoor(self, approvals.person_uid if approvals is not None else -1)

    def attach(self) -> None:
        if self.approvals is not None:
            self.approvals.attach(self.door)

    def detach(self) -> None:
        if self.approvals is not None:
            self.approvals.detach(self.door)

    def asking(self, room_id: str) -> bool:
        return room_id in self._asking

    def frame(self, frame: Mapping[str, Any]) -> bool:
        """Put a question (or its end) to the room of the turn that asks; False when none."""
        kind = frame.get("type")
        if kind == "approval":
            room = self._turn_room.get(str(frame.get("turn_id")))
            if room is None:
                return False  # not a Matrix turn: its own client is asked
            aid = str(frame.get("id"))
            self._asking[room] = aid
            preview = str(frame.get("preview") or "")
            if len(preview) > PREVIEW_CHARS:
                preview = preview[:PREVIEW_CHARS] + " …"
            text = (
                f"Approval needed: {frame.get('summary')}\n"
                + (f"{preview}\n" if preview else "")
                + f"Reply yes, no or always (within {float(frame.get('timeout_s') or 0):.0f} s)."
            )
            self._queue(Reply(f"ask-{aid}", room, text, notice=True))
            return True
        if kind == "approval_settled":
            aid = str(frame.get("id"))
            for room, asked in list(self._asking.items()):
                if asked == aid:
                    del self._asking[room]
                    if frame.get("by") != "person":
                        why = {"timeout": "no answer in time", "nobody": "nobody to ask"}.get(
                            str(frame.get("by")), str(frame.get("by"))
                        )
                        self._queue(Reply(f"settled-{aid}", room, f"Declined: {why}.", notice=True))
            return True
        return False

    def answer(self, room_id: str, decision: ApprovalAnswer) -> None:
        aid = self._asking.get(room_id)
        if aid is None or self.approvals is None:
            return
        try:
            self.approvals.answer(self.door, aid, decision)
        except ApprovalRefused as exc:
            self._queue(Reply(f"answer-{aid}", room_id, f"Not taken: {exc.message}", notice=True))
            return
        self._asking.pop(room_id, None)
        log.info("approval answered from matrix", approval=aid, decision=decision)


class ApprovalDoor:
    """The channel as the approvals see a client of the person's (the allowed Matrix IDs)."""

    id = "matrix"
    closed = False

    def __init__(self, room_approvals: RoomApprovals, uid: int) -> None:
        self._rooms = room_approvals
        self.uid = uid

    def send(self, frame: Mapping[str, Any]) -> bool:
        return self._rooms.frame(frame)
