"""JSON for the forwarded commands without importing the `json` package.

`json` imports `re`, and `re` imports `enum`, `functools` and `collections`: ~7 ms of a
~45 ms forwarded `memory search`. CPython's C accelerator `_json` (what `json` itself uses
underneath) encodes and scans without any of them. `dumps` gives exactly what `json.dumps`
gives with its default separators, and `loads` exactly what `json.loads` gives for one
document; where the accelerator is missing or differs, both fall back to `json`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
_WHITESPACE = " \t\n\r"


class _ScanContext:
    """The attributes `_json.make_scanner` reads from a decoder (those of `json.JSONDecoder()`)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _not_serialisable(o: object) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_make_encoder: Callable[..., Callable[[Any, int], Any]] | None = None
_scanner: Callable[[str, int], tuple[Any, int]] | None = None

try:
    import _json

    _make_encoder = _json.make_encoder
    _context: Any = _ScanContext()  # typeshed types the argument as a scanner
    _scanner = _json.make_scanner(_context)
except (ImportError, AttributeError, TypeError):  # another interpreter: plain json below
    _make_encoder = _scanner = None


def _encoder(ensure_ascii: bool) -> Callable[[Any, int], Any] | None:
    """A fresh C encoder (its circular-reference markers must not outlive one call)."""
    if _make_encoder is None:
        return None
    try:
        return _make_encoder(
            {},  # markers: refuse circular structures, as json.dumps does
            _not_serialisable,
            _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring,
            None,  # indent
            ": ",
            ", ",
            False,  # sort_keys
            False,  # skipkeys
            True,  # allow_nan
        )
    except TypeError:  # a signature this module does not know
        return None


def dumps(obj: Any, *, ensure_ascii: bool = True) -> str:
    """`json.dumps(obj, ensure_ascii=...)`."""
    encoder = None if isinstance(obj, str) else _encoder(ensure_ascii)
    if encoder is None:
        import json

        return json.dumps(obj, ensure_ascii=ensure_ascii)
    return "".join(encoder(obj, 0))


def loads(text: str | bytes) -> Any:
    """`json.loads(text)` for one document; raises ValueError on anything else."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _scanner is None:
        import json

        return json.loads(text)
    start, end = 0, len(text)
    while start < end and text[start] in _WHITESPACE:
        start += 1
    while end > start and text[end - 1] in _WHITESPACE:
        end -= 1
    try:
        obj, stop = _scanner(text, start)
    except StopIteration:
        stop = -1
    if stop != end:
        import json

        return json.loads(text)  # raises json's own error, with its position
    return obj
