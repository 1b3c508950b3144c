"""The native replay of events JSONL (``tripwire.replay.events_core``, ``rust/events_replay.rs``)
against the per-call replay (``Fleet`` fed by ``formats.files.Reader``), which is the
reference: the same files through both give byte-identical reports and ``--json``: the
generated fleet, hand-made files with every corner of the events format the native path
reads (interleaved runs, call ids, arguments and results of every kind, runs finished early
and coming back), random files, and the files it leaves to the per-call path whole.

Native only (the reference backend has no native core): skipped on the reference build."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
import tripwire
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_arrow_core import SETTINGS, spy_native  # SETTINGS: default, hash-only, policies
from test_replay_fleet import cli, fleet_generator
from tripwire.replay import Settings, events_core, render, replay, simulate, to_json
from tripwire.replay.formats import files as files_module

pytestmark = pytest.mark.skipif(
    tripwire.IMPLEMENTATION != "native", reason="the events core is part of the native build"
)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the native path replayed."""
    return spy_native(monkeypatch, events_core, "replay_events")


def both(monkeypatch: pytest.MonkeyPatch, paths: list[str], **kwargs: Any) -> tuple[Any, Any]:
    """The report of ``paths`` natively and by the per-call path: JSON data, the runs as
    objects, the tools in the order they were made, the models, the runs split."""
    outcomes = []
    for core in ("native", "python"):
        monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", core)
        report = replay(paths, **kwargs)
        try:
            outcomes.append(
                (
                    to_json(report),
                    [repr(r) for r in report.runs],
                    list(report.tools.items()),
                    report.models,
                    report.split_runs,
                )
            )
        finally:
            report.runs.close()
    monkeypatch.delenv("TRIPWIRE_REPLAY_CORE")
    return outcomes[0], outcomes[1]


def lines(path: Path, records: list[Any], *, raw: str = "") -> str:
    """Writes records as JSONL (a ``str`` record is written as it is: a line of any text)."""
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    path.write_text(text + raw, encoding="utf-8")
    return str(path)


def test_the_generated_fleet_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    taken: list[str],
) -> None:  # fmt: skip
    paths = fleet_generator().write(tmp_path / "fleet", 6000, shards=2, layouts=("jsonl",))
    files = [str(p) for p in paths["jsonl"]]
    outputs = []
    for core in ("native", "python"):
        monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", core)
        text = cli(["replay", "--jobs", "1", "--limit", "0", *files], capsys)
        data = cli(["replay", "--jobs", "1", "--json", *files], capsys)
        outputs.append((text, data))
    native, reference = outputs
    assert native == reference
    assert taken == files * 2  # natively, both times
    summary = json.loads(native[1][1])["summary"]
    assert summary["stopped"] > 10 and summary["steps"] == 6000


def test_jobs_over_the_native_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tripwire.replay import parallel

    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    paths = fleet_generator().write(tmp_path / "fleet", 4000, shards=3, layouts=("jsonl",))
    files = [str(p) for p in paths["jsonl"]]
    one = cli(["replay", "--jobs", "1", "--json", *files], capsys)
    two = cli(["replay", "--jobs", "2", "--json", *files], capsys)
    monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", "python")
    reference = cli(["replay", "--jobs", "1", "--json", *files], capsys)
    assert one == two == reference


# -- the corners ------------------------------------------------------------------------------


def corners() -> list[Any]:
    deep_text = "[" * 300 + "]" * 300
    deep_value: Any = []
    for _ in range(150):
        deep_value = [deep_value]
    out: list[Any] = [
        # interleaved runs, results of every kind on their lines
        {
            "run": "a",
            "tool": "get_logs",
            "args": '{"since":"15m"}',
            "result": '{"items":[]}',
            "model": "gpt-4o",
        },
        {"run": "b", "tool": "search", "args": {"q": "x", "page": 1}, "result": "plain text"},
        {"run": "a", "tool": "get_logs", "args": '{"since": "15m"}', "result": {"items": []}},
        {"run": "b", "tool": "search", "args": {"page": 1, "q": "x"}, "result": None},
        "",
        "   ",
        {
            "run": "a",
            "tool": "get_logs",
            "args": '{"since":"15m", "request_id": 7}',
            "result": '{"items":[]}',
            "model": "claude-3-haiku",
        },
        {"run": "b", "tool": "search", "args": {"q": "x", "page": 1}, "result": [1, 2]},
        {"run": "a", "tool": "get_logs", "args": '{"since":"15m"}', "result": "late"},
        {"run": "b", "tool": "search", "args": {"q": "x", "page": 1}, "result": 3.5},
        # call ids: given, numbers, empty, reused, without results (kept for nothing here)
        {
            "run": "c",
            "tool": "search",
            "args": "{not json",
            "call_id": "c1",
            "result": "Error: timed out",
        },
        {"run": "c", "tool": "search", "args": "{not json", "call_id": 7, "result": "Error: x"},
        {
            "run": "c",
            "tool": "search",
            "args": None,
            "call_id": "",
            "result": '{"type":"text","text":"[]"}',
        },
        {"run": "c", "tool": "search", "call_id": "c3", "result": [{"type": "text", "text": "n"}]},
        {
            "run": "c",
            "tool": "search",
            "call_id": "c4",
            "result": '{"t\\u0079pe":"tool_result","content":"x"}',
        },
        {"run": "c", "tool": "search", "arguments": {"q": 1}, "call_id": "c5"},
        {"run": "c", "tool": "search", "input": {"q": 1}, "call_id": "c5", "result": {}},
        {
            "run": "c",
            "tool": "search",
            "args": None,
            "arguments": None,
            "input": {"q": 2},
            "call_id": True,
            "result": {"type": "tool_result", "content": "x", "is_error": True},
        },
        {"run": "c", "tool": "search", "args": '"text"', "call_id": 1.5, "result": "null"},
        {"run": "c", "tool": "search", "args": [1, 2], "result": '"x"'},
        {"run": "c", "tool": "search", "args": 5, "result": ' {"a": 1} '},
        {"run": "c", "tool": "search", "args": True, "result": "[]"},
        # text nested deeper than the guard keys (keyed by its text), and values nearly so
        {"run": "c0", "tool": "search", "args": deep_text, "call_id": "c2", "result": "[]"},
        {"run": "c0", "tool": "search", "args": {"q": 1}, "result": deep_text},
        {"run": "c0", "tool": "search", "args": {"deep": deep_value}, "result": "[]"},
        # runs named by run_id, by numbers, by the file; unknown members; duplicate members
        {"run_id": "d", "tool": "read_file", "args": {"p": 1}, "result": {"x": 1}, "ts": 1},
        {"run": None, "run_id": "d", "tool": "write_file", "args": {"p": 1}, "result": "ok"},
        '{"run": "z", "run": "d", "tool": "read_file", "args": {"p": 1}, "result": {"x": 1}}',
        {"run": "d", "step": 4, "tool": "write_file", "args": {"p": 1}, "result": {"ok": True}},
        {"run": 12, "tool": "job_status", "args": {"job": 1}, "result": {"state": "running"}},
        {"run": -0, "tool": "job_status", "args": {"job": 1}, "result": {"state": "running"}},
        {"tool": "job_status", "args": {"job": 1}, "result": {"state": "done"}, "model": 5},
        {"tool": "job_status", "args": {"job": 1}, "result": {"state": "done"}, "model": ""},
        # whitespace-keeping tools, text that only the reference keys, escapes, non-ASCII
        {
            "run": "e",
            "tool": "edit_file",
            "args": '{"path":"a.py","text":"x  =  1\\n"}',
            "result": "{}",
        },
        {
            "run": "e",
            "tool": "edit_file",
            "args": {"path": "a.py", "text": "x = 1\n"},
            "result": "{}",
        },
        {
            "run": "e",
            "tool": "edit_file",
            "args": {"path": "a.py", "text": "x = 1\n"},
            "result": "{}",
        },
        {
            "run": "e",
            "tool": "edit_file",
            "args": '{"path":"a.py","text":"x = 1\\n"}',
            "result": "{}",
        },
        {"run": "h", "tool": "lookup", "args": '{"q":"ü  x"}', "result": '{"r":"☃"}'},
        {"run": "h", "tool": "lookup", "args": {"q": "ü  x"}, "result": {"r": "☃"}},
        {"run": "h", "tool": "lookup", "args": '{"q":"ü x"}', "result": '{"r":"\\u2603"}'},
        {"run": "h", "tool": "lookup", "args": '{"q":"\\u00fc x"}', "result": '{"r":"☃"}'},
        {
            "run": "h\u2603",
            "tool": "t\u00fc",
            "args": {"q": "\U0001f600", "n": 1e400},
            "result": "\U0001f600",
        },
        {"run": "g", "tool": "get_logs", "args": "{\ufeff}"},
        {"run": "g", "tool": "get_logs", "args": "{\ufeff}"},
        {"run": "g", "tool": "get_logs", "args": "{\ufeff}", "usage": None, "turn": None},
    ]
    out += [{"run": "f", "tool": "shell", "args": {"cmd": "ls"}, "result": "a b"}] * 4
    out += [{"run": "i", "tool": "job_status", "args": '{"job":1}',
             "result": '{"state":"running"}'}] * 24  # fmt: skip
    return out


def test_corners_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    path = lines(tmp_path / "corners.jsonl", corners(), raw='{"run": "end", "tool": "t"}')
    for chosen in SETTINGS:
        native, reference = both(monkeypatch, [path], settings=chosen)
        assert native == reference, chosen
    assert len(taken) == len(SETTINGS)
    data = native[0]
    # Nothing the native path reads is bad input; broken JSON text is keyed by its text.
    assert data["problems_total"] == 0
    assert sum(r["invalid_arguments"] for r in data["runs"]) > 0
    assert {r["run"] for r in data["runs"]} >= {"a", "b", "c", "d", "12", "0", path, "end"}


@pytest.mark.parametrize("evicted", [1, 3, 50])
def test_runs_finished_early_come_back_as_parts(
    evicted: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    monkeypatch.setattr(simulate, "MAX_OPEN_RUNS", 3)
    monkeypatch.setattr(simulate, "MAX_EVICTED", evicted)
    records = []
    for step in range(60):
        # Six runs, three open at a time: each comes back after the others pushed it out.
        run = f"r{(step * 5) % 6}"
        records.append({"run": run, "tool": "get_logs", "args": {"p": step % 2},
                        "result": {"n": step % 3}, "call_id": f"{run}-{step % 4}"})  # fmt: skip
        if step % 5 == 0:
            records.append({"run": run, "tool": "get_logs", "args": {"p": 1}, "result": {}})
    path = lines(tmp_path / "split.jsonl", records)
    native, reference = both(monkeypatch, [path])
    assert native == reference and taken == [path]
    if evicted == 50:
        assert native[4] > 0  # some runs were split
        assert max(r["part"] for r in native[0]["runs"]) > 2


# -- files left to the per-call path ------------------------------------------------------------

GOOD = {"run": "a", "tool": "get_logs", "args": {"since": "15m"}, "result": {"items": []}}


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"run": "a", "tool": "x"',
        '{"run": "a", "tool": "x"} {}',
        '{"run": "a", "tool": "x", "args": "tab\there"}',
        '{"run": "a", "tool": "x", "args": "\\x"}',
        '{"run": "a", "tool": "x", "args": 01}',
        '{"run": "a", "tool": "x", "args": [1,]}',
        '\ufeff{"run": "a", "tool": "x"}',
        "\u3000 \u00a0",
        '{"run": "é", "tool": "x", "args": nul}',
    ],
)
def test_a_line_that_is_not_json_is_reported_natively(
    bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    path = lines(tmp_path / "bad.jsonl", [GOOD, GOOD, bad, GOOD])
    native, reference = both(monkeypatch, [path])
    assert native == reference and taken == [path]
    assert native[0]["problems_total"] == (0 if bad.strip() == "" else 1)


def test_a_line_that_is_not_utf8_is_reported_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    path = tmp_path / "latin1.jsonl"
    good = (json.dumps(GOOD) + "\n").encode()
    path.write_bytes(good + b'{"run": "a", "tool": "caf\xe9"}\n' + good * 3 + b"\xff\n")
    native, reference = both(monkeypatch, [str(path)])
    assert native == reference and taken == [str(path)]
    assert [p["message"] for p in native[0]["problems"]] == [
        "not UTF-8 text (byte 25); line skipped",
        "not UTF-8 text (byte 0); line skipped",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "[1, 2]",
        '"a string"',
        {"run": "a", "tool": ""},
        {"run": "a", "tool": 3},
        {"run": "", "tool": "x"},
        {"run": True, "tool": "x"},
        {"run": None, "run_id": None, "tool": "x"},
        {"run": "a", "usage": {"input_tokens": 3}},
        {"run": "a", "tool": "x", "turn": 1},
        {"run": "a", "result_of": None, "result": "x"},
        {"run": "a", "result_of": 1.5, "result": "x"},
        {"run": "a", "result_of": "c1"},
        {"run": "a", "event": "budget"},
        {"run": "a", "tool": "x", "args": "\ud800"},
        '{"run": "a", "t\\u006fol": "x"}',
        {"run": "a", "tool": "x", "args": {"n": int("9" * 700)}},
        '{"run": "a", "tool": "x", "args": {"n": 1}}\u00a0',
    ],
)
def test_a_line_outside_the_subset_sends_the_file_to_the_per_call_path(
    bad: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    path = lines(tmp_path / "bad.jsonl", [GOOD, GOOD, bad, GOOD])
    native, reference = both(monkeypatch, [path])
    assert native == reference and taken == []


@pytest.mark.parametrize("keep_runs", [True, False])
def test_a_file_given_up_late_leaves_nothing_of_what_was_replayed(
    keep_runs: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    """The native replay gives a file up at its first line outside the subset, after
    thousands of runs went to the fleet aside: thrown away, the per-call path replays the
    file whole, and the report is as if the native path had never been tried."""
    given: list[int] = []
    sink = events_core._Sink.__call__

    def counting(self: Any, runs: list[Any], *rest: Any) -> None:
        given.append(len(runs))
        sink(self, runs, *rest)

    monkeypatch.setattr(events_core._Sink, "__call__", counting)
    monkeypatch.setattr(simulate, "MAX_OPEN_RUNS", 8)  # runs finish as they go
    records = [{**GOOD, "run": f"r{n % 3000}", "result": {"n": n // 3000}} for n in range(6000)]
    late = lines(tmp_path / "late.jsonl", [*records, {"run": "x", "tool": "t", "turn": 1}])
    fine = lines(tmp_path / "fine.jsonl", records[:50])
    paths = [fine, late, fine]
    if keep_runs:
        native, reference = both(monkeypatch, paths)
        assert native == reference
    else:  # the terminal report's runs, counted, not kept
        texts = []
        for core in ("native", "python"):
            monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", core)
            texts.append(render(replay(paths, keep_runs=False)))
        assert texts[0] == texts[1] and "6,101 runs" in texts[0]
    assert sum(given) > 2000  # the aside had them: runs of the late file, then given up
    assert taken == [fine, fine]


@pytest.mark.parametrize("pending", [1, simulate.MAX_PENDING])
def test_results_on_lines_of_their_own_byte_identical(
    pending: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    """``{"run", "result_of": ID, "result"}`` gives an earlier call's result: linked to the
    newest call waiting under that id, progress or not; to no call (unlinked), to a run not
    open (an orphan: before its first call, or finished early), after the stop (ignored);
    past ``MAX_PENDING`` calls waiting, the oldest forgotten."""
    monkeypatch.setattr(simulate, "MAX_OPEN_RUNS", 2)
    monkeypatch.setattr(simulate, "MAX_PENDING", pending)

    def poll(run: str, n: int, call_id: Any) -> dict[str, Any]:
        return {"run": run, "tool": "job_status", "args": {"job": 1}, "call_id": call_id}

    records: list[Any] = [{"run": "early", "result_of": "x", "result": "{}"}]
    for n in range(6):  # progress: the job advances, no loop
        records += [poll("p", n, f"c{n}"), {"run": "p", "result_of": f"c{n}", "result": {"n": n}}]
    for n in range(6):  # the same answer every time: stopped
        records += [poll("s", n, 7), {"run": "s", "result_of": 7, "result": '{"state":"x"}'}]
    records += [
        poll("u", 0, "same"), poll("u", 1, "same"),  # one id twice: the newer call's result
        {"run": "u", "result_of": "same", "result": "{}"},
        {"run": "u", "result_of": "same", "result": "{}"},  # nothing waits: unlinked
        {"run": "u", "result_of": "", "result": None, "turn": 3, "usage": {"input_tokens": 1}},
        poll("u", 2, ""), {"run": "u", "result_of": "", "result": "Error: boom"},
        {"result_of": "c1", "result": "{}"},  # the file's run, never started
        poll("w", 0, "w0"), poll("w", 1, "w1"),  # w0 forgotten when one may wait
        {"run": "w", "result_of": "w0", "result": "{}"},
        {"run": "w", "result_of": "w1", "result": "{}"},
        poll("x", 0, "a"), poll("y", 0, "b"), poll("z", 0, "c"),  # x finished early
        {"run": "x", "result_of": "a", "result": "{}"},
        {"run": "z", "result_of": "c", "result": "{}"},
    ]  # fmt: skip
    path = lines(tmp_path / "results.jsonl", records)
    for chosen in SETTINGS:
        native, reference = both(monkeypatch, [path], settings=chosen)
        assert native == reference, chosen
    assert len(taken) == len(SETTINGS)
    summary = native[0]["summary"]
    assert summary["stopped"] >= 1 and summary["results_unlinked"] >= 4


def test_usage_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    """A call's line with its model call's ``usage`` (one call a turn): read by the
    reference's ``parse_usage``, priced with its cache reads and writes, the run's figures
    marked as usage, estimated, or mixed; a usage that is not counts reported and the turn
    estimated; counts too big for the native core leave the file to the per-call path."""
    anthropic = {"input_tokens": 1200, "output_tokens": 80, "cache_read_input_tokens": 9000,
                 "cache_creation_input_tokens": 300}  # fmt: skip
    openai = {"prompt_tokens": 5000, "completion_tokens": 40,
              "prompt_tokens_details": {"cached_tokens": 4096}}  # fmt: skip
    records: list[Any] = []
    for _ in range(8):  # usage on every line, the loop stopped
        records.append({**GOOD, "run": "u", "model": "claude-sonnet-4-5", "usage": anthropic})
    for n in range(5):  # usage on some lines: mixed
        usage = openai if n % 2 else None
        records.append({"run": "m", "tool": "read", "args": {"n": n}, "model": "gpt-4o",
                        "usage": usage, "result": {"n": n}})  # fmt: skip
    records += [
        {"run": "e", "tool": "read", "args": {"n": 1}, "usage": {"input_tokens": "many"}},
        {"run": "e", "tool": "read", "args": {"n": 2}, "usage": [1, 2]},
        {"run": "e", "tool": "read", "args": {"n": 3}, "usage": {"cached_tokens": 5}},
        {"run": "e", "tool": "read", "args": {"n": 4}, "usage": {"output_tokens": 2.5}},
        {"run": "e", "tool": "read", "args": {"n": 5}, "usage": {"input_tokens": 1e400}},
        {"run": "e", "tool": "read", "args": {"n": 6}, "usage": None, "turn": None},
    ]
    path = lines(tmp_path / "usage.jsonl", records)
    big = lines(tmp_path / "big.jsonl", [{**GOOD, "usage": {"input_tokens": 1 << 41}}] * 3)
    for chosen in SETTINGS:
        native, reference = both(monkeypatch, [path, big], settings=chosen)
        assert native == reference, chosen
    assert taken == [path] * len(SETTINGS)
    tokens = {r["run"]: r["tokens"] for r in native[0]["runs"]}
    assert (tokens["u"]["source"], tokens["m"]["source"]) == ("usage", "mixed")
    assert tokens["u"]["cached"] == 72000 and tokens["u"]["cache_write"] == 2400
    assert len(native[0]["problems"]) == 4  # the usages that are not counts


_COUNT = st.one_of(
    st.integers(0, 10**6), st.sampled_from([0, (1 << 40) - 1, 1 << 40, 10**30, -1, None, 2.5,
                                            "7", True, float("inf")]),
)  # fmt: skip
_USAGE_NAMES = ("prompt_tokens", "input_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens", "output_tokens", "completion_tokens",
                "cached_input_tokens", "cached_tokens", "service_tier", "total_tokens")  # fmt: skip
usage_value = st.one_of(
    st.dictionaries(
        st.sampled_from(_USAGE_NAMES),
        _COUNT,
        max_size=5,
    ).flatmap(
        lambda d: st.fixed_dictionaries(
            {},
            optional={
                "prompt_tokens_details": st.one_of(
                    st.fixed_dictionaries({}, optional={"cached_tokens": _COUNT,
                                                        "audio_tokens": _COUNT}),
                    st.just([1]),
                ),
                "cache_creation": st.just({"ephemeral_5m_input_tokens": 3, "x": "}{"}),
            },
        ).map(lambda extra: {**d, **extra})
    ),
    st.sampled_from([[], "usage", 5]),
)  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(usages=st.lists(usage_value, min_size=1, max_size=12))
def test_random_usages(
    usages: list[Any], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Usage objects of every shape: read natively where plain, by the reference else (or
    the file given up past the native core's bounds): the same report either way."""
    records = [{**GOOD, "args": {"n": n}, "usage": usage} for n, usage in enumerate(usages)]
    path = lines(tmp_path_factory.mktemp("usage") / "f.jsonl", records)
    native, reference = both(monkeypatch, [path])
    assert native == reference


def test_other_files_go_to_the_per_call_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    good = lines(tmp_path / "good.jsonl", [GOOD] * 4)
    zipped = tmp_path / "good.jsonl.gz"
    zipped.write_bytes(gzip.compress(Path(good).read_bytes()))
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + Path(good).read_bytes())
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(b'{"run": "a", "tool": "caf\xe9"}\n' + Path(good).read_bytes())
    bad_first = lines(tmp_path / "bad_first.jsonl", ["not json", GOOD, GOOD])
    empty = lines(tmp_path / "empty.jsonl", [])
    blank = lines(tmp_path / "blank.jsonl", ["", "  "])
    # A first line another format claims (an OpenInference span): not an events file.
    span = {"name": "t", "span_kind": "TOOL", "context": {"trace_id": "x", "span_id": "y"},
            "attributes": {"openinference": {"span": {"kind": "TOOL"}}}}  # fmt: skip
    other = lines(tmp_path / "other.jsonl", [span, GOOD])
    document = lines(tmp_path / "document.json", ["[", json.dumps(GOOD), "]"])
    paths = [str(bom), str(not_utf8), bad_first, empty, blank, other, document, good]
    native, reference = both(monkeypatch, paths)
    assert native == reference and taken == [good]


def test_gzip_is_read_natively_as_the_per_call_path_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    """A gzip file is decompressed natively, every member of it (``gzip.GzipFile``); one
    that is damaged (a bad checksum, cut short, garbage after it), holds a byte-order mark
    or another format, goes to the per-call path, which reports what it finds."""
    records = [{**GOOD, "run": f"r{n % 7}", "result": {"n": n % 3}} for n in range(300)]
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    whole = gzip.compress(text)

    def write(name: str, data: bytes) -> str:
        path = tmp_path / name
        path.write_bytes(data)
        return str(path)

    fine = write("fine.jsonl.gz", whole)
    members = write("members.jsonl.gz", gzip.compress(text[:999]) + gzip.compress(text[999:]))
    bad_crc = bytearray(whole)
    bad_crc[-8] ^= 0xFF  # the CRC-32 in the trailer
    damaged = [
        write("crc.jsonl.gz", bytes(bad_crc)),
        write("cut.jsonl.gz", whole[: len(whole) // 2]),
        write("garbage.jsonl.gz", whole + b"garbage"),
        write("bom.jsonl.gz", gzip.compress(b"\xef\xbb\xbf" + text)),
        write("span.jsonl.gz", gzip.compress(b'{"resourceSpans": []}\n' + text)),
    ]
    native, reference = both(monkeypatch, [fine, members, *damaged])
    assert native == reference
    assert taken == [fine, members]
    assert native[0]["summary"]["steps"] >= 600
    # Progress is told in the file's own bytes, compressed ones (the per-call path's too),
    # and the lines' position in what they decompress to.
    from tripwire import _core

    told: list[int] = []
    core = _core.EventsReplay(
        Settings().guard(), observe=True, prices=lambda m: (3.0, 15.0, 0.3, 3.75),
        sink=lambda *batch: told.append(batch[3]), default_run="f", max_open=10,
        max_evicted=10, line_limit=1 << 20,
    )  # fmt: skip
    assert core.replay(fine) is None
    assert told[-1] == len(whole) and core.position == len(text)


def test_a_pipe_is_left_to_the_per_call_path(tmp_path: Path) -> None:
    """A path that is not a regular file (``<(...)``, a FIFO) is not even opened here: what
    a look at its first line read would be lost to the per-call path."""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert not events_core._first_line_is_events(str(fifo))  # would block, were it opened


def test_a_line_over_the_limit_goes_to_the_per_call_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    monkeypatch.setattr(files_module, "MAX_LINE_BYTES", 200)
    long = {"run": "a", "tool": "x", "args": {"p": "x" * 300}}
    path = lines(tmp_path / "long.jsonl", [GOOD, long, GOOD])
    fits = lines(tmp_path / "fits.jsonl", [GOOD, GOOD], raw=json.dumps(GOOD))  # no last newline
    native, reference = both(monkeypatch, [path, fits])
    assert native == reference and taken == [fits]


def test_calls_out_stdin_and_the_python_core_take_the_per_call_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    taken: list[str],
) -> None:  # fmt: skip
    path = lines(tmp_path / "good.jsonl", [GOOD] * 5)
    cli(["replay", "--calls-out", str(tmp_path / "calls.parquet"), path], capsys)
    monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", "python")
    cli(["replay", path], capsys)
    assert taken == []
    monkeypatch.delenv("TRIPWIRE_REPLAY_CORE")
    cli(["replay", path], capsys)
    assert taken == [path]


def test_the_core_says_why_it_did_not_replay(tmp_path: Path) -> None:
    from tripwire import _core

    seen: list[Any] = []

    def core() -> Any:
        return _core.EventsReplay(
            Settings().guard(), observe=True, prices=lambda m: (3.0, 15.0, 0.3, 3.75),
            sink=lambda *batch: seen.append(batch), default_run="f", max_open=10,
            max_evicted=10, line_limit=1 << 20,
        )  # fmt: skip

    bad = lines(tmp_path / "bad.jsonl", [GOOD, {"run": "a", "tool": "x", "turn": 2}])
    assert core().replay(bad) == "line 2: a line with a turn"
    assert core().replay(str(tmp_path / "missing.jsonl")).startswith("cannot read: ")
    assert core().replay(lines(tmp_path / "none.jsonl", ["", " "])) == "no calls"
    first = lines(tmp_path / "first.jsonl", ["not json", GOOD])
    assert core().replay(first) == "line 1: a line that is not a JSON object"
    assert seen == []
    once = core()
    assert once.replay(lines(tmp_path / "once.jsonl", [GOOD])) is None
    with pytest.raises(RuntimeError, match="one file once"):
        once.replay(bad)
    seen.clear()
    good = lines(tmp_path / "good.jsonl", [GOOD] * 4)
    replayer = core()
    assert replayer.replay(good) is None
    [(runs, problems, tools, position)] = seen
    assert problems == [] and tools == ["get_logs"] and position == Path(good).stat().st_size
    [(item, line, part)] = runs
    assert (item[0], line, part) == ("a", 1, 1) and item[4] is not None  # stopped
    assert (replayer.lines, replayer.turns) == (4, 4)


# -- random files ------------------------------------------------------------------------------

_ARGS = ('{"q":1}', '{"q":2}', '{"q": 1}', '{"q":"a  b"}', "{bad", None, {}, {"q": 1},
         {"q": None}, {"q": "a  b"}, [1], "MISSING")  # fmt: skip
_RESULTS = (None, "{}", "[]", '{"n":1}', '{"n":2}', "Error: rate limit", "plain", '"x"',
            '{"type":"text","text":"a"}', '{"items":[]}', "null", {}, {"n": 1}, {"n": 2},
            [], [{"type": "text", "text": "a"}], 0, "MISSING")  # fmt: skip
record = st.tuples(
    st.sampled_from(("r1", "r2", "r3", 4, "MISSING")),
    st.sampled_from(("get_logs", "edit_file", "job_status", "write_file", "bash")),
    st.sampled_from(("args", "arguments", "input")),
    st.sampled_from(_ARGS),
    st.sampled_from(_RESULTS),
    st.sampled_from(("MISSING", "i1", "i2", 3, None)),
    st.sampled_from(("MISSING", "gpt-4o-mini", "o3")),
)


# Lines the per-call path reports and skips (or skips silently): read natively too.
_BAD = ("not json", '{"run": "r1", "tool": "bash"', "{} {}", "\u3000", "", '{"a": "\\q"}',
        '{"run": "r2", "tool": "x", "args": [1,]}', "\ufeff{}")  # fmt: skip
# An earlier call's result on a line of its own: the ids of the calls above, one no call
# has, and runs open, not yet started, or the file's.
result_line = st.tuples(
    st.sampled_from(("r1", "r2", "r5", "MISSING")),
    st.sampled_from(("i1", "i2", 3, "", "nope")),
    st.sampled_from([r for r in _RESULTS if r != "MISSING"]),
).map(lambda t: {k: v for k, v in zip(("run", "result_of", "result"), t, strict=True)
                   if v != "MISSING"})  # fmt: skip
line = st.one_of(record, result_line, st.sampled_from(_BAD))


def _record(fields: tuple[Any, ...] | str | dict[str, Any]) -> dict[str, Any] | str:
    if isinstance(fields, (str, dict)):
        return fields
    run, tool, key, args, result, call_id, model = fields
    made: dict[str, Any] = {"run": run, "tool": tool, key: args, "result": result,
                            "call_id": call_id, "model": model}  # fmt: skip
    return {k: v for k, v in made.items() if v != "MISSING"}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.tuples(record, st.lists(line, max_size=60)).map(lambda t: [t[0], *t[1]]),
    chosen=st.sampled_from(SETTINGS),
    open_runs=st.sampled_from((1, 2, simulate.MAX_OPEN_RUNS)),
)
def test_random_files(
    records: list[Any],
    chosen: Settings,
    open_runs: int,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    taken: list[str],
) -> None:
    monkeypatch.setattr(simulate, "MAX_OPEN_RUNS", open_runs)
    path = lines(tmp_path_factory.mktemp("random") / "f.jsonl", [_record(r) for r in records])
    before = len(taken)
    native, reference = both(monkeypatch, [path], settings=chosen)
    assert native == reference
    assert taken[before:] == [path]


# Text made of JSON's pieces, to find where the native scanner and ``json.loads`` disagree on
# what a line is: whatever it is, both paths must report the file alike.
_PIECES = st.sampled_from(
    ['{', '}', '[', ']', '"', ':', ',', '\\', 'u', '0', '1', '-', '.', 'e', '+', 'null', 'true',
     'NaN', '-Infinity', ' ', '\t', '\r', '\x01', '\x7f', 'é', '\u3000', '\ud800', 'a', '"x"',
     '"tool"', '"run"'],
)  # fmt: skip
fragment = st.lists(_PIECES, max_size=12).map("".join)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(
        st.one_of(
            fragment,
            fragment.map(lambda f: '{"run": "r", "tool": "t", "args": ' + f + "}"),
            fragment.map(lambda f: '{"tool": "t", "result": "' + f + '"}'),
        ),
        max_size=6,
    )
)
def test_lines_of_json_pieces(
    texts: list[str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path_factory.mktemp("pieces") / "f.jsonl"
    body = "".join(text + "\n" for text in [json.dumps(GOOD), *texts])
    path.write_bytes(body.encode("utf-8", "surrogatepass"))
    native, reference = both(monkeypatch, [str(path)])
    assert native == reference
