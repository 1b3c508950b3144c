"""In-process ratio tables: ``timeit``, candidates interleaved, best of several repeats.

Absolute times drift on these machines (docs/design/speed.md), so what the benches report is ratios
measured side by side in one process. Each repeat times every candidate once, in turn, so a
burst of load from elsewhere hits all of them rather than one; the best repeat is kept, as
``timeit`` recommends. These run even under ``--benchmark-disable``; the tables are printed
at the end of the session by ``conftest.py`` (and to stdout, seen with ``-s``).
"""

from __future__ import annotations

import os
import timeit
from typing import Any

# Filled by the ``test_ratios_*`` tests, printed by ``conftest.pytest_terminal_summary``.
TABLES: list[str] = []

REPEATS = 7
# Each timed repeat of each candidate runs for about this long.
REPEAT_SECONDS = 0.02


def best_ns(
    candidates: dict[str, str],
    namespace: dict[str, Any],
    *,
    calls_per_stmt: int = 1,
    repeats: int = REPEATS,
    seconds: float = REPEAT_SECONDS,
) -> dict[str, float]:
    """Best time per call in ns of each statement (run in ``namespace``), interleaved.

    Statements are strings rather than lambdas so the timed loop calls the function under
    test directly, with no extra Python frame in the measurement.
    """
    timers = {label: timeit.Timer(stmt, globals=namespace) for label, stmt in candidates.items()}
    loops: dict[str, int] = {}
    for label, timer in timers.items():
        number = 1
        while True:
            elapsed = timer.timeit(number)
            if elapsed >= seconds / 4:
                break
            number *= 4
        loops[label] = max(1, int(number * seconds / elapsed))
    best = dict.fromkeys(timers, float("inf"))
    for _ in range(repeats):
        for label, timer in timers.items():
            elapsed = timer.timeit(loops[label])
            per_call = elapsed * 1e9 / loops[label] / calls_per_stmt
            best[label] = min(best[label], per_call)
    return best


def fmt_ns(ns: float) -> str:
    # Thresholds just under the unit, so 999.7 ns prints as "1.00 µs", not "1000 ns".
    if ns >= 999.5e6:
        return f"{ns / 1e9:.2f} s"
    if ns >= 999.5e3:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 999.5:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def table(title: str, header: list[str], rows: list[list[str]], notes: list[str]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    rule = "-" * len(line(header))
    return "\n".join([title, rule, line(header), rule, *map(line, rows), rule, *notes])


def report(text: str) -> None:
    TABLES.append(text)
    print("\n" + text)


def machine() -> str:
    """Cores and load when measured: ratios from a busy machine deserve a second look."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} CPUs, load average {load:.2f} when measured"
