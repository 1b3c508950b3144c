"""OpenInference tool spans, as Arize Phoenix exports them: JSONL of Phoenix's span JSON
(``{"name", "context": {"trace_id", "span_id"}, "span_kind", "start_time", "status_code",
"attributes": {...}}``, the attributes nested or as dotted keys, as Phoenix writes them; and
the same spans as rows of its spans dataframe, with ``attributes.``-prefixed keys). OTLP
spans with OpenInference attributes are read by ``otlp``, through ``add``.

Read: spans whose ``openinference.span.kind`` (or ``span_kind``) is ``TOOL``, with
``tool.name``, ``input.value`` (the arguments, JSON text) and ``output.value`` (the result);
a run is a ``session.id``, else a trace. A span with status ``ERROR`` is a failed call.

Specification: OpenInference semantic conventions, spec/semantic_conventions.md and
spec/traces.md at https://github.com/Arize-ai/openinference (tool spans: ``tool.name``,
``tool.parameters``, ``input.value``, ``output.value``, ``session.id``); Phoenix's span
JSON: ``phoenix.trace.span_json_encoder`` / ``span_json_decoder`` (arize-phoenix 8.x).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from tripwire.replay.formats._base import Event, Format, Source, register
from tripwire.replay.formats._spans import SpanRuns

NAME: Final = "openinference"
TOOL: Final = "TOOL"


def _get(attrs: dict[str, Any], dotted: str) -> Any:
    """An attribute by its dotted name, whether stored flat or nested (Phoenix writes both)."""
    if dotted in attrs:
        return attrs[dotted]
    value: Any = attrs
    for part in dotted.split("."):
        if type(value) is not dict or part not in value:
            return None
        value = value[part]
    return value


def _attributes(value: dict[str, Any]) -> dict[str, Any]:
    attrs = value.get("attributes")
    if type(attrs) is dict:
        return attrs
    # A spans-dataframe row: "attributes.tool.name" keys at the top.
    return {k[len("attributes.") :]: v for k, v in value.items() if k.startswith("attributes.")}


def is_record(value: dict[str, Any]) -> bool:
    if "span_kind" in value and ("context" in value or "context.trace_id" in value):
        return True
    attrs = value.get("attributes")
    return type(attrs) is dict and _get(attrs, "openinference.span.kind") is not None


def _nanos(value: Any) -> int:
    """A span's start time in nanoseconds; 0 where it cannot be read (spans then keep the
    order they were read in): not a number or an ISO 8601 time, a number that is not
    finite (JSON's ``NaN``, ``Infinity``), a time out of the range of a timestamp."""
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if type(value) is str:
        try:
            stamp = datetime.fromisoformat(value).timestamp()
        except (ValueError, OverflowError, OSError):
            # Not a time; or one the platform's clock cannot place (year 1 as local time).
            return 0
        return int(stamp * 1_000_000) * 1000
    return 0


def add(
    runs: SpanRuns, attrs: dict[str, Any], trace: str, start: int, failed: bool, line: int | None
) -> None:
    """One TOOL span's call, given its attributes (nested or dotted) and where it belongs."""
    tool = _get(attrs, "tool.name")
    if type(tool) is not str or not tool:
        return
    session = _get(attrs, "session.id")
    run = session if type(session) is str and session else trace
    arguments = _get(attrs, "input.value")
    if arguments is None:
        arguments = _get(attrs, "tool.parameters")
    result = _get(attrs, "output.value")
    has_result = result is not None or "output.value" in attrs
    call_id = _get(attrs, "tool_call.id")
    size = len(arguments) if type(arguments) is str else 0
    runs.add(
        run, start, tool, arguments, call_id if type(call_id) is str else None,
        (result,) if has_result else None, True if failed else None, line, size,
    )  # fmt: skip


class Lines:
    __slots__ = ("_runs", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._runs = SpanRuns(source, NAME)

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterable[Event]:
        attrs = _attributes(value)
        kind = _get(attrs, "openinference.span.kind") or value.get("span_kind")
        self._source.stats.formats.add(NAME)
        if kind != TOOL:
            return ()
        context = value.get("context")
        trace = context.get("trace_id") if type(context) is dict else value.get("context.trace_id")
        trace = trace if type(trace) is str and trace else self._source.default_run
        failed = value.get("status_code") == "ERROR"
        add(self._runs, attrs, trace, _nanos(value.get("start_time")), failed, line)
        return ()

    def finish(self) -> Iterable[Event]:
        return self._runs.finish()


FORMAT = register(
    Format(
        name=NAME,
        help=(
            (
                NAME,
                "OpenInference TOOL spans as Phoenix exports them (JSONL of span JSON);\n"
                "runs by session.id, else trace",
            ),
        ),
        order=21,
        is_record=is_record,
        lines=Lines,
    )
)
