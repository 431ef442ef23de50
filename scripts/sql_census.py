"""Count the SQL statements written outside `daemon/store/`, per module.

A statement is a string literal (or the literal head of an f-string) that opens the way SQL
does: `SELECT …`, `INSERT …`, `UPDATE t SET`, `DELETE FROM`, `WITH x AS (`, `CREATE TABLE`
(or INDEX, VIEW, TRIGGER, VIRTUAL TABLE, EXTENSION, SCHEMA), `DROP TABLE` (…), `ALTER TABLE`,
`PRAGMA`, `BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `VACUUM`, `ANALYZE`. Prose that begins
with one of those words ("Create the home …", "Drop the cache") is not SQL and is not counted.
tests/test_architecture.py holds the same line: no module outside the store but the ones it
names may have any.

    .venv/bin/python scripts/sql_census.py            # modules with SQL, most first, and the total
    .venv/bin/python scripts/sql_census.py --all      # the same, counting daemon/store/ too
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "daemon"
STORE = PACKAGE / "store"

_OBJECT = r"(?:TABLE|INDEX|UNIQUE\s+INDEX|VIEW|TRIGGER|VIRTUAL\s+TABLE|EXTENSION|SCHEMA)"
SQL = re.compile(
    r"""^\s*(?:
        SELECT(?:\s+(?:\*|DISTINCT\b|[\w(."'])|\s+$)
      | INSERT\s+(?:OR\s+\w+\s+)?INTO\b
      | REPLACE\s+INTO\b
      | UPDATE\s+[\w."]+\s+SET\b | UPDATE\s+$
      | DELETE\s+FROM\b | DELETE\s+FROM\s*$
      | WITH\s+(?:RECURSIVE\s+)?\w+(?:\s*\([^)]*\))?\s+AS\s*(?:MATERIALIZED\s*)?\(
      | CREATE\s+(?:TEMP(?:ORARY)?\s+)?(?:OR\s+REPLACE\s+)?"""
    + _OBJECT
    + r"""\b
      | DROP\s+"""
    + _OBJECT
    + r"""\b
      | ALTER\s+TABLE\b
      | PRAGMA\s+\w
      | (?:BEGIN|COMMIT|ROLLBACK|VACUUM|ANALYZE)\s*(?:IMMEDIATE|DEFERRED|EXCLUSIVE|TO|;|$)
      | SAVEPOINT\s+\w | RELEASE\s+(?:SAVEPOINT\s+)?\w+\s*$
    )""",
    re.I | re.X,
)


def is_sql(text: str) -> bool:
    return bool(SQL.match(text))


def statements(source: str) -> list[tuple[int, str]]:
    """The SQL literals in `source`: (line, first line of the text)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            text = head.value if isinstance(head, ast.Constant) else ""
            if isinstance(text, str) and is_sql(text):
                out.append((node.lineno, text.strip().splitlines()[0]))
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_sql(node.value):
            out.append((node.lineno, node.value.strip().splitlines()[0]))
    # An f-string's literal parts are Constants too: keep one entry per statement.
    return sorted(set(out))


def census(*, include_store: bool = False) -> dict[str, int]:
    """Module name → SQL statements in it, for every module of `daemon/` that has any."""
    counts: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if not include_store and STORE in path.parents:
            continue
        n = len(statements(path.read_text(encoding="utf-8")))
        if n:
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            counts[".".join(parts)] = n
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="count daemon/store/ too")
    args = ap.parse_args()
    counts = census(include_store=args.all)
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:4d}  {name}")
    print(f"{sum(counts.values()):4d}  statements in {len(counts)} modules")


if __name__ == "__main__":
    main()
