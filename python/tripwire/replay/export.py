"""Results as data: ``--out results.parquet`` (one row a run) and ``--calls-out calls.parquet``
(one row a call, with the guard's verdict), for DuckDB, polars or pyarrow. Written from the
same ``Report`` as the terminal report and the HTML page.

Each is written to a temporary file beside its destination and renamed over it once whole,
so a replay that fails (or is interrupted) leaves no half-written file. Needs pyarrow (the
``parquet`` extra).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from typing import Any, Final

from tripwire.replay.simulate import CallRow, Report, RunResult

ROWS_PER_BATCH: Final = 65_536


class ExportError(Exception):
    """The file cannot be written (pyarrow missing, a directory that is not there)."""


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ExportError(
            "writing Parquet needs pyarrow: pip install 'tripwire[parquet]'"
        ) from None
    return pyarrow


def run_schema(pa: Any) -> Any:
    text, integer, number = pa.string(), pa.int64(), pa.float64()
    return pa.schema(
        [
            ("run", text), ("file", text), ("line", integer), ("format", text),
            ("part", integer), ("steps", integer), ("model_calls", integer),
            ("nudges", integer), ("nudge_step", integer), ("nudge_tool", text),
            ("stopped", pa.bool_()), ("stop_step", integer), ("reason", text), ("tool", text),
            ("repeats", integer), ("key", text), ("stop_location", text), ("stop_call", text),
            ("stop_message", text), ("steps_saved", integer), ("model_calls_saved", integer),
            ("tokens_source", text), ("input_tokens", integer), ("output_tokens", integer),
            ("cached_tokens", integer), ("cache_write_tokens", integer),
            ("input_tokens_saved", integer), ("output_tokens_saved", integer),
            ("cost", number), ("cost_guarded", number), ("cost_saved", number),
            ("invalid_arguments", integer), ("skipped_calls", integer), ("results", integer),
            ("results_unlinked", integer), ("model", text), ("reward", number),
            ("timeline", text),
        ]
    )  # fmt: skip


def _run_row(run: RunResult) -> tuple[Any, ...]:
    c = run.counts
    return (
        run.run, run.file, run.line, run.format, run.part, c.steps, c.turns, c.nudges,
        run.nudge_step, run.nudge_tool, run.stopped, run.stop_step, run.reason, run.tool,
        run.repeats, run.key, run.stop_location, run.stop_call, run.stop_message,
        c.steps_saved, c.turns_saved, run.tokens_source, c.input_tokens, c.output_tokens,
        c.cached_tokens, c.cache_write_tokens, c.input_tokens_saved, c.output_tokens_saved,
        c.cost, c.cost_guarded, c.cost_saved, c.invalid_arguments, c.skipped_calls,
        c.results, c.results_unlinked, run.model, run.reward, run.timeline,
    )  # fmt: skip


def call_schema(pa: Any) -> Any:
    text, integer = pa.string(), pa.int64()
    return pa.schema([(name, text if name in _TEXT else integer) for name in CallRow._fields])


_TEXT: Final = frozenset({"file", "run", "tool", "action", "reason", "where"})


class _Writer:
    """Rows to a Parquet file in batches, renamed into place by ``commit``."""

    def __init__(self, path: str, schema: Any) -> None:
        pa = _pyarrow()
        self._pa = pa
        self._schema = schema
        self._path = path
        directory = os.path.dirname(os.path.abspath(path))
        try:
            fd, self._tmp = tempfile.mkstemp(
                prefix=".tripwire-", suffix=".parquet.part", dir=directory
            )
        except OSError as exc:
            raise ExportError(f"{path}: {exc.strerror or exc}") from None
        os.close(fd)
        self._writer = pa.parquet.ParquetWriter(self._tmp, schema, compression="zstd")
        self._rows: list[tuple[Any, ...]] = []

    def add(self, row: tuple[Any, ...]) -> None:
        self._rows.append(row)
        if len(self._rows) >= ROWS_PER_BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        columns = list(zip(*self._rows, strict=True))
        arrays = [
            self._pa.array(column, type=field.type)
            for column, field in zip(columns, self._schema, strict=True)
        ]
        self._writer.write_batch(self._pa.record_batch(arrays, schema=self._schema))
        self._rows = []

    def commit(self) -> None:
        self._flush()
        self._writer.close()
        try:
            os.replace(self._tmp, self._path)
        except OSError as exc:
            self.abort()
            raise ExportError(f"{self._path}: {exc.strerror or exc}") from None

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)


def write_runs(report: Report, path: str) -> None:
    """``--out``: one row a run."""
    pa = _pyarrow()
    writer = _Writer(path, run_schema(pa))
    try:
        for run in report.runs:
            writer.add(_run_row(run))
    except BaseException:
        writer.abort()
        raise
    writer.commit()


class CallsWriter:
    """``--calls-out``: one row a call, as the replay hears of them (``on_call``); ``commit``
    once the replay is done, ``abort`` if it failed."""

    def __init__(self, path: str) -> None:
        self._writer = _Writer(path, call_schema(_pyarrow()))

    def __call__(self, row: CallRow) -> None:
        self._writer.add(row)

    def commit(self) -> None:
        self._writer.commit()

    def abort(self) -> None:
        self._writer.abort()


def runs_table(runs: Iterable[RunResult]) -> Any:
    """The runs as a ``pyarrow.Table`` (as ``--out`` writes them)."""
    pa = _pyarrow()
    schema = run_schema(pa)
    rows = [_run_row(run) for run in runs]
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.table(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )
