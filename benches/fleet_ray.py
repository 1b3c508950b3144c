"""Replay on Ray (``tripwire.replay.cluster``) on the generated fleet of ``benches/fleet.py``:
Ray with 2 workers against 1, beside the single-process replay, and the results of each
compared with ``tripwire replay --out``.

    python benches/fleet_ray.py                   # 1,000,000 calls in 8 Parquet shards
    python benches/fleet_ray.py --calls 200000    # quicker

The fleet is ``fleet.write``'s (deterministic: the same ``--calls`` and ``--seed``, the same
bytes), as Parquet tables of calls in ``--shards`` files. Each replay runs in a fresh process:
``tripwire replay --jobs 1 --out``, then a local Ray started with ``num_cpus`` 1 and then 2
(``ray.init``; its start-up is timed apart and left out of the replay's time), which maps
``replay_calls`` over ``read_calls``' run-partitioned blocks (``how="blocks"``) and, with
``--groupby``, through ``groupby(...).map_groups`` too. Its workers are started (and have
imported tripwire) before the clock starts, as a cluster's long-lived workers are: on this
busy machine a worker's start took 4 to 10 s, most of a replay of a million calls. It prints
wall seconds, calls/s, the ratio of 2 workers to 1 (and what two spinning processes get on
this machine now: the cores are shared), and whether each result equals ``--out`` row for
row. Ray's workers run at niceness 0 (``RAY_worker_niceness``), like the processes they are
compared with. Nothing is asserted about time; this is not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet

# Runs in a fresh process: starts a local Ray of N CPUs, replays, writes the runs as Parquet
# and prints [Ray start-up s, replay s].
_CHILD = """
import json, sys, time
import pyarrow as pa, pyarrow.parquet as pq
import ray
from tripwire.replay import cluster
workers, how, out, *paths = sys.argv[1:]
started = time.perf_counter()
ray.init(num_cpus=int(workers), include_dashboard=False, log_to_driver=False,
         logging_level="warning")
context = ray.data.DataContext.get_current()
context.enable_progress_bars = False
context.print_on_execution_start = False

@ray.remote
def warm():
    # A worker's start: its process and imports (seconds on a busy machine), which a cluster's
    # long-lived workers have paid long before; the sleep holds it, so each task gets its own.
    import pyarrow.parquet, tripwire.replay.cluster
    time.sleep(1.0)
    return 0

ray.get([warm.remote() for _ in range(int(workers))])
up = time.perf_counter() - started
started = time.perf_counter()
runs = cluster.replay_dataset(cluster.read_calls(paths), how=how)
table = pa.concat_tables(ray.get(runs.to_arrow_refs()))
wall = time.perf_counter() - started
pq.write_table(table, out)
ray.shutdown()
print(json.dumps([up, wall]))
"""

KEYS = [("file", "ascending"), ("run", "ascending"), ("part", "ascending")]


def _ray(paths: list[Path], workers: int, how: str, out: Path) -> tuple[float, float]:
    # Ray runs its workers at niceness 15 unless told: on a machine shared with other work
    # they would yield to it, where the processes they are compared with (tripwire replay,
    # the spinning pair) do not. A cluster's nodes run nothing else; here, like for like.
    env = {**os.environ, "RAY_worker_niceness": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(workers), how, str(out), *map(str, paths)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    up, wall = json.loads(done.stdout.splitlines()[-1])
    return up, wall


def _single(paths: list[Path], out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tripwire", "replay", "--jobs", "1", "--out", str(out),
         *map(str, paths)],
        capture_output=True, check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def _same(a: Path, b: Path) -> bool:
    import pyarrow.parquet as pq

    return bool(pq.read_table(a).sort_by(KEYS).equals(pq.read_table(b).sort_by(KEYS)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=fleet.SHARDS)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--groupby", action="store_true", help="also through a groupby")
    parser.add_argument("--keep", metavar="DIR", default=None)
    args = parser.parse_args()
    directory = Path(args.keep or tempfile.mkdtemp(prefix="tripwire-fleet-ray-"))
    try:
        started = time.perf_counter()
        paths = fleet.write(
            directory / "parquet", args.calls, shards=args.shards, seed=args.seed,
            layouts=("parquet",),
        )["parquet"]  # fmt: skip
        print(
            f"generated {args.calls:,} calls in {args.shards} Parquet files in"
            f" {time.perf_counter() - started:.0f} s in {directory}"
        )
        single_out = directory / "single.parquet"
        single = _single(paths, single_out)
        rows: list[tuple[str, float, float, bool]] = []
        hows = ["blocks", "groupby"] if args.groupby else ["blocks"]
        walls: dict[tuple[str, int], float] = {}
        for how in hows:
            for workers in (1, 2):
                out = directory / f"ray-{how}-{workers}.parquet"
                up, wall = _ray(paths, workers, how, out)
                walls[how, workers] = wall
                rows.append((f"Ray {how}, {workers} worker{'s' * (workers > 1)}", wall, up,
                             _same(out, single_out)))  # fmt: skip
        calls = args.calls
        print(f"{'':30}{'wall s':>8}{'calls/s':>11}{'start s':>9}  same rows as --out")
        print(f"{'tripwire replay --jobs 1':30}{single:8.1f}{calls / single:11,.0f}{'':>9}  -")
        for name, wall, up, same in rows:
            print(f"{name:30}{wall:8.1f}{calls / wall:11,.0f}{up:9.1f}  {'yes' if same else 'NO'}")
        spin = fleet.ceiling()
        for how in hows:
            ratio = walls[how, 1] / walls[how, 2]
            print(
                f"Ray {how}: 2 workers {ratio:.2f}x 1 worker (target 1.6x;"
                f" two spinning processes: {spin:.2f}x)"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
