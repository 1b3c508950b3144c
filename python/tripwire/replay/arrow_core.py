"""The native replay of a table of calls (``formats.table``): Parquet files and Arrow streams
replayed row by row in Rust (``tripwire._core.TableReplay``, over ``rust/arrow_replay.rs``),
the strings read where Arrow keeps them, the GIL released, each run's calls put through the
guard's own run state. ``Fleet`` with ``formats.table`` (one call at a time, in Python) is
the reference, and this path must give byte-identical results (``tests/test_arrow_core.py``).

Taken where it applies, else the per-call path is (``replay_table`` returns ``None``): the
native guard (``tripwire.IMPLEMENTATION == "native"``), no ``on_call`` sink (``--calls-out``),
and a table whose columns it reads: ``run`` (text or integer), ``tool``, ``arguments`` (JSON
text), optional ``result`` (text), ``error`` (boolean), ``call_id``, ``model``, ``label``;
no ``turn`` or ``usage`` column (one call a model turn, tokens estimated). A file that cannot
be opened, or whose columns are missing or mistyped, goes to the per-call path too, which
reports it. ``TRIPWIRE_REPLAY_CORE=python`` turns the native path off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Final

import tripwire
from tripwire.replay import simulate as _simulate
from tripwire.replay.cost import Source
from tripwire.replay.formats import FileStats, Problem, location
from tripwire.replay.formats import files as _files
from tripwire.replay.simulate import (
    Counts,
    Fleet,
    RunResult,
    _preview,
    lead_preview,
)

# The columns read natively and the types they may have (``table._kinds``' names).
_TEXT: Final = ("string", "large_string", "string_view")
_NATIVE: Final = {
    "run": (*_TEXT, "int"),
    "tool": _TEXT,
    "arguments": _TEXT,
    "result": _TEXT,
    "error": ("bool",),
    "call_id": (*_TEXT, "int"),
    "model": _TEXT,
    "label": ("int", "float", "bool"),
    "step": ("int",),  # not read, but measured (see ``too_long``) were it text
}


def enabled() -> bool:
    return (
        tripwire.IMPLEMENTATION == "native"
        and os.environ.get("TRIPWIRE_REPLAY_CORE", "native") != "python"
    )


def _kind(pa: Any, ty: Any) -> str | None:
    t = pa.types
    if t.is_null(ty):
        return "null"
    if t.is_string(ty):
        return "string"
    if t.is_large_string(ty):
        return "large_string"
    if getattr(t, "is_string_view", None) is not None and t.is_string_view(ty):
        return "string_view"
    if t.is_integer(ty):
        return "int"
    if t.is_floating(ty) and ty.bit_width in (32, 64):
        return "float"
    if t.is_boolean(ty):
        return "bool"
    return None


def native_plan(pa: Any, schema: Any, plan: Mapping[str, str]) -> dict[str, str] | None:
    """The columns to read natively, or ``None`` where the table needs the per-call path."""
    native: dict[str, str] = {}
    for column, theirs in plan.items():
        kind = _kind(pa, schema.field(theirs).type)
        if kind is None or (kind != "null" and kind not in _NATIVE.get(column, ())):
            return None
        if column != "step":
            native[column] = theirs
    return native


def _too_long(pa: Any, schema: Any, plan: Mapping[str, str]) -> dict[str, str]:
    """Per column held as (large) strings, the problem of a cell over the limit (as
    ``table._Rows.batch`` words it; it measures only those)."""
    limit = _files.MAX_LINE_BYTES
    found = {}
    for column, theirs in plan.items():
        if _kind(pa, schema.field(theirs).type) in ("string", "large_string"):
            found[column] = f"column {theirs!r}: cell longer than {limit:,} bytes; row skipped"
    return found


def _prices(fleet: Fleet) -> Any:
    prices = fleet.settings.prices

    def of(model: str | None) -> tuple[float, float, float, float]:
        p = prices.of(model)
        return (p.input, p.output, p.cache_read, p.cache_write)

    return of


class _Sink:
    """Finished runs and problems from the native core, into the fleet as ``Fleet.feed``
    would have put them. ``format``, ``_location``: what the runs' results say of where they
    are (``events_core`` replays JSONL lines through the same core)."""

    format = "table"

    def __init__(self, fleet: Fleet, stats: FileStats) -> None:
        self.fleet = fleet
        self.stats = stats
        self.volatile = fleet.settings.volatile_keys

    def __call__(self, runs: list[tuple[Any, ...]], problems: list[tuple[int, str]]) -> None:
        fleet, stats = self.fleet, self.stats
        for row, message in problems:
            stats.problems += 1
            fleet.problem(Problem(stats.path, None, message, f"row {row}"))
        for item in runs:
            self._run(*item)

    def _run(
        self,
        name: str,
        ints: tuple[int, ...],
        costs: tuple[float, float],
        nudge: tuple[int, str] | None,
        stop: tuple[Any, ...] | None,
        timeline: str,
        model: str | None,
        reward: float | None,
        nudges: list[tuple[str, int]],
        models: list[tuple[str, int]],
        source: Source,
        line: int | None = None,
        part: int = 1,
    ) -> None:
        fleet = self.fleet
        for tool, count in nudges:
            fleet.tool(tool).nudges += count
        for named, count in models:
            fleet.models[named] = fleet.models.get(named, 0) + count
        (
            steps, steps_saved, turns, turns_saved, nudge_count, input_tokens, output_tokens,
            cached, cache_write, input_saved, output_saved, invalid, skipped, results, unlinked,
        ) = ints  # fmt: skip
        # Positionally, in the fields' order: keywords cost a microsecond a run here.
        counts = Counts(
            steps, steps_saved, turns, turns_saved, nudge_count, input_tokens, output_tokens,
            cached, cache_write, input_saved, output_saved, costs[0], costs[1], invalid,
            skipped, results, unlinked,
        )  # fmt: skip
        self.stats.runs += 1
        if not fleet.shows(stop is not None, nudge_count > 0, counts.cost_saved):
            # Neither kept nor listed (the terminal report's runs are counted): summed only,
            # not made into a RunResult nor the stop described (most of this function's time).
            if stop is None:
                fleet.add_run(counts, None, None, None, source, reward, None)
            else:
                fleet.add_run(counts, stop[0], stop[1], stop[2], source, reward, None)
            return
        path = self.stats.path
        nudge_step, nudge_tool = nudge if nudge is not None else (None, None)
        if stop is None:
            result = RunResult(
                name, path, line, self.format, part, counts, nudge_step, nudge_tool, None,
                None, None, None, None, None, None, None, (), source, timeline, model, reward,
            )  # fmt: skip
        else:
            step, reason, tool, repeats, key, row, message, args, lead = stop
            result = RunResult(
                name, path, line, self.format, part, counts, nudge_step, nudge_tool, step,
                reason, tool, repeats, key, self._location(row),
                _preview(_call(tool, args), self.volatile), message,
                tuple((s, action, lead_preview(_call(t, a))) for s, action, t, a in lead),
                source, timeline, model, reward,
            )  # fmt: skip
        fleet.add_result(result)

    def _location(self, row: int) -> str:
        return location(self.stats.path, None, f"row {row}")


def _call(tool: str, args: str | bytes | None) -> tuple[str, Any, bool]:
    """A call as the format made it: JSON text, ``{}`` for null arguments, or (``bytes``, from
    the events format) the text of a JSON value, which the call held as that value."""
    if args is None:
        return (tool, {}, False)
    if isinstance(args, bytes):
        return (tool, json.loads(args), False)
    return (tool, args, True)


def _native(fleet: Fleet, plan: dict[str, str], stats: FileStats, too_long: dict[str, str]) -> Any:
    from tripwire import _core

    settings = fleet.settings
    return _core.TableReplay(
        settings.guard(),
        observe=settings.observe,
        prices=_prices(fleet),
        plan=plan,
        sink=_Sink(fleet, stats),
        cell_limit=_files.MAX_LINE_BYTES,
        too_long=too_long,
        max_pending=_simulate.MAX_PENDING,
    )


def replay_parquet(
    fleet: Fleet, index: int, path: str, columns: Mapping[str, str] | None
) -> FileStats | None:
    """Replays a Parquet file natively into ``fleet``; ``None``: the per-call path must."""
    if not enabled() or fleet.on_call is not None:
        return None
    from tripwire.replay.formats import table

    pa = table._pyarrow()
    if pa is None:
        return None
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        plan = table._plan(pa, parquet.schema_arrow, columns)
    except (pa.ArrowException, OSError, table.TableError):
        return None  # the per-call path reports it
    native = native_plan(pa, parquet.schema_arrow, plan)
    if native is None:
        return None
    stats = FileStats(path, size=os.path.getsize(path))
    reader, core = _begin(
        fleet, index, stats, columns, native, _too_long(pa, parquet.schema_arrow, native)
    )
    wanted = list(dict.fromkeys(plan.values()))
    try:
        for batch in table._row_groups(reader, parquet, wanted):
            if isinstance(batch, table._Oversized):
                core.row = stats.lines
                _problem(fleet, stats, reader.problem(None, str(batch)))
                continue
            stats.lines += batch.num_rows
            core.feed_batch(batch)
    except (pa.ArrowException, OSError) as exc:
        _unreadable(fleet, stats, reader, core, exc)
    return _end(stats, core)


def replay_stream(
    fleet: Fleet, index: int, stream: Any, label: str, columns: Mapping[str, str] | None
) -> FileStats | None:
    """Replays an Arrow stream (``__arrow_c_stream__``) natively; ``None``: the per-call
    path must (the stream is not consumed then)."""
    if not enabled() or fleet.on_call is not None:
        return None
    from tripwire.replay.formats import table

    pa = table._pyarrow()
    if pa is None:
        return None
    try:
        reader = pa.RecordBatchReader.from_stream(stream)
        plan = table._plan(pa, reader.schema, columns)
    except (pa.ArrowException, TypeError, table.TableError):
        return None
    native = native_plan(pa, reader.schema, plan)
    if native is None:
        # Consumed by from_stream: the per-call path reads the reader instead.
        raise _Fallback(reader)
    stats = FileStats(label)
    source, core = _begin(
        fleet, index, stats, columns, native, _too_long(pa, reader.schema, native)
    )
    try:
        stats.lines += core.feed_stream(reader)
    except (pa.ArrowException, OSError, ValueError) as exc:
        _unreadable(fleet, stats, source, core, exc)
    return _end(stats, core)


class _Fallback(Exception):
    """The stream was opened but must be read by the per-call path: its reader."""

    def __init__(self, reader: Any) -> None:
        super().__init__("per-call path")
        self.reader = reader


def _begin(
    fleet: Fleet,
    index: int,
    stats: FileStats,
    columns: Mapping[str, str] | None,
    native: dict[str, str],
    too_long: dict[str, str],
) -> tuple[_files.Reader, Any]:
    """A table's replay begun: the reader its problems are worded by, and the native core."""
    from tripwire.replay.formats import table

    reader = _files.Reader(stats.path, stats, results=fleet.settings.observe, columns=columns)
    stats.formats.add(table.NAME)
    fleet.register_file(index, stats)
    return reader, _native(fleet, native, stats, too_long)


def _unreadable(
    fleet: Fleet, stats: FileStats, reader: _files.Reader, core: Any, exc: Exception
) -> None:
    stats.unreadable = True
    message = f"corrupt or truncated; not read past row {core.row}: {exc}"
    _problem(fleet, stats, reader.problem(None, message))


def _end(stats: FileStats, core: Any) -> FileStats:
    core.finish()
    stats.turns += core.turns
    return stats


def _problem(fleet: Fleet, stats: FileStats, problem: Problem) -> None:
    stats.problems += 1
    fleet.problem(problem)
