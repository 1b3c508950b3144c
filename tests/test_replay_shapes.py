"""Bad trace data against bugs of our own (issue 32): a reader raises one error on purpose,
``TraceShapeError``, from explicit checks of what it reads; the file reader catches that
alone, reports it (file, line, what was expected) and skips what it was reading. Any other
exception raised while reading, a ``TypeError`` or ``AttributeError`` of a reader's own, is
a bug, and fails the replay loudly instead of reading as "unexpected shape; skipped".

The malformed shapes below are the ones a mutation probe of every format found the readers
skipping (or crashing on) when every exception was caught: each node of a valid trace of
each format replaced by hostile values (null, numbers, NaN, Infinity, text, lists, objects,
the node removed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _traces import (
    anthropic_poll,
    chat_poll,
    codex_edit_undo,
    edit_undo_events,
    fruitless_search_responses,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tripwire.replay import replay
from tripwire.replay.formats import (
    TraceShapeError,
    atif,
    claude_code,
    events,
    files,
    messages,
    openhands,
)

FLEET = Path(__file__).parent / "fixtures" / "fleet"


def copilot_events() -> list[dict[str, Any]]:
    """Copilot CLI session events (the shape ``formats/copilot.py`` reads): a session, a
    person speaking, a turn with one call, its result."""
    base = {"timestamp": "2026-12-05T10:00:00Z"}
    return [
        {**base, "type": "session.start", "id": "e0", "data": {"sessionId": "cp-1"}},
        {**base, "type": "user.message", "id": "e1", "data": {"content": "list the logs"}},
        {
            **base,
            "type": "assistant.message",
            "id": "e2",
            "data": {
                "model": "gpt-5",
                "toolRequests": [{"toolCallId": "c1", "name": "ls", "arguments": {"p": "/"}}],
            },
        },
        {
            **base,
            "type": "tool.execution_complete",
            "id": "e3",
            "data": {"toolCallId": "c1", "success": True, "result": {"content": "logs"}},
        },
        {
            **base,
            "type": "assistant.message",
            "id": "e4",
            "data": {"toolRequests": [{"toolCallId": "c2", "name": "ls", "arguments": {"p": "/"}}]},
        },
    ]


def gemini_session() -> list[dict[str, Any]]:
    """Gemini CLI session JSONL: the session, a person, a gemini message written twice as
    it grows (its call, then its result)."""
    call = {"id": "c1", "name": "ls", "args": {"p": "/"}}
    result = [{"functionResponse": {"response": {"output": "logs"}}}]
    message = {"type": "gemini", "id": "m1", "timestamp": "t", "model": "gemini-3"}
    return [
        {"sessionId": "g-1", "projectHash": "h"},
        {"type": "user", "id": "m0", "timestamp": "t", "content": [{"text": "go"}]},
        {**message, "toolCalls": [call]},
        {**message, "toolCalls": [{**call, "result": result}]},
    ]


def atif_trajectory() -> dict[str, Any]:
    """An ATIF trajectory: a person, then three agent steps calling the same tool."""
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": "go"}]
    for number in range(2, 5):
        steps.append(
            {
                "step_id": number,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {
                        "tool_call_id": f"c{number}",
                        "function_name": "search",
                        "arguments": {"q": "refunds"},
                    }
                ],
                "observation": {"results": [{"source_call_id": f"c{number}", "content": "[]"}]},
                "metrics": {"prompt_tokens": 100, "completion_tokens": 5},
            }
        )
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": "atif-1",
        "agent": {"name": "a", "model_name": "m"},
        "steps": steps,
    }


def openhands_events() -> list[dict[str, Any]]:
    """OpenHands events: a person, then the agent running the same command twice."""
    rows: list[dict[str, Any]] = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "go"}}
    ]
    for number in (1, 3):
        rows.append({"id": number, "source": "agent", "action": "run", "args": {"command": "ls"}})
        rows.append(
            {"id": number + 1, "source": "environment", "observation": "run", "cause": number,
             "content": "logs"}
        )  # fmt: skip
    return rows


def claude_session() -> list[dict[str, Any]]:
    """A Claude Code session: a person, then the same Read three times with its results."""
    base = {"sessionId": "cc-1", "isSidechain": False}
    rows: list[dict[str, Any]] = [
        {**base, "type": "user", "uuid": "u0", "message": {"role": "user", "content": "go"}}
    ]
    for number in range(3):
        use = {"type": "tool_use", "id": f"t{number}", "name": "Read", "input": {"p": "a"}}
        result = {"type": "tool_result", "tool_use_id": f"t{number}", "content": "same"}
        rows += [
            {**base, "type": "assistant", "uuid": f"a{number}",
             "message": {"id": f"msg{number}", "role": "assistant", "content": [use]}},
            {**base, "type": "user", "uuid": f"r{number}",
             "message": {"role": "user", "content": [result]}},
        ]  # fmt: skip
    return rows


def lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def document(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")
    return path


# -- a bug is not bad data -----------------------------------------------------------------------


def _raise(kind: type[Exception]) -> Callable[..., Any]:
    def bug(*args: Any, **kwargs: Any) -> Any:
        raise kind("injected bug")

    return bug


# (id, the module and name replaced by a function raising the bug, the bug's type, the
# trace that reaches it: a file name and its writer)
INJECTED_BUGS: list[tuple[str, Any, str, type[Exception], str, Callable[[Path], Path]]] = [
    # A JSONL format's record reader (Claude Code's calls, through the messages reader).
    ("claude-code-line", claude_code, "chat_calls", TypeError, "s.jsonl",
     lambda p: lines(p, claude_session())),
    # The events format, the hot path of fleet logs (its lines skip detection).
    ("events-line", events, "result_value", AttributeError, "e.jsonl",
     lambda p: lines(p, edit_undo_events())),
    # A whole-document format's reader.
    ("atif-document", atif, "argument_call", TypeError, "t.json",
     lambda p: document(p, atif_trajectory())),
    # A message list read as one document.
    ("messages-document", messages, "chat_calls", TypeError, "c.json",
     lambda p: document(p, chat_poll(["a", "b"]))),
    # Detection: which format claims a document.
    ("openhands-detection", openhands, "is_event", TypeError, "o.json",
     lambda p: document(p, openhands_events())),
    # The one place a line is decoded.
    ("line-decoding", files, "_raw_decode", TypeError, "e.jsonl",
     lambda p: lines(p, edit_undo_events())),
    # The one place a document is decoded.
    ("document-decoding", files, "_loads", AttributeError, "c.json",
     lambda p: document(p, chat_poll(["a", "b"]))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "name", "bug", "file", "write"),
    [case[1:] for case in INJECTED_BUGS],
    ids=[case[0] for case in INJECTED_BUGS],
)
def test_a_bug_in_a_reader_fails_the_replay_loudly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    name: str,
    bug: type[Exception],
    file: str,
    write: Callable[[Path], Path],
) -> None:
    """A ``TypeError`` or ``AttributeError`` raised by our own code while a trace is read
    propagates out of ``replay``: it is not reported as a line of unexpected shape."""
    # The bugs are injected into the per-call readers; the native core reads events files
    # without them (its own faults: tests/test_events_native.py).
    monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", "python")
    path = write(tmp_path / file)
    assert replay([str(path)]).problems_total == 0  # the trace itself is good
    monkeypatch.setattr(module, name, _raise(bug))
    with pytest.raises(bug, match="injected bug"):
        replay([str(path)])


def test_the_shape_error_is_a_value_error_that_says_where() -> None:
    """One class, a ``ValueError`` (as the style guide wants of our exceptions), carrying
    what was expected and where; the file reader fills in what the raiser did not know."""
    error = TraceShapeError(
        "unexpected shape: data is a list, not an object", expected="an object", line=7
    )
    assert isinstance(error, ValueError)
    problem = error.problem("trace.jsonl", 3, "line skipped", "steps[2]")
    assert (problem.path, problem.line, problem.where) == ("trace.jsonl", 7, "steps[2]")
    assert str(problem) == (
        "trace.jsonl:7 (steps[2]): unexpected shape: data is a list, not an object; line skipped"
    )


# -- bad data is skipped and counted ---------------------------------------------------------------


def _copilot_with(index: int, change: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    rows = copilot_events()
    change(rows[index])
    return rows


def _atif_with(tool_calls: Any) -> dict[str, Any]:
    doc = atif_trajectory()
    doc["steps"][2]["tool_calls"] = tool_calls
    return doc


def _text_lines(path: Path, text: bytes) -> Path:
    path.write_bytes(text)
    return path


_GOOD = json.dumps({"run": "r", "tool": "search", "args": {"q": 1}}).encode() + b"\n"

# (id, file name, writer, problems, a problem's (line, words), runs' steps by run)
Malformed = tuple[str, str, Callable[[Path], Path], int, tuple[int | None, str], dict[str, int]]
MALFORMED: list[Malformed] = [
    # Copilot: a record claimed by its type whose data is not an object, where it is read.
    ("copilot-data-list", "c.jsonl",
     lambda p: lines(p, _copilot_with(2, lambda r: r.update(data=[]))),
     1, (3, "unexpected shape: data is a list, not an object; line skipped"), {"cp-1": 1}),
    ("copilot-data-missing", "c.jsonl",
     lambda p: lines(p, _copilot_with(3, lambda r: r.pop("data"))),
     1, (4, "unexpected shape: data is missing, not an object; line skipped"), {"cp-1": 2}),
    ("copilot-result-text", "c.jsonl",
     lambda p: lines(p, _copilot_with(3, lambda r: r.update(data="logs"))),
     1, (4, "data is text, not an object; line skipped"), {"cp-1": 2}),
    # The same records as one JSON document: what was read before the bad one counts.
    ("copilot-document", "c.json",
     lambda p: document(p, _copilot_with(3, lambda r: r.update(data=7))),
     1, (None, "data is a number, not an object; rest of file skipped"), {"cp-1": 1}),
    # ATIF: a step whose tool_calls is not a list is still a model call; its calls are not.
    ("atif-tool-calls-number", "t.json", lambda p: document(p, _atif_with(-1)),
     1, (None, "tool_calls is a number, not a list; the step's calls skipped"), {"atif-1": 2}),
    ("atif-tool-calls-text", "t.json", lambda p: document(p, _atif_with("search")),
     1, (None, "tool_calls is text, not a list; the step's calls skipped"), {"atif-1": 2}),
    # Lines that are not JSON: the one place lines are decoded.
    ("not-json", "e.jsonl", lambda p: _text_lines(p, _GOOD + b"{oops\n" + _GOOD),
     1, (2, "not JSON (Expecting property name enclosed in double quotes at column 2); "
         "line skipped"), {"r": 2}),
    ("not-utf8", "e.jsonl", lambda p: _text_lines(p, _GOOD + b'{"a": "\xff"}\n' + _GOOD),
     1, (2, "not UTF-8 text (byte 7); line skipped"), {"r": 2}),
    ("extra-data", "e.jsonl", lambda p: _text_lines(p, _GOOD + b"{} {}\n" + _GOOD),
     1, (2, "not JSON (extra data at column 3); line skipped"), {"r": 2}),
    ("nested-too-deeply", "e.jsonl",
     lambda p: _text_lines(p, _GOOD + b"[" * 100_000 + b"]" * 100_000 + b"\n" + _GOOD),
     1, (2, "JSON nested too deeply; line skipped"), {"r": 2}),
    ("document-not-json", "c.json",
     lambda p: _text_lines(p, b'[\n {"role": "user",\n  oops\n]\n'),
     1, (3, "not JSON or JSONL"), {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("file", "write", "count", "expected", "steps"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_shapes_are_skipped_and_counted(
    tmp_path: Path,
    file: str,
    write: Callable[[Path], Path],
    count: int,
    expected: tuple[int | None, str],
    steps: dict[str, int],
) -> None:
    """Each malformed shape is one problem naming the file and the line, the rest of the
    file is read (or, for a document, what came before it counts), and nothing raises."""
    path = write(tmp_path / file)
    report = replay([str(path)])
    assert report.problems_total == count
    line, words = expected
    [problem] = report.problems
    assert (problem.path, problem.line) == (str(path), line)
    assert words in problem.message
    assert {run.run.removeprefix(f"{tmp_path}/"): run.steps for run in report.runs} == steps


@pytest.mark.parametrize(
    ("file", "value", "start"),
    [
        ("oi.jsonl", "NaN", "start_time"),
        ("oi.jsonl", "Infinity", "start_time"),
        ("oi.jsonl", '"0001-01-01"', "start_time"),
        ("otel.jsonl", "Infinity", "startTimeUnixNano"),
        ("otel.jsonl", "-Infinity", "startTimeUnixNano"),
    ],
)
def test_span_times_that_cannot_be_read_are_zero(
    tmp_path: Path, file: str, value: str, start: str
) -> None:
    """A span's start time that is not a finite number or a time on the clock (JSON's NaN
    and Infinity, which Python's json reads; year 1 as local time) orders the span first,
    as an unreadable ISO time already did, rather than raising ``OverflowError`` out of the
    replay (Infinity did) or skipping the span (NaN was, by accident)."""
    source = FLEET / ("openinference_phoenix.jsonl" if file == "oi.jsonl" else "otel_genai.jsonl")
    good = replay([str(source)])
    text = source.read_text()
    first = text.index(f'"{start}": ') + len(f'"{start}": ')
    end = text.index(",", first)
    path = tmp_path / file
    path.write_text(text[:first] + value + text[end:])
    report = replay([str(path)])
    assert report.problems_total == good.problems_total == 0
    assert sorted(r.steps for r in report.runs) == sorted(r.steps for r in good.runs)


def test_an_otlp_int_value_of_infinity_is_kept_as_it_is(tmp_path: Path) -> None:
    """OTLP writes 64-bit integers as text; an ``intValue`` of JSON's Infinity is no
    integer, and is kept as the value it is (as NaN was), not raised."""
    source = FLEET / "otel_genai.jsonl"
    text = source.read_text().replace('{"stringValue": "travel-agent"}', '{"intValue": Infinity}')
    path = tmp_path / "otel.jsonl"
    path.write_text(text)
    report = replay([str(path)])
    assert report.problems_total == 0
    assert len(report.runs) == len(replay([str(source)]).runs)


def test_an_event_list_whose_first_source_is_no_text_is_not_openhands(tmp_path: Path) -> None:
    """Detection asks, it does not raise: an event whose ``source`` is a list is no OpenHands
    event (a list cannot be looked up among the sources, and raised ``TypeError``)."""
    rows = openhands_events()
    rows[0]["source"] = ["user"]
    report = replay([str(document(tmp_path / "o.json", rows))])
    assert report.problems_total == 0 and not report.runs
    assert report.without_calls_total == 1  # said, not added in silence


def test_a_byte_order_mark_alone_on_the_first_line(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark on a line of its own is not a line: the file is read from
    the next one, as JSONL, with no problem (it was an empty-message problem)."""
    path = _text_lines(tmp_path / "e.jsonl", b"\xef\xbb\xbf\n" + _GOOD * 3)
    report = replay([str(path)])
    assert report.problems_total == 0
    [run] = report.runs
    assert (run.steps, run.stop_step) == (3, 3)


# -- every format's fields, one at a time --------------------------------------------------------


def _samples() -> dict[str, tuple[str, Any]]:
    """A valid trace of each format: ("lines", rows) or ("document", value)."""
    otel = [json.loads(line) for line in (FLEET / "otel_genai.jsonl").read_text().splitlines()]
    spans = (FLEET / "openinference_phoenix.jsonl").read_text().splitlines()
    return {
        "openai-chat": ("document", chat_poll(["a", "a", "b"])),
        "anthropic": ("document", anthropic_poll(["a", "b"])),
        "openai-responses": ("document", fruitless_search_responses()[:8]),
        "codex": ("lines", codex_edit_undo(1)),
        "events": ("lines", edit_undo_events()[:5]),
        "claude-code": ("lines", claude_session()),
        "copilot": ("lines", copilot_events()),
        "gemini": ("lines", gemini_session()),
        "atif": ("document", atif_trajectory()),
        "openhands": ("document", openhands_events()),
        "otel-genai": ("lines", otel[:2]),
        "openinference": ("lines", [json.loads(line) for line in spans[:3]]),
    }


SAMPLES = _samples()
HOSTILE: list[Any] = [
    None, 0, -1, 1.5, float("nan"), float("inf"), True, "", "x", "user", "assistant",
    "agent", "TOOL", [], [None], [1], {}, {"a": 1}, [{}], 10**30,
]  # fmt: skip
REMOVED = object()


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _nodes(item, (*path, index))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if not rest and new is REMOVED:
            del copy[head]
        else:
            copy[head] = _replaced(copy[head], rest, new)
        return copy
    items = list(value)
    if not rest and new is REMOVED:
        del items[head]
    else:
        items[head] = _replaced(items[head], rest, new)
    return items


@st.composite
def _mutations(draw: st.DrawFn) -> tuple[str, str, Any]:
    name = draw(st.sampled_from(sorted(SAMPLES)))
    kind, value = SAMPLES[name]
    path = draw(st.sampled_from(_nodes(value)[1:]))
    new = draw(st.sampled_from([*HOSTILE, REMOVED]))
    return name, kind, _replaced(value, path, new)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutation=_mutations())
def test_any_one_field_of_any_format_changed_is_read_or_reported(
    tmp_path_factory: pytest.TempPathFactory, mutation: tuple[str, str, Any]
) -> None:
    """One field of a valid trace of any format replaced by a value of another kind (or
    removed): the replay does not raise (no reader reaches into a field it has not
    checked, now that only ``TraceShapeError`` is caught), and the file is never passed
    over in silence: it gives runs, problems naming it, or a note that it held no calls."""
    name, kind, value = mutation
    directory = tmp_path_factory.mktemp("mutated")
    path = (lines if kind == "lines" else document)(directory / f"{name}.trace", value)
    report = replay([str(path)])
    assert all(problem.path == str(path) for problem in report.problems)
    assert report.runs or report.problems_total or report.without_calls_total
