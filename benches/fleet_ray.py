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
``--groupby``, through ``groupby(...).map_groups`` too. Before the clock starts, as on a
cluster that has run a replay before: each worker is started and has replayed a block (its
imports and first calls; on this busy machine a worker's start took 4 to 10 s, most of a
replay of a million calls), and the driver has run a replay of a few runs (its first dataset
starts Ray Data's statistics and autoscaling actors, new processes: 2 to 3 s). Then the fleet
is replayed ``--repeat`` times and the quickest is shown (the cores are shared: the others
measure the neighbours). Each Ray runs twice: with Ray Data's defaults, and with its operator
reservation off (``op_resource_reservation_enabled``), which holds a dataset's first second
to one task at a time (``docs/cluster.md``); ``--reserved-only`` skips the second.

It prints wall seconds, calls/s, the ratio of 2 workers to 1 (and what two spinning
processes get on this machine before and after: the cores are shared), and whether each
result equals ``--out`` row for row. Ray's workers run at niceness 0
(``RAY_worker_niceness``), like the processes they are compared with. Nothing is asserted
about time; this is not part of the test run.
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
workers, how, reserve, repeat, out, warm_path, *paths = sys.argv[1:]
started = time.perf_counter()
ray.init(num_cpus=int(workers), include_dashboard=False, log_to_driver=False,
         logging_level="warning")
context = ray.data.DataContext.get_current()
context.enable_progress_bars = False
context.print_on_execution_start = False
context.op_resource_reservation_enabled = reserve == "1"

@ray.remote
def warm(path):
    # A worker's start: its process, imports and first replay (seconds on a busy machine),
    # which a cluster's long-lived workers have paid long before; the sleep holds it, so
    # each task gets its own worker.
    import ray.data
    cluster.replay_calls(next(cluster.read_file_blocks(path)))
    time.sleep(1.0)
    return 0

ray.get([warm.remote(warm_path) for _ in range(int(workers))])
# The first dataset of a driver starts Ray Data's actors (its statistics, its autoscaling
# coordinator: new processes) and imports its executor: a few seconds, once.
cluster.replay_dataset(cluster.read_calls(warm_path), how=how).materialize()
up = time.perf_counter() - started
walls = []
for _ in range(int(repeat)):
    started = time.perf_counter()
    runs = cluster.replay_dataset(cluster.read_calls(paths), how=how)
    table = pa.concat_tables(ray.get(runs.to_arrow_refs()))
    walls.append(time.perf_counter() - started)
pq.write_table(table, out)
ray.shutdown()
print(json.dumps([up, walls]))
"""

KEYS = [("file", "ascending"), ("run", "ascending"), ("part", "ascending")]


def _ray(
    paths: list[Path], workers: int, how: str, out: Path, *, reserve: bool, repeat: int
) -> tuple[float, list[float]]:
    # A few runs of the first file, to warm up on.
    warm = out.with_name("warm.parquet")
    if not warm.exists():
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(paths[0]).slice(0, 2_000), warm)
    # Ray runs its workers at niceness 15 unless told: on a machine shared with other work
    # they would yield to it, where the processes they are compared with (tripwire replay,
    # the spinning pair) do not. A cluster's nodes run nothing else; here, like for like.
    env = {**os.environ, "RAY_worker_niceness": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(workers), how, str(int(reserve)), str(repeat),
         str(out), str(warm), *map(str, paths)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    up, walls = json.loads(done.stdout.splitlines()[-1])
    return up, walls


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
    parser.add_argument(
        "--reserved-only", action="store_true",
        help="only Ray Data's default (not also its operator reservation off)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=3,
        help="replays timed in each Ray (the quickest is shown: the cores are shared)",
    )  # fmt: skip
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
        ways = [("blocks", True)]
        ways += [] if args.reserved_only else [("blocks", False)]
        ways += [("groupby", True)] if args.groupby else []
        walls: dict[tuple[str, int], float] = {}
        spins = [fleet.ceiling()]
        for how, reserve in ways:
            name = how if reserve else f"{how} unreserved"
            for workers in (1, 2):
                out = directory / f"ray-{how}-{int(reserve)}-{workers}.parquet"
                up, times = _ray(paths, workers, how, out, reserve=reserve, repeat=args.repeat)
                wall = min(times)
                walls[name, workers] = wall
                rows.append((f"Ray {name}, {workers} worker{'s' * (workers > 1)}", wall, up,
                             _same(out, single_out)))  # fmt: skip
        spins.append(fleet.ceiling())
        calls = args.calls
        print(f"{'':34}{'wall s':>8}{'calls/s':>11}{'start s':>9}  same rows as --out")
        print(f"{'tripwire replay --jobs 1':34}{single:8.1f}{calls / single:11,.0f}{'':>9}  -")
        for name, wall, up, same in rows:
            print(f"{name:34}{wall:8.1f}{calls / wall:11,.0f}{up:9.1f}  {'yes' if same else 'NO'}")
        for how, reserve in ways:
            name = how if reserve else f"{how} unreserved"
            ratio = walls[name, 1] / walls[name, 2]
            print(
                f"Ray {name}: 2 workers {ratio:.2f}x 1 worker (target 1.6x; two spinning"
                f" processes: {spins[0]:.2f}x before, {spins[1]:.2f}x after)"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
