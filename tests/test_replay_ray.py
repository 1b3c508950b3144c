"""Replay on a cluster (``tripwire.replay.cluster``) through a real local Ray (2 CPUs): a fleet
replayed by Ray Data gives the rows ``tripwire replay --out`` gives, over run-partitioned blocks
and through a groupby; a batch cut inside a run is refused. The Ray tests skip where Ray is not
installed (``pip install 'tripwire[ray]'``; ``.ci/run`` installs it); the function itself is
tested without it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tripwire
from test_arrow_core import spy_native
from tripwire.cli import main
from tripwire.replay import arrow_core, cluster

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pc = pytest.importorskip("pyarrow.compute")
try:
    import ray
    import ray.data

    HAVE_RAY = True
except ImportError:
    HAVE_RAY = False
needs_ray = pytest.mark.skipif(
    not HAVE_RAY, reason="Ray Data is not installed: pip install 'tripwire[ray]' (.ci/run does)"
)

KEYS = [("file", "ascending"), ("run", "ascending"), ("part", "ascending")]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    try:
        yield
    finally:
        ray.shutdown()


def _shard(path: Path, shard: int, *, native: bool = False) -> None:
    """A day of runs (the same names every day): some stuck on a call, one with parallel
    calls, some with an outcome, one with a usage figure; each run's rows together.
    ``native``: without the ``turn`` and ``usage`` columns, which the native core leaves
    to the per-call path (``arrow_core``)."""
    rows: dict[str, list[Any]] = {
        k: [] for k in ("run", "step", "tool", "arguments", "result", "turn", "label", "usage")
    }

    def call(run: str, step: int, tool: str, args: Any, result: Any, **more: Any) -> None:
        rows["run"].append(run)
        rows["step"].append(step)
        rows["tool"].append(tool)
        rows["arguments"].append(json.dumps(args))
        rows["result"].append(json.dumps(result))
        rows["turn"].append(more.get("turn", step))
        rows["label"].append(more.get("label"))
        rows["usage"].append(more.get("usage"))

    for index in range(40):
        run = f"run-{index:02d}"
        stuck = (index + shard) % 4 == 0
        label = None if index % 3 == 0 else float(not stuck)
        for step in range(1, 13 + index % 5):
            if stuck and step > 3:
                call(run, step, "get_logs", {"level": "error"}, {"lines": []}, label=label)
            elif index == 7 and step == 2:
                call(run, step, "read", {"f": "a"}, "A", turn=2, label=label)
                call(run, step, "read", {"f": "a"}, "A", turn=2, label=label)
            else:
                usage = json.dumps({"input_tokens": 900, "output_tokens": 40})
                extra = {"usage": usage} if index == 5 else {}
                call(run, step, "search", {"q": f"{run}-{step}"}, {"n": step}, label=label, **extra)
    calls = pa.table(rows)
    if native:
        calls = calls.drop_columns(["turn", "usage"])
    pq.write_table(calls, path, row_group_size=97)


def _fleet(root: Path, *, native: bool) -> tuple[list[str], Any]:
    paths = []
    for shard in range(3):
        path = root / f"day-{shard}.parquet"
        _shard(path, shard, native=native)
        paths.append(str(path))
    out = root / "single.parquet"
    assert main(["replay", "--jobs", "1", "--out", str(out), *paths]) == 0
    return paths, pq.read_table(out)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Any]:
    """Three shards with turns and usage (replayed call by call), and what ``tripwire
    replay --out`` makes of them in one process."""
    return _fleet(tmp_path_factory.mktemp("shards"), native=False)


@pytest.fixture(scope="module")
def native_fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Any]:
    """The same without ``turn`` and ``usage``: what the native core replays."""
    return _fleet(tmp_path_factory.mktemp("native-shards"), native=True)


@pytest.fixture
def native_replays(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stretches ``replay_calls`` gave the native core (in this process), by source."""
    return spy_native(monkeypatch, arrow_core, "replay_stream")


def _collect(dataset: Any) -> Any:
    return pa.concat_tables(ray.get(dataset.to_arrow_refs())).sort_by(KEYS)


@needs_ray
@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("how", ["blocks", "groupby"])
@pytest.mark.parametrize("calls", ["fleet", "native_fleet"])
def test_ray_gives_the_single_process_rows(
    request: pytest.FixtureRequest, calls: str, how: str
) -> None:
    paths, single = request.getfixturevalue(calls)
    stopped = single.filter(single.column("stopped")).num_rows
    assert 20 < stopped < single.num_rows  # a fleet with loops and healthy runs
    # Small blocks: many per file, each cut between runs, stops far into their files.
    calls = cluster.read_calls(paths, block_rows=50)
    got = _collect(cluster.replay_dataset(calls, how=how))  # type: ignore[arg-type]
    expected = single.sort_by(KEYS)
    assert got.schema == expected.schema
    for name in expected.column_names:
        assert got.column(name).equals(expected.column(name)), name
    assert got.equals(expected)
    # The stops name their row in the file, and the same run names in each file are kept apart.
    locations = [where for where in got.column("stop_location").to_pylist() if where]
    assert any(int(where.rsplit("row ", 1)[1].rstrip(")")) > 200 for where in locations)
    assert len(set(got.column("run").to_pylist())) * 3 == got.num_rows


@needs_ray
@pytest.mark.usefixtures("local_ray")
def test_the_blocks_hold_whole_runs(fleet: tuple[list[str], Any]) -> None:
    paths, _ = fleet
    # Cut between runs, in order, every row once.
    made = list(cluster.read_file_blocks(paths[0], block_rows=50))
    assert len(made) > 3
    # What Ray makes of them (it may merge blocks, whole): whole runs still.
    blocks = ray.get(cluster.read_calls(paths[:1], block_rows=50).to_arrow_refs())
    for cut in (made, blocks):
        rows = 0
        for block in cut:
            first, last = block.column(cluster.FIRST), block.column(cluster.LAST)
            assert first[0].as_py() and last[-1].as_py()
            assert block.column(cluster.ROW)[0].as_py() == rows + 1
            rows += block.num_rows
        assert rows == pq.ParquetFile(paths[0]).metadata.num_rows


def test_a_batch_cut_inside_a_run_is_refused(fleet: tuple[list[str], Any]) -> None:
    paths, _ = fleet
    (block,) = cluster.read_file_blocks(paths[0], block_rows=10**9)
    with pytest.raises(cluster.SplitRunError, match="inside a run"):
        cluster.replay_calls(block.slice(5, 40))
    # Whole runs, given without our columns: replayed, named as one source.
    plain = block.drop_columns(list(cluster.OURS))
    runs = cluster.replay_calls(plain)
    assert runs.num_rows == 40
    assert set(runs.column("file").to_pylist()) == {cluster.UNNAMED}
    # As the dict of columns Ray's "numpy" batches are, the same.
    as_dict = {name: plain.column(name).to_pylist() for name in plain.column_names}
    assert cluster.replay_calls(as_dict).equals(runs)


def test_a_batch_of_several_sources_is_each_file(fleet: tuple[list[str], Any]) -> None:
    """Blocks of two files, and of the first again, in one batch: each stretch is its file,
    its stops located in it, as when replayed apart."""
    paths, single = fleet
    a = list(cluster.read_file_blocks(paths[0], block_rows=200))
    b = list(cluster.read_file_blocks(paths[1], block_rows=200))
    mixed = pa.concat_tables([a[0], b[0], a[1]])
    apart = pa.concat_tables([cluster.replay_calls(t) for t in (a[0], b[0], a[1])])
    together = cluster.replay_calls(mixed)
    assert together.equals(apart)
    expected = single.filter(pc.is_in(single.column("run"), value_set=together.column("run")))
    assert together.num_rows > 0
    assert set(together.column("stop_location").to_pylist()) <= set(
        expected.column("stop_location").to_pylist()
    )


needs_native = pytest.mark.skipif(
    tripwire.IMPLEMENTATION != "native", reason="the Arrow core is part of the native build"
)


@needs_native
def test_replay_calls_takes_the_native_core(
    native_fleet: tuple[list[str], Any], native_replays: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Blocks the native core can read are replayed by it, to the rows the per-call path
    gives them (``TRIPWIRE_REPLAY_CORE=python``) and ``tripwire replay --out`` gives."""
    paths, single = native_fleet
    blocks = [block for path in paths for block in cluster.read_file_blocks(path, block_rows=50)]
    native = pa.concat_tables([cluster.replay_calls(block) for block in blocks])
    assert native_replays == [str(block.column(cluster.SOURCE)[0]) for block in blocks]
    monkeypatch.setenv("TRIPWIRE_REPLAY_CORE", "python")
    native_replays.clear()
    per_call = pa.concat_tables([cluster.replay_calls(block) for block in blocks])
    assert native_replays == []
    assert native.equals(per_call)
    assert native.sort_by(KEYS).equals(single.sort_by(KEYS))


@needs_native
def test_replay_calls_leaves_what_the_core_cannot_read_to_the_per_call_path(
    fleet: tuple[list[str], Any], native_replays: list[str]
) -> None:
    """``turn`` and ``usage`` columns: the per-call path replays them, to ``--out``'s rows."""
    paths, single = fleet
    blocks = [block for path in paths for block in cluster.read_file_blocks(path, block_rows=50)]
    got = pa.concat_tables([cluster.replay_calls(block) for block in blocks])
    assert native_replays == []
    assert got.sort_by(KEYS).equals(single.sort_by(KEYS))


@pytest.mark.parametrize(
    "values",
    [
        ["a", "a", None, None, "b", "b", "a", None],
        [3, 3, 1, None, 1],
        [[1], [1], [2], None, None],  # compared in Python: Arrow has no list equality
        [None],
        [],
    ],
)
def test_runs_begin_where_python_says_they_do(values: list[Any]) -> None:
    expected = [index == 0 or values[index] != values[index - 1] for index in range(len(values))]
    assert cluster._run_starts(pa.array(values)).to_pylist() == expected
    chunked = pa.chunked_array(
        [pa.array(values[:2]), pa.array(values[2:])], type=pa.array(values).type
    )
    assert cluster._run_starts(chunked).to_pylist() == expected
    if values and not isinstance(values[0], list):
        encoded = pa.array(values).dictionary_encode()
        assert cluster._run_starts(encoded).to_pylist() == expected
