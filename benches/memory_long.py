"""Memory over a long run (issue #7): is RSS and ``tracemalloc`` flat across ten million native
guard checks? ``python benches/memory_long.py [checks]`` (default 10,000,000; ~3 min here).

One native guard is fed a production-like mix, cycling through prebuilt inputs so the loop
itself allocates nothing that stays:

- ``check`` of 17 distinct argument dicts in rotation, every 7th call a repeat of the one
  before (nudges, and stops that latch until the next ``reset``);
- every 4th call by ``check_json`` (every 50th of those with invalid JSON text);
- a ``call_id`` on every 10th call, from a pool of 256 (the guard remembers 128);
- ``observe`` of every allowed verdict, and ``keep`` of results for the read tool;
- a ``check_turn`` of three calls every 100th call; a failing check (TypeError, an
  unserialisable argument) every 1,000th; ``reset`` every 1,000th.

Every million checks it prints RSS (``VmRSS``, from /proc/self/statm: the Rust heap included)
and ``tracemalloc``'s current and peak (Python allocations only), and at the end the growth
from the first sample to the last. ``tracemalloc`` is started after a warm-up of 100,000
checks; it slows the run about 2x. Linux only.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
from array import array
from contextlib import suppress
from typing import Any

import tripwire._core as native

SAMPLE_EVERY = 1_000_000
WARMUP = 100_000


_STATM = os.open("/proc/self/statm", os.O_RDONLY)
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    """Resident set size (``VmRSS``), read from /proc/self/statm through a descriptor kept
    open: opening /proc/self/status as a text file leaves ~70 bytes behind each time,
    which tracemalloc would report as growth."""
    return int(os.pread(_STATM, 256, 0).split()[1]) * _PAGE / (1024 * 1024)


def workload() -> tuple[Any, Any]:
    """The guard and a function doing ``n`` checks of the mix, returning how many checks
    (turn entries included) it made."""
    guard = native.Guard(tools={"get_logs": "read", "deploy": "write", "build": "volatile"})
    tools = ("get_logs", "search", "deploy", "get_logs", "build")
    args = [
        {"service": "checkout", "since": f"{m}m", "level": "error", "request_id": f"r{m}"}
        for m in range(17)
    ]
    texts = [
        f'{{"service": "checkout", "since": "{m}m", "level": "error", "page": {m % 3}}}'
        for m in range(17)
    ]
    invalid = ['{"service": "checkout",', "[1, 2", '{"a": NaN, }']
    call_ids = [f"call-{n}" for n in range(256)]
    results: list[Any] = [
        "no errors in the last 15 minutes",
        ["ERROR checkout timeout", "ERROR checkout 502"],
        {"status": "ok", "items": [1, 2, 3]},
        "",
        None,
    ]
    turn = [("get_logs", args[0]), ("get_logs", args[0]), ("search", {"q": "refund policy"})]
    unserialisable = {"payload": {1, 2, 3}}
    check, check_json, observe, keep = (
        guard.check,
        guard.check_json,
        guard.observe,
        guard.keep,
    )

    def run(start: int, n: int) -> int:
        done = 0
        previous = 0
        for i in range(start, start + n):
            m = previous if i % 7 == 0 else i % 17
            previous = m
            tool = tools[i % 5]
            call_id = call_ids[i % 256] if i % 10 == 0 else None
            if i % 4 == 0:
                text = invalid[i % 3] if i % 200 == 0 else texts[m]
                verdict = check_json(tool, text, call_id=call_id)
            else:
                verdict = check(tool, args[m], call_id=call_id)
            done += 1
            if verdict.action == "allow":
                result = results[i % 5]
                observe(verdict, result)
                keep(verdict, result)
            if i % 100 == 0:
                done += len(guard.check_turn(turn))
            if i % 1_000 == 0:
                with suppress(TypeError):
                    check("search", unserialisable)
                guard.reset()
        return done

    return guard, run


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    guard, run = workload()
    run(0, WARMUP)
    # Samples go into a preallocated array, so that keeping them allocates nothing that
    # tracemalloc would count as growth.
    samples = array("d", [0.0] * (5 * (total // SAMPLE_EVERY + 2)))
    gc.collect()
    tracemalloc.start()
    done = rows = 0
    i = WARMUP
    started = time.perf_counter()
    print(f"{'checks':>12} {'RSS MB':>9} {'traced KB':>10} {'peak KB':>9} {'gc objs':>9} {'s':>7}")
    while done < total:
        done += run(i, SAMPLE_EVERY)
        i += SAMPLE_EVERY
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
        at = 5 * rows
        samples[at : at + 5] = array(
            "d", (done, rss_mb(), current / 1024, peak / 1024, len(gc.get_objects()))
        )
        rows += 1
        elapsed = time.perf_counter() - started
        print(
            f"{int(samples[at]):>12,} {samples[at + 1]:>9.1f} {samples[at + 2]:>10.1f} "
            f"{samples[at + 3]:>9.1f} {int(samples[at + 4]):>9,} {elapsed:>7.1f}",
            flush=True,
        )
    first, last = samples[0:5], samples[5 * (rows - 1) : 5 * rows]
    peak = max(samples[5 * r + 3] for r in range(rows))
    print(
        f"\ngrowth from the first sample to the last ({int(last[0] - first[0]):,} checks): "
        f"RSS {last[1] - first[1]:+.2f} MB, traced {last[2] - first[2]:+.1f} KB, "
        f"gc objects {int(last[4] - first[4]):+,}; tracemalloc peak {peak:.1f} KB"
    )
    per_check = (last[1] - first[1]) * 1024 * 1024 / max(1, last[0] - first[0])
    print(f"RSS growth per check: {per_check:.4f} bytes; guard steps now {guard.steps}")


if __name__ == "__main__":
    main()
