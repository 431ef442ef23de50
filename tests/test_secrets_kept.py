"""What the person asks to keep is kept; key-shaped secrets and others' secrets are not.

Policy (docs/trust.md, "Secrets"): a named secret the person tells and asks to keep ("remember that the guest wifi password is …") is stored and repeated in the
files written from the day (session summary, WAKE.md, dream entry); a password said in passing
stays masked there; an API key, token or private key is never stored, even when asked, and
the `remember` answer says what was withheld.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.redact import Redactor, kept_secrets
from tests.harness import Client, DaemonProcess, daemon_env, run_cli
from tests.sleep_phase_support import START, sleep_home

KEY = "sk-ant-api03-Zq8vLx2NcPw7RtYb4HmKd9JsAe6FgUo1"
WIFI = "cobalt-lantern-24"


def test_a_kept_password_is_given_back_and_a_key_is_withheld_saying_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            _, frames = c.chat(f"Please remember that the guest wifi password is {WIFI}.")
            assert WIFI in frames[-1]["text"], frames[-1]
            _, frames = c.chat(f"Remember that my api key is {KEY}")
            reply = frames[-1]["text"]
            assert KEY not in reply and "withheld: the anthropic key" in reply, reply
            _, frames = c.chat("The router's admin password is hunter2, not that it matters.")
            assert frames[-1]["type"] == "done"
        facts = run_cli("memory", "facts", "--home", str(home), timeout=60).stdout
        assert WIFI in facts and KEY not in facts and "[redacted:anthropic-key]" in facts, facts
        said = run_cli("remember", f"the deploy token is {KEY}", "--json", "--home", str(home))
        assert said.returncode == 0, said.stderr
        assert "withheld" in json.loads(said.stdout)["message"], said.stdout

        done = run_cli("sleep", "--wait", "--home", str(home), timeout=120)
        assert done.returncode == 0, done.stderr
        written = [home / "WAKE.md", *(home / "memory" / "sessions").glob("*.md")]
        written += list((home / "dreams").glob("dream-*.md"))
        texts = {p.name: p.read_text() for p in written}
        assert len(texts) >= 3, texts.keys()
        assert all(WIFI in t for t in texts.values()), texts  # kept: given back everywhere
        for name, text in texts.items():
            assert "hunter2" not in text and KEY not in text, (name, text)
    finally:
        assert d.stop() == 0


def test_only_the_kept_value_itself_is_left_unmasked() -> None:
    keep = kept_secrets([f"the guest wifi password is {WIFI}", "my favourite tea is rooibos"])
    assert keep == {WIFI}
    r = Redactor(keep=keep)
    assert (
        r.mask(f"The guest wifi password is “{WIFI}”.") == f"The guest wifi password is “{WIFI}”."
    )
    assert r.mask("password: cobalt-lantern-25") == "password: [redacted:password]"
    assert r.mask(f"{KEY}") == "[redacted:anthropic-key]"
    # What a fact may not keep: key shapes always, a named secret unless the person said it.
    assert Redactor().withhold(f"password is {WIFI}", named_too=False) == (
        f"password is {WIFI}",
        [],
    )
    assert Redactor().withhold(f"password is {WIFI}", named_too=True) == (
        "password is [redacted:password]",
        ["password"],
    )


@pytest.mark.anyio
async def test_a_secret_in_a_tool_s_words_is_not_kept_in_a_fact(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            rig.clock.set(START + timedelta(hours=1))
            got = await rig.memory.remember("the staging db password is tr0ub4dor", origin="tool")
            assert "tr0ub4dor" not in got.text and "withheld: the password" in got.message
            mine = await rig.memory.remember("the shed padlock password is 4471")
            assert "4471" in mine.text and "withheld" not in mine.message
            imported = await rig.memory.remember("the vpn password is s3cr3t-x", origin="import")
            assert "s3cr3t-x" not in imported.text and "withheld" in imported.message
            assert rig.memory.facts.kept_secrets() == {"4471"}
