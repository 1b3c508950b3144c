"""A long table of calls, one row a call, from Parquet or any Arrow stream (the PyCapsule
interface, ``__arrow_c_stream__``: pyarrow, polars, DuckDB results); read through pyarrow
(the ``parquet`` extra).

Columns (``COLUMNS``; other names through a column mapping, ``--column NAME=THEIRS``):

* ``run`` (text or integer), ``tool`` (text), ``arguments`` (JSON text, or a struct / map
  value): required;
* ``step`` (integer): the call's number in its run, kept in ``--calls-out``; rows are replayed
  in the table's order, so a run's rows come together and in order (``ORDER BY run, step``):
  a run seen again after another is a new part of it, as in every format;
* ``result`` (JSON text or plain text, or a value; null: not recorded), ``error`` (boolean, or
  text: an error message, which is the result when there is none);
* ``turn``: consecutive rows of a run with the same turn are one model call's parallel calls;
  ``call_id``; ``model``; ``usage`` (a struct or JSON text of ``input_tokens``,
  ``output_tokens``, ...: as the events format takes it, given on any row of the turn);
  ``label``: the run's outcome (a reward, or a success flag), on any of its rows.

A file with a required column missing or of a type that cannot mean it is reported naming
the file and the column, and skipped; a cell longer than the line limit (64 MiB) is reported
naming the file, the row and the column, and its row skipped; a corrupt file is reported and
what was read before the damage counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from tripwire.replay.cost import Usage, UsageError, parse_usage
from tripwire.replay.formats import files
from tripwire.replay.formats._base import (
    Call,
    Event,
    Format,
    Result,
    RunEnd,
    Source,
    Turn,
    register,
    result_value,
)
from tripwire.replay.formats._base import reward as _reward

NAME: Final = "table"
PARQUET_MAGIC: Final = b"PAR1"
REQUIRED: Final = ("run", "tool", "arguments")
OPTIONAL: Final = ("step", "result", "error", "turn", "call_id", "model", "usage", "label")
COLUMNS: Final = REQUIRED + OPTIONAL
BATCH_ROWS: Final = 16_384
# A Parquet row group whose wanted columns decode to more than this is not read (see
# ``_row_groups``): 4x the line limit, so that a cell over the limit in a row group of
# ordinary size is still read, and reported alone.
MAX_ROW_GROUP_BYTES = 256 << 20


class _Oversized(Exception):
    """A row group too big to read: skipped, and reading goes on with the next."""


class TableError(Exception):
    """A table that cannot be read as calls: the message names the column."""


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        return None
    return pyarrow


def _kinds(pa: Any) -> dict[str, tuple[str, Any]]:
    """Per column, what its type must be: (what the message says, the test)."""
    t = pa.types

    def text(ty: Any) -> bool:
        return bool(t.is_string(ty) or t.is_large_string(ty) or _view(t, ty))

    def name(ty: Any) -> bool:
        return text(ty) or bool(t.is_integer(ty))

    def value(ty: Any) -> bool:
        return text(ty) or bool(t.is_struct(ty) or t.is_map(ty) or t.is_list(ty))

    def anything(ty: Any) -> bool:
        return True

    def flag(ty: Any) -> bool:
        return text(ty) or bool(t.is_boolean(ty))

    def integer(ty: Any) -> bool:
        return bool(t.is_integer(ty))

    def number(ty: Any) -> bool:
        return bool(t.is_integer(ty) or t.is_floating(ty) or t.is_boolean(ty))

    def usage(ty: Any) -> bool:
        return text(ty) or bool(t.is_struct(ty) or t.is_map(ty))

    return {
        "run": ("text or integer", name),
        "tool": ("text", text),
        "arguments": ("JSON text, or a struct or map", value),
        "step": ("integer", integer),
        "result": ("any", anything),
        "error": ("boolean or text", flag),
        "turn": ("text or integer", name),
        "call_id": ("text or integer", name),
        "model": ("text", text),
        "usage": ("a struct, map or JSON text", usage),
        "label": ("a number or boolean", number),
    }


def _view(t: Any, ty: Any) -> bool:
    is_view = getattr(t, "is_string_view", None)
    return bool(is_view is not None and is_view(ty))


def _plan(pa: Any, schema: Any, mapping: Mapping[str, str] | None) -> dict[str, str]:
    """Our column -> the table's, checked: raises ``TableError`` naming the column."""
    mapping = mapping or {}
    names = set(schema.names)
    kinds = _kinds(pa)
    plan: dict[str, str] = {}
    for column in COLUMNS:
        theirs = mapping.get(column, column)
        if theirs not in names:
            if column in REQUIRED:
                has = ", ".join(schema.names[:12])
                mapped = f" (mapped to {theirs!r})" if theirs != column else ""
                raise TableError(f"column {column!r}{mapped} missing (has: {has})")
            continue
        ty = schema.field(theirs).type
        if pa.types.is_dictionary(ty):  # pandas categoricals: read as their values
            ty = ty.value_type
        what, test = kinds[column]
        if not (pa.types.is_null(ty) or test(ty)):
            raise TableError(f"column {theirs!r} is {ty}, not {what}")
        plan[column] = theirs
    return plan


def _map_pairs(value: Any) -> Any:
    """An Arrow map as Python lists it (a list of pairs), as a dict."""
    if type(value) is list and all(type(item) is tuple and len(item) == 2 for item in value):
        return dict(value)
    return value


class _Rows:
    """The table's rows, batch by batch, as events."""

    def __init__(self, source: Source, pa: Any, plan: dict[str, str]) -> None:
        self.source = source
        self.pa = pa
        self.plan = plan
        self.row = 0
        self.run: str | None = None
        self.label: float | None = None
        self.turn: Turn | None = None
        self.turn_id: Any = None
        self.results: list[Result] = []

    def batch(self, batch: Any) -> Iterator[Event]:
        pa = self.pa
        columns: dict[str, list[Any]] = {}
        too_long: dict[int, str] = {}
        for column, theirs in self.plan.items():
            array = batch.column(batch.schema.get_field_index(theirs))
            if array.nbytes > files.MAX_LINE_BYTES and (
                pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
            ):
                import pyarrow.compute as pc

                lengths = pc.binary_length(array).to_pylist()
                for index, length in enumerate(lengths):
                    if length is not None and length > files.MAX_LINE_BYTES:
                        too_long.setdefault(index, theirs)
            columns[column] = array.to_pylist() if not too_long else _clipped(array, too_long)
        count = batch.num_rows
        get = columns.get
        runs, tools, args = columns["run"], columns["tool"], columns["arguments"]
        results, errors, turns = get("result"), get("error"), get("turn")
        ids, models, usages, labels = get("call_id"), get("model"), get("usage"), get("label")
        for index in range(count):
            self.row += 1
            row = self.row
            if index in too_long:
                yield self.source.problem(
                    None,
                    f"column {too_long[index]!r}: cell longer than {files.MAX_LINE_BYTES:,} "
                    "bytes; row skipped",
                    f"row {row}",
                )
                continue
            run = runs[index]
            if type(run) is int:
                run = str(run)
            if type(run) is not str or not run:
                yield self.source.problem(
                    None, f"run is {run!r}, not a name; row skipped", f"row {row}"
                )
                continue
            if run != self.run:
                yield from self.end()
                self.run = run
            tool = tools[index]
            if type(tool) is not str or not tool:
                yield self.source.problem(
                    None, f"tool is {tool!r}, not a name; row skipped", f"row {row}"
                )
                continue
            raw = args[index]
            call: Call = (
                (tool, raw, True) if type(raw) is str else (tool, _map_pairs(raw) or {}, False)
            )
            usage: Usage | None = None
            if usages is not None and usages[index] is not None:
                raw_usage = usages[index]
                try:
                    if type(raw_usage) is str:
                        raw_usage = json.loads(raw_usage)
                    usage = parse_usage(_map_pairs(raw_usage))
                except (UsageError, ValueError) as exc:
                    yield self.source.problem(None, f"usage: {exc}; tokens estimated", f"row {row}")
            if labels is not None and labels[index] is not None:
                self.label = _reward(labels[index])
            call_id = ids[index] if ids is not None else None
            call_id = str(call_id) if call_id is not None else f"\x00row{row}"
            result = self._result(run, call_id, results, errors, index, row)
            model = models[index] if models is not None else None
            turn_id = turns[index] if turns is not None else None
            size = len(raw) if type(raw) is str else 0
            pending = self.turn
            if pending is not None and turn_id is not None and turn_id == self.turn_id:
                pending.calls.append(call)
                assert pending.call_ids is not None
                pending.call_ids.append(call_id)
                pending.produced += size
                if usage is not None:
                    pending.usage = usage
            else:
                yield from self._flush()
                self.turn = Turn(
                    run, [call], usage, size, None, None, NAME, f"row {row}", [call_id],
                    model if type(model) is str else None,
                )  # fmt: skip
                self.turn_id = turn_id
            if result is not None:
                self.results.append(result)

    def _result(
        self,
        run: str,
        call_id: str,
        results: list[Any] | None,
        errors: list[Any] | None,
        index: int,
        row: int,
    ) -> Result | None:
        value = results[index] if results is not None else None
        error = errors[index] if errors is not None else None
        failed: bool | None = None
        if type(error) is bool:
            failed = error
        elif type(error) is str and error:
            failed = True
            if value is None:
                value = error
        if value is None:
            return None
        return Result(run, call_id, result_value(_map_pairs(value)), None, f"row {row}", failed)

    def _flush(self) -> Iterator[Event]:
        if self.turn is not None:
            yield self.turn
            self.turn = None
            yield from self.results
            self.results = []

    def end(self) -> Iterator[Event]:
        """The run's rows are over: its last turn, and its end with its label."""
        yield from self._flush()
        if self.run is not None:
            yield RunEnd(self.run, self.label)
        self.run, self.label = None, None


def _clipped(array: Any, too_long: dict[int, str]) -> list[Any]:
    """A column with cells over the limit, as Python values, those cells left out (never
    copied into Python strings)."""
    out: list[Any] = []
    for index in range(len(array)):
        out.append(None if index in too_long else array[index].as_py())
    return out


def read_batches(source: Source, batches: Any, schema: Any) -> Iterator[Event]:
    """Rows from record batches (a ``RecordBatchReader``, or a Parquet file's ``iter_batches``)
    of a table whose ``schema`` is given."""
    pa = _pyarrow()
    source.stats.formats.add(NAME)
    try:
        plan = _plan(pa, schema, getattr(source, "columns", None))
    except TableError as exc:
        yield source.problem(None, f"{exc}; file skipped")
        source.stats.unreadable = True
        return
    rows = _Rows(source, pa, plan)
    try:
        for batch in batches:
            if isinstance(batch, _Oversized):
                rows.row = source.stats.lines
                yield source.problem(None, str(batch))
                continue
            source.stats.lines += batch.num_rows
            yield from rows.batch(batch)
    except (pa.ArrowException, OSError) as exc:
        source.stats.unreadable = True
        yield source.problem(None, f"corrupt or truncated; not read past row {rows.row}: {exc}")
    yield from rows.end()


def read_parquet(source: Source, path: str) -> Iterator[Event]:
    pa = _pyarrow()
    if pa is None:
        yield source.problem(None, "a Parquet file: install tripwire[parquet] (pyarrow) to read it")
        return
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError) as exc:
        source.stats.unreadable = True
        yield source.problem(None, f"not a readable Parquet file ({exc}); file skipped")
        return
    try:
        plan = _plan(pa, schema, getattr(source, "columns", None))
    except TableError as exc:
        source.stats.unreadable = True
        yield source.problem(None, f"{exc}; file skipped")
        return
    wanted = list(dict.fromkeys(plan.values()))
    yield from read_batches(source, _row_groups(source, parquet, wanted), schema)


def _row_groups(source: Source, parquet: Any, wanted: list[str]) -> Iterator[Any]:
    """The file's batches, row group by row group; a row group whose wanted columns would
    take more than ``MAX_ROW_GROUP_BYTES`` to decode (a cell of a gigabyte) is skipped, its
    rows counted, so that memory stays bounded whatever a cell holds."""
    metadata = parquet.metadata
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    for group in range(metadata.num_row_groups):
        info = metadata.row_group(group)
        sizes: dict[str, int] = {}
        for index, name in enumerate(names):
            top = name.split(".")[0]
            if top in wanted:
                sizes[top] = sizes.get(top, 0) + info.column(index).total_uncompressed_size
        column, size = max(sizes.items(), key=lambda item: item[1], default=("", 0))
        if size > MAX_ROW_GROUP_BYTES:
            first = source.stats.lines + 1
            source.stats.lines += info.num_rows
            yield _Oversized(
                f"column {column!r} holds {size:,} bytes in row group {group} (rows {first:,} "
                f"to {source.stats.lines:,}), over {MAX_ROW_GROUP_BYTES:,}; row group skipped"
            )
            continue
        yield from parquet.iter_batches(BATCH_ROWS, row_groups=[group], columns=wanted)


def read_stream(source: Source, stream: Any) -> Iterator[Event]:
    """Any object with ``__arrow_c_stream__`` (pyarrow, polars, DuckDB)."""
    pa = _pyarrow()
    if pa is None:
        yield source.problem(
            None, "an Arrow stream: install tripwire[parquet] (pyarrow) to read it"
        )
        return
    try:
        reader = pa.RecordBatchReader.from_stream(stream)
    except (pa.ArrowException, TypeError) as exc:
        yield source.problem(None, f"not a readable Arrow stream ({exc}); skipped")
        return
    yield from read_batches(source, reader, reader.schema)


FORMAT = register(
    Format(
        name=NAME,
        help=(
            (
                NAME,
                "Parquet (or an Arrow stream, from Python) of calls, one row a call: run, tool,\n"
                "arguments, and optional step, result, error, turn, call_id, model, usage, label",
            ),
        ),
        order=5,
        magic=PARQUET_MAGIC,
        open=read_parquet,
        suffixes=(".parquet",),
    )
)
