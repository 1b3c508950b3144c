"""Where a ``call_keys`` text's time goes: the batch of ``test_bench_json.py`` against
variants that each take one cost away. ``python benches/batch_anatomy.py``

Every variant has 100,000 seed-shaped ``get_logs`` calls as JSON text, built like the
benchmark's batch (``payloads.json_batch``), with one thing changed:

- ``sorted keys``: ``json.dumps(sort_keys=True)``, so no object is reordered;
- ``compact``: ``(",", ":")`` separators for every text (the batch has half with spaces);
- ``one space``: the ``query`` value without its double space, so nothing is collapsed;
- ``no nulls``: ``limit`` always 100 (the batch has it null three times in four);
- ``all of the above``;
- ``{}``: empty arguments, one distinct text in two: what the batch machinery costs with
  next to nothing to parse (reading the calls, hashing one block, building the result).

The difference between the batch and a variant is roughly what that feature costs.
Per-text times with one thread, timed with ``_timing.best_ns`` (interleaved, best of
repeats); differences of a few ns are noise. Nothing here asserts on time.
"""

from __future__ import annotations

from typing import Any

import tripwire._core as native
from _timing import best_ns, machine, table
from payloads import json_batch

COUNT = 100_000
ONE_SPACE = "timeout near line {i}"


def main() -> None:
    variants: dict[str, list[tuple[str, str]]] = {
        "benchmark batch": json_batch(COUNT),
        "sorted keys": json_batch(COUNT, sort_keys=True),
        "compact": json_batch(COUNT, compact=True),
        "one space": json_batch(COUNT, query=ONE_SPACE),
        "no nulls": json_batch(COUNT, nulls=False),
        "all of the above": json_batch(
            COUNT, sort_keys=True, compact=True, query=ONE_SPACE, nulls=False
        ),
        "{}": [("get_logs", "{}" + " " * (i % 2)) for i in range(COUNT)],
    }
    names = list(variants)
    namespace: dict[str, Any] = {"call_keys": native.call_keys}
    statements = {}
    for n, name in enumerate(names):
        namespace[f"calls{n}"] = variants[name]
        statements[name] = f"call_keys(calls{n}, threads=1)"
    times = best_ns(statements, namespace, calls_per_stmt=COUNT, repeats=15)
    base = times["benchmark batch"]
    rows = [
        [
            name,
            f"{sum(len(t) for _, t in variants[name]) / COUNT:.0f}",
            f"{times[name]:.0f} ns",
            "" if name == "benchmark batch" else f"{base - times[name]:+.0f} ns",
        ]
        for name in names
    ]
    print(
        table(
            "call_keys, one thread: time per text by batch variant",
            ["variant", "bytes/text", "per text", "batch minus variant"],
            rows,
            [machine()],
        )
    )


if __name__ == "__main__":
    main()
