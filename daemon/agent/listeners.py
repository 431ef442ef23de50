"""Who listens to which trunk turn, and telling them how it goes.

A listener (a chat connection, a channel) registers a `TurnObserver` for the turn its message
became; events for a turn nobody listens to are dropped (the turn still runs and lands on
disk). A listener that goes away is detached from every turn it listened to.
"""

from __future__ import annotations

from daemon.agent.turns import TurnEvent, TurnObserver, ignore


class Listeners:
    """The trunk's listeners, by turn id."""

    def __init__(self) -> None:
        self._by_turn: dict[str, TurnObserver] = {}

    def attach(self, turn_id: str, observer: TurnObserver) -> None:
        self._by_turn[turn_id] = observer

    def detach(self, observer: TurnObserver) -> None:
        """Stop telling `observer` about any turn."""
        for key in [k for k, v in self._by_turn.items() if v is observer]:
            del self._by_turn[key]

    def has(self, turn_id: str) -> bool:
        return turn_id in self._by_turn

    def of(self, turn_id: str) -> TurnObserver:
        """The turn's listener (one that drops every event when nobody listens)."""
        return self._by_turn.get(turn_id, ignore)

    def report(self, event: TurnEvent) -> None:
        """Tell the listener of the event's turn, if any."""
        self.of(event.turn_id)(event)

    def forget(self, turn_id: str) -> None:
        """The turn is over: nobody is told about it any more."""
        self._by_turn.pop(turn_id, None)
