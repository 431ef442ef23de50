"""Resources stay flat for years of uptime: what `status` shows, and RSS back after a sleep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.clock import FakeClock
from daemon.resources import ResourceSample, ResourceWatch, forgettable, release_memory
from daemon.tokens import TokenCounter
from tests.harness import Client, DaemonProcess, daemon_env, run_cli


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_the_token_count_cache_keeps_a_bounded_amount_of_text() -> None:
    counter = TokenCounter()
    # Whole prompts are counted turn after turn (the offline model counts its request): each is
    # new text, and a cache bounded only in entries would keep hundreds of them.
    for n in range(200):
        counter.count(f"turn {n} " + "persona and memory layers, a long system prompt. " * 1200)
    # 12 M characters counted; a megabyte or two of them kept at most.
    assert counter.cached_chars() <= 2_000_000
    counter.forget()
    assert counter.cached_chars() == 0


def test_a_sleep_clears_the_registered_caches_and_samples_again(tmp_path: Path) -> None:
    cleared: list[int] = []
    clear = forgettable(lambda: cleared.append(1))
    try:
        watch = ResourceWatch(db_file=tmp_path / "reverie.db", clock=FakeClock())
        watch.started()
        import anyio

        anyio.run(watch.slept)
        assert cleared == [1]
        assert watch.after_sleep is not None and watch.after_sleep.rss_mb > 0
    finally:
        from daemon import resources

        resources._forgettable.remove(clear)
    release_memory()  # with every real cache registered: never raises


def test_a_sleep_before_any_turn_gives_the_start_figures_and_the_first_turn_takes_them_again(
    tmp_path: Path,
) -> None:
    """The first work (a turn or a sleep) loads what an idle daemon does not hold (the
    tokenizer's vocabulary, ~47 MB): a sleep before any turn is not held to the idle start."""
    import anyio

    watch = ResourceWatch(db_file=tmp_path / "reverie.db", clock=FakeClock())
    idle = watch.started()
    anyio.run(watch.slept)
    assert watch.after_sleep is not None and watch.at_start is watch.after_sleep
    assert watch.at_start is not idle
    anyio.run(watch.first_turn)
    after_turn = watch.at_start
    assert after_turn is not watch.after_sleep
    # Once a turn has run, a sleep is held to the figures taken after it.
    anyio.run(watch.slept)
    assert watch.at_start is after_turn


def _sample(rss: float, fds: int = 10, children: int = 0, wal: float = 0.1) -> ResourceSample:
    return ResourceSample(
        at="2026-01-01T00:00:00+00:00",
        rss_mb=rss,
        fds=fds,
        children=children,
        db_mb=1.0,
        wal_mb=wal,
    )


def test_drift_is_named_in_warnings(tmp_path: Path) -> None:
    watch = ResourceWatch(db_file=None, clock=FakeClock())
    watch.at_start = _sample(120)
    assert watch.warnings(_sample(130), expected_children=0) == []
    watch.after_sleep = _sample(150)
    said = watch.warnings(_sample(400, fds=200, children=3, wal=100), expected_children=1)
    assert any("after the last sleep is 30 MB above" in w for w in said), said
    assert any("grown 280 MB" in w for w in said), said
    assert any("190 more open files" in w for w in said), said
    assert any("3 child processes where 1 are expected" in w for w in said), said
    assert any("WAL is 100 MB" in w for w in said), said
    # While work runs (expected None) children come and go: no warning about them.
    assert not any(
        "child" in w for w in watch.warnings(_sample(130, children=5), expected_children=None)
    )


@pytest.mark.timeout(300)
def test_rss_after_300_turns_and_a_sleep_is_back_near_its_start(tmp_path: Path) -> None:
    """The outside check: RSS after 300 turns and a sleep within 30 MB of start (we hold 20)."""
    home = tmp_path / "home"
    daemon = DaemonProcess(home, daemon_env({"REVERIE_LOG_LEVEL": "warning"})).start(timeout=60)
    try:
        assert daemon.proc is not None
        with Client(daemon.socket_path, timeout=120) as c:
            c.hello()
            c.chat("hello, a first message so the tokenizer and the index are warm")
            start = c.command("status")["data"]["resources"]
            assert start["at_start"] is not None and start["fds"] > 0
            for n in range(300):
                c.chat(
                    f"note {n}: the {('garden', 'boiler', 'kayak', 'novel')[n % 4]} needs"
                    f" {n % 7} more hours and my friend {('Ada', 'Bo', 'Cy')[n % 3]} helps"
                )
            reply = c.command("sleep", {"wait": True})
            assert reply["type"] == "result", reply
            after = c.command("status")["data"]["resources"]
        rss_now = _rss_mb(daemon.proc.pid)
        assert after["after_sleep"] is not None
        grown = after["after_sleep"]["rss_mb"] - start["at_start"]["rss_mb"]
        assert grown < 20, f"RSS {grown:.1f} MB above its start after 300 turns and a sleep"
        assert rss_now - start["at_start"]["rss_mb"] < 20
        assert after["fds"] <= start["fds"] + 4
        assert after["children"] == 0
        assert after["warnings"] == []
        # The person sees the same figures in `status`.
        out = run_cli("status", "--home", str(home), env=daemon.env)
        assert "resources:" in out.stdout and "after the last sleep" in out.stdout, out.stdout
        data = json.loads(run_cli("status", "--json", "--home", str(home), env=daemon.env).stdout)
        assert data["resources"]["wal_mb"] < 64
    finally:
        daemon.stop()
