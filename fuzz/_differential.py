"""What both fuzz targets share: running one call on each backend and comparing the outcomes.

An outcome is ``("ok", value)`` or a tuple describing the exception: its exact type and, for
``json.JSONDecodeError``, its ``msg``/``pos``/``lineno``/``colno`` (the reference's are the
contract). Messages of other exceptions are compared too when ``TRIPWIRE_FUZZ_MESSAGES=1``
(off by default: the contract is the exception *type*).

A disagreement raises ``Mismatch`` (an ``AssertionError``), which atheris reports as a
crash and saves the input that caused it.
"""

from __future__ import annotations

import json
import os
import reprlib
from collections.abc import Callable, Sequence
from typing import Any

STRICT_MESSAGES = os.environ.get("TRIPWIRE_FUZZ_MESSAGES", "0") == "1"

# Every public field of a Verdict, ``message`` included (``cached`` compared by identity).
VERDICT_FIELDS = (
    "action",
    "reason",
    "tool",
    "key",
    "repeats",
    "step",
    "message",
    "call_id",
    "duplicate_of",
    "invalid_arguments",
)


class Mismatch(AssertionError):
    """The native core and the reference disagree."""


def describe_exception(exc: BaseException) -> tuple[Any, ...]:
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    if isinstance(exc, json.JSONDecodeError):
        return (kind, exc.msg, exc.pos, exc.lineno, exc.colno)
    notes = tuple(getattr(exc, "__notes__", ()))
    if STRICT_MESSAGES:
        return (kind, str(exc), notes)
    return (kind, notes)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``("ok", result)`` or the description of what ``fn`` raised. ``KeyboardInterrupt``
    and ``SystemExit`` are never swallowed."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:
        return describe_exception(exc)


def verdict_fields(verdict: Any, kept: Sequence[Any] = ()) -> tuple[Any, ...]:
    """The verdict's fields; ``cached`` as the index of the kept result it is (each
    backend is given its own copies of the results, so identity is all that can match)."""
    cached = verdict.cached
    if cached is not None:
        cached = next((i for i, r in enumerate(kept) if r is cached), "a foreign object")
    return (*(getattr(verdict, name) for name in VERDICT_FIELDS), cached)


def guard_state(guard: Any) -> tuple[Any, ...]:
    return (guard.steps, guard.stopped, len(guard), tuple(guard.keys()))


def same(what: str, native: Any, reference: Any, given: Any) -> None:
    if native != reference:
        raise Mismatch(
            f"{what}: native and reference disagree\n"
            f"  input:     {safe_repr(given)}\n"
            f"  native:    {safe_repr(native)}\n"
            f"  reference: {safe_repr(reference)}"
        )


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 12, 12, 12, 12
_SHORT.maxstring = _SHORT.maxother = 300


def safe_repr(value: Any, limit: int = 4000) -> str:
    """A bounded repr: whole for texts, shortened for containers (which may be cyclic, very
    deep, or share subtrees), and never raising."""
    try:
        plain = isinstance(value, (str, bytes, bytearray)) or (
            type(value).__repr__ is not (object.__repr__)
            and not isinstance(value, (list, dict, tuple, set, frozenset))
        )
        text = repr(value) if plain else _SHORT.repr(value)
    except BaseException as exc:  # a hostile __repr__
        text = f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def play_guard(
    module: Any,
    steps: Sequence[tuple[str, str, Any, Any]],
    *,
    tools: dict[str, Any],
    volatile_keys: Any = None,
) -> list[tuple[Any, ...]]:
    """Runs ``steps`` on a new guard of ``module``: each step is ``(method, name, args,
    result)`` with method ``check`` or ``check_json``; an allowed verdict is then observed
    (and kept) with ``result`` when that is not ``None``. Returns what every call gave
    and the guard's state after each step."""
    guard = module.Guard(window=4, nudge_at=2, stop_at=3, tools=tools, volatile_keys=volatile_keys)
    trace: list[tuple[Any, ...]] = []
    kept: list[Any] = []
    for method, name, args, result in steps:
        got = outcome(getattr(guard, method), name, args)
        if got[0] == "ok":
            verdict = got[1]
            trace.append(("verdict", verdict_fields(verdict, kept)))
            if result is not None:
                trace.append(("observe", outcome(guard.observe, verdict, result)))
                kept.append(result)
                trace.append(("keep", outcome(guard.keep, verdict, result)))
        else:
            trace.append(("raised", got))
        trace.append(("state", guard_state(guard)))
    return trace
