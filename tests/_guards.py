"""Helpers shared by the guard tests (test_guard, test_guard_parity, test_concurrency).

The guard tests take whole backend *modules* (``tripwire._core`` and ``tripwire.reference``),
not the key-API namespace that ``conftest.impl`` provides, because they need ``Guard``.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
import tripwire.reference

try:
    import tripwire._core as _native
except ImportError:  # pragma: no cover - only where the extension is not built
    _native = None

NATIVE: ModuleType | None = _native
REFERENCE: ModuleType = tripwire.reference
NO_NATIVE = "tripwire._core is not built (run `maturin develop`); testing the reference only"

# Parameters for a fixture yielding a backend module: ids ``native`` and ``reference``.
BACKENDS = [
    pytest.param(NATIVE, id="native", marks=pytest.mark.skipif(NATIVE is None, reason=NO_NATIVE)),
    pytest.param(REFERENCE, id="reference"),
]

requires_native = pytest.mark.skipif(NATIVE is None, reason=NO_NATIVE)

# The same, by name, for tests that hand the backend to a subprocess.
BACKEND_NAMES = [
    pytest.param("native", marks=requires_native),
    pytest.param("reference"),
]


def backend(name: str) -> ModuleType:
    """``tripwire._core`` for ``"native"``, ``tripwire.reference`` for ``"reference"``."""
    if name == "native":
        if NATIVE is None:
            pytest.skip(NO_NATIVE)
        return NATIVE
    return REFERENCE


# Every public field of a Verdict, ``message`` included.
VERDICT_FIELDS = (
    "action",
    "reason",
    "tool",
    "key",
    "repeats",
    "step",
    "message",
    "cached",
    "call_id",
    "duplicate_of",
    "invalid_arguments",
)

# The seed's triage run: the tools and policies of the on-call agent.
TOOLS = {"get_logs": "read", "issue_refund": "write", "build_status": "volatile"}

# The spellings of one get_logs call, as the model emitted them (JSON text of the
# arguments), from step 4 of the seed's run on: key order, whitespace, a trailing space in
# a value, and a volatile key.
GET_LOGS_SPELLINGS = (
    '{"service":"checkout","since":"15m","level":"error"}',
    '{"service": "checkout", "level": "error", "since": "15m"}',
    '{"since":"15m","service":"checkout","level":"error"}',
    '{"service":"checkout ","since":"15m","level":"error"}',
    '{"service":"checkout","since":"15m","level":"error","request_id":"req-8812"}',
)


def get_logs_args(step: int) -> dict[str, Any]:
    """The arguments of the seed's get_logs call at ``step`` (4, 5, ...)."""
    return json.loads(GET_LOGS_SPELLINGS[(step - 4) % len(GET_LOGS_SPELLINGS)])


def fields(verdict: Any) -> dict[str, Any]:
    """Every field of a verdict, for comparing verdicts across backends."""
    return {name: getattr(verdict, name) for name in VERDICT_FIELDS}


def state(guard: Any) -> dict[str, Any]:
    """What a guard shows of its state."""
    return {
        "steps": guard.steps,
        "stopped": guard.stopped,
        "len": len(guard),
        "keys": guard.keys(),
    }


def deep_args(depth: int = 300) -> list[Any]:
    """Lists nested ``depth`` levels: deeper than MAX_DEPTH (256)."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """``("ok", result)`` or ``(exception type name, message)``, to compare backends."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def baseline_tools(tools: dict[str, Any]) -> dict[str, str]:
    """Declared policies as the hash-only (pre-#6) guard knew them: ``poll`` becomes
    ``volatile``; ``max_polls``, ``empty`` and ``whitespace`` are dropped."""
    mapped = {}
    for tool, spec in tools.items():
        kind = spec["policy"] if isinstance(spec, dict) else spec
        mapped[tool] = "volatile" if kind == "poll" else kind
    return mapped


# The seed's messages: the hash-only guard's, unchanged (docs/design/guard.md, Counting).
HASH_NUDGE = (
    "This is the second identical call to {tool} with the same arguments. Do not repeat it. "
    "Either use different arguments, use a different tool, or report what you have so far."
)
HASH_STOP = (
    "Stopped (loop_detected): {tool} was called {repeats} times with the same arguments "
    "within the last 12 calls."
)
