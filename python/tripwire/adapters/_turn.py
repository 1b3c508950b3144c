"""One model turn through a guard, whatever the SDK: the calls it asked for, the verdicts,
the results the harness observes, and one answer for every call id.

Every provider wants exactly one result per call id in the next request, so ``answers``
answers each: a call that ran with its result; a call the guard served from its read cache
(``verdict.cached``: the kept result of the same call to a declared ``read`` tool) with that
result, without running it, as the MCP adapter does; a nudged call with the guard's message,
as an error; a copy of another call in the same turn (``duplicate_of``) with that call's
result (it ran once); a call whose arguments were not valid JSON with what was wrong (it
cannot run); and on a stop, every call the stop left pending with the stop's message.
"""

from __future__ import annotations

import decimal
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import tripwire
from tripwire.telemetry import emit_turn


def field_of(obj: Any, name: str) -> Any:
    """A field of an SDK object or of its dict form."""
    if type(obj) is dict:
        return obj.get(name)
    return getattr(obj, name, None)


# Results that are not text are sent as JSON; anything JSON cannot write, as its str.
_to_json = json.JSONEncoder(ensure_ascii=False, default=str).encode


def as_text(result: Any) -> str:
    """A tool's result as the text a tool message carries. Never raises an ``Exception``:
    whatever a tool returned, the model gets an answer to its call."""
    if type(result) is str:
        return result
    try:
        if isinstance(result, (bytes, bytearray)):
            return bytes(result).decode("utf-8", "replace")
        dump = getattr(result, "model_dump", None)
        if callable(dump):
            result = dump(mode="json")
        return _to_json(result)
    except Exception:
        pass
    if isinstance(result, int) and not isinstance(result, bool):
        # Longer than Python will print (sys.get_int_max_str_digits(), 4,300 digits by
        # default): decimal's conversion has no such limit.
        return str(decimal.Decimal(int.__index__(result)))
    try:
        return str(result)
    except Exception:
        return f"<a {type(result).__name__} that cannot be written as text>"


def _error_text(error: Any) -> str:
    """An exception as the model reads it, even one whose ``__str__`` raises."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return type(error).__name__


class LoopStopped(RuntimeError):
    """The guard stopped the run (raised by the adapters whose framework ends a run with an
    exception): ``verdict`` is the stop, its ``message`` the exception's text."""

    def __init__(self, verdict: tripwire.Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


@dataclass(slots=True)
class ToolCall:
    """One call of the turn: its id, tool name, arguments (``None`` where the model's JSON
    text did not parse: then ``verdict.invalid_arguments`` says why), and the guard's
    verdict."""

    id: str
    name: str
    arguments: Any
    verdict: tripwire.Verdict
    # Its place in the turn.
    index: int


@dataclass(slots=True)
class Answer:
    """What to send back for one call id: the text, and whether it is an error."""

    id: str
    content: str
    is_error: bool


def _parsed(raw: Any, verdict: tripwire.Verdict) -> Any:
    if verdict.invalid_arguments is not None:
        return None
    if isinstance(raw, (str, bytes, bytearray)):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return None
    return raw


def _invalid_text(verdict: tripwire.Verdict) -> str:
    return (
        f"The arguments of this call to {verdict.tool} are not valid JSON "
        f"({verdict.invalid_arguments}). Send them again as one JSON object."
    )


@dataclass
class Turn:
    """The calls of one model response, checked as one turn (``Guard.check_turn``)."""

    guard: Any
    calls: list[ToolCall]
    # The calls to dispatch (see ``to_run``).
    to_run: list[ToolCall] = field(default_factory=list)
    _results: dict[int, tuple[Any, bool]] = field(default_factory=dict)

    @classmethod
    def check(cls, guard: Any, calls: Sequence[tuple[str, str, Any]]) -> Self:
        """``calls``: ``(id, name, arguments)``, arguments as the SDK holds them (JSON text
        or a dict)."""
        verdicts = guard.check_turn([(name, raw, call_id) for call_id, name, raw in calls])
        emit_turn(verdicts)
        turn = cls(guard, [])
        for index, ((call_id, name, raw), verdict) in enumerate(zip(calls, verdicts, strict=True)):
            call = ToolCall(call_id, name, _parsed(raw, verdict), verdict, index)
            turn.calls.append(call)
            if verdict.action != "allow" or verdict.duplicate_of is not None:
                continue
            if verdict.cached is not None:
                # Served from the guard's read cache: the tool is not run again.
                turn._results[index] = (verdict.cached, False)
                continue
            if verdict.invalid_arguments is None:
                turn.to_run.append(call)
                continue
            # Broken arguments cannot run: answered now, and told to the guard as the error
            # they are, so a model that keeps sending them is seen failing the same way.
            text = _invalid_text(verdict)
            guard.observe(verdict, text, error=True)
            turn._results[index] = (text, True)
        return turn

    @property
    def stop(self) -> tripwire.Verdict | None:
        """The verdict that stopped the run in this turn (or before it), if one did."""
        for call in self.calls:
            if call.verdict.action == "stop":
                return call.verdict
        return None

    @property
    def stopped(self) -> bool:
        """The run must end: send no further request (or only the answers, for a summary)."""
        return self.stop is not None

    def observe(
        self,
        call: ToolCall | str,
        result: Any,
        /,
        *,
        error: Any = None,
        transient: bool | None = None,
    ) -> None:
        """The result of a call that ran (``call``: the ``ToolCall`` or its id), told to the
        guard (``Guard.observe``: ``error`` and ``transient`` as it takes them), kept in its
        read cache where the tool is declared ``read`` (``Guard.keep``), and kept for
        ``answers``."""
        index = call.index if isinstance(call, ToolCall) else self._index(call)
        verdict = self.calls[index].verdict
        if verdict.action != "allow" or verdict.duplicate_of is not None:
            raise ValueError(f"call {self.calls[index].id!r} was not to run ({verdict.action})")
        if verdict.cached is not None:
            raise ValueError(
                f"call {self.calls[index].id!r} was not to run (served from the guard's read cache)"
            )
        if error is None and transient is None:  # the common case, without keywords
            self.guard.observe(verdict, result)
        else:
            self.guard.observe(verdict, result, error=error, transient=transient)
        failed = error is not None and error is not False
        if not failed and self.guard.policy_of(verdict.tool) == ("read", "declared"):
            self.guard.keep(verdict, result)
        if result is None and failed and error is not True:
            # The error is all there is to tell the model.
            result = error if isinstance(error, str) else _error_text(error)
        self._results[index] = (result, failed)

    def record(
        self,
        call: ToolCall | str,
        result: Any,
        /,
        *,
        error: Any = None,
        transient: bool | None = None,
    ) -> None:
        """Deprecated: ``observe``, under its old name."""
        warnings.warn(
            "Turn.record() is deprecated: use Turn.observe(), which does the same",
            DeprecationWarning,
            stacklevel=2,
        )
        self.observe(call, result, error=error, transient=transient)

    def _index(self, call: ToolCall | str) -> int:
        for index, known in enumerate(self.calls):
            if known is call or known.id == call:
                return index
        raise ValueError(f"no call {call!r} in this turn")

    def answers(self) -> list[Answer]:
        """One answer per call id, in the order of the calls. Raises ``ValueError`` naming a
        call that ran but whose result was not observed."""
        return [Answer(*answer) for answer in self._answers()]

    def _answers(self) -> list[tuple[str, str, bool]]:
        """``answers`` as ``(id, content, is_error)`` tuples, for the SDK shapes."""
        out: list[tuple[str, str, bool]] = []
        results = self._results
        for call in self.calls:
            verdict = call.verdict
            action = verdict.action
            if action != "allow":
                out.append((call.id, verdict.message or "", True))
                continue
            source = verdict.duplicate_of
            if source is None:
                source = call.index
            answer = results.get(source)
            if answer is None:
                raise ValueError(
                    f"no result recorded for call {self.calls[source].id!r} "
                    f"({self.calls[source].name}): every call id must be answered"
                )
            out.append((call.id, as_text(answer[0]), answer[1]))
        return out
