"""Keys from JSON text (issue #4): ``call_key_json`` and ``call_keys``.

Candidates for one call, on the seed's ``get_logs`` arguments and on a ~1 KB call, as JSON text:

- ``native``: ``tripwire._core.call_key_json(name, text)``.
- ``json+reference``: ``tripwire.reference.call_key(name, json.loads(text))``, the contract.
- ``orjson+native``: ``tripwire._core.call_key(name, orjson.loads(text))``: the fastest
  parse-then-key you could write yourself with the native core.

Candidates for a batch of 100,000 JSON texts:

- ``call_keys t=1`` / ``call_keys t=2``: ``tripwire._core.call_keys(calls, threads=...)``.
- ``native loop``: ``[tripwire._core.call_key_json(n, t) for n, t in calls]``, for context.
- ``reference loop``: ``[tripwire.reference.call_key_json(n, t) for n, t in calls]``.

Issue targets: ``call_key_json`` at least 20x faster than ``json.loads`` + reference
``call_key`` on both calls; ``call_keys`` on one thread at least 30x faster than the reference
loop, and faster again on two threads. ``test_ratios_*`` measure the candidates side by side
in this process with ``time.perf_counter`` (interleaved, best of several repeats), print the
tables (also under ``--benchmark-disable``) and assert nothing about time.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import tripwire._core as native
import tripwire.reference as reference
from _timing import best_ns, fmt_ns, machine, report, table
from payloads import ONE_KB, json_batch

KEY_TARGET = 20.0
BATCH_TARGET = 30.0
BATCH_SIZE = 100_000

BENCH = pytest.mark.benchmark(min_rounds=20, max_time=0.5, warmup=True, warmup_iterations=100)

SEED_CALL = ("get_logs", '{"service":"checkout","since":"15m","level":"error"}')


ONE_KB_CALL = (ONE_KB[0], json.dumps(ONE_KB[1], ensure_ascii=False))

CALLS: dict[str, tuple[str, str]] = {"seed": SEED_CALL, "1kb": ONE_KB_CALL}


BATCH = json_batch(BATCH_SIZE)
BATCH_BYTES = sum(len(text.encode()) for _, text in BATCH)


# --- preconditions ---------------------------------------------------------------------------


def test_backends_agree() -> None:
    """Not a timing: every candidate computes the same keys."""
    for name, text in CALLS.values():
        want = reference.call_key(name, json.loads(text))
        assert native.call_key_json(name, text) == want
        assert native.call_key(name, orjson.loads(text)) == want
    sample = BATCH[:: BATCH_SIZE // 1000]
    want = [reference.call_key_json(name, text) for name, text in sample]
    assert native.call_keys(sample, threads=1) == want
    # The whole batch is well past the native parallel threshold (256 KiB of text).
    assert BATCH_BYTES > 256 * 1024
    assert native.call_keys(BATCH, threads=2) == native.call_keys(BATCH, threads=1)


# --- pytest-benchmark ------------------------------------------------------------------------


def json_reference(name: str, text: str) -> str:
    return reference.call_key(name, json.loads(text))


def orjson_native(name: str, text: str) -> str:
    return native.call_key(name, orjson.loads(text))


KEY_CANDIDATES = {
    "native": native.call_key_json,
    "json+reference": json_reference,
    "orjson+native": orjson_native,
}


@BENCH
@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("candidate", list(KEY_CANDIDATES))
def test_key_json(benchmark: Any, call: str, candidate: str) -> None:
    name, text = CALLS[call]
    benchmark.group = f"call_key_json {call} ({len(text.encode()):,} B of JSON)"
    benchmark(KEY_CANDIDATES[candidate], name, text)


def reference_loop(calls: list[tuple[str, str]]) -> list[str]:
    return [reference.call_key_json(name, text) for name, text in calls]


def native_loop(calls: list[tuple[str, str]]) -> list[str]:
    return [native.call_key_json(name, text) for name, text in calls]


BATCH_CANDIDATES = {
    "call_keys t=1": (lambda calls: native.call_keys(calls, threads=1), 5),
    "call_keys t=2": (lambda calls: native.call_keys(calls, threads=2), 5),
    "native loop": (native_loop, 3),
    "reference loop": (reference_loop, 2),
}


@pytest.mark.parametrize("candidate", list(BATCH_CANDIDATES))
def test_call_keys(benchmark: Any, candidate: str) -> None:
    benchmark.group = f"call_keys over {BATCH_SIZE:,} JSON texts ({BATCH_BYTES / 1e6:.1f} MB)"
    function, rounds = BATCH_CANDIDATES[candidate]
    benchmark.pedantic(function, args=(BATCH,), rounds=rounds, iterations=1, warmup_rounds=1)


# --- ratio tables ----------------------------------------------------------------------------


def test_ratios_key_json() -> None:
    """Prints native call_key_json vs json.loads + reference and orjson.loads + native."""
    header = ["call", "bytes", "native", "json+reference", "orjson+native", "ref/native"]
    header.append("orjson/native")
    rows = []
    for label, (name, text) in CALLS.items():
        namespace = {
            "key_json": native.call_key_json,
            "reference_key": reference.call_key,
            "native_key": native.call_key,
            "json_loads": json.loads,
            "orjson_loads": orjson.loads,
            "name": name,
            "text": text,
        }
        ns = best_ns(
            {
                "native": "key_json(name, text)",
                "reference": "reference_key(name, json_loads(text))",
                "orjson": "native_key(name, orjson_loads(text))",
            },
            namespace,
        )
        speedup = ns["reference"] / ns["native"]
        rows.append(
            [
                label,
                f"{len(text.encode()):,}",
                fmt_ns(ns["native"]),
                fmt_ns(ns["reference"]),
                fmt_ns(ns["orjson"]),
                f"{speedup:.1f}x {'ok' if speedup >= KEY_TARGET else 'MISS'}",
                f"{ns['orjson'] / ns['native']:.2f}x",
            ]
        )
    report(
        table(
            "call_key_json: time per call (perf_counter, interleaved, best of 7)",
            header,
            rows,
            [
                f"ref/native: speed-up over json.loads + reference call_key (target >= "
                f"{KEY_TARGET:g}x).",
                "orjson/native: > 1 means call_key_json beats orjson.loads + native call_key.",
                machine(),
            ],
        )
    )


def test_ratios_call_keys() -> None:
    """Prints call_keys over 100,000 texts on 1 and 2 threads vs the reference loop."""
    namespace = {
        "call_keys": native.call_keys,
        "key_json": native.call_key_json,
        "reference_key_json": reference.call_key_json,
        "calls": BATCH,
    }
    native_ns = best_ns(
        {
            "call_keys t=1": "call_keys(calls, threads=1)",
            "call_keys t=2": "call_keys(calls, threads=2)",
            "native loop": "[key_json(n, t) for n, t in calls]",
        },
        namespace,
        repeats=5,
        seconds=0.0,
        calls_per_stmt=BATCH_SIZE,
    )
    reference_ns = best_ns(
        {"reference loop": "[reference_key_json(n, t) for n, t in calls]"},
        namespace,
        repeats=3,
        seconds=0.0,
        calls_per_stmt=BATCH_SIZE,
    )
    ns = {**native_ns, **reference_ns}
    base = ns["reference loop"]
    one, two = ns["call_keys t=1"], ns["call_keys t=2"]
    rows = []
    for label, per_call in ns.items():
        speedup = base / per_call
        mark = ""
        if label == "call_keys t=1":
            mark = " ok" if speedup >= BATCH_TARGET else " MISS"
        if label == "call_keys t=2":
            mark = " ok" if two < one else " MISS"
        rows.append(
            [
                label,
                fmt_ns(per_call * BATCH_SIZE),
                fmt_ns(per_call),
                f"{BATCH_BYTES / (per_call * BATCH_SIZE) * 1e3:.0f} MB/s",
                f"{speedup:.1f}x{mark}",
            ]
        )
    report(
        table(
            f"call_keys over {BATCH_SIZE:,} JSON texts ({BATCH_BYTES / 1e6:.1f} MB; "
            "perf_counter, interleaved, best of 5 (reference: 3))",
            ["candidate", "batch", "per call", "throughput", "vs reference loop"],
            rows,
            [
                f"call_keys t=1 target: >= {BATCH_TARGET:g}x the reference loop; "
                "t=2 target: faster than t=1.",
                f"2-thread scaling: t=1 / t=2 = {one / two:.2f}x "
                f"(ideal 2.00x on 2 free cores); batch vs native loop: "
                f"{ns['native loop'] / one:.2f}x on one thread.",
                machine(),
            ],
        )
    )
