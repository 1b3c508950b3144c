"""The canonical call key in pure Python: the seed's ``normalise``/``call_key``, plus
``volatile_keys`` and a depth limit. This *is* the contract (DESIGN.md §1); the native core
must produce the same bytes, and hands back to the helpers here whatever it does not walk
itself (tuples, subclasses, non-``str`` keys, Decimal, ...).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

DEFAULT_VOLATILE_KEYS: frozenset[str] = frozenset(
    {"request_id", "trace_id", "timestamp", "now", "nonce", "idempotency_key"}
)

# Deeper nesting raises RecursionError in both implementations: the native walker must not
# overflow the C stack, and the reference must not depend on Python's recursion limit.
MAX_DEPTH = 256

_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def volatile_set(volatile_keys: Iterable[Any] | None) -> frozenset[Any]:
    """The set of dict keys to drop: the default, or the caller's replacement."""
    if volatile_keys is None:
        return DEFAULT_VOLATILE_KEYS
    if isinstance(volatile_keys, (str, bytes)):
        raise TypeError(
            "volatile_keys must be an iterable of keys such as {'request_id'}, "
            f"not a single {type(volatile_keys).__name__}"
        )
    return frozenset(volatile_keys)


def _too_deep() -> RecursionError:
    return RecursionError(f"arguments nested deeper than {MAX_DEPTH} levels")


def normalise_at(value: Any, volatile: frozenset[Any], depth: int) -> Any:
    """``normalise`` for a value found inside ``depth`` enclosing dicts or lists."""
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        return {
            k: normalise_at(v, volatile, depth + 1)
            for k, v in sorted(value.items())
            if k not in volatile and v is not None
        }
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        return [normalise_at(v, volatile, depth + 1) for v in value]
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def dumps_normalised(value: Any) -> str:
    """JSON text of an already normalised value, as the key contract writes it."""
    return _dumps(value)


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"tool name must be a str, not {type(name).__name__}")
    return name


def normalise(value: Any, /, *, volatile_keys: Iterable[Any] | None = None) -> Any:
    """The normalised value: keys sorted, volatile keys and ``None`` entries dropped at every
    depth, whitespace in strings collapsed, integral floats made ints, lists recursed."""
    return normalise_at(value, volatile_set(volatile_keys), 0)


def canonical_json(
    name: str, args: Any, /, *, volatile_keys: Iterable[Any] | None = None
) -> bytes:
    """Exactly the bytes that ``call_key`` hashes."""
    check_name(name)
    normalised = normalise_at(args, volatile_set(volatile_keys), 0)
    return _dumps({"tool": name, "args": normalised}).encode()


def call_key(name: str, args: Any, /, *, volatile_keys: Iterable[Any] | None = None) -> str:
    """16 hex digits of SHA-256 over ``canonical_json(name, args)``."""
    digest = hashlib.sha256(canonical_json(name, args, volatile_keys=volatile_keys))
    return digest.hexdigest()[:16]
