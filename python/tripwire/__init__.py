"""tripwire: the loop guard between an agent's model and its tools.

The backend is chosen once, at import, by ``TRIPWIRE_IMPLEMENTATION``: ``auto`` (the default:
native where it is built, else the pure-Python reference), ``native`` or ``reference``.
``tripwire.IMPLEMENTATION`` says which one is in use.
"""

from __future__ import annotations

import os
from typing import Literal

from tripwire._keys import DEFAULT_VOLATILE_KEYS, normalise
from tripwire._snapshot import SnapshotError


def _choose() -> Literal["native", "reference"]:
    wanted = os.environ.get("TRIPWIRE_IMPLEMENTATION", "auto").strip().lower() or "auto"
    if wanted not in ("auto", "native", "reference"):
        raise ImportError(
            f"TRIPWIRE_IMPLEMENTATION={wanted!r}: expected 'auto', 'native' or 'reference'"
        )
    if wanted == "reference":
        return "reference"
    try:
        import tripwire._core  # noqa: F401
    except ImportError:
        if wanted == "native":
            raise
        return "reference"
    return "native"


IMPLEMENTATION: Literal["native", "reference"] = _choose()

if IMPLEMENTATION == "native":
    from tripwire._core import (
        Guard,
        Verdict,
        call_key,
        call_key_json,
        call_keys,
        canonical_json,
    )
else:  # the same API, typed by the reference's own annotations
    from tripwire.reference import (  # type: ignore[assignment]
        Guard,
        Verdict,
        call_key,
        call_key_json,
        call_keys,
        canonical_json,
    )


def __getattr__(name: str) -> str:
    # ``__version__`` is read from the package metadata when first asked for: importing
    # importlib.metadata costs ~40 ms, which a hook process run per tool call cannot pay.
    if name != "__version__":
        raise AttributeError(f"module 'tripwire' has no attribute {name!r}")
    try:
        from importlib.metadata import version

        value = version("tripwire")
    except Exception:  # pragma: no cover - running from a source tree without metadata
        value = "0+unknown"
    globals()["__version__"] = value
    return value


__all__ = (
    "DEFAULT_VOLATILE_KEYS",
    "IMPLEMENTATION",
    "Guard",
    "SnapshotError",
    "Verdict",
    "__version__",
    "call_key",
    "call_key_json",
    "call_keys",
    "canonical_json",
    "normalise",
)
