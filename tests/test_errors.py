"""One root for the daemon's own errors: every exception class in daemon/ is a ReverieError.

Read with `ast`, so a class is checked without importing its module: a class whose bases name
a built-in exception (`Exception`, `ValueError`, `OSError` …) must also name `ReverieError`;
one derived from another daemon error inherits it (checked at run time for a sample).
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from tests.test_architecture import PACKAGE, ROOT

BUILTIN_EXCEPTIONS = {
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type)
    and issubclass(getattr(builtins, name), BaseException)
}


def rootless(source: str) -> list[str]:
    """Classes of `source` that derive from a built-in exception but not from ReverieError."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            if any(b in BUILTIN_EXCEPTIONS for b in bases) and "ReverieError" not in bases:
                out.append(node.name)
    return out


def test_the_finder_finds_a_class_without_the_root() -> None:
    source = (
        "class A(ValueError): pass\nclass B(ReverieError, ValueError): pass\nclass C(A): pass\n"
    )
    assert rootless(source) == ["A"]


def test_every_error_class_in_the_daemon_derives_from_reverie_error() -> None:
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "errors.py" or path.parent != PACKAGE
        for name in rootless(path.read_text())
    }
    assert found == set()


def test_the_errors_keep_their_standard_bases_and_the_root() -> None:
    from daemon.errors import ReverieError
    from daemon.memory.facts import FactError
    from daemon.models.base import ModelError
    from daemon.settings import ConfigError
    from daemon.when import WhenError

    assert Path(PACKAGE / "errors.py").exists()
    for cls in (ConfigError, ModelError, WhenError, FactError):
        assert issubclass(cls, ReverieError), cls
    assert issubclass(WhenError, ValueError) and issubclass(FactError, ValueError)
