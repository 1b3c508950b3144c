"""``tripwire replay`` on a big trace: throughput and peak memory.

    python benches/replay_big.py            # ~1 GB
    python benches/replay_big.py --gb 0.1   # quicker
    python benches/replay_big.py --keep     # leave the trace behind (its path is printed)

Writes a JSONL trace in the events format to a temporary directory, streaming (the generator
holds one run per concurrent slot, never the file): many runs, about a third of them stuck in a
loop (a call repeated in respelled forms: key order, spacing, volatile ids), the rest healthy
(paging, reading and writing files, polls whose arguments advance), up to ``CONCURRENT`` runs
interleaved as a fleet log is. Every line carries usage figures whose input grows step by step,
and a tool result of a realistic size. Then replays it in this process, as ``tripwire replay
--json`` does (the table is rendered too), and prints calls per second, bytes per second, wall
time and the peak RSS (``ru_maxrss``) before and after. Nothing is asserted about time; the
script is not part of the test run (docs/design/speed.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tripwire
from tripwire.replay import Settings, render, replay, write_json

CONCURRENT = 16
SEED = 20260302


def rss_mb() -> float:
    """Peak RSS of this process so far, in MiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_RESULT = "x" * 120
_SPACES = ["", " ", "  "]


def _healthy(rng: random.Random, steps: int) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    page = 0
    for i in range(steps):
        kind = rng.randrange(5)
        if kind == 0:
            page += 1
            calls.append(("list_orders", {"status": "open", "cursor": f"p{page}", "limit": 50}))
        elif kind == 1:
            calls.append(("read_file", {"path": f"src/module_{rng.randrange(400)}.py"}))
        elif kind == 2:
            calls.append(("write_file", {"path": f"src/module_{i}.py", "text": "def f(): ..."}))
        elif kind == 3:
            calls.append(("get_build", {"id": 9000 + i, "after": f"2026-03-02T02:{i % 60:02}"}))
        else:
            calls.append(("search_docs", {"query": f"refund policy clause {rng.randrange(10**6)}"}))
    return calls


def _looping(rng: random.Random, steps: int) -> list[tuple[str, dict[str, Any]]]:
    lead = rng.randrange(1, 8)
    calls = _healthy(rng, lead)
    service = f"svc-{rng.randrange(50)}"
    for i in range(steps - lead):
        args: dict[str, Any] = {"service": service, "since": "15m", "level": "error"}
        if i % 3 == 1:
            args = dict(reversed(list(args.items())))
        if i % 4 == 2:
            args["request_id"] = f"r-{rng.randrange(10**9)}"
        if i % 5 == 3:
            args["service"] = service + rng.choice(_SPACES)
        calls.append(("get_logs", args))
    return calls


def generate(path: Path, target_bytes: int) -> dict[str, int]:
    """Streams a trace of about ``target_bytes`` to ``path``."""
    rng = random.Random(SEED)
    counts = {"lines": 0, "runs": 0, "looping": 0, "bytes": 0}
    active: list[list[Any]] = []  # [name, calls, next index, input tokens]

    started = 0

    def start() -> None:
        nonlocal started
        started += 1
        steps = rng.randrange(8, 60)
        looping = rng.random() < 0.3
        calls = _looping(rng, steps) if looping else _healthy(rng, steps)
        active.append([f"run-{started:07}", calls, 0, rng.randrange(4000, 16000), looping])

    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        while counts["bytes"] < target_bytes:
            while len(active) < CONCURRENT:
                start()
            slot = rng.randrange(len(active))
            run = active[slot]
            name, calls, index, tokens, looping = run
            if index == 0:  # runs are counted once written, not when merely started
                counts["runs"] += 1
                counts["looping"] += looping
            tool, args = calls[index]
            output = rng.randrange(80, 400)
            line = (
                f'{{"run": "{name}", "step": {index + 1}, "tool": "{tool}", '
                f'"args": {json.dumps(args)}, "result": "{_RESULT[: rng.randrange(20, 120)]}", '
                f'"usage": {{"input_tokens": {tokens}, "output_tokens": {output}}}}}\n'
            )
            out.write(line)
            counts["lines"] += 1
            counts["bytes"] += len(line)
            run[2] = index + 1
            run[3] = tokens + output + rng.randrange(20, 300)
            if run[2] == len(calls):
                active.pop(slot)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="trace size in GB (default 1.0)")
    parser.add_argument("--dir", default=None, help="where to write the trace (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the trace file")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="tripwire-replay-", dir=args.dir))
    path = workdir / "fleet.jsonl"
    try:
        start = time.perf_counter()
        counts = generate(path, int(args.gb * 1e9))
        generated = time.perf_counter() - start
        size = path.stat().st_size
        print(f"tripwire {tripwire.__version__} ({tripwire.IMPLEMENTATION} core)")
        print(
            f"trace      {size / 1e9:.2f} GB, {counts['lines']:,} calls, {counts['runs']:,} runs "
            f"({counts['looping']:,} looping), written in {generated:.1f} s: {path}"
        )
        before = rss_mb()

        start = time.perf_counter()
        cpu = time.process_time()
        report = replay([str(path)], Settings())
        replayed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        after_replay = rss_mb()

        start = time.perf_counter()
        table = render(report)
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            write_json(report, devnull)
        rendered = time.perf_counter() - start
        peak = rss_mb()

        calls = sum(run.steps for run in report.runs)
        looped = sum(1 for run in report.runs if run.looped)
        print(
            f"replay     {replayed:.1f} s: {calls / replayed:,.0f} calls/s, "
            f"{size / replayed / 1e6:.1f} MB/s ({calls:,} calls, {len(report.runs):,} runs, "
            f"{looped:,} looped, {report.problems_total} problems)"
        )
        print(
            f"           {cpu:.1f} s of CPU: {calls / cpu:,.0f} calls per CPU second "
            "(wall time suffers on a busy machine; CPU time less)"
        )
        print(f"report     {rendered:.1f} s (table + JSON to /dev/null)")
        print(
            f"peak RSS   {before:.0f} MiB before replay, {after_replay:.0f} MiB after replay, "
            f"{peak:.0f} MiB after the report (finished runs spilled to a temporary file: "
            f"{'yes' if report.runs.spilled else 'no'})"
        )
        print(f"wall       {generated + replayed + rendered:.1f} s in all")
        print()
        print("\n".join(table.splitlines()[-12:]))
        report.runs.close()
        if calls != counts["lines"] or report.problems_total:
            print("MISMATCH: calls replayed differ from calls written", file=sys.stderr)
            return 1
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
