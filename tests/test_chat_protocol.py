"""The chat wire format: parsing client frames, encoding, size-limited line splitting."""

from __future__ import annotations

import json
import socket

import anyio
import pytest
from anyio.abc import UNIXSocketStream

from daemon.chat import protocol
from daemon.chat.protocol import (
    ApproveFrame,
    CancelFrame,
    CommandFrame,
    LineBuffer,
    LineReader,
    MessageFrame,
    Oversized,
    ProtocolError,
    parse_client_frame,
)


def _code(line: bytes) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(line)
    return info.value.code, info.value.message


def test_message_frame_parses_with_and_without_id() -> None:
    assert parse_client_frame(b'{"type":"message","text":"hi","id":"m1"}') == MessageFrame(
        text="hi", id="m1"
    )
    assert parse_client_frame('{"type":"message","text":"héllo ☃"}'.encode()) == MessageFrame(
        text="héllo ☃"
    )


def test_command_frame_defaults_args_and_keeps_them() -> None:
    assert parse_client_frame(b'{"type":"command","name":"status"}') == CommandFrame(name="status")
    frame = parse_client_frame(b'{"type":"command","name":"recall","args":{"query":"x"},"id":"7"}')
    assert frame == CommandFrame(name="recall", args={"query": "x"}, id="7")


def test_cancel_frame_turn_id_is_optional() -> None:
    assert parse_client_frame(b'{"type":"cancel"}') == CancelFrame()
    assert parse_client_frame(b'{"type":"cancel","turn_id":"t1"}') == CancelFrame(turn_id="t1")


def test_unknown_fields_are_ignored() -> None:
    assert parse_client_frame(b'{"type":"message","text":"a","future":1}') == MessageFrame(text="a")


@pytest.mark.parametrize(
    ("line", "code", "fragment"),
    [
        (b"not json", "bad_frame", "not valid JSON"),
        (b"\xff\xfe{}", "bad_frame", "UTF-8"),
        (b"[1,2]", "bad_frame", "an array"),
        (b'"text"', "bad_frame", "a string"),
        (b"42", "bad_frame", "a number"),
        (b"null", "bad_frame", "null"),
        (b"{}", "bad_frame", "no 'type'"),
        (b'{"type":5}', "bad_frame", "'type' must be a string"),
        (b'{"type":"message"}', "bad_frame", "'text'"),
        (b'{"type":"message","text":3}', "bad_frame", "a number"),
        (b'{"type":"message","text":"  "}', "bad_frame", "empty"),
        (b'{"type":"message","text":"a","id":1}', "bad_frame", "'id' must be a string"),
        (b'{"type":"command"}', "bad_frame", "'name'"),
        (b'{"type":"command","name":""}', "bad_frame", "empty string"),
        (b'{"type":"command","name":"x","args":[1]}', "bad_frame", "'args' must be an object"),
        (b'{"type":"cancel","turn_id":7}', "bad_frame", "'turn_id' must be a string"),
        (b'{"type":"shout"}', "unknown_type", "shout"),
    ],
)
def test_malformed_frames_get_a_code_and_a_reason(line: bytes, code: str, fragment: str) -> None:
    got_code, message = _code(line)
    assert got_code == code
    assert fragment in message


def test_error_carries_the_frame_id_when_readable() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(b'{"type":"command","id":"abc"}')
    assert info.value.to_frame() == {
        "type": "error",
        "code": "bad_frame",
        "message": info.value.message,
        "id": "abc",
    }


def test_deeply_nested_json_is_a_bad_frame_not_a_crash() -> None:
    code, _ = _code(b"[" * 100_000 + b"]" * 100_000)
    assert code == "bad_frame"


def test_encode_is_one_compact_line_even_with_newlines_inside() -> None:
    data = protocol.encode(protocol.delta(turn_id="t", text="a\nb\r\n☃"))
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert json.loads(data) == {"type": "delta", "turn_id": "t", "text": "a\nb\r\n☃"}
    with pytest.raises(ValueError):
        protocol.encode({"x": float("nan")})


def test_frame_constructors_omit_absent_optionals() -> None:
    assert protocol.error("internal", "boom") == {
        "type": "error",
        "code": "internal",
        "message": "boom",
    }
    assert protocol.state("asleep") == {"type": "state", "state": "asleep"}
    assert protocol.tool(turn_id="t", name="recall", phase="finished", is_error=False) == {
        "type": "tool",
        "turn_id": "t",
        "name": "recall",
        "phase": "finished",
        "is_error": False,
    }
    assert protocol.done(turn_id="t", text="x", stop_reason="end_turn", usage={"input": 3})[
        "usage"
    ] == {"input": 3}


def test_client_frames_are_built_as_the_daemon_parses_them() -> None:
    assert protocol.message(text="hi") == {"type": "message", "text": "hi"}
    assert protocol.command(name="status") == {"type": "command", "name": "status"}
    assert protocol.cancel() == {"type": "cancel"}
    built = [
        protocol.message(text="hello ☃\nthere", id="m1"),
        protocol.command(name="journal", id="c1", args={"tail": 3}),
        protocol.command(name="memory_import", id="c2", args={"name": "notes"}, files=1),
        protocol.cancel(turn_id="t9"),
    ]
    assert [parse_client_frame(protocol.encode(frame)) for frame in built] == [
        MessageFrame(text="hello ☃\nthere", id="m1"),
        CommandFrame(name="journal", args={"tail": 3}, id="c1"),
        CommandFrame(name="memory_import", args={"name": "notes"}, id="c2", files=1),
        CancelFrame(turn_id="t9"),
    ]


def test_line_buffer_splits_across_chunks_and_skips_blank_lines() -> None:
    buf = LineBuffer(100)
    assert buf.feed(b'{"a"') == []
    assert buf.feed(b':1}\n\n  \n{"b":2}\r\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert buf.pending == 4
    assert buf.feed(b":3}\n") == [b'{"c":3}']
    assert buf.finish() is None


def test_line_buffer_reports_oversize_once_and_recovers() -> None:
    buf = LineBuffer(10)
    out = buf.feed(b"x" * 8)
    assert out == []
    out = buf.feed(b"y" * 8)  # crosses the limit: reported immediately
    assert len(out) == 1 and isinstance(out[0], Oversized)
    assert buf.pending == 0
    assert buf.feed(b"z" * 1000) == []  # still inside the oversized line: dropped
    assert buf.pending == 0
    assert buf.feed(b'zz\n{"ok":1}\n') == [b'{"ok":1}']


def test_line_buffer_limit_is_exclusive_of_the_newline() -> None:
    buf = LineBuffer(5)
    assert buf.feed(b"12345\n") == [b"12345"]
    out = buf.feed(b"123456\n")
    assert len(out) == 1 and isinstance(out[0], Oversized)


def test_line_buffer_returns_an_unterminated_tail_at_the_end() -> None:
    buf = LineBuffer(100)
    assert buf.feed(b'{"a":1}\n{"b":2}') == [b'{"a":1}']
    assert buf.finish() == b'{"b":2}'


@pytest.mark.anyio
async def test_line_reader_over_a_real_socket_pair() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    writer = await UNIXSocketStream.from_socket(left)
    stream = await UNIXSocketStream.from_socket(right)
    reader = LineReader(stream, 8)
    with anyio.fail_after(5):
        async with writer, stream:
            await writer.send(b'{"a":1}\n' + b"q" * 20)
            await writer.send(b"q\n{}")
            await writer.send_eof()
            got = [await reader.receive() for _ in range(4)]
    assert got[0] == b'{"a":1}'
    assert isinstance(got[1], Oversized)
    assert got[2] == b"{}"  # the unterminated tail at end of stream
    assert got[3] is None


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b'{"type":"command","name":"remember","args":{"text":7}}', "'text' must be a string"),
        (b'{"type":"command","name":"remember","args":{"tags":"a"}}', "an array of strings"),
        (b'{"type":"command","name":"sleep","args":{"wait":"yes"}}', "'wait' must be a boolean"),
        (b'{"type":"command","name":"journal","args":{"tail":true}}', "must be an integer"),
        (b'{"type":"command","name":"journal","args":{"tail":"5"}}', "must be an integer"),
        (
            b'{"type":"command","name":"memory_search","args":{"queries":["a",1]}}',
            "'queries' must be an array of strings, got an array",
        ),
        (b'{"type":"command","name":"recall","args":{"query":["x"]}}', "got an array"),
        (b'{"type":"command","name":" switch ","args":{"reason":{}}}', "switch: 'reason'"),
    ],
)
def test_a_known_commands_argument_of_the_wrong_type_is_refused(line: bytes, fragment: str) -> None:
    code, message = _code(line)
    assert code == "bad_args"
    assert fragment in message


def test_command_arguments_keep_nulls_unknown_names_and_unknown_commands() -> None:
    frame = parse_client_frame(
        b'{"type":"command","name":"remember","id":"r",'
        b'"args":{"text":"tea","correct":null,"tags":[],"later":1}}'
    )
    assert frame == CommandFrame(
        name="remember", args={"text": "tea", "correct": None, "tags": [], "later": 1}, id="r"
    )
    # A command the protocol does not describe is the handler's to answer.
    assert parse_client_frame(b'{"type":"command","name":"x","args":{"text":7}}') == CommandFrame(
        name="x", args={"text": 7}
    )


def test_a_refused_argument_names_the_frame_it_came_in() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_client_frame(b'{"type":"command","name":"recall","id":"q1","args":{"query":1}}')
    assert info.value.to_frame()["id"] == "q1"


@pytest.mark.parametrize(("files", "fragment"), [("1", "a string"), (2, "got 2"), (-1, "got -1")])
def test_a_command_passes_at_most_one_file(files: object, fragment: str) -> None:
    line = json.dumps({"type": "command", "name": "memory_import", "files": files}).encode()
    code, message = _code(line)
    assert code == "bad_frame" and "'files'" in message and fragment in message
    ok = parse_client_frame(b'{"type":"command","name":"memory_import","files":1}')
    assert ok == CommandFrame(name="memory_import", files=1)


def test_an_approve_frame_names_its_approval_and_one_of_three_answers() -> None:
    line = protocol.encode(protocol.approve(id="ap-1", decision="always"))
    assert parse_client_frame(line) == ApproveFrame(id="ap-1", decision="always")
    for bad, fragment in (
        (b'{"type":"approve","decision":"yes"}', "needs 'id'"),
        (
            b'{"type":"approve","id":"ap-1","decision":"sure"}',
            "one of: yes, no, always; got 'sure'",
        ),
        (b'{"type":"approve","id":"ap-1"}', "got null"),
    ):
        with pytest.raises(ProtocolError) as exc:
            parse_client_frame(bad)
        assert exc.value.code == "bad_frame" and fragment in exc.value.message


def test_an_approval_frame_caps_its_preview_and_a_tool_frame_carries_its_summary() -> None:
    frame = protocol.approval(
        id="ap-1",
        turn_id="t1",
        session_id="trunk-1",
        tool="write_file",
        subject="notes.md",
        summary="write_file: notes.md",
        preview="+" * (protocol.MAX_PREVIEW_CHARS + 500),
        pattern="notes.md",
        timeout_s=120.0,
    )
    assert frame["type"] == "approval" and frame["pattern"] == "notes.md"
    assert len(frame["preview"]) < protocol.MAX_PREVIEW_CHARS + 60
    assert frame["preview"].endswith("[500 more characters not shown]")
    started = protocol.tool(turn_id="t", name="run", phase="started", summary="run: git status")
    assert started["summary"] == "run: git status"
