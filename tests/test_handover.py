"""Model handover through the real daemon: the official Anthropic SDK against the fake Messages
API, a model switch in the config between two runs, the letter in the first request on the new
model, a journal entry, `reverie handover --preview` and `reverie status` — and no letter when
nothing changed, for a fork, or when only another role's model changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env, run_cli

FRAMING = "You are in focused task mode. Your objective is: "
OLD, NEW = "claude-alpha-1", "claude-beta-2"
VOICE = "Morning, Marisol. The tide tables for Saturday look kind to your kayak plan: low water near nine."
USER_MD = """# About my person

- **Name / what to call you:** Marisol
- **Where you are (city, time zone):** Porto
- **How you like answers (short? detailed? examples? sources?):** short, plain prose, no bullet lists
- **Things I should never do:**
"""


def _config(trunk: str, delegate: str) -> str:
    return (
        FAKE_API_CONFIG
        + f'\n[models.trunk]\nprovider = "anthropic"\nmodel = "{trunk}"\n'
        + f'\n[models.delegate]\nprovider = "anthropic"\nmodel = "{delegate}"\n'
    )


def _system(req: RecordedRequest) -> str:
    system = req.body.get("system") or []
    if isinstance(system, str):
        return system
    return "\n".join(b.get("text", "") for b in system)


def _first_user_text(req: RecordedRequest) -> str:
    first = (req.body.get("messages") or [{}])[0].get("content")
    if isinstance(first, str):
        return first
    return " ".join(b.get("text", "") for b in first or [] if isinstance(b, dict))


def _is_fork(req: RecordedRequest) -> bool:
    return _first_user_text(req).startswith(FRAMING)


def _journal(home: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((home / "journal").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _handover_entries(home: Path) -> list[dict[str, Any]]:
    return [e for e in _journal(home) if "handover" in (e.get("tags") or [])]


def _run(home: Path, fake: FakeAnthropic, *messages: str) -> list[RecordedRequest]:
    """Start the daemon, send each message in turn (waiting for its reply), stop; the requests."""
    before = len(fake.message_requests)
    d = DaemonProcess(
        home=home,
        env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
    )
    d.start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            for text in messages:
                _, frames = c.chat(text)
                assert frames[-1]["type"] == "done", frames[-1]
    finally:
        assert d.stop() == 0, d.logs()
    return fake.message_requests[before:]


def test_a_trunk_model_switch_hands_over_with_a_letter_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "persona").mkdir(parents=True)
    (home / "persona" / "USER.md").write_text(USER_MD)
    (home / "reverie.toml").write_text(_config(OLD, OLD))
    env = {"REVERIE_HOME": str(home)}
    with FakeAnthropic() as fake:
        # Run 1, on the old model: a reply in its voice.
        fake.enqueue(Planned.reply(VOICE))
        first_run = _run(home, fake, "Any news on the tides for my kayak trip?")
        assert [r.body["model"] for r in first_run] == [OLD]
        assert "## Handover" not in _system(first_run[0])  # a new home hands nothing over
        assert _handover_entries(home) == []

        # The person switches the trunk to a new model; before starting, the letter is previewed.
        (home / "reverie.toml").write_text(_config(NEW, OLD))
        preview = run_cli("handover", "--preview", "--home", str(home), env=daemon_env(env))
        assert preview.returncode == 0, preview.stderr
        assert f"anthropic:{OLD}" in preview.stdout and f"anthropic:{NEW}" in preview.stdout
        assert "Marisol" in preview.stdout and VOICE in preview.stdout
        assert "no bullet lists" in preview.stdout.split("How they like to be spoken to")[1]

        # Run 2, on the new model: the first turn delegates, so a fork runs while the letter waits.
        fake.enqueue(
            Planned.tool("delegate", {"task": "Check the tide table for Saturday", "context": ""}),
            Planned(
                tool_calls=(
                    ("task_complete", {"summary": "Low water 09:12.", "outcome": "success"}),
                )
            ),
            Planned.reply("Low water is at 09:12 on Saturday."),
            Planned.reply("Glad it helps."),
        )
        second_run = _run(home, fake, "And the tide on Saturday exactly?", "Thanks!")
        trunk = [r for r in second_run if not _is_fork(r)]
        forks = [r for r in second_run if _is_fork(r)]
        assert [r.body["model"] for r in trunk] == [NEW, NEW, NEW] and forks
        letter = _system(trunk[0])
        assert "## Handover" in letter
        assert f"You were running on anthropic:{OLD}" in letter and f"anthropic:{NEW}" in letter
        assert VOICE in letter and "Marisol" in letter
        # Delimited as the agent's own memory: inside memory markers.
        assert '<memory kind="handover"' in letter or 'kind="handover"' in letter
        # The whole first turn carries it (its second request, after the fork, too) ...
        assert "## Handover" in _system(trunk[1])
        # ... never a fork, and not the turn after the first was answered.
        assert all("## Handover" not in _system(r) for r in forks)
        assert "## Handover" not in _system(trunk[2])
        entries = _handover_entries(home)
        assert len(entries) == 1
        assert entries[0]["summary"] == f"model handover: anthropic:{OLD} → anthropic:{NEW}"

        status = run_cli("status", "--json", "--home", str(home), env=daemon_env(env))
        info = json.loads(status.stdout)["handover"]
        assert (info["from"], info["to"], info["pending"]) == (
            f"anthropic:{OLD}",
            f"anthropic:{NEW}",
            False,
        )
        assert info["delivered_at"]
        text = run_cli("status", "--home", str(home), env=daemon_env(env)).stdout
        assert f"handover:     anthropic:{OLD} → anthropic:{NEW} on " in text

        # Run 3: only the delegate role changes model — no letter, no new entry.
        (home / "reverie.toml").write_text(_config(NEW, "claude-gamma-3"))
        fake.enqueue(Planned.reply("Still here."))
        third_run = _run(home, fake, "Hello again")
        assert [r.body["model"] for r in third_run] == [NEW]
        assert "## Handover" not in _system(third_run[0])
        assert len(_handover_entries(home)) == 1
