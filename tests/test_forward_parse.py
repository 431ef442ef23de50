"""The forwarder's quick parser reads a command line exactly as argparse does, or leaves it alone.

The quick parser spares a forwarded command argparse (and `re`, `enum`, `gettext` behind it);
whatever it accepts must give the values argparse gives — both the forwarder's own argparse
parser and the full CLI's — and whatever it cannot read the same way it must hand on (None).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from daemon.cli import build_parser
from daemon.commands import wire
from daemon.commands.forward import _NotOurs, _parser, command_word, quick_parse
from tests.harness import REPO

EVERYDAY = [
    ["memory", "search", "when did we talk about Lisbon"],
    ["memory", "search", "kalo mine", "--json"],
    ["memory", "search", "q", "--k", "5", "--mode", "lexical", "--json"],
    ["memory", "search", "--k=3", "q", "--kind", "fact", "--kind", "summary", "--raw"],
    ["memory", "search", "--batch", "queries.txt", "--json", "--include-retired"],
    ["--home", "/tmp/h", "memory", "search", "q"],
    ["memory", "--home", "/tmp/a", "search", "--home=/tmp/b", "q", "--config", "c.toml"],
    ["memory", "import", "conv.jsonl", "--json", "--no-progress"],
    ["memory", "import", "conv.jsonl", "--summarise", "--no-embed"],
    ["remember", "my dentist is on Friday", "--tag", "health", "--tag", "dates"],
    ["remember", "--target", "profile", "I prefer tea"],
    ["remember", "--correct", "fact:12", "moved to Monday", "--json"],
    ["remember", "--retract", "fact:12", "--reason", "cancelled"],
    ["remember", "--restore=fact:3"],
    ["recall", "what did Ada study?", "--json"],
    ["recall", ""],
    ["memory", "search", ""],
]
# Lines the quick parser must hand to argparse: errors to report, or readings it does not do.
HANDED_ON = [
    ["memory", "search", "q", "--k", "-5"],  # a negative number: argparse takes it as the value
    ["memory", "search", "q", "--k", "x"],  # not a number: argparse's error
    ["memory", "search", "q", "--mode", "fuzzy"],  # not a choice
    ["memory", "search", "q", "--inc"],  # a prefix argparse expands
    ["memory", "search", "--", "-q"],
    ["memory", "search", "a", "b"],  # one positional too many
    ["memory", "search", "q", "--json=yes"],
    ["memory", "search", "q", "--k"],  # a value missing
    ["memory", "import"],  # a required positional missing
    ["memory", "reindex"],  # not forwarded
    ["memory"],
    ["remember", "--correct", "fact:1", "--retract", "fact:2"],  # mutually exclusive
    ["recall"],
    ["status"],
    [],
]

TOKENS = {
    "memory search": [
        "q",
        "two words",
        "--k",
        "3",
        "0",
        "-2",
        "--k=7",
        "--json",
        "--mode",
        "lexical",
        "vector",
        "bad",
        "--batch",
        "f.txt",
        "--kind",
        "fact",
        "chunk",
        "--include-retired",
        "--raw",
        "--home",
        "/h",
        "--config=c",
        "--",
        "-",
        "--ra",
        "x=y",
        "",
    ],
    "memory import": ["f.jsonl", "--summarise", "--no-embed", "--json", "--no-progress", "--home"],
    "remember": [
        "text",
        "--target",
        "profile",
        "memory",
        "--tag",
        "t",
        "--correct",
        "--retract",
        "--restore",
        "fact:1",
        "--reason",
        "why",
        "--json",
        "--home=/h",
        "--target=nope",
    ],
    "recall": ["question", "--json", "--home", "/h", "--config", "-c", "?"],
}


def _argparse(argv: list[str]) -> dict[str, object] | None:
    try:
        return vars(_parser(command_word(argv)).parse_args(argv))
    except _NotOurs:
        return None


def test_everyday_lines_are_read_without_argparse_and_as_argparse_reads_them() -> None:
    for argv in EVERYDAY:
        quick = quick_parse(argv)
        assert quick is not None, argv
        assert quick == _argparse(argv), argv


def test_lines_argparse_must_judge_are_handed_on() -> None:
    for argv in HANDED_ON:
        assert quick_parse(argv) is None, argv


def test_quick_parser_agrees_with_the_full_cli_parser() -> None:
    for argv in EVERYDAY:
        quick = quick_parse(argv)
        assert quick is not None
        full = vars(build_parser(argv).parse_args(argv))
        assert {k: full[k] for k in quick} == quick, argv


@pytest.mark.parametrize("command", sorted(TOKENS))
def test_random_lines_are_read_the_same_or_handed_on(command: str) -> None:
    rng = random.Random(command)
    accepted = 0
    for _ in range(3000):
        argv = [*command.split(), *rng.choices(TOKENS[command], k=rng.randint(0, 6))]
        if rng.random() < 0.1:
            rng.shuffle(argv)  # the command words out of place too
        quick = quick_parse(argv)
        if quick is None:
            continue
        accepted += 1
        assert quick == _argparse(argv), argv
    assert accepted > 100  # the quick parser does take ordinary lines


def _same_json(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def test_wire_json_matches_the_json_module() -> None:
    rng = random.Random(7)
    texts = ["", "plain", "é ü 中文 🙂", 'quote " back \\ slash', "ctrl \x00\x1f\n\t", "\ud800"]

    def value(depth: int) -> object:
        pick = rng.randrange(9 if depth < 3 else 6)
        if pick == 0:
            return rng.choice(texts)
        if pick == 1:
            return rng.randint(-(10**20), 10**20)
        if pick == 2:
            return rng.choice([0.1, -2.5e-300, 1e308, float("inf"), float("-inf"), float("nan")])
        if pick == 3:
            return rng.choice([True, False, None])
        if pick == 4:
            return rng.random() * 1000
        if pick == 5:
            return rng.choice(texts) * 3
        if pick == 6:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        if pick == 7:
            return tuple(value(depth + 1) for _ in range(rng.randint(0, 3)))
        return {rng.choice(texts) + str(i): value(depth + 1) for i in range(rng.randint(0, 4))}

    for _ in range(500):
        obj = value(0)
        for ascii_only in (True, False):
            text = wire.dumps(obj, ensure_ascii=ascii_only)
            assert text == json.dumps(obj, ensure_ascii=ascii_only)
            assert _same_json(wire.loads(text), json.loads(text))
            assert _same_json(wire.loads(f" \n{text}\t\r\n"), json.loads(text))
            if ascii_only:  # bytes off the socket: UTF-8
                assert _same_json(wire.loads(text.encode()), json.loads(text))


def test_wire_json_refuses_what_the_json_module_refuses() -> None:
    for bad in ('{"a": 1} x', "", "[1,", "{'a': 1}", '"\\x"', "[1] [2]"):
        with pytest.raises(json.JSONDecodeError):
            wire.loads(bad)
    bad = {"a": object()}
    with pytest.raises(TypeError, match="not JSON serializable"):
        wire.dumps(bad)
    bad["a"] = 1  # a stale circular-reference marker would refuse it now
    assert wire.dumps(bad) == '{"a": 1}'
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        wire.dumps(loop)
    # A failed encode leaves nothing behind that would refuse the next one.
    assert wire.dumps([[1], [2]]) == "[[1], [2]]"


def test_the_forwarded_path_imports_neither_argparse_nor_json() -> None:
    code = (
        "import sys\n"
        "from daemon.commands import forward, render\n"
        "args = forward.quick_parse(['memory', 'search', 'q', '--json', '--kind', 'fact'])\n"
        "render.search_results([{'id': 'fact:1', 'score': 0.5}], as_json=True, batch=False,"
        " query='q', out=sys.stdout)\n"
        "print(forward.wire.loads(forward.wire.dumps({'args': args}))['args']['kind'])\n"
        "print(sorted(m for m in ('argparse', 'json', 're', 'typing') if m in sys.modules))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert r.stdout.splitlines() == ['[{"id": "fact:1", "score": 0.5}]', "['fact']", "[]"]
