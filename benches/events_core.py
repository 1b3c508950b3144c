"""The native replay of events JSONL (``tripwire.replay.events_core``) on ``fleet.py``'s
generated fleet, three ways side by side, each in CPU seconds on one core:

* the Rust core alone: ``_core.EventsReplay`` fed the file with a sink that does nothing
  (reading, keys, the guard, and the finished runs made into Python tuples);
* ``tripwire replay --json`` with the native core, in a fresh process (``fleet._replay``: the
  runs' Python results, the totals and the report written as well);
* the same with ``TRIPWIRE_REPLAY_CORE=python``: the per-call path, the reference.

    python benches/events_core.py                     # 1,000,000 calls (~300 MB written)
    python benches/events_core.py --file FLEET.jsonl  # a fleet written before

Nothing is asserted about time; this is not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def core_only(path: Path, repeats: int) -> tuple[float, int]:
    """The Rust core's best CPU seconds over ``repeats`` replays of ``path``, and its calls."""
    from tripwire import _core
    from tripwire.replay import arrow_core, simulate
    from tripwire.replay.formats import files

    best, calls = float("inf"), 0
    for _ in range(repeats):
        settings = simulate.Settings()
        core = _core.EventsReplay(
            settings.guard(),
            observe=True,
            prices=arrow_core._prices(simulate.Fleet(settings)),
            sink=lambda *batch: None,
            default_run=str(path),
            max_open=simulate.MAX_OPEN_RUNS,
            max_evicted=simulate.MAX_EVICTED,
            line_limit=files.MAX_LINE_BYTES,
        )
        started = time.process_time()
        why = core.replay(str(path))
        best = min(best, time.process_time() - started)
        if why is not None:
            raise SystemExit(f"{path}: not replayed natively ({why})")
        calls = core.turns
    return best, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--file", type=Path, default=None, help="a fleet JSONL written before")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # fleet.py writes the fleet and replays it in a fresh process; it imports this file for
    # its row of the Rust core alone, so this one imports it only here.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fleet

    with tempfile.TemporaryDirectory(prefix="tripwire-events-") as tmp:
        path = args.file
        if path is None:
            path = fleet.write(Path(tmp), args.calls, seed=args.seed, layouts=("jsonl",))["jsonl"][
                0
            ]
        size = os.path.getsize(path)
        rows = []
        seconds, calls = core_only(path, args.repeats)
        rows.append(("Rust core alone (sink does nothing)", seconds))
        for core, label in (("native", "tripwire replay --json, native"),
                            ("python", "tripwire replay --json, per call")):  # fmt: skip
            rows.append((label, fleet._replay([path], 1, core).cpu))
        print(f"{path}: {size / 1e6:.0f} MB, {calls:,} calls")
        for label, seconds in rows:
            print(
                f"  {label:38s} {seconds:6.2f} s  {size / seconds / 1e6:6.1f} MB/s"
                f"  {calls / seconds:>10,.0f} calls/s a core"
            )


if __name__ == "__main__":
    main()
