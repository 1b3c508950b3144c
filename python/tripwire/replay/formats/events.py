"""The events format: JSONL of ``{"run", "tool", "args", "usage"}``, one tool call a line.

``args`` (or ``arguments``, ``input``) is an object or a JSON string; ``run`` (or ``run_id``)
defaults to the file, and runs may interleave. Optional ``turn``: consecutive events of a run
with the same ``turn`` are one model call's parallel calls (its ``usage`` given on any of them;
the last one given counts); optional ``model`` names the model (prices are per model). A line
without ``tool`` but with ``usage`` is a model call without tool calls; one with only
``run``/``event`` (a budget entry, say) is noted and ignored. Results: ``"result"`` on a call's
line is what it returned (``null`` too: it returned nothing); or the call carries
``"call_id"`` and a later line ``{"run", "result_of": <call_id>, "result"}`` gives its result.

This is the hot path of big fleet logs: ``feed`` is a plain function returning a tuple.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from tripwire.replay.cost import Usage, UsageError, parse_usage
from tripwire.replay.formats._base import (
    Call,
    Event,
    Format,
    Result,
    Source,
    Turn,
    register,
    result_value,
)
from tripwire.replay.formats._base import call_id as _id

NAME: Final = "events"


@dataclass(slots=True)
class _PendingTurn:
    """A turn of the events format still taking calls, and the results given on its lines
    (they follow it once it is complete)."""

    turn: Any
    value: Turn
    results: list[Result] = field(default_factory=list)


def is_record(value: dict[str, Any]) -> bool:
    return "tool" in value or (
        "run" in value or "run_id" in value or "event" in value or "result_of" in value
    )


class Lines:
    __slots__ = ("_formats", "_pending", "_source", "_stats")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._stats = source.stats
        self._formats = source.stats.formats
        self._pending: dict[str, _PendingTurn] = {}

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> tuple[Event, ...]:
        """One line of the events format: usually one turn (the hot path of big fleet logs,
        so a plain function returning a tuple rather than a generator)."""
        self._formats.add(NAME)
        run = value.get("run")
        if run is None:
            run = value.get("run_id", self._source.default_run)
        if type(run) is not str or not run:
            if isinstance(run, int) and not isinstance(run, bool):
                run = str(run)
            else:
                return (
                    self._source.problem(line, f"run is {run!r}, not a name; line skipped", where),
                )
        calls: list[Call] = []
        call_id: str | None = None
        result: Result | None = None
        if "tool" in value:
            name = value["tool"]
            if type(name) is not str or not name:
                return (
                    self._source.problem(
                        line, f"tool is {name!r}, not a name; line skipped", where
                    ),
                )
            args = value.get("args")
            if args is None:
                args = value.get("arguments", value.get("input"))
            if type(args) is str:
                calls.append((name, args, True))
            else:
                calls.append((name, {} if args is None else args, False))
            if "call_id" in value:
                call_id = _id(value["call_id"])
            if "result" in value and self._source.results:
                # Linked by the call's own id, or one only this line has.
                call_id = call_id or f"\x00{line}{where}"
                result = Result(run, call_id, result_value(value["result"]), line, where)
        elif "result_of" in value:
            return self._result_line(value, run, line, where)
        usage: Usage | None = None
        problem: tuple[Event, ...] = ()
        raw_usage = value.get("usage")
        if raw_usage is not None:
            try:
                usage = parse_usage(raw_usage)
            except UsageError as exc:
                problem = (self._source.problem(line, f"{exc}; tokens estimated", where),)
        turn_id = value.get("turn")
        pending = self._pending.get(run) if self._pending else None
        flushed: tuple[Event, ...] = ()
        if pending is not None:
            if turn_id is not None and pending.turn == turn_id:
                merged = pending.value
                if call_id is not None or merged.call_ids is not None:
                    merged_ids = merged.call_ids or [None] * len(merged.calls)
                    merged_ids.extend([call_id] * len(calls))
                    merged.call_ids = merged_ids
                merged.calls.extend(calls)
                merged.produced += size
                if usage is not None:
                    merged.usage = usage
                if result is not None:
                    pending.results.append(result)
                return problem
            del self._pending[run]
            flushed = (pending.value, *pending.results)
        if not calls and usage is None:
            # A budget entry, a note: part of the trace, not a model call.
            self._stats.ignored += 1
            return problem + flushed
        ids: list[str | None] | None = None if call_id is None else [call_id]
        model = value.get("model")
        turn = Turn(
            run, calls, usage, size, None, line, NAME, where, ids,
            model if type(model) is str else None,
        )  # fmt: skip
        if turn_id is not None:
            self._pending[run] = _PendingTurn(turn_id, turn, [] if result is None else [result])
            return problem + flushed
        if result is not None:
            return (*problem, *flushed, turn, result)
        if problem or flushed:
            return (*problem, *flushed, turn)
        return (turn,)

    def _result_line(
        self, value: dict[str, Any], run: str, line: int | None, where: str | None
    ) -> tuple[Event, ...]:
        """``{"run", "result_of": <call id>, "result"}``: the result of an earlier call. One
        given while its run's turn is still taking calls waits for the turn."""
        call_id = _id(value["result_of"])
        if call_id is None:
            what = f"result_of is {value['result_of']!r}, not a call id; line skipped"
            return (self._source.problem(line, what, where),)
        if "result" not in value:
            return (self._source.problem(line, "result_of without a result; line skipped", where),)
        result = Result(run, call_id, result_value(value["result"]), line, where)
        pending = self._pending.get(run) if self._pending else None
        if pending is not None:
            pending.results.append(result)
            return ()
        return (result,)

    def finish(self) -> Iterable[Event]:
        """End of file: turns still open are complete."""
        pending, self._pending = self._pending, {}
        events: list[Event] = []
        for item in pending.values():
            events.append(item.value)
            events.extend(item.results)
        return events


FORMAT = register(
    Format(
        name=NAME,
        help=(
            (
                NAME,
                'JSONL of {"run": ..., "tool": ..., "args": {...} or "json text",\n'
                '"usage": {"input_tokens": ..., "output_tokens": ...}, "model": ...}',
            ),
        ),
        # After the formats whose records are more specific: a "run" key is common.
        order=110,
        is_record=is_record,
        lines=Lines,
    )
)
