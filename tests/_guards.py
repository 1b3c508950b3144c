"""Helpers shared by the guard tests (test_guard, test_guard_parity, test_concurrency).

The guard tests take whole backend *modules* (``tripwire._core`` and ``tripwire.reference``),
not the key-API namespace that ``conftest.impl`` provides, because they need ``Guard``.
"""

from __future__ import annotations

import hashlib
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


# The default volatile keys, as the key contract lists them.
DEFAULT_VOLATILE = frozenset(
    {"request_id", "trace_id", "timestamp", "now", "nonce", "idempotency_key"}
)


def verbatim_key_written_out(name: str, args: Any) -> str:
    """The key of a call whose strings keep their whitespace, written out from the key
    contract (docs/design/key.md) with json and hashlib alone: the seed's ``normalise``
    without its string collapse (default volatile keys dropped, ``None`` entries dropped,
    integral floats folded), nesting past 256 levels a RecursionError."""

    def normalised(value: Any, depth: int) -> Any:
        if isinstance(value, (dict, list)) and depth >= 256:
            raise RecursionError("nested too deep")
        if isinstance(value, dict):
            return {
                k: normalised(v, depth + 1)
                for k, v in value.items()
                if k not in DEFAULT_VOLATILE and v is not None
            }
        if isinstance(value, list):
            return [normalised(v, depth + 1) for v in value]
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    payload = {"tool": name, "args": normalised(args, 0)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def raw_text_key_written_out(name: str, text: str | bytes | bytearray) -> str:
    """The key of arguments that are not valid JSON, written out: SHA-256 of the raw text,
    whitespace collapsed, under ``invalid_args`` in place of ``args`` (docs/guard/index.md:
    a model that keeps sending the same broken arguments is looping too)."""
    if isinstance(text, (bytes, bytearray)):
        # Bytes as UTF-8 whatever they are (a BOM or UTF-16 too): each invalid byte kept.
        text = bytes(text).decode("utf-8", "surrogateescape")
    payload = {"tool": name, "invalid_args": " ".join(text.split())}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
