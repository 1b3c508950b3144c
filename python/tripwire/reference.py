"""The pure-Python implementation of tripwire's whole API, name for name.

It is the contract the native core is tested against (when the two disagree, this one is
right), and the backend ``tripwire`` falls back to where the native module is missing or
``TRIPWIRE_IMPLEMENTATION=reference`` asks for it.
"""

from __future__ import annotations

from typing import Final, Literal

from tripwire._guard import Guard, Verdict
from tripwire._keys import (
    DEFAULT_VOLATILE_KEYS,
    call_key,
    call_key_json,
    call_keys,
    canonical_json,
    normalise,
)
from tripwire._snapshot import SnapshotError

IMPLEMENTATION: Final[Literal["reference"]] = "reference"

__all__ = (
    "DEFAULT_VOLATILE_KEYS",
    "IMPLEMENTATION",
    "Guard",
    "SnapshotError",
    "Verdict",
    "call_key",
    "call_key_json",
    "call_keys",
    "canonical_json",
    "normalise",
)
