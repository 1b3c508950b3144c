"""The native replay of tables of calls (``tripwire.replay.arrow_core``, ``rust/arrow_replay.rs``)
against the per-call replay (``Fleet`` with ``formats.table``), which is the reference: the
same tables through both give byte-identical reports, ``--json``, ``--out`` and HTML pages:
the generated fleet, every trace fixture written as a table, hand-made tables with every
corner the native path hands back to the guard's Python code, and random tables.

Native only (the reference backend has no native core): skipped on the reference build."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tripwire
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_replay_fleet import ROOT, cli, fleet_generator
from tripwire.replay import Settings, arrow_core, replay, to_json
from tripwire.replay.formats import Reader, Result, Turn
from tripwire.replay.formats import files as files_module

pytestmark = pytest.mark.skipif(
    tripwire.IMPLEMENTATION != "native", reason="the Arrow core is part of the native build"
)
pa = pytest.importorskip("pyarrow", reason="pyarrow (tripwire[parquet]) not installed")
pq = pytest.importorskip("pyarrow.parquet")


def spy_native(monkeypatch: pytest.MonkeyPatch, module: Any, *names: str) -> list[str]:
    """The paths of the files (or streams) that ``module``'s native replays ``names`` took
    (they return ``None`` for what they leave to the per-call path), as they take them."""
    found: list[str] = []
    for name in names:
        real = getattr(module, name)

        def spy(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            stats = _real(*args, **kwargs)
            if stats is not None:
                found.append(stats.path)
            return stats

        monkeypatch.setattr(module, name, spy)
    return found


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files and streams the native path replayed."""
    return spy_native(monkeypatch, arrow_core, "replay_parquet", "replay_stream")


def per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", "python")


def both(monkeypatch: pytest.MonkeyPatch, sources: Any, **kwargs: Any) -> tuple[Any, Any]:
    """The report of ``sources`` (paths, or a function making fresh streams) natively and by
    the per-call path: JSON data, the runs as objects, tools and models."""
    outcomes = []
    for core in ("native", "python"):
        monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", core)
        report = replay(sources() if callable(sources) else sources, **kwargs)
        try:
            outcomes.append(
                (to_json(report), [repr(r) for r in report.runs], report.tools, report.models)
            )
        finally:
            report.runs.close()
    monkeypatch.delenv("TRIPWIRE_REPLAY_CORE")
    return outcomes[0], outcomes[1]


def write(tmp_path: Path, name: str, table: Any, **kwargs: Any) -> str:
    path = tmp_path / name
    pq.write_table(table, path, **kwargs)
    return str(path)


def test_the_generated_fleet_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    taken: list[str],
) -> None:  # fmt: skip
    paths = fleet_generator().write(tmp_path / "fleet", 6000, shards=2, layouts=("parquet",))
    files = [str(p) for p in paths["parquet"]]
    outputs = []
    for core in ("native", "python"):
        monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", core)
        out, page = tmp_path / f"{core}.parquet", tmp_path / f"{core}.html"
        text = cli(["replay", "--jobs", "1", "--limit", "0", *files], capsys)
        data = cli(["replay", "--jobs", "1", "--json", "--out", str(out), *files], capsys)
        # The page names each step's tool, which it hears call by call: the per-call path.
        cli(["replay", "--jobs", "1", "--html", str(page), *files], capsys)
        outputs.append((text, data, page.read_text(), pq.read_table(out)))
    native, reference = outputs
    assert native[:3] == reference[:3]
    assert native[3].equals(reference[3])
    assert taken == files * 2  # natively, both times (text, and --json with --out)
    assert json.loads(native[1][1])["summary"]["stopped"] > 10


def test_jobs_over_the_native_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tripwire.replay import parallel

    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    paths = fleet_generator().write(tmp_path / "fleet", 4000, shards=3, layouts=("parquet",))
    files = [str(p) for p in paths["parquet"]]
    one = cli(["replay", "--jobs", "1", "--json", *files], capsys)
    two = cli(["replay", "--jobs", "2", "--json", *files], capsys)
    per_call(monkeypatch)
    reference = cli(["replay", "--jobs", "1", "--json", *files], capsys)
    assert one == two == reference


# -- every trace fixture, written as a table -------------------------------------------------


# Public traces no one here wrote, where they are beside the repository (never copied in).
REAL_TRACES = ROOT.parent / "shared" / "real_traces"


def _fixtures() -> list[Path]:
    found = []
    for directory in (ROOT / "tests" / "fixtures", ROOT / "examples", REAL_TRACES):
        for path in sorted(directory.rglob("*")):
            if path.is_file() and path.name.removesuffix(".gz").endswith((".json", ".jsonl")):
                found.append(path)
    return found


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def table_of(path: Path) -> Any:
    """A trace's calls as a long table: one row a call, arguments and results as text."""
    rows: dict[str, list[Any]] = {k: [] for k in ("run", "tool", "arguments", "result", "error")}
    rows["call_id"] = []
    results: dict[tuple[str, str], tuple[Any, bool | None]] = {}
    calls: list[tuple[str, str, str | None, str | None]] = []
    stats = files_module.FileStats(str(path))
    for event in Reader(str(path), stats):
        if isinstance(event, Turn):
            ids = event.call_ids or [None] * len(event.calls)
            for (name, args, is_text), call_id in zip(event.calls, ids, strict=False):
                text = args if is_text else _text(args)
                calls.append((event.run, name, text, call_id))
        elif isinstance(event, Result):
            results[(event.run, event.call_id)] = (event.value, event.error)
    for run, name, args, call_id in calls:
        value, error = results.get((run, call_id or ""), (None, None))
        rows["run"].append(run)
        rows["tool"].append(name)
        rows["arguments"].append(args if isinstance(args, str) else None)
        rows["result"].append(_text(value))
        rows["error"].append(error)
        rows["call_id"].append(call_id)
    return pa.table(
        rows,
        schema=pa.schema(
            [("run", pa.string()), ("tool", pa.string()), ("arguments", pa.string()),
             ("result", pa.string()), ("error", pa.bool_()), ("call_id", pa.string())]
        ),
    )  # fmt: skip


def test_every_fixture_as_a_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    tables = 0
    for index, fixture in enumerate(_fixtures()):
        table = table_of(fixture)
        if table.num_rows == 0:
            continue
        tables += 1
        path = write(tmp_path, f"{index:03d}.parquet", table)
        for observe in (True, False):
            native, reference = both(monkeypatch, [path], settings=Settings(observe=observe))
            assert native == reference, fixture
    assert tables >= (20 if REAL_TRACES.is_dir() else 3) and len(taken) == 2 * tables


# -- the corners the native path hands back to the guard's Python code -----------------------


# The default guard, the hash-only one, declared policies, other volatile keys and thresholds.
SETTINGS = (
    Settings(observe=False),
    Settings(
        tools={
            "job_status": {"policy": "poll", "max_polls": 5},
            "write_file": "write",
            "read_file": "read",
            "search": "volatile",
        },
        volatile_keys=frozenset({"q", "since"}),
    ),
    Settings(window=5, nudge_at=3, stop_at=4),
    Settings(),
)


def corners() -> Any:
    deep = "[" * 300 + "]" * 300
    rows = [
        # run, tool, arguments, result, error, call_id, model, label
        ("a", "get_logs", '{"since":"15m"}', '{"items":[]}', False, None, "gpt-4o", None),
        ("a", "get_logs", '{"since": "15m"}', '{"items":[]}', False, None, "gpt-4o", None),
        ("a", "get_logs", '{"since":"15m", "request_id": 7}', '{"items":[]}', None, None, None, 1),
        ("a", "get_logs", '{"since":"15m"}', '{"items":[]}', False, None, "claude-3-haiku", None),
        ("a", "get_logs", '{"since":"15m"}', "late", False, None, None, None),
        (None, "x", "{}", None, None, None, None, None),
        ("", "x", "{}", None, None, None, None, None),
        ("b", None, "{}", None, None, None, None, None),
        ("b", "", "{}", None, None, None, None, None),
        ("b", "edit_file", '{"path":"a.py","text":"x  =  1\\n"}', "{}", False, None, None, None),
        ("b", "edit_file", '{"path":"a.py","text":"x = 1\\n"}', "{}", False, None, None, None),
        ("b", "edit_file", '{"path":"a.py","text":"x = 1\\n"}', "{}", False, None, None, True),
        ("b", "edit_file", '{"path":"a.py","text":"x = 1\\n"}', "{}", False, None, None, None),
        ("c", "search", "{not json", "Error: timed out", None, "c1", None, 0.5),
        ("c", "search", "{not json", "Error: timed out", None, "c1", None, None),
        ("c", "search", None, '{"type":"text","text":"[]"}', None, "c3", None, None),
        ("c", "search", None, '[{"type":"text","text":"none"}]', None, "c3", None, None),
        ("c", "search", None, '{"t\\u0079pe":"tool_result","content":"x"}', None, "c4", None, None),
        ("c", "search", None, None, None, "c5", None, None),
        ("c", "search", None, "{}", None, "c5", None, None),
        ("c", "search", None, "{}", True, "c6", None, None),
        ("c", "search", None, "{}", True, "c6", None, None),
        ("c", "search", None, "{}", True, "c6", None, None),
        ("c", "search", None, "{}", True, "c6", None, None),
        ("d", "read_file", '{"p":1}', '{"x":1}', False, None, None, None),
        ("d", "write_file", '{"p":1}', '{"ok":true}', False, None, None, None),
        ("d", "read_file", '{"p":1}', '{"x":1}', False, None, None, None),
        ("d", "write_file", '{"p":1}', '{"ok":true}', False, None, None, None),
        ("d", "read_file", '{"p":1}', '{"x":1}', False, None, None, None),
        ("d", "write_file", '{"p":1}', '{"ok":true}', False, None, None, None),
        ("d", "read_file", '{"p":1}', '{"x":1}', False, None, None, None),
        ("d", "write_file", '{"p":1}', '{"ok":true}', False, None, None, None),
        ("e", "job_status", '{"job":1}', '{"state":"running"}', False, None, None, None),
    ]
    rows += [("c0", "search", deep, "[]", None, "c2", None, None)]
    rows += [("e", "job_status", '{"job":1}', '{"state":"running"}', False, None, None, None)] * 24
    rows += [("f", "shell", '{"cmd":"ls"}', "a b", False, None, None, None)] * 4
    rows += [("g", "get_logs", "{\ufeff}", None, None, None, None, None)] * 3
    rows += [("h", "lookup", '{"q":"ü  x"}', '{"r":"☃"}', None, None, None, None)] * 4
    columns = list(zip(*rows, strict=True))
    names = ("run", "tool", "arguments", "result", "error", "call_id", "model", "label")
    types = (pa.string(), pa.string(), pa.string(), pa.string(), pa.bool_(), pa.string(),
             pa.string(), pa.float64())  # fmt: skip
    return pa.table(
        [pa.array(c, type=t) for c, t in zip(columns, types, strict=True)], names=list(names)
    )


def test_corners_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    table = corners()
    path = write(tmp_path, "corners.parquet", table, row_group_size=7)
    for chosen in reversed(SETTINGS):
        native, reference = both(monkeypatch, [path], settings=chosen)
        assert native == reference, chosen
    data = native[0]
    assert data["problems_total"] == 4  # the rows without a run or a tool
    assert {r["run"] for r in data["runs"]} >= {"a", "b", "c", "d", "e"}
    # Large strings, string views, integer runs and call ids, 32-bit floats and labels that
    # are flags: the same, from a stream too.
    wide = table.cast(
        pa.schema(
            [("run", pa.large_string()), ("tool", pa.string_view()),
             ("arguments", pa.large_string()), ("result", pa.string_view()),
             ("error", pa.bool_()), ("call_id", pa.large_string()), ("model", pa.string()),
             ("label", pa.float32())]
        )
    )  # fmt: skip
    native, reference = both(monkeypatch, lambda: [wide])
    assert native == reference
    numbered = pa.table(
        {
            "run": pa.array([1, 1, 1, 2, 2], pa.int32()),
            "tool": ["t"] * 5,
            "arguments": ["{}"] * 5,
            "call_id": pa.array([7, 7, 8, 7, 7], pa.uint16()),
            "result": ["{}", None, "{}", "[]", "[]"],
            "label": [True, None, None, False, None],
        }
    )
    native, reference = both(monkeypatch, [write(tmp_path, "numbered.parquet", numbered)])
    assert native == reference
    assert len(taken) == len(SETTINGS) + 2


# -- random tables ----------------------------------------------------------------------------

_ARGS = ('{"q":1}', '{"q":2}', '{"q": 1}', '{"q":"a  b"}', "{bad", None, "{}", '{"q":null}')
_RESULTS = (None, "{}", "[]", '{"n":1}', '{"n":2}', "Error: rate limit", "plain", '"x"',
            '{"type":"text","text":"a"}', '{"items":[]}', "null")  # fmt: skip
row = st.tuples(
    st.sampled_from(("r1", "r2", "r3", None)),
    st.sampled_from(("get_logs", "edit_file", "job_status", "write_file", "bash", None)),
    st.sampled_from(_ARGS),
    st.sampled_from(_RESULTS),
    st.sampled_from((None, True, False)),
    st.sampled_from((None, "i1", "i2")),
    st.sampled_from((None, "gpt-4o-mini", "o3")),
    st.sampled_from((None, 0.0, 1.0)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(row, min_size=1, max_size=60), chosen=st.sampled_from(SETTINGS))
def test_random_tables(
    rows: list[tuple[Any, ...]], chosen: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = list(zip(*rows, strict=True))
    names = ("run", "tool", "arguments", "result", "error", "call_id", "model", "label")
    types = (pa.string(), pa.string(), pa.string(), pa.string(), pa.bool_(), pa.string(),
             pa.string(), pa.float64())  # fmt: skip
    table = pa.table(
        [pa.array(c, type=t) for c, t in zip(columns, types, strict=True)], names=list(names)
    )
    native, reference = both(monkeypatch, lambda: [table], settings=chosen)
    assert native == reference


# -- broken tables ---------------------------------------------------------------------------


def _fleet_table(rows: int) -> Any:
    fleet = fleet_generator()
    made: list[Any] = []
    for run in fleet.runs(rows):
        made.extend(run)
    names = ("run", "step", "tool", "arguments", "result", "error")
    return pa.table({n: list(c) for n, c in zip(names, zip(*made, strict=True), strict=True)})


def test_a_cell_over_the_limit_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    monkeypatch.setattr(files_module, "MAX_LINE_BYTES", 4096)
    table = _fleet_table(300)
    args = table.column("arguments").to_pylist()
    args[40] = json.dumps({"p": "x" * 10_000})
    table = table.set_column(3, "arguments", pa.array(args))
    path = write(tmp_path, "huge.parquet", table)
    native, reference = both(monkeypatch, [path])
    assert native == reference and taken == [path]
    assert native[0]["problems"] == [
        {"file": path, "line": None, "where": "row 41",
         "message": "column 'arguments': cell longer than 4,096 bytes; row skipped"}
    ]  # fmt: skip


def test_a_row_group_too_big_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    from tripwire.replay.formats import table as table_module

    monkeypatch.setattr(table_module, "MAX_ROW_GROUP_BYTES", 40_000)
    table = _fleet_table(300)
    args = table.column("arguments").to_pylist()
    args[150] = json.dumps({"p": "x" * 50_000})
    table = table.set_column(3, "arguments", pa.array(args))
    path = write(tmp_path, "huge.parquet", table, row_group_size=100)
    native, reference = both(monkeypatch, [path])
    assert native == reference and taken == [path]
    [problem] = native[0]["problems"]
    assert "in row group 1 (rows 101 to 200)" in problem["message"]


def _damaged(tmp_path: Path) -> str:
    """A file whose footer is whole and whose second row group's pages are not."""
    path = tmp_path / "damaged.parquet"
    pq.write_table(_fleet_table(600), path, row_group_size=200, compression="zstd")
    meta = pq.ParquetFile(path).metadata.row_group(1).column(3)
    start = meta.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + 40 : start + 400] = b"\xff" * 360
    path.write_bytes(bytes(data))
    return str(path)


def test_a_damaged_row_group_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    path = _damaged(tmp_path)
    native, reference = both(monkeypatch, [path])
    assert native == reference and taken == [path]
    [problem] = native[0]["problems"]
    assert problem["message"].startswith("corrupt or truncated; not read past row 200: ")
    assert native[0]["files"][0]["unreadable"]


def test_missing_mistyped_and_corrupt_tables_go_to_the_per_call_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[str]
) -> None:
    table = _fleet_table(100)
    missing = write(tmp_path, "missing.parquet", table.drop_columns(["tool"]))
    mistyped = write(
        tmp_path, "mistyped.parquet", table.set_column(2, "tool", pa.array(range(100)))
    )
    good = write(tmp_path, "good.parquet", table)
    corrupt = tmp_path / "corrupt.parquet"
    data = Path(good).read_bytes()
    corrupt.write_bytes(data[:-12] + b"\x00" * 8 + data[-4:])
    native, reference = both(monkeypatch, [missing, mistyped, str(corrupt), good])
    assert native == reference and taken == [good]
    messages = [p["message"] for p in native[0]["problems"]]
    assert messages[0].startswith("column 'tool' missing (has: run, step, arguments")
    assert messages[1] == "column 'tool' is int64, not text; file skipped"
    assert messages[2].startswith("not a readable Parquet file (")


def test_streams_natively_from_duckdb(monkeypatch: pytest.MonkeyPatch, taken: list[str]) -> None:
    duckdb = pytest.importorskip("duckdb", reason="duckdb (in tripwire[test]) not installed")

    def relation() -> Iterator[Any]:
        yield duckdb.sql(
            "select 'r' || (i // 7) as run, 'get_logs' as tool,"
            " '{\"since\":\"15m\"}' as arguments, '[]' as result from range(30) t(i) order by i"
        )

    native, reference = both(monkeypatch, lambda: list(relation()))
    assert native == reference and len(taken) == 1
    assert [r["stop_step"] for r in native[0]["runs"]] == [4, 4, 4, 4, None]


def test_the_core_without_pyarrow_types_and_a_wrong_capsule() -> None:
    """The core takes any producer's stream (here pyarrow's, but nothing of pyarrow is
    needed by it), and refuses a capsule of another kind with the interface's own error."""
    from tripwire import _core

    seen: list[Any] = []
    core = _core.TableReplay(
        Settings().guard(), observe=True, prices=lambda m: (3.0, 15.0, 0.3, 3.75),
        plan={"run": "run", "tool": "tool", "arguments": "arguments"},
        sink=lambda runs, problems: seen.append((runs, problems)),
        cell_limit=1 << 20, too_long={},
    )  # fmt: skip
    core.feed_stream(pa.table({"run": ["a"] * 3, "tool": ["t"] * 3, "arguments": ["{}"] * 3}))
    core.finish()
    [(runs, problems)] = seen
    assert problems == [] and runs[0][0] == "a" and runs[0][4][0] == 3  # stopped at step 3
    with pytest.raises(ValueError, match="incorrect name"):
        core.feed_stream(_NotAStream())


class _NotAStream:
    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return pa.record_batch({"x": [1]}).__arrow_c_array__()[0]
