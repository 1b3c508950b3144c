"""``tripwire replay`` at fleet scale: OpenTelemetry GenAI and OpenInference spans, tables of
calls from Parquet and Arrow streams, ``--jobs``, ``--out`` / ``--calls-out``, and tables that
are broken in the ways exports break.

The span fixtures are faithful reductions written from the specifications (cited in
``tests/fixtures/fleet/README.md``); tables are written here with pyarrow; the fleet in every
layout comes from the bench's generator (``benches/fleet.py``)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tripwire.cli import main
from tripwire.replay import Settings, replay, to_json
from tripwire.replay.formats import files as files_module

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "fleet"
OTEL = FIXTURES / "otel_genai.jsonl"
PHOENIX = FIXTURES / "openinference_phoenix.jsonl"
VERDICT = ("run", "steps", "nudges", "nudge_step", "stop_step", "reason", "tool", "steps_saved")


def fleet_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_bench", ROOT / "benches" / "fleet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_bench"] = module
    spec.loader.exec_module(module)
    return module


def runs_of(paths: list[Any], **kwargs: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    report = replay(paths, Settings(), **kwargs)
    try:
        data = to_json(report)
    finally:
        report.runs.close()
    return data, {run["run"]: run for run in data["runs"]}


def verdicts(runs: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {name: tuple(run[k] for k in VERDICT) for name, run in runs.items()}


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


# -- OpenTelemetry GenAI spans ------------------------------------------------------------------


def test_otel_genai_spans_grouped_by_conversation_else_trace() -> None:
    _, runs = runs_of([str(OTEL)])
    assert set(runs) == {"conv-stuck", "0af7651916cd43dd8448eb211c80319c", "conv-no-results"}
    stuck = runs["conv-stuck"]
    # Results observed (issue 25): nudged at the 2nd identical call, stopped at the 4th.
    assert (stuck["nudge_step"], stuck["stop_step"], stuck["reason"], stuck["tool"]) == (
        2, 4, "loop_detected", "search_flights",
    )  # fmt: skip
    assert stuck["steps"] == 5 and stuck["results"] == 3
    # Ordered by start time, not by the order spans were exported: the 4th call (by start
    # time) is the span on line 1.
    assert stuck["stop_location"] == f"{OTEL}:1"
    assert stuck["format"] == "otel-genai"
    # No conversation id: the trace is the run. Three cities and a failed call: no loop.
    healthy = runs["0af7651916cd43dd8448eb211c80319c"]
    assert (healthy["steps"], healthy["stop_step"], healthy["results"]) == (4, None, 4)


def test_otel_spans_without_the_opt_in_attributes() -> None:
    data, runs = runs_of([str(OTEL)])
    # Without results the guard compares keys alone (as --hash-only): stopped at the 3rd.
    no_results = runs["conv-no-results"]
    assert (no_results["stop_step"], no_results["results"]) == (3, 0)
    # Without arguments a call cannot be compared: skipped and counted, not bad input.
    assert "conv-no-arguments" not in runs
    (file,) = data["files"]
    assert file["unknown_records"] == {
        "otel-genai:tool span without arguments (opt-in: not recorded)": 1
    }
    assert data["problems_total"] == 0


def test_otel_spans_other_than_tools_are_ignored(tmp_path: Path) -> None:
    chat = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "ab" * 16,
                                "spanId": "cd" * 8,
                                "name": "chat gpt-4o",
                                "startTimeUnixNano": "1",
                                "attributes": [
                                    {
                                        "key": "gen_ai.operation.name",
                                        "value": {"stringValue": "chat"},
                                    }
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps(chat) + "\n")
    data, runs = runs_of([str(path)])
    assert runs == {} and data["problems_total"] == 0
    assert data["without_calls"][0]["why"] == "otel-genai records, no tool calls"


# -- OpenInference spans ------------------------------------------------------------------------


def test_openinference_spans_as_phoenix_exports_them() -> None:
    data, runs = runs_of([str(PHOENIX)])
    assert set(runs) == {"sess-stuck", "trace-2"}
    stuck = runs["sess-stuck"]
    assert (stuck["nudge_step"], stuck["stop_step"], stuck["reason"]) == (2, 4, "loop_detected")
    assert stuck["format"] == "openinference"
    # Flat dotted attributes, grouped by trace: three orders, no loop.
    assert (runs["trace-2"]["steps"], runs["trace-2"]["stop_step"]) == (3, None)
    assert data["problems_total"] == 0


# -- tables of calls ----------------------------------------------------------------------------


def _pyarrow() -> Any:
    return pytest.importorskip("pyarrow", reason="pyarrow (tripwire[parquet]) not installed")


def stuck_table(pa: Any, names: dict[str, str] | None = None) -> Any:
    names = names or {}
    rows: dict[str, list[Any]] = {
        "run": ["a", "a", "a", "a", "a", "b", "b", "b"],
        "step": [1, 2, 3, 4, 5, 1, 2, 3],
        "tool": ["get_logs"] * 5 + ["read", "read", "write"],
        "arguments": ['{"since":"15m"}'] * 5 + ['{"p":1}', '{"p":2}', '{"p":1}'],
        "result": ["[]"] * 5 + ["one", "two", None],
        "error": [None] * 7 + ["disk full"],
        "turn": [1, 2, 3, 4, 5, 1, 1, 2],
        "usage": [{"input_tokens": 1000, "output_tokens": 10} for _ in range(8)],
        "label": [0.0, None, None, None, None, 1.0, None, None],
    }
    return pa.table({names.get(k, k): v for k, v in rows.items()})


def test_parquet_table_of_calls(tmp_path: Path) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    path = tmp_path / "calls.parquet"
    pq.write_table(stuck_table(pa), path)
    data, runs = runs_of([str(path)])
    a, b = runs["a"], runs["b"]
    assert (a["nudge_step"], a["stop_step"], a["reason"], a["reward"]) == (
        2,
        4,
        "loop_detected",
        0.0,
    )
    assert a["stop_location"] == f"{path} (row 4)"
    assert a["tokens"]["source"] == "usage" and a["tokens"]["input"] == 5000
    # Rows 1 and 2 of run b are one model call's two calls (one turn).
    assert (b["steps"], b["model_calls"], b["stop_step"], b["reward"]) == (3, 2, None, 1.0)
    assert data["files"][0]["formats"] == ["table"]
    assert data["summary"]["outcomes"]["labelled"] == 2


def test_dictionary_encoded_columns(tmp_path: Path) -> None:
    """pandas categoricals come as dictionary-encoded columns: read as their values."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    table = stuck_table(pa)
    for name in ("run", "tool"):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, table.column(name).dictionary_encode())
    path = tmp_path / "categorical.parquet"
    pq.write_table(table, path)
    _, runs = runs_of([str(path)])
    assert {name: run["stop_step"] for name, run in runs.items()} == {"a": 4, "b": None}


def test_column_mapping_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    path = tmp_path / "langsmith.parquet"
    pq.write_table(
        stuck_table(pa, {"run": "session_id", "tool": "name", "arguments": "inputs"}), path
    )
    code, out, err = cli(["replay", "--json", str(path)], capsys)
    assert code == 4 and "column 'run' missing (has: session_id, step, name" in err
    args = ["replay", "--json", "--column", "run=session_id", "--column", "tool=name"]
    code, out, err = cli([*args, "--column", "arguments=inputs", str(path)], capsys)
    assert code == 0, err
    assert {run["run"]: run["stop_step"] for run in json.loads(out)["runs"]} == {"a": 4, "b": None}
    code, _, err = cli(["replay", "--column", "nonsense=x", str(path)], capsys)
    assert code == 2 and "--column 'nonsense=x': expected NAME=THEIRS" in err


class _CapsuleOnly:
    """A producer with nothing but the Arrow PyCapsule stream interface (as polars' and
    DuckDB's results have): the replay must not need to know its type."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._table.__arrow_c_stream__(requested_schema)


def test_arrow_stream_through_the_pycapsule_interface(tmp_path: Path) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    table = stuck_table(pa)
    path = tmp_path / "calls.parquet"
    pq.write_table(table, path)
    _, from_file = runs_of([str(path)])
    _, from_stream = runs_of([_CapsuleOnly(table)])
    assert verdicts(from_stream) == verdicts(from_file)


# -- the same fleet from every layout, and --jobs -----------------------------------------------


def test_every_layout_replays_to_the_same_verdicts(tmp_path: Path) -> None:
    _pyarrow()
    fleet = fleet_generator()
    paths = fleet.write(tmp_path, 2500, shards=2)
    results = {}
    for layout, files in paths.items():
        data, runs = runs_of([str(p) for p in files])
        assert data["problems_total"] == 0, data["problems"]
        results[layout] = verdicts(runs)
    first = results["jsonl"]
    assert len(first) > 50 and any(v[4] is not None for v in first.values())
    for layout, found in results.items():
        assert found == first, layout


def test_the_generator_is_deterministic(tmp_path: Path) -> None:
    fleet = fleet_generator()
    one = fleet.write(tmp_path / "one", 500, layouts=("jsonl", "otlp", "openinference"))
    two = fleet.write(tmp_path / "two", 500, layouts=("jsonl", "otlp", "openinference"))
    for layout in one:
        assert one[layout][0].read_bytes() == two[layout][0].read_bytes()


@pytest.fixture
def workers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """--jobs uses its workers however small the input; the files they replayed, listed."""
    from tripwire.replay import parallel

    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    absorbed: list[str] = []
    absorb = parallel._absorb

    def spy(fleet: Any, outcome: Any) -> None:
        absorbed.append(outcome.stats.path)
        absorb(fleet, outcome)

    monkeypatch.setattr(parallel, "_absorb", spy)
    return absorbed


def test_small_input_is_replayed_without_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Starting the workers costs more than a few files are worth; a Parquet file counts
    # what it would decode to, roughly, so the same fleet is about as big in either layout.
    from tripwire.replay import parallel

    absorbed: list[str] = []
    absorb = parallel._absorb
    monkeypatch.setattr(
        parallel, "_absorb", lambda f, o: (absorbed.append(o.stats.path), absorb(f, o))
    )
    written = fleet_generator().write(tmp_path, 3000, shards=3, layouts=("jsonl", "parquet"))
    for layout in ("jsonl", "parquet"):
        paths = [str(p) for p in written[layout]]
        assert parallel._size(paths) < parallel.MIN_BYTES
        cli(["replay", "--jobs", "2", *paths], capsys)
        assert absorbed == []
    jsonl, parquet = (parallel._size(map(str, written[k])) for k in ("jsonl", "parquet"))
    assert 0.5 < parquet / jsonl < 1.5  # both as text
    zipped = []
    for path in written["jsonl"]:
        zipped.append(tmp_path / f"{path.name}.gz")
        zipped[-1].write_bytes(gzip.compress(path.read_bytes()))
    assert 0.5 < parallel._size(map(str, zipped)) / jsonl < 2.5  # gzip counts as text too
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    cli(["replay", "--jobs", "2", *map(str, written["parquet"])], capsys)
    assert len(absorbed) == 3


def test_jobs_output_is_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: list[str]
) -> None:
    fleet = fleet_generator()
    fleet.write(tmp_path / "fleet", 3000, shards=3, layouts=("jsonl",))
    broken = tmp_path / "fleet" / "zz-broken.jsonl"
    broken.write_text('{"run": "x", "tool": "t", "args": {}}\nnot json\n')
    paths = [str(tmp_path / "fleet"), str(OTEL), str(PHOENIX), str(ROOT / "examples")]
    outputs = []
    for jobs in ("1", "2"):
        page = tmp_path / f"page{jobs}.html"
        text = cli(["replay", "--jobs", jobs, "--limit", "0", *paths], capsys)
        as_json = cli(["replay", "--jobs", jobs, "--json", "--html", str(page), *paths], capsys)
        # The default table: its runs chosen as they finish, the others counted, not kept.
        table = [cli(["replay", "--jobs", jobs, "--limit", n, *paths], capsys) for n in "13"]
        outputs.append((text, as_json, page.read_bytes(), table))
    assert outputs[0] == outputs[1]
    assert len(workers) == 4 * 7  # every file, by the workers, in each --jobs 2 run
    (code, out, err), _, _, _ = outputs[0]
    assert code == 4 and "zz-broken.jsonl:2: not JSON" in err
    assert "run-0000001" in out


@pytest.mark.usefixtures("workers")
def test_jobs_over_parquet_with_results_as_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers read Parquet while the parent writes it (--calls-out): the same tables."""
    _pyarrow()
    import pyarrow.parquet as pq

    fleet = fleet_generator()
    paths = fleet.write(tmp_path / "fleet", 2000, shards=3, layouts=("parquet",))["parquet"]
    tables = []
    for jobs in ("1", "2"):
        out, calls = tmp_path / f"runs{jobs}.parquet", tmp_path / f"calls{jobs}.parquet"
        args = ["replay", "--jobs", jobs, "--out", str(out), "--calls-out", str(calls)]
        code, text, err = cli([*args, *map(str, paths)], capsys)
        assert code == 0, err
        tables.append((text, pq.read_table(out), pq.read_table(calls)))
    (text1, runs1, calls1), (text2, runs2, calls2) = tables
    assert text1 == text2 and runs1.equals(runs2) and calls1.equals(calls2)
    assert calls1.num_rows == 2000


@pytest.mark.parametrize("limit", [1, 5, 20])
def test_the_terminal_report_of_runs_counted_is_that_of_runs_kept(
    tmp_path: Path, limit: int
) -> None:
    """The terminal report needs only the runs it lists: counted, not kept, the stops no one
    will see not described (the native cores skip their previews), the same report."""
    from tripwire.replay import render

    _pyarrow()
    layouts = ("jsonl", "parquet")
    written = fleet_generator().write(tmp_path, 3000, shards=2, layouts=layouts)
    for layout in layouts:
        paths = [str(p) for p in written[layout]]
        kept = replay(paths, limit=limit)
        counted = replay(paths, limit=limit, keep_runs=False)
        assert render(counted, limit=limit) == render(kept, limit=limit)
        assert counted.totals == kept.totals and counted.tools == kept.tools
        assert len(counted.runs) == len(kept.runs) > 50
        kept.runs.close()


# A fresh ``tripwire`` process: one thread until it imports pyarrow. It replays with workers
# however small the input, and tells on stderr how they were started.
_STARTED_BY = """
import sys
from tripwire.replay import parallel
from tripwire.cli import main

parallel.MIN_BYTES = 0
choose = parallel._start_method
methods = []
parallel._start_method = lambda: methods.append(choose()) or methods[-1]
code = main(sys.argv[1:])
sys.stdout.flush()
print("started by", methods, file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
@pytest.mark.parametrize("layout", ["jsonl", "parquet"])
def test_workers_forked_from_one_thread_replay_the_same(tmp_path: Path, layout: str) -> None:
    """Workers are forked while the process has one thread, started fresh once it has more
    (a forked child can hang on a lock held by a thread it lacks): the same report."""
    import subprocess

    if layout == "parquet":
        _pyarrow()
    paths = fleet_generator().write(tmp_path, 3000, shards=3, layouts=(layout,))[layout]

    def replay(jobs: str, *, threads: bool = False) -> tuple[str, str]:
        script = ("import pyarrow\n" if threads else "") + _STARTED_BY
        args = [sys.executable, "-c", script, "replay", "--jobs", jobs, "--json"]
        # Without the command's entry point, the libraries start their threads.
        ours = ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")
        env = {k: v for k, v in os.environ.items() if k not in ours}
        done = subprocess.run(
            [*args, *map(str, paths)], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr.splitlines()[-1]

    one, started = replay("1")
    assert started == "started by []"
    assert replay("2") == (one, "started by ['fork']")
    if layout == "parquet":  # importing pyarrow starts a thread
        assert replay("2", threads=True) == (one, "started by ['forkserver']")


# -- results as data ----------------------------------------------------------------------------


def test_out_and_calls_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    out, calls = tmp_path / "runs.parquet", tmp_path / "calls.parquet"
    code, text, err = cli(
        ["replay", "--json", "--out", str(out), "--calls-out", str(calls), str(OTEL), str(PHOENIX)],
        capsys,
    )
    assert code == 0, err
    report = json.loads(text)
    runs = pq.read_table(out).to_pylist()
    assert [r["run"] for r in runs] == [r["run"] for r in report["runs"]]
    for row, run in zip(runs, report["runs"], strict=True):
        assert (row["steps"], row["stop_step"], row["reason"], row["steps_saved"]) == (
            run["steps"], run["stop_step"], run["reason"], run["steps_saved"],
        )  # fmt: skip
    table = pq.read_table(calls)
    assert table.num_rows == sum(r["steps"] for r in report["runs"])
    stuck = [r for r in table.to_pylist() if r["run"] == "conv-stuck"]
    # Issue 25: the 2nd identical call is nudged; its result repeated, the 4th is stopped.
    assert [r["action"] for r in stuck] == ["allow", "nudge", "allow", "stop", "not_run"]
    assert [r["step"] for r in stuck] == [1, 2, 3, 4, None]
    assert pa.types.is_string(table.schema.field("tool").type)


def test_duckdb_reads_the_results_and_feeds_a_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real DuckDB: it queries --calls-out, and its query results (Arrow streams through
    the PyCapsule interface) are replayed as tables of calls."""
    _pyarrow()
    duckdb = pytest.importorskip("duckdb", reason="duckdb (in tripwire[test]) not installed")
    calls = tmp_path / "calls.parquet"
    code, _, err = cli(["replay", "--calls-out", str(calls), str(OTEL), str(PHOENIX)], capsys)
    assert code == 0, err
    stops = duckdb.sql(
        f"select tool, count(*) from '{calls}' where action = 'stop' group by tool order by tool"
    ).fetchall()
    assert stops == [("lookup_order", 1), ("read_file", 1), ("search_flights", 1)]
    relation = duckdb.sql(
        "select 'r' || (i // 5) as run, i % 5 + 1 as step, 'get_logs' as tool,"
        " '{\"since\":\"15m\"}' as arguments, '[]' as result from range(10) t(i) order by i"
    )
    _, runs = runs_of([relation])
    assert {name: run["stop_step"] for name, run in runs.items()} == {"r0": 4, "r1": 4}


def test_out_is_never_half_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _pyarrow()
    from tripwire.replay import simulate

    out, calls = tmp_path / "runs.parquet", tmp_path / "calls.parquet"

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(simulate.Fleet, "report", fail)
    code, _, err = cli(
        ["replay", "--jobs", "1", "--out", str(out), "--calls-out", str(calls), str(OTEL)], capsys
    )
    assert (code, err) == (130, "tripwire: interrupted\n")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    code, _, err = cli(
        ["replay", "--out", str(tmp_path / "no" / "such" / "dir.parquet"), str(OTEL)], capsys
    )
    assert code == 2 and "no/such/dir.parquet" in err


# -- broken exports -----------------------------------------------------------------------------


def test_parquet_with_a_missing_or_mistyped_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    missing = tmp_path / "missing.parquet"
    pq.write_table(stuck_table(pa).drop_columns(["arguments"]), missing)
    mistyped = tmp_path / "mistyped.parquet"
    table = stuck_table(pa)
    table = table.set_column(table.schema.get_field_index("tool"), "tool", pa.array(range(8)))
    pq.write_table(table, mistyped)
    good = tmp_path / "good.parquet"
    pq.write_table(stuck_table(pa), good)
    out = tmp_path / "runs.parquet"
    code, _, err = cli(
        ["replay", "--out", str(out), str(missing), str(mistyped), str(good)], capsys
    )
    assert code == 4
    assert f"{missing}: column 'arguments' missing (has: run, step, tool, result" in err
    assert f"{mistyped}: column 'tool' is int64, not text; file skipped" in err
    # The rest is replayed and written whole.
    assert [r["run"] for r in pq.read_table(out).to_pylist()] == ["a", "b"]


def test_parquet_with_a_corrupt_footer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    path = tmp_path / "corrupt.parquet"
    pq.write_table(stuck_table(pa), path)
    data = path.read_bytes()
    path.write_bytes(data[:-12] + b"\x00" * 8 + data[-4:])  # footer length and end mangled
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(data[: len(data) // 2])
    code, _, err = cli(["replay", str(path), str(truncated)], capsys)
    assert code == 4
    assert f"{path}: not a readable Parquet file (" in err
    assert f"{truncated}: not a readable Parquet file (" in err


def test_parquet_cell_over_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    # The limit is 64 MiB; lowered here so that the test writes kilobytes, not gigabytes
    # (docs/replay.md gives what a real 1 GB cell costs).
    monkeypatch.setattr(files_module, "MAX_LINE_BYTES", 4096)
    table = stuck_table(pa)
    huge = ['{"since":"15m"}'] * 8
    huge[6] = json.dumps({"p": "x" * 10_000})
    table = table.set_column(table.schema.get_field_index("arguments"), "arguments", pa.array(huge))
    path = tmp_path / "huge.parquet"
    pq.write_table(table, path)
    code, text, err = cli(["replay", "--json", str(path)], capsys)
    assert code == 4
    assert f"{path} (row 7): column 'arguments': cell longer than 4,096 bytes; row skipped" in err
    runs = {run["run"]: run for run in json.loads(text)["runs"]}
    assert runs["a"]["stop_step"] == 4 and runs["b"]["steps"] == 2


def test_parquet_row_group_too_big_to_decode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell of a gigabyte is not even decoded: its row group is skipped from the file's
    metadata, and the rows around it replayed."""
    pa = _pyarrow()
    import pyarrow.parquet as pq
    from tripwire.replay.formats import table as table_module

    monkeypatch.setattr(table_module, "MAX_ROW_GROUP_BYTES", 20_000)
    table = stuck_table(pa)
    huge = ['{"since":"15m"}'] * 8
    huge[5] = json.dumps({"p": "x" * 50_000})
    table = table.set_column(table.schema.get_field_index("arguments"), "arguments", pa.array(huge))
    path = tmp_path / "huge.parquet"
    pq.write_table(table, path, row_group_size=3)  # rows 1-3, 4-6, 7-8
    code, text, err = cli(["replay", "--json", str(path)], capsys)
    assert code == 4
    assert f"{path}: column 'arguments' holds " in err
    assert "in row group 1 (rows 4 to 6), over 20,000; row group skipped" in err
    runs = json.loads(text)["runs"]
    # Run a: rows 1-3, then (after the skipped rows) nothing more of it; run b: rows 7-8,
    # whose locations still count the skipped rows.
    assert [(r["run"], r["steps"]) for r in runs] == [("a", 3), ("b", 2)]
    assert runs[1]["line"] is None


def test_without_pyarrow_a_parquet_file_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq
    from tripwire.replay.formats import table as table_module

    path = tmp_path / "calls.parquet"
    pq.write_table(stuck_table(pa), path)
    monkeypatch.setattr(table_module, "_pyarrow", lambda: None)
    code, _, err = cli(["replay", "--jobs", "1", str(path)], capsys)
    assert code == 4 and "install tripwire[parquet]" in err
