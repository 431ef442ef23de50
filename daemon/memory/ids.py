"""Fact ids as a person gives them: `2`, `fact:2`, `[fact:2]`, `Fact: 2` all name `fact:2`.

One parser for every place an id is taken — `reverie remember --correct/--retract/--restore/
--pin`, `reverie memory facts --history`, the console's forms, the model's `correct` and
`retract` — so the bare number shown next to `fact:2` works wherever the id does. The command
line imports it before anything heavy: the standard library only, and not even `re`.
"""

_PREFIXES = ("fact", "shared")


def fact_uid(given: object) -> str:
    """The id `given` names, as the fact log spells it (`2` → `fact:2`; `shared:3` stays a
    shared fact's). Anything else comes back stripped, for the caller to refuse by name."""
    text = str(given).strip()
    inner = text[1:-1].strip() if text.startswith("[") and text.endswith("]") else text
    prefix, colon, number = inner.partition(":")
    if not colon:
        prefix, number = "fact", inner
    prefix, number = prefix.strip().lower(), number.strip().removeprefix("#")
    if prefix in _PREFIXES and number.isascii() and number.isdigit():
        return f"{prefix}:{int(number)}"
    return text
