"""Memory: does the native core leak, and what does a guard cost? ``python benches/memory.py``

(a) Leaks: RSS (``VmRSS`` in /proc/self/status) around a million native ``call_key`` calls on
    the seed and the 1 KB payload, and a million native ``Guard.check`` calls (a default guard,
    13 distinct seed-shaped calls in rotation, so every verdict is "allow"). Each workload first
    runs 10,000 warm-up calls, so allocator and interpreter warm-up are not counted: the delta
    is taken from after the warm-up. A leak of even 1 byte per call would show as ~1 MB.
(b) Guard size: RSS delta of creating 100,000 idle ``Guard()`` objects, per guard (target:
    under 1 KB for the native guard; the reference for comparison), and of 10,000 guards
    after 12 distinct checks each (a full default window).
(c) Distinct tool names (issue 26): RSS of one guard over a million checks, each of a tool
    with a new name, on both backends (``--names`` runs only this part). Flat: a guard keeps a
    name only while its window holds a call to it.
(d) Distinct poll calls (issue 26): RSS of one guard over a million checks of a poll tool,
    each with new arguments and each observed as a transient failure (so both the poll counts
    and the transient-retry counts get a new call each check), on both backends, and the
    size of its snapshot (``--polls`` runs only this part). Flat, and the snapshot bounded:
    a guard keeps the counts of the 256 calls it counted last (``COUNTED_CALLS``).

Each measurement runs in its own fresh interpreter (this script re-runs itself), so memory one
measurement frees and the allocator keeps cannot hide the next one's growth. The list holding
the guards is allocated before the baseline is read, so its 8 bytes a slot are not counted.
Linux only.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from payloads import ONE_KB, SEED

CALLS_PER_RUN = 1_000_000
WARMUP_CALLS = 10_000
IDLE_GUARDS = 100_000
FULL_GUARDS = 10_000
WINDOW = 12
GUARD_TARGET_BYTES = 1024

SEED_NAME, SEED_ARGS = SEED
# As in test_bench_guard.py: 13 distinct calls, so each key's last occurrence has just left
# the default window of 12 when it comes round again.
ROTATION = [(SEED_NAME, {**SEED_ARGS, "since": f"{minutes}m"}) for minutes in range(1, 14)]


def rss_bytes() -> int:
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _backend(name: str) -> Any:
    if name == "native":
        import tripwire._core as module
    else:
        import tripwire.reference as module
    return module


# -- (a) leaks ----------------------------------------------------------------------------


def _key_loop(payload: tuple[str, Any]) -> Callable[[int], None]:
    from tripwire._core import call_key

    name, args = payload

    def run(calls: int) -> None:
        for _ in range(calls):
            call_key(name, args)

    return run


def _check_loop() -> Callable[[int], None]:
    from tripwire._core import Guard

    guard = Guard()
    check = guard.check

    def run(calls: int) -> None:
        for _ in range(calls // len(ROTATION)):
            for name, args in ROTATION:
                verdict = check(name, args)
        assert verdict.action == "allow" and len(guard) == WINDOW

    return run


LEAK_WORKLOADS: dict[str, Callable[[], Callable[[int], None]]] = {
    "call_key seed": lambda: _key_loop(SEED),
    "call_key 1kb": lambda: _key_loop(ONE_KB),
    "Guard.check seed": _check_loop,
}


def measure_leak(workload: str) -> dict[str, Any]:
    run = LEAK_WORKLOADS[workload]()
    before = rss_bytes()
    run(WARMUP_CALLS)
    warm = rss_bytes()
    start = time.perf_counter()
    run(CALLS_PER_RUN)
    seconds = time.perf_counter() - start
    after = rss_bytes()
    return {"before": before, "warm": warm, "after": after, "seconds": seconds}


# -- (b) guard size -----------------------------------------------------------------------


def measure_guards(backend: str, count: int, checks: int) -> dict[str, Any]:
    Guard = _backend(backend).Guard
    calls = ROTATION[:checks]
    guards: list[Any] = [None] * count
    Guard().check(*ROTATION[0])  # import and initialise whatever the first check needs
    before = rss_bytes()
    for i in range(count):
        guard = Guard()
        for name, args in calls:
            guard.check(name, args)
        guards[i] = guard
    after = rss_bytes()
    assert all(len(guard) == checks for guard in guards)
    return {"before": before, "after": after, "count": count}


# -- (c) distinct tool names ----------------------------------------------------------------

NAMES = 1_000_000
NAMES_WARMUP = 10_000


def measure_names(backend: str, names: int) -> dict[str, Any]:
    """One guard, ``names`` checks each of a tool of a new name (a model that makes names
    up): RSS after a warm-up of 10,000 names, and after all of them. Flat when the guard
    keeps a name only while its window holds a call to it."""
    guard = _backend(backend).Guard()
    check = guard.check
    for i in range(NAMES_WARMUP):
        check(f"warm_{i}", {})
    warm = rss_bytes()
    start = time.perf_counter()
    for i in range(names):
        check(f"made_up_tool_{i}", {})
    seconds = time.perf_counter() - start
    after = rss_bytes()
    assert guard.steps == NAMES_WARMUP + names
    return {"warm": warm, "after": after, "seconds": seconds, "names": names}


# -- (d) distinct poll calls ---------------------------------------------------------------

POLLS = 1_000_000


def measure_polls(backend: str, polls: int) -> dict[str, Any]:
    """One guard, ``polls`` checks of a poll tool with new arguments each, each observed as
    a timeout: RSS after a warm-up of 10,000, and after all of them; the snapshot's size
    after the warm-up and at the end."""
    guard = _backend(backend).Guard(tools={"job_status": "poll"})
    check, observe = guard.check, guard.observe

    def run(start: int, stop: int) -> None:
        for i in range(start, stop):
            observe(check("job_status", {"job": i}), None, error="timed out", transient=True)

    run(0, NAMES_WARMUP)
    warm, warm_snapshot = rss_bytes(), len(guard.snapshot())
    start = time.perf_counter()
    run(NAMES_WARMUP, NAMES_WARMUP + polls)
    seconds = time.perf_counter() - start
    after, snapshot = rss_bytes(), len(guard.snapshot())
    assert guard.steps == NAMES_WARMUP + polls and not guard.stopped
    return {
        "warm": warm,
        "after": after,
        "seconds": seconds,
        "warm_snapshot": warm_snapshot,
        "snapshot": snapshot,
    }


def print_polls(polls: int = POLLS) -> None:
    rows = []
    for backend in ("native", "reference"):
        m = _child("polls", backend, str(polls))
        delta = m["after"] - m["warm"]
        rows.append(
            [
                backend,
                _mb(m["warm"]),
                _mb(m["after"]),
                _signed_kb(delta),
                f"{m['warm_snapshot']:,} B",
                f"{m['snapshot']:,} B",
                f"{m['seconds']:.1f} s",
            ]
        )
    _print_table(
        f"(d) one guard, {polls:,} distinct poll calls, each a timeout (after {NAMES_WARMUP:,})",
        ["backend", "after warm-up", f"after {polls:,}", "delta", "snapshot", "at end", "time"],
        rows,
    )


# -- driver -------------------------------------------------------------------------------


def _child(kind: str, *args: str) -> dict[str, Any]:
    """Runs one measurement in a fresh interpreter; returns what it printed."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def _signed_kb(n: float) -> str:
    return f"{n / 1024:+,.0f} KB"


def _print_table(
    title: str, header: list[str], rows: list[list[str]], *, text_columns: int = 1
) -> None:
    """Text columns (the first ``text_columns``) left-aligned, numbers right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i < text_columns else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()
        for cells in [header, *rows]
    ]
    rule = "-" * max(map(len, lines))
    print(title, rule, lines[0], rule, *lines[1:], rule, sep="\n")


def main() -> None:
    import tripwire

    print(f"tripwire {tripwire.__version__}, {sys.version.split()[0]}, RSS from VmRSS\n")

    rows = []
    for workload in LEAK_WORKLOADS:
        m = _child("leak", workload)
        delta = m["after"] - m["warm"]
        rows.append(
            [
                workload,
                _mb(m["before"]),
                _mb(m["warm"]),
                _mb(m["after"]),
                _signed_kb(delta),
                f"{delta / CALLS_PER_RUN:.3f}",
                f"{m['seconds']:.1f} s",
            ]
        )
    _print_table(
        f"(a) RSS around {CALLS_PER_RUN:,} native calls (after {WARMUP_CALLS:,} warm-up calls)",
        [
            "workload",
            "before",
            "after warm-up",
            "after 1M",
            "delta (1M)",
            "B/call",
            "time",
        ],
        rows,
    )
    print()

    rows = []
    for backend in ("native", "reference"):
        for count, checks in ((IDLE_GUARDS, 0), (FULL_GUARDS, WINDOW)):
            m = _child("guards", backend, str(count), str(checks))
            per_guard = (m["after"] - m["before"]) / count
            verdict = ""
            if checks == 0:
                under = per_guard < GUARD_TARGET_BYTES
                verdict = f"{'yes' if under else 'NO'} (target < {GUARD_TARGET_BYTES} B)"
            rows.append(
                [
                    backend,
                    "idle" if checks == 0 else f"after {checks} checks (full window)",
                    f"{count:,}",
                    _mb(m["after"] - m["before"]),
                    f"{per_guard:,.0f}",
                    verdict,
                ]
            )
    _print_table(
        "(b) memory per guard (RSS delta / guards)",
        ["backend", "state", "guards", "RSS delta", "bytes/guard", "under 1 KB?"],
        rows,
        text_columns=2,
    )
    print()
    print_names()
    print()
    print_polls()


def print_names(names: int = NAMES) -> None:
    rows = []
    for backend in ("native", "reference"):
        m = _child("names", backend, str(names))
        delta = m["after"] - m["warm"]
        rows.append(
            [
                backend,
                _mb(m["warm"]),
                _mb(m["after"]),
                _signed_kb(delta),
                f"{delta / names:.3f}",
                f"{m['seconds']:.1f} s",
            ]
        )
    _print_table(
        f"(c) one guard, {names:,} checks of distinct tool names (after {NAMES_WARMUP:,})",
        ["backend", "after warm-up", f"after {names:,}", "delta", "B/name", "time"],
        rows,
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, *rest = sys.argv[2:]
        if kind == "leak":
            result = measure_leak(rest[0])
        elif kind == "names":
            result = measure_names(rest[0], int(rest[1]))
        elif kind == "polls":
            result = measure_polls(rest[0], int(rest[1]))
        else:
            result = measure_guards(rest[0], int(rest[1]), int(rest[2]))
        print(json.dumps(result))
    elif sys.argv[1:2] == ["--names"]:
        print_names()  # (c) alone
    elif sys.argv[1:2] == ["--polls"]:
        print_polls(int(sys.argv[2]) if len(sys.argv) > 2 else POLLS)  # (d) alone
    else:
        main()
