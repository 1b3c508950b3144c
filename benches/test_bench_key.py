"""``call_key`` on the three payloads: native, reference, and what you would write yourself.

Candidates, grouped per payload:

- ``native``: ``tripwire._core.call_key``.
- ``reference``: ``tripwire.reference.call_key``, the pure-Python contract.
- ``orjson+sha256``: ``orjson.dumps(..., option=OPT_SORT_KEYS)`` then ``hashlib.sha256``. It
  does *not* normalise (no volatile keys or ``None`` dropped, no whitespace collapsed, floats
  kept), so it is the "what you would write yourself" baseline, not an equivalent.
- ``json+sha256``: the same with ``json.dumps(sort_keys=True, separators=(",", ":"))``.
- ``sha256``: ``hashlib.sha256`` alone over the precomputed canonical bytes, hex digest
  truncated as ``call_key`` does: the floor (canonicalising for free).

Issue targets: native ≥15x faster than reference on each payload; on 100 KB, native within
2.5x of ``sha256`` alone. ``test_ratios_key`` prints them; nothing here asserts on time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import _timing
import orjson
import pytest
import tripwire._core as native
import tripwire.reference as reference
from payloads import PAYLOADS

# pytest-benchmark: a stable minimum in bounded time, so the file (15 benchmarks) runs in well
# under a minute on two cores; warm-up so the first (import, cache) calls are not counted.
BENCH = pytest.mark.benchmark(min_rounds=20, max_time=0.5, warmup=True, warmup_iterations=100)

SPEEDUP_TARGET = 15.0
FLOOR_TARGET = 2.5
FLOOR_PAYLOAD = "100kb"


def orjson_key(name: str, args: Any) -> str:
    data = orjson.dumps({"tool": name, "args": args}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


def json_key(name: str, args: Any) -> str:
    text = json.dumps({"tool": name, "args": args}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sha256_only(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


CANONICAL = {label: native.canonical_json(*payload) for label, payload in PAYLOADS.items()}


def test_backends_agree() -> None:
    """A precondition, not a timing: both backends key the payloads identically."""
    for label, (name, args) in PAYLOADS.items():
        assert native.canonical_json(name, args) == reference.canonical_json(name, args), label
        assert native.call_key(name, args) == reference.call_key(name, args), label
        assert native.call_key(name, args) == sha256_only(CANONICAL[label]), label


CANDIDATES: dict[str, Callable[[str, Any], str]] = {
    "native": native.call_key,
    "reference": reference.call_key,
    "orjson+sha256": orjson_key,
    "json+sha256": json_key,
}


@BENCH
@pytest.mark.parametrize("payload", list(PAYLOADS))
@pytest.mark.parametrize("candidate", [*CANDIDATES, "sha256"])
def test_key(benchmark: Any, payload: str, candidate: str) -> None:
    benchmark.group = f"call_key {payload} ({len(CANONICAL[payload]):,} B canonical)"
    if candidate == "sha256":
        benchmark(sha256_only, CANONICAL[payload])
    else:
        name, args = PAYLOADS[payload]
        benchmark(CANDIDATES[candidate], name, args)


def test_ratios_key() -> None:
    """Prints native vs reference, orjson+sha256 and sha256 alone, per payload."""
    header = [
        "payload",
        "bytes",
        "native",
        "reference",
        "orjson+sha",
        "json+sha",
        "sha256",
        "ref/native",
        "orjson/native",
        "native/sha256",
    ]
    rows = []
    for label, (name, args) in PAYLOADS.items():
        namespace = {
            "native_key": native.call_key,
            "reference_key": reference.call_key,
            "orjson_dumps": orjson.dumps,
            "OPT_SORT_KEYS": orjson.OPT_SORT_KEYS,
            "json_dumps": json.dumps,
            "sha256": hashlib.sha256,
            "name": name,
            "args": args,
            "canonical": CANONICAL[label],
        }
        # The baselines are inlined (no wrapper function) so they are as cheap as possible.
        ns = _timing.best_ns(
            {
                "native": "native_key(name, args)",
                "reference": "reference_key(name, args)",
                "orjson": "sha256(orjson_dumps({'tool': name, 'args': args},"
                " option=OPT_SORT_KEYS)).hexdigest()[:16]",
                "json": "sha256(json_dumps({'tool': name, 'args': args}, sort_keys=True,"
                " separators=(',', ':')).encode()).hexdigest()[:16]",
                "sha256": "sha256(canonical).hexdigest()[:16]",
            },
            namespace,
        )
        speedup = ns["reference"] / ns["native"]
        floor = ns["native"] / ns["sha256"]
        speed_mark = "ok" if speedup >= SPEEDUP_TARGET else "MISS"
        floor_mark = ""
        if label == FLOOR_PAYLOAD:
            floor_mark = " ok" if floor <= FLOOR_TARGET else " MISS"
        rows.append(
            [
                label,
                f"{len(CANONICAL[label]):,}",
                *(_timing.fmt_ns(ns[k]) for k in ("native", "reference", "orjson", "json")),
                _timing.fmt_ns(ns["sha256"]),
                f"{speedup:.1f}x {speed_mark}",
                f"{ns['orjson'] / ns['native']:.2f}x",
                f"{floor:.2f}x{floor_mark}",
            ]
        )
    _timing.report(
        _timing.table(
            "call_key: time per call and ratios",
            header,
            rows,
            [
                f"ref/native: native speed-up over the reference (target >= {SPEEDUP_TARGET:g}x"
                " on every payload).",
                "orjson/native: > 1 means native is faster than orjson.dumps(sort_keys)"
                " + sha256, which does not normalise.",
                f"native/sha256: native cost over SHA-256 alone on the canonical bytes (target"
                f" <= {FLOOR_TARGET:g}x on {FLOOR_PAYLOAD}).",
            ],
        )
    )
