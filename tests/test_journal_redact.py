"""Redaction: every default pattern masks a real-looking secret, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from daemon.redact import DEFAULT_PATTERNS, Redactor
from daemon.settings import ConfigError, load_settings
from tests.journal_support import journal_rig, journal_settings

# Real-looking (random, never issued) secrets of each shape, with the kind each must be masked as.
SECRETS: dict[str, str] = {
    "anthropic-key": "sk-ant-api03-Qm9vYmFyQmF6UXV4NzQ2MjE5OWFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6MDEyMzQ1Njc4OQ-AbCdEfAA",
    "openai-key": "sk-proj-4fJkq8ZrT1vXbN2mLp0sWcYe7HgU3iOa9KdQx5RjTn6EuVzBwFy",
    "aws-key": "AKIAZ7Q4M2XW9PLK3TRB",
    "aws-secret": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    "github-token": "ghp_8xKq2mZL0vN4rT7yW1pB5cH9dF3gJ6sA2eUi",
    "slack-token": "xoxb-2468013579-1357924680-AbCdEfGhIjKlMnOpQrStUvWx",
    "bearer-token": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlLXZhbHVl",
    "password": "password=Tr0ub4dor&3-horse",
    "private-key": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACBm3ZkKp7Zf0yq8Yb5nJ6d2Zq9Q2l7x1vY1YbM8xk0N9wAAAJgVb0Q1FW9E\n"
        "-----END OPENSSH PRIVATE KEY-----"
    ),
}
# The part of each that must not survive.
SECRET_CORES = {
    "anthropic-key": "Qm9vYmFyQmF6UXV4",
    "openai-key": "4fJkq8ZrT1vXbN2m",
    "aws-key": "AKIAZ7Q4M2XW9PLK3TRB",
    "aws-secret": "wJalrXUtnFEMI/K7MDENG",
    "github-token": "ghp_8xKq2mZL0vN4",
    "slack-token": "2468013579-1357924680",
    "bearer-token": "eyJhbGciOiJIUzI1NiJ9",
    "password": "Tr0ub4dor",
    "private-key": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
}


def test_every_default_pattern_has_a_real_looking_secret() -> None:
    assert {kind for kind, _ in DEFAULT_PATTERNS} == set(SECRETS)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_secret_is_masked_as_its_kind(kind: str) -> None:
    redactor = Redactor()
    text = f"Here it is: {SECRETS[kind]} — keep it safe."
    masked = redactor.mask(text)
    assert SECRET_CORES[kind] not in masked
    assert f"[redacted:{kind}]" in masked
    assert masked.startswith("Here it is: ") and masked.endswith("keep it safe.")


@pytest.mark.parametrize(
    "text",
    [
        "my password is hunter2-longer",
        "PASSWORD: 'correct horse battery staple'",
        'api_key="0123456789abcdef0123"',
        "export ACCESS_TOKEN=abc123def456ghi789",
    ],
)
def test_assignments_keep_their_name_and_lose_their_value(text: str) -> None:
    masked = Redactor().mask(text)
    assert "[redacted:password]" in masked
    for secret in ("hunter2", "horse battery", "0123456789abcdef", "abc123def456"):
        assert secret not in masked


def test_ordinary_text_is_left_alone() -> None:
    text = (
        "We spent 1200 tokens on the summary; the task list is long. Ask her for the key to the shed. "
        "sk-short is not a key, nor is AKIA123. The token budget is fine."
    )
    assert Redactor().mask(text) == text


def test_custom_patterns_are_masked_and_bad_ones_refused(tmp_path: Path) -> None:
    redactor = Redactor(extra=[r"ACME-\d{6}"])
    assert redactor.mask("ticket ACME-123456 is open") == "ticket [redacted:custom] is open"
    assert Redactor(defaults=False).mask(SECRETS["aws-key"]) == SECRETS["aws-key"]
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[journal]\nredact_patterns = ["(unclosed"]\n')
    with pytest.raises(ConfigError, match="redact_patterns"):
        load_settings(None, cfg, environ={})


@pytest.mark.anyio
async def test_secrets_never_reach_the_model_the_files_or_the_index(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        every = " ".join(SECRETS.values())
        # A model that repeats whatever it was shown (the worst case): nothing secret to repeat.
        from tests.journal_support import answering

        def parrot(request):  # type: ignore[no-untyped-def]
            shown = request.messages[-1].text
            return {
                "summary": shown[-600:],
                "decisions": [shown[:300]],
                "files_touched": [],
                "tags": ["keys"],
            }

        model = answering(parrot)
        async with journal_rig(
            tmp_path / "home", model=model, config=journal_settings(entry_tokens=2000)
        ) as rig:
            await rig.say(
                f"Here are my credentials, set them up: {every}",
                f"Configured with {SECRETS['anthropic-key']}.",
            )
            await rig.journal.tick()
            # The transcript went to the heartbeat model masked.
            prompt = model.calls[0].messages[-1].text
            written = [p.read_text() for p in rig.home.journal_dir.iterdir()]
            hits = await rig.index.search("credentials", k=5, kinds=["journal"])
            assert hits
            for core in SECRET_CORES.values():
                assert core not in prompt
                assert all(core not in text for text in written)
                assert all(core not in h.text for h in hits)
            assert "[redacted:" in prompt and any("[redacted:" in text for text in written)
            (entry,) = rig.lines()
            assert json.dumps(entry).count("[redacted:") >= 3


@pytest.mark.anyio
async def test_a_secret_in_the_models_answer_is_masked_before_it_is_written(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        from tests.journal_support import answering

        leak = {
            "summary": f"Set the deploy key {SECRETS['github-token']} and {SECRETS['aws-key']}.",
            "decisions": [SECRETS["password"]],
            "files_touched": [],
            "tags": [],
        }
        async with journal_rig(tmp_path / "home", model=answering(lambda request: leak)) as rig:
            await rig.say("Set up the deploy.")
            await rig.journal.tick()
            written = "".join(p.read_text() for p in rig.home.journal_dir.iterdir())
            for kind in ("github-token", "aws-key", "password"):
                assert SECRET_CORES[kind] not in written
                assert f"[redacted:{kind}]" in written
