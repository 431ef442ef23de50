"""Regenerate the parts of the documentation that are read from the code, or check them.

A block between `<!-- BEGIN generated: NAME -->` and `<!-- END generated -->` in README.md,
docs/*.md or bench/README.md is rewritten from the command-line parsers (`daemon.cli`) or the
hook definitions (`daemon.events.HOOKS`), so a new command or hook reaches the docs by running:

    .venv/bin/python scripts/gen_docs.py

`--check` writes nothing: it lists stale blocks, relative links that do not resolve, docs/ pages
the README does not link to and error codes docs/protocol.md does not describe, and exits 1 if
there are any (the links and codes are checked on every run).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

REGENERATE = ".venv/bin/python scripts/gen_docs.py"
BLOCK = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END generated -->)",
    re.DOTALL,
)
# Options every subcommand takes; documented once, not on every row.
COMMON_OPTIONS = {"--home", "--config", "-h"}
# A synopsis longer than this shows `[options]` and leaves them to docs/commands.md.
SYNOPSIS_WIDTH = 60


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench/README.md"]


# --- the command line ------------------------------------------------------------------------


def _commands() -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """Every runnable command as (`reverie …` words, its parser, its one-line help), in order."""
    from daemon.cli import build_parser

    def walk(
        parser: argparse.ArgumentParser, words: str, summary: str
    ) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        # A command group is a row of its own only when it takes options of its own.
        if not subs or _options(parser):
            yield words, parser, summary
        for action in subs:
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield from walk(child, f"{words} {name}".strip(), helps.get(name, ""))

    root = build_parser()
    for words, parser, summary in walk(root, "", ""):
        if words:
            yield words, parser, summary


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction)
        and not COMMON_OPTIONS.intersection(a.option_strings)
    ]


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


def _invocation(action: argparse.Action) -> str:
    """How the argument is written: `QUERY`, `[QUERY]`, `--json`, `-m, --message TEXT`."""
    if not action.option_strings:
        name = _metavar(action)
        return f"[{name}]" if action.nargs in ("?", "*") else name
    flags = ", ".join(action.option_strings)
    return flags if action.nargs == 0 else f"{flags} {_metavar(action)}"


def _short(action: argparse.Action) -> str:
    if not action.option_strings:
        return _invocation(action)
    flag = max(action.option_strings, key=len)
    return f"[{flag}]" if action.nargs == 0 else f"[{flag} {_metavar(action)}]"


def _synopsis(words: str, parser: argparse.ArgumentParser) -> str:
    parts = [_short(a) for a in _options(parser)]
    full = " ".join(["reverie", words, *parts])
    if len(full) <= SYNOPSIS_WIDTH:
        return full
    positionals = [_invocation(a) for a in _options(parser) if not a.option_strings]
    return " ".join(["reverie", words, *positionals, "[options]"])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return _cell(parser._get_formatter()._expand_help(action))


def commands_table() -> str:
    rows = ["| command | does |", "|---|---|"]
    for words, parser, summary in _commands():
        rows.append(f"| `{_synopsis(words, parser)}` | {_cell(summary)} |")
    return "\n".join(rows) + "\n"


def command_reference() -> str:
    out: list[str] = []
    for words, parser, summary in _commands():
        out += [f"### `reverie {words}`", ""]
        about = parser.description or summary
        if about:
            about = _cell(about[:1].upper() + about[1:])
            out += [about if about.endswith(".") else about + ".", ""]
        options = _options(parser)
        if options:
            out += ["| argument | meaning |", "|---|---|"]
            out += [f"| `{_invocation(a)}` | {_help(parser, a)} |" for a in options]
            out.append("")
    return "\n".join(out)


# --- the event bus ---------------------------------------------------------------------------


def _handlers() -> dict[str, list[str]]:
    """Handler names registered on each event class, found in the daemon's source."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "daemon").rglob("*.py")):
        if path.name == "testing.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "on"
                and node.args
                and isinstance(node.args[0], ast.Name)
            ):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            name = keywords.get("name")
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            required = keywords.get("required")
            label = f"`{name.value}`"
            if isinstance(required, ast.Constant) and required.value is True:
                label += " (required)"
            found.setdefault(node.args[0].id, []).append(label)
    return found


def _announces(event_type: type) -> str:
    doc = event_type.__doc__ or ""
    # A dataclass without a docstring gets its signature as one; that says nothing new here.
    if doc.startswith(f"{event_type.__name__}("):
        return ""
    return _cell(doc.strip().splitlines()[0])


def hooks_table() -> str:
    from daemon.events import HOOKS

    handlers = _handlers()
    rows = [
        "| hook | kind | timeout | announces | event fields | handlers |",
        "|---|---|---|---|---|---|",
    ]
    for spec in HOOKS.values():
        fields = ", ".join(f"`{f.name}`" for f in dataclasses.fields(spec.event_type))
        listening = ", ".join(handlers.get(spec.event_type.__name__, [])) or "—"
        rows.append(
            f"| `{spec.name}` | {spec.kind.value} | {spec.timeout_s:g} s"
            f" | {_announces(spec.event_type)} | {fields} | {listening} |"
        )
    return "\n".join(rows) + "\n"


def _error_codes() -> list[str]:
    from daemon.chat.protocol import ErrorCode

    return [code.value for code in ErrorCode]


GENERATORS: dict[str, Callable[[], str]] = {
    "commands": commands_table,
    "command-reference": command_reference,
    "hooks": hooks_table,
}


# --- files -----------------------------------------------------------------------------------


def render(text: str, rendered: dict[str, str]) -> str:
    """`text` with every generated block's body replaced by what the code produces now."""

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise SystemExit(f"gen_docs: unknown generated block {name!r}")
        if name not in rendered:
            rendered[name] = GENERATORS[name]()
        return match[1] + rendered[name] + match[4]

    return BLOCK.sub(body, text)


FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def anchors(text: str) -> set[str]:
    """Heading anchors as GitHub makes them (lower case, punctuation dropped, spaces to '-')."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def doc_problems(root: Path) -> list[str]:
    """Links that do not resolve, docs/ pages the README leaves out, error codes not described."""
    problems = []
    texts = {path: path.read_text(encoding="utf-8") for path in doc_files(root) if path.exists()}
    for path, text in texts.items():
        for target in LINK.findall(FENCE.sub("", text)):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}: link {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text("utf-8")):
                problems.append(f"{where}: no heading with that anchor")
    protocol = texts.get(root / "docs/protocol.md", "")
    for code in _error_codes():
        if f"`{code}`" not in protocol:
            problems.append(f"docs/protocol.md does not describe the error code `{code}`")
    readme = texts.get(root / "README.md", "")
    linked = {t.partition("#")[0] for t in LINK.findall(readme)}
    for page in sorted((root / "docs").glob("*.md")):
        if f"docs/{page.name}" not in linked:
            problems.append(f"README.md does not link to docs/{page.name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--root", type=Path, default=REPO, help="where README.md and docs/ are")
    args = parser.parse_args(argv)
    rendered: dict[str, str] = {}
    stale = []
    for path in doc_files(args.root):
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        new = render(text, rendered)
        if new != text:
            stale.append(str(path.relative_to(args.root)))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    problems = doc_problems(args.root)
    for problem in problems:
        print(f"gen_docs: {problem}", file=sys.stderr)
    if args.check and stale:
        print(
            f"gen_docs: generated text is out of date in {', '.join(stale)};"
            f" regenerate with: {REGENERATE}",
            file=sys.stderr,
        )
    elif stale:
        print(f"gen_docs: rewrote {', '.join(stale)}")
    return 1 if problems or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
