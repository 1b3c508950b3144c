"""Tool-call spans (OpenTelemetry GenAI, OpenInference) turned into runs.

Spans are written when they end, by many processes, in no order a run can rely on: a
file's tool spans are kept (a few hundred bytes each, and the arguments and results as
logged) until the file ends, then each run's are put in order of start time (ties: the
order read) and replayed, one turn a span (a span is one tool call; spans say nothing of
which calls one model turn asked for together). Runs come out in the order their first
span was read. Memory is bounded by the file, not the fleet: write a big trace store as
many files (the Collector's file exporter rotates them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tripwire.replay.formats._base import Event, Result, Source, Turn, result_value

# What a run without recorded arguments gets: its calls cannot be compared (two calls of a
# tool without arguments would look identical), so they are skipped and counted in the
# file's unknown records under this name, not reported as bad input.
NO_ARGUMENTS = "tool span without arguments (opt-in: not recorded)"


@dataclass(slots=True)
class ToolSpan:
    start: int
    seq: int
    tool: str
    arguments: Any
    call_id: str
    # Whether the result was recorded (opt-in too: without it the guard compares the calls
    # by their keys alone, as ``--hash-only`` does).
    has_result: bool
    result: Any
    error: bool | None
    line: int | None
    size: int


@dataclass(slots=True)
class SpanRuns:
    """One file's tool spans, by run, until the file ends."""

    source: Source
    name: str
    runs: dict[str, list[ToolSpan]] = field(default_factory=dict)
    seq: int = 0

    def add(
        self,
        run: str,
        start: int,
        tool: str,
        arguments: Any,
        call_id: str | None,
        result: tuple[Any] | None,
        error: bool | None,
        line: int | None,
        size: int,
    ) -> None:
        self.source.stats.formats.add(self.name)
        self.seq += 1
        if arguments is None:
            unknown = self.source.stats.unknown
            key = f"{self.name}:{NO_ARGUMENTS}"
            unknown[key] = unknown.get(key, 0) + 1
            return
        spans = self.runs.get(run)
        if spans is None:
            spans = self.runs[run] = []
        spans.append(
            ToolSpan(
                start, self.seq, tool, arguments, call_id or f"\x00span{self.seq}",
                result is not None, None if result is None else result[0], error, line, size,
            )
        )  # fmt: skip

    def finish(self) -> list[Event]:
        events: list[Event] = []
        runs, self.runs = self.runs, {}
        for run, spans in runs.items():
            spans.sort(key=lambda span: (span.start, span.seq))
            for span in spans:
                args = span.arguments
                call = (span.tool, args, True) if type(args) is str else (span.tool, args, False)
                events.append(
                    Turn(
                        run, [call], None, span.size, None, span.line, self.name, None,
                        [span.call_id],
                    )
                )  # fmt: skip
                if span.has_result:
                    value = result_value(span.result)
                    events.append(Result(run, span.call_id, value, span.line, None, span.error))
        return events
