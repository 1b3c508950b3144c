"""Replay on a cluster: a function over runs' calls, for a distributed engine to map over a
dataset partitioned by run. Ray Data is the engine supported and tested (the ``ray`` extra).

Runs are independent (replay is a pure function of one run's calls), so a cluster needs no
scheduler of ours: ``replay_calls`` takes a table of calls holding whole runs (the long table
of ``tripwire.replay.formats.table``) and returns their rows as ``--out`` writes them (one row
a run, ``export.run_schema``); an engine maps it over the dataset.

    import ray
    from tripwire.replay import cluster

    calls = cluster.read_calls(["s3://bucket/traces/2026-12-01.parquet", ...])
    runs = cluster.replay_dataset(calls)         # a ray.data.Dataset, one row a run
    runs.write_parquet("s3://bucket/replay/")    # or .to_arrow_refs(), .to_pandas()

**Why ``map_batches`` over run-partitioned blocks, not ``groupby("run").map_groups``.** A
``groupby`` shuffles every call across the cluster (all the arguments and results: most of the
dataset's bytes) to bring each run's rows together, then calls the function once a run, for
runs of a few dozen calls; and it merges the stretches of a run that the single-process replay
keeps apart. Trace exports already hold each run's rows together (``ORDER BY run, step``, as the
table format asks), so ``read_calls`` reads each file in order and cuts its blocks only between
runs: ``replay_dataset`` then maps ``replay_calls`` over whole blocks (``batch_size=None``),
with no shuffle, each file streamed, memory bounded by a block and the largest run, and the
results those of ``tripwire replay --out`` row for row (the file, the run's parts, the
``row N`` of a stop). Ray may reshape blocks between operators (it slices a block over 1.5
times ``DataContext.target_max_block_size``, 128 MiB); the blocks ``read_calls`` makes are far
smaller, and each row says whether it is its run's first and last (``FIRST``, ``LAST``), so a
block that does not hold whole runs is refused with a clear error rather than replayed wrong.
``how="groupby"`` is there for a dataset not partitioned by run (rows of a run scattered across
files or blocks), at the price of the shuffle.

A block's runs are replayed by the native core (``arrow_core.replay_stream``, the Rust
``TableReplay`` that ``tripwire replay`` takes for a Parquet file: ~500k calls/s a core, the
strings read where Arrow keeps them) where it applies, else call by call (``turn`` or
``usage`` columns, the reference build, ``TRIPWIRE_REPLAY_CORE=python``): the same rows
either way. With the replay that fast, the rest of a task had to be too: run and source
boundaries are found by comparing neighbours in ``pyarrow.compute``, not in Python lists
(``_run_starts``). On one Ray worker a 125,000-call file takes ~0.25 s (Parquet decoding
and tagging ~0.03 s, the replay ~0.2 s, Ray's gap between tasks ~0.03 s); what does not
scale is Ray Data's start of each dataset: its resource reservation learns the cluster's
size from its autoscaling coordinator, asynchronously, and holds the first (empty) answer
for a second, so a dataset's first second runs one task at a time (Ray 2.60). Long replays
do not notice; for a short one ``DataContext.op_resource_reservation_enabled = False`` runs
tasks on every CPU from the start (``docs/cluster.md``). The library leaves Ray's defaults
as they are.

Rows of a source (``SOURCE``: a file, or a dataset) are replayed as that source's file, keyed
by (source, run) as ``tripwire replay`` keys them. Bad rows are skipped as ``tripwire replay``
skips them (the runs' figures say what was replayed); the problems themselves are not part of
the results table.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

from tripwire.replay import arrow_core, export
from tripwire.replay.formats import FileStats, Reader, table
from tripwire.replay.simulate import Fleet, RunResult, Settings

# Columns ``read_calls`` adds to the calls: the file, the row's number in it (from 1), and
# whether the row is its run's first and its last.
SOURCE: Final = "tripwire_source"
ROW: Final = "tripwire_row"
FIRST: Final = "tripwire_first"
LAST: Final = "tripwire_last"
OURS: Final = (SOURCE, ROW, FIRST, LAST)
# Rows a block of ``read_calls`` aims at (a block ends at the first run boundary past it).
BLOCK_ROWS: Final = 16_384
# A source without a ``SOURCE`` column (a table given as it is).
UNNAMED: Final = "<calls>"

_STOP_ROW: Final = re.compile(r" \(row (\d+)\)\Z")


class SplitRunError(ValueError):
    """A batch holds part of a run only (a block cut inside a run): replaying it would give
    wrong results."""


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ImportError(
            "replay on a cluster needs pyarrow: pip install 'tripwire[ray]'"
        ) from None
    return pyarrow


def _as_table(pa: Any, calls: Any) -> Any:
    """A pyarrow Table of the calls: a Table or RecordBatch, a pandas DataFrame, a dict of
    columns (Ray's batch formats), or any Arrow stream (``__arrow_c_stream__``)."""
    if isinstance(calls, pa.Table):
        return calls
    if isinstance(calls, pa.RecordBatch):
        return pa.Table.from_batches([calls])
    if isinstance(calls, Mapping):
        return pa.table(dict(calls))
    if hasattr(calls, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(calls).read_all()
    if type(calls).__name__ == "DataFrame" and hasattr(calls, "to_records"):
        return pa.Table.from_pandas(calls, preserve_index=False)
    raise TypeError(f"calls must be an Arrow table or stream, not {type(calls).__name__}")


def replay_calls(
    calls: Any,
    *,
    settings: Settings | None = None,
    columns: Mapping[str, str] | None = None,
    check_whole: bool = True,
) -> Any:
    """The runs in ``calls`` replayed: a ``pyarrow.Table`` of one row a run, as ``--out``
    writes them.

    ``calls``: a table of calls (see ``_as_table``) holding whole runs, each run's rows
    together and in order; ``columns`` maps ours to its names (``--column``). With a
    ``SOURCE`` column (``read_calls`` adds it), each stretch of rows of one source is that
    source's file; and with ``ROW``, a stop's location names its row in that file. With
    ``FIRST`` and ``LAST`` (``read_calls``) and ``check_whole``, a batch that begins or ends
    inside a run raises ``SplitRunError``."""
    pa = _pyarrow()
    data = _as_table(pa, calls)
    settings = settings or Settings()
    names = data.column_names
    whole = FIRST not in names or LAST not in names or not data.num_rows
    if check_whole and not whole:
        whole = data.column(FIRST)[0].as_py() and data.column(LAST)[-1].as_py()
        if not whole:
            raise SplitRunError(
                "a batch of calls begins or ends inside a run: map over whole runs"
                " (batch_size=None over read_calls' blocks, or groupby)"
            )
    results: list[RunResult] = []
    for source, stretch in _stretches(data):
        results += _replay_stretch(source, stretch, settings, columns)
    return export.runs_table(results)


def _replay_stretch(
    source: str, stretch: Any, settings: Settings, columns: Mapping[str, str] | None
) -> list[RunResult]:
    """One source's rows, replayed as its file (one fleet each: the readers number a
    stretch's rows from 1, which ``ROW`` turns into the file's numbers): by the native core
    where it applies (``arrow_core``, as ``tripwire replay`` takes it for a Parquet file),
    else call by call."""
    names = stretch.column_names
    fleet = Fleet(settings)
    calls = stretch.drop_columns([name for name in OURS if name in names])
    stats = _replay_native(fleet, source, calls, columns)
    if stats is None:
        stats = FileStats(source)
        reader = Reader(source, stats, results=settings.observe, columns=columns)
        fleet.feed(0, stats, table.read_batches(reader, calls.to_batches(), calls.schema))
    report = fleet.report([stats])
    try:
        if ROW not in names:
            return list(report.runs)
        rows = stretch.column(ROW)
        return [_located(run, rows) for run in report.runs]
    finally:
        report.runs.close()


def _replay_native(
    fleet: Fleet, source: str, calls: Any, columns: Mapping[str, str] | None
) -> FileStats | None:
    """The calls replayed by the native core into ``fleet``, labelled ``source``; ``None``
    where the per-call path must replay them (the table, unlike a stream, can be read
    again)."""
    try:
        return arrow_core.replay_stream(fleet, 0, calls, source, columns)
    except arrow_core._Fallback:
        return None


def _stretches(data: Any) -> Iterator[tuple[str, Any]]:
    """(source, its rows) for each stretch of rows of one source, in order."""
    if SOURCE not in data.column_names:
        yield UNNAMED, data
        return
    import pyarrow.compute as pc

    sources = data.column(SOURCE)
    starts = pc.indices_nonzero(_run_starts(sources)).to_pylist()
    for start, end in zip(starts, [*starts[1:], data.num_rows], strict=True):
        yield str(sources[start].as_py()), data.slice(start, end - start)


def _located(run: RunResult, rows: Any) -> RunResult:
    """The run, its stop's ``row N`` (of the stretch) made the row of its file (``rows``:
    the stretch's ``ROW`` column)."""
    where = run.stop_location
    found = _STOP_ROW.search(where) if where is not None else None
    if where is None or found is None or not where.startswith(run.file):
        return run
    index = int(found.group(1)) - 1
    if not 0 <= index < len(rows):
        return run
    row = rows[index].as_py()
    return dataclasses.replace(run, stop_location=f"{where[: found.start()]} (row {row})")


# -- Ray Data ------------------------------------------------------------------------------------


def _ray_data() -> Any:
    try:
        import ray.data
    except ImportError:
        raise ImportError("replay on Ray needs Ray Data: pip install 'tripwire[ray]'") from None
    return ray.data


def parquet_files(paths: Iterable[str]) -> list[str]:
    """The paths, each directory replaced by the Parquet files under it in name order (as
    ``tripwire replay`` lists a directory, so that the files are named alike)."""
    out: list[str] = []
    for path in paths:
        if not os.path.isdir(path):
            out.append(path)
            continue
        for root, dirs, names in os.walk(path):
            dirs.sort()
            out += [os.path.join(root, name) for name in sorted(names) if name.endswith(".parquet")]
    return out


def read_calls(
    paths: str | Sequence[str],
    *,
    columns: Mapping[str, str] | None = None,
    block_rows: int = BLOCK_ROWS,
    filesystem: Any = None,
) -> Any:
    """Parquet files of calls (directories: their ``.parquet`` files) as a Ray dataset of
    blocks that hold whole runs: one read task a file, its rows in order, with ``SOURCE``
    (the path as given), ``ROW``, ``FIRST`` and ``LAST`` added; a block ends at the first run
    boundary past ``block_rows`` rows. ``filesystem``: a ``pyarrow.fs`` filesystem (S3, GCS,
    HDFS), else the local one or what the path's scheme says."""
    rd = _ray_data()
    files = parquet_files([paths] if isinstance(paths, str) else paths)
    if not files:
        raise ValueError("no Parquet files to read")
    run_column = (columns or {}).get("run", "run")
    items = [{"path": path} for path in files]
    return rd.from_items(items, override_num_blocks=len(items)).map_batches(
        _read_files,
        batch_size=1,
        batch_format="pyarrow",
        fn_kwargs={"run": run_column, "block_rows": block_rows, "filesystem": filesystem},
    )


def _read_files(paths: Any, *, run: str, block_rows: int, filesystem: Any) -> Iterator[Any]:
    for path in paths.column("path").to_pylist():
        yield from read_file_blocks(path, run=run, block_rows=block_rows, filesystem=filesystem)


def read_file_blocks(
    path: str, *, run: str = "run", block_rows: int = BLOCK_ROWS, filesystem: Any = None
) -> Iterator[Any]:
    """One Parquet file's calls as tables that hold whole runs, in order, with our columns
    (see ``read_calls``). A run is a stretch of rows with the same ``run``; memory holds a
    block and the run that goes on past it."""
    pa = _pyarrow()
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path, filesystem=filesystem)
    held: list[Any] = []  # batches read and not yet given out: the last run may go on
    held_rows = 0
    first_row = 1  # the file's number of the first held row
    # One thread: the engine gives a read task one CPU, and pyarrow's own pool would take
    # the cores of the node's other tasks (and make one worker look like two).
    rows = max(1, min(table.BATCH_ROWS, block_rows))
    for batch in parquet.iter_batches(batch_size=rows, use_threads=False):
        if not batch.num_rows:
            continue
        held.append(batch)
        held_rows += batch.num_rows
        if run not in batch.schema.names:
            # No runs to keep whole: the table reader says which column is missing.
            data = pa.Table.from_batches(held)
            yield _tagged(pa, data, path, first_row, None)
            first_row += data.num_rows
            held, held_rows = [], 0
            continue
        if held_rows < block_rows:
            continue
        data = pa.Table.from_batches(held)
        starts = _run_starts(data.column(run))
        cut = pc.indices_nonzero(starts)[-1].as_py()  # the last run's first row
        if cut == 0:
            continue  # one run throughout, and it goes on
        yield _tagged(pa, data.slice(0, cut), path, first_row, starts.slice(0, cut))
        first_row += cut
        rest = data.slice(cut)
        held, held_rows = rest.to_batches(), rest.num_rows
    if held:
        data = pa.Table.from_batches(held)
        starts = _run_starts(data.column(run)) if run in data.column_names else None
        yield _tagged(pa, data, path, first_row, starts)


def _run_starts(values: Any) -> Any:
    """Whether each value begins a run of equal values (the first does; null equals null,
    and only null): a pyarrow ``BooleanArray``. Compared in Arrow, as these are a file's
    whole columns; values Arrow cannot compare (lists, structs) are compared in Python."""
    pa = _pyarrow()
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    count = len(values)
    if count == 0:
        return pa.array([], type=pa.bool_())
    this, before = values.slice(1), values.slice(0, count - 1)
    try:
        changed = pc.not_equal(this, before)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        listed = values.to_pylist()
        changed = pa.array([listed[i] != listed[i - 1] for i in range(1, count)], pa.bool_())
    if changed.null_count:
        # A null against a value: a new run; two nulls: the same.
        changed = pc.if_else(changed.is_valid(), changed, pc.xor(this.is_null(), before.is_null()))
    return pa.concat_arrays([pa.array([True]), changed])


def _tagged(pa: Any, data: Any, path: str, first_row: int, starts: Any) -> Any:
    """The calls with ``SOURCE``, ``ROW``, ``FIRST`` and ``LAST`` added; ``starts``: which
    rows begin a run (``_run_starts``; ``None``: every row). ``data`` holds whole runs:
    ``read_file_blocks`` cuts only between runs, or at the end of the file, so a row is its
    run's last where the next row begins one, and the last row is."""
    import pyarrow.compute as pc

    count = data.num_rows
    if starts is None:
        starts = pa.repeat(True, count)
    ends = pa.concat_arrays([starts.slice(1), pa.array([True] if count else [], pa.bool_())])
    ones = pa.repeat(pa.scalar(1, pa.int64()), count)
    return (
        data.append_column(SOURCE, pa.repeat(pa.scalar(path, pa.string()), count))
        .append_column(ROW, pc.add(pc.cumulative_sum(ones), first_row - 1))
        .append_column(FIRST, starts)
        .append_column(LAST, ends)
    )


def replay_dataset(
    calls: Any,
    *,
    settings: Settings | None = None,
    columns: Mapping[str, str] | None = None,
    how: Literal["blocks", "groupby"] = "blocks",
) -> Any:
    """``replay_calls`` mapped over a Ray dataset of calls: a dataset of one row a run (in
    the order the blocks finish: sort by file, run and part for a stable order).

    ``how="blocks"``: over whole blocks, each holding whole runs (``read_calls``' blocks); no
    shuffle. ``how="groupby"``: the calls grouped by (``SOURCE`` where there is one, run),
    then each run replayed alone, its rows in ``ROW`` order where there is one; for a dataset
    not partitioned by run (a shuffle of every call)."""
    kwargs = {"settings": settings or Settings(), "columns": columns}
    if how == "blocks":
        return calls.map_batches(
            replay_calls, batch_size=None, batch_format="pyarrow", fn_kwargs=kwargs
        )
    if how != "groupby":
        raise ValueError(f"how must be 'blocks' or 'groupby', not {how!r}")
    names = calls.columns()
    run = (columns or {}).get("run", "run")
    keys = [SOURCE, run] if SOURCE in names else [run]
    return calls.groupby(keys).map_groups(
        _replay_group, batch_format="pyarrow", fn_kwargs={**kwargs, "ordered": ROW in names}
    )


def _replay_group(group: Any, *, settings: Settings, columns: Any, ordered: bool) -> Any:
    if ordered:
        group = group.sort_by(ROW)
    # A group is one run whole, whatever its blocks were.
    return replay_calls(group, settings=settings, columns=columns, check_whole=False)


__all__ = (
    "BLOCK_ROWS",
    "FIRST",
    "LAST",
    "ROW",
    "SOURCE",
    "SplitRunError",
    "parquet_files",
    "read_calls",
    "read_file_blocks",
    "replay_calls",
    "replay_dataset",
)
