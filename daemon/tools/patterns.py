"""How permission patterns match a call's subject; shared by the policy and `chat --approve`.

Standard library only, so the command line can match its `--approve` patterns without
loading the daemon's settings. A glob's `*` crosses `/` (fnmatch). For a command, an allow
never reaches past a shell operator the pattern does not hold itself: `pytest*` allows
`pytest -q`, not `pytest; rm -rf ~`.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Final

# Characters that let one command line run another; an allow for a command must hold them itself.
_SHELL_OPERATORS: Final = re.compile(r"[;&|`$<>\n(){}]")


def escape_glob(text: str) -> str:
    """`text` as a glob that matches exactly it (`*`, `?` and `[` in brackets)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def unescape_glob(pattern: str) -> str:
    """The text `escape_glob` made `pattern` from."""
    return re.sub(r"\[([*?\[])\]", r"\1", pattern)


def operators_held(command: str, pattern: str) -> bool:
    """Whether every shell operator in `command` is written out in `pattern` too."""
    return set(_SHELL_OPERATORS.findall(command)) <= set(_SHELL_OPERATORS.findall(pattern))


def subject_matches(pattern: str, value: str, *, allow: bool, command: bool) -> bool:
    """Whether `value` matches `pattern`; an allow for a command keeps to its operators."""
    if not fnmatch.fnmatchcase(value, pattern):
        return False
    return not (allow and command and not operators_held(value, pattern))
