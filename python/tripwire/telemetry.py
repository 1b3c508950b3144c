"""The guard's nudges and stops as OpenTelemetry data, when ``opentelemetry-api`` is installed
(``pip install 'tripwire[otel]'``); without it every function here does nothing.

- An event named ``gen_ai.guardrail.result`` on the current span for each nudge and stop:
  ``gen_ai.guardrail.name`` (``tripwire``), ``gen_ai.guardrail.action`` (``nudge``,
  ``stop``), ``gen_ai.guardrail.reason`` (a stop's: ``loop_detected``, ``no_progress``,
  ``budget_exhausted``), ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` (where the call has
  one), ``tripwire.key``, ``tripwire.repeats`` and ``tripwire.step``.
- A counter, ``tripwire.guard.results``, of the same, labelled only by ``tripwire.action``,
  ``tripwire.reason`` (``none`` for a nudge) and ``gen_ai.tool.name``: never a run id, call
  id or key, whose values are unbounded (each would be a new time series).

The adapters (``tripwire.adapters.*``) call these for every decision they ask the guard
for; a hand-written loop calls ``emit_turn`` with the verdicts of ``check_turn`` (or
``emit`` with one ``check``'s). Nothing is emitted for calls that were allowed: a loop
guard's telemetry is about the runs it acted on, and allowed calls are the tools' own spans.
``record`` and ``record_turn`` are their old names (deprecated: they warn, then do the same).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, Final

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised where opentelemetry-api is absent
    _metrics = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

__all__ = ("COUNTER", "ENABLED", "EVENT", "emit", "emit_turn", "record", "record_turn")

EVENT: Final = "gen_ai.guardrail.result"
COUNTER: Final = "tripwire.guard.results"
ENABLED: Final = _trace is not None

# Made on first use, from the global meter provider: the API's proxy meter binds to a
# provider set later, so an application that configures OpenTelemetry after importing
# tripwire still gets the counts.
_counter: Any = None


def _results_counter() -> Any:
    global _counter
    if _counter is None:
        from tripwire import __version__

        meter = _metrics.get_meter("tripwire", __version__)
        _counter = meter.create_counter(
            COUNTER,
            unit="{result}",
            description="Tool calls the loop guard nudged or stopped",
        )
    return _counter


def emit(verdict: Any) -> None:
    """One verdict: an event on the current span and a count, if it is a nudge or a stop."""
    if _trace is None or verdict.action == "allow":
        return
    attributes: dict[str, Any] = {
        "gen_ai.guardrail.name": "tripwire",
        "gen_ai.guardrail.action": verdict.action,
        "gen_ai.tool.name": verdict.tool,
        "tripwire.key": verdict.key,
        "tripwire.repeats": verdict.repeats,
        "tripwire.step": verdict.step,
    }
    # A nudge has no reason (it is a warning); attributes cannot be None.
    if verdict.reason is not None:
        attributes["gen_ai.guardrail.reason"] = verdict.reason
    if verdict.call_id is not None:
        attributes["gen_ai.tool.call.id"] = verdict.call_id
    _trace.get_current_span().add_event(EVENT, attributes)
    labels = {
        "tripwire.action": verdict.action,
        "tripwire.reason": verdict.reason or "none",
        "gen_ai.tool.name": verdict.tool,
    }
    _results_counter().add(1, labels)


def emit_turn(verdicts: Iterable[Any]) -> None:
    """The verdicts of one turn (``Guard.check_turn``), each decision once: a copy of
    another call of the turn (``duplicate_of``) is that call's decision, and a stop is
    emitted for the call that met it, not again for each call it leaves unanswered."""
    if _trace is None:
        return
    for verdict in verdicts:
        if verdict.action == "allow" or verdict.duplicate_of is not None:
            continue
        emit(verdict)
        if verdict.action == "stop":
            return


def record(verdict: Any) -> None:
    """Deprecated: ``emit``, under its old name."""
    warnings.warn(
        "tripwire.telemetry.record() is deprecated: use tripwire.telemetry.emit()",
        DeprecationWarning,
        stacklevel=2,
    )
    emit(verdict)


def record_turn(verdicts: Iterable[Any]) -> None:
    """Deprecated: ``emit_turn``, under its old name."""
    warnings.warn(
        "tripwire.telemetry.record_turn() is deprecated: use tripwire.telemetry.emit_turn()",
        DeprecationWarning,
        stacklevel=2,
    )
    emit_turn(verdicts)
