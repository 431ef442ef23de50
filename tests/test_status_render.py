"""`reverie status` text for the trunk: what it is doing, and a model outage said plainly."""

from __future__ import annotations

from daemon.cli.status import render


def _trunk(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "session_id": "trunk-1",
        "messages": 3,
        "busy": False,
        "held": False,
        "current_turn": None,
        "queued": 0,
    }
    return {"running": True, "state": "awake", "trunk": dict(base, **kw)}


def test_a_queue_waiting_for_the_model_says_so_and_never_prints_none() -> None:
    waiting = {
        "since": "2026-01-01T09:00:00+00:00",
        "error": "529 overloaded",
        "attempts": 1,
        "next_retry": "2026-01-01T09:00:05+00:00",
        "queued": 2,
    }
    text = render(_trunk(queued=2, waiting_for_model=waiting))
    assert "None" not in text
    assert (
        "model down:   unreachable since 2026-01-01T09:00:00+00:00 (1 attempt; last error: 529 overloaded)"
        in text
    )
    assert "2 messages kept, answered when it is back · next try 2026-01-01T09:00:05+00:00" in text
    assert "working:      waiting for the model · 2 queued" in text


def test_a_running_turn_and_a_healthy_model() -> None:
    text = render(_trunk(busy=True, current_turn="turn-abc", queued=2, waiting_for_model=None))
    assert "working:      turn turn-abc · 2 queued" in text
    assert "model down" not in text
    held = render(_trunk(held=True, queued=1))
    assert "working:      paused · 1 queued · held" in held and "None" not in held
