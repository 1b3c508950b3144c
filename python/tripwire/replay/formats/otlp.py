"""OpenTelemetry GenAI tool spans, as the Collector's file exporter writes them: OTLP JSON, one
``{"resourceSpans": [...]}`` export request a line.

Read: ``execute_tool`` spans (``gen_ai.operation.name``, or the span name
``execute_tool {tool}``) with ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``; a run is a
``gen_ai.conversation.id`` (on the span or its resource), else a trace. A span whose status is
an error (or that has ``error.type``) is a failed call. Spans of tools as OpenInference
instrumentations write them (``openinference.span.kind`` ``TOOL``) are read too: see
``openinference``. The arguments and the result are opt-in attributes: a span without its
arguments is skipped and counted (its call cannot be compared with others), one without its
result is replayed on keys alone, as ``--hash-only`` does. Other spans (model calls, agents)
are ignored.

Specifications: OTLP JSON encoding, https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding
(opentelemetry-proto v1.5.0, trace/v1/trace.proto); GenAI spans, semantic conventions v1.38.0,
https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span ; the
file exporter, https://github.com/open-telemetry/opentelemetry-collector-contrib/tree/main/exporter/fileexporter
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from tripwire.replay.formats import openinference
from tripwire.replay.formats._base import Event, Format, Source, register
from tripwire.replay.formats._spans import SpanRuns

NAME: Final = "otel-genai"
EXECUTE_TOOL: Final = "execute_tool"
# OTLP's Status.code: STATUS_CODE_ERROR, as JSON writes it (the enum's number, or its name).
STATUS_ERROR: Final = (2, "STATUS_CODE_ERROR")


def is_record(value: dict[str, Any]) -> bool:
    return type(value.get("resourceSpans")) is list


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value (64-bit integers are JSON strings in OTLP)."""
    if type(value) is not dict:
        return None
    for key, item in value.items():
        if key == "stringValue" or key == "boolValue" or key == "doubleValue":
            return item
        if key == "intValue":
            # A string of digits, as OTLP writes 64-bit integers; else kept as it is.
            try:
                return int(item)
            except (TypeError, ValueError, OverflowError):  # not digits; NaN; Infinity
                return item
        if key == "arrayValue":
            values = item.get("values") if type(item) is dict else None
            return [any_value(v) for v in values] if type(values) is list else []
        if key == "kvlistValue":
            values = item.get("values") if type(item) is dict else None
            return attributes(values)
        if key == "bytesValue":
            return item
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` lists as a dict."""
    out: dict[str, Any] = {}
    if type(items) is list:
        for item in items:
            if type(item) is dict and type(item.get("key")) is str:
                out[item["key"]] = any_value(item.get("value"))
    return out


def _nanos(value: Any) -> int:
    """A start time (a string of digits, as OTLP writes 64-bit integers), 0 where it cannot
    be read: spans then keep the order they were read in."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # not digits; NaN; Infinity
        return 0


class Lines:
    __slots__ = ("_inference", "_runs", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._runs = SpanRuns(source, NAME)
        self._inference = SpanRuns(source, openinference.NAME)

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterable[Event]:
        self._source.stats.formats.add(NAME)
        problems: list[Event] = []
        for resource_spans in value["resourceSpans"]:
            if type(resource_spans) is not dict:
                continue
            resource = resource_spans.get("resource")
            common = attributes(resource.get("attributes")) if type(resource) is dict else {}
            scopes = resource_spans.get("scopeSpans")
            for scope in scopes if type(scopes) is list else ():
                spans = scope.get("spans") if type(scope) is dict else None
                for span in spans if type(spans) is list else ():
                    if type(span) is dict:
                        self._span(span, common, line, problems)
        return problems

    def _span(
        self, span: dict[str, Any], common: dict[str, Any], line: int | None, problems: list[Event]
    ) -> None:
        attrs = attributes(span.get("attributes"))
        status = span.get("status")
        failed = type(status) is dict and status.get("code") in STATUS_ERROR
        start = _nanos(span.get("startTimeUnixNano"))
        trace = span.get("traceId")
        trace = trace if type(trace) is str and trace else self._source.default_run
        if attrs.get("openinference.span.kind") == "TOOL":
            openinference.add(self._inference, attrs, trace, start, failed, line)
            return
        name = span.get("name")
        operation = attrs.get("gen_ai.operation.name")
        if operation != EXECUTE_TOOL and not (
            operation is None and type(name) is str and name.startswith(EXECUTE_TOOL)
        ):
            return
        tool = attrs.get("gen_ai.tool.name")
        if type(tool) is not str or not tool:
            problems.append(
                self._source.problem(line, "execute_tool span without gen_ai.tool.name; skipped")
            )
            return
        conversation = attrs.get("gen_ai.conversation.id", common.get("gen_ai.conversation.id"))
        run = conversation if type(conversation) is str and conversation else trace
        call_id = attrs.get("gen_ai.tool.call.id")
        result = (attrs["gen_ai.tool.call.result"],) if "gen_ai.tool.call.result" in attrs else None
        error = True if failed or "error.type" in attrs else None
        if result is None and error:
            # A failed call without its result recorded: what the span says of the failure.
            message = status.get("message") if type(status) is dict else None
            result = (message or attrs.get("error.type") or "error",)
        size = len(str(attrs.get("gen_ai.tool.call.arguments", "")))
        self._runs.add(
            run, start, tool, attrs.get("gen_ai.tool.call.arguments"),
            call_id if type(call_id) is str else None, result, error, line, size,
        )  # fmt: skip

    def finish(self) -> Iterable[Event]:
        return [*self._runs.finish(), *self._inference.finish()]


FORMAT = register(
    Format(
        name=NAME,
        help=(
            (
                NAME,
                "OpenTelemetry GenAI execute_tool spans, OTLP JSON lines (the Collector's file\n"
                "exporter); runs by gen_ai.conversation.id, else trace",
            ),
        ),
        order=20,
        is_record=is_record,
        lines=Lines,
    )
)
