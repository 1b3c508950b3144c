"""A generated fleet, the same calls in every layout ``tripwire replay`` reads at fleet scale,
and the bench of it.

    python benches/fleet.py                     # 1,000,000 calls (~2 GB written, a few minutes)
    python benches/fleet.py --calls 200000      # quicker
    python benches/fleet.py --keep DIR          # write the layouts to DIR and keep them

The generator is deterministic (a seeded ``random.Random``; the same ``--calls`` and ``--seed``
give the same bytes) and streams: it holds one run at a time. Runs of 4 to 60 calls over a
dozen tools; about a quarter get stuck (the same call and the same result, four times or
more), some poll a job whose answer changes (no loop), the rest work (different arguments).
Each layout gets the same calls:

* ``jsonl``: the events format, one call a line, ``"result"`` on the line;
* ``parquet``: the long table of calls (``tripwire.replay.formats.table``), row groups of 64k;
* ``otlp``: OpenTelemetry GenAI ``execute_tool`` spans, OTLP JSON lines, 200 spans a request,
  runs by ``gen_ai.conversation.id``;
* ``openinference``: Phoenix span JSON, one TOOL span a line, runs by ``session.id``.

Then it prints, side by side: JSONL replay MB/s and calls/s on one core, Parquet replay
calls/s on one core, ``--jobs 2`` against ``--jobs 1`` (the fleet in ``SHARDS`` files, as trace
stores shard it; with what two spinning processes get, as the cores are shared), and the
peak memory (``VmHWM`` of the replaying process) for two fifths of the fleet and for all of
it, in one file: flat, bounded by the largest run and the results kept in memory
(``simulate.SPILL_AFTER`` runs; the rest spill to a temporary file), not by the dataset.
Nothing is asserted about time; this is not part of the test run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LAYOUTS = ("jsonl", "parquet", "otlp", "openinference")
SHARDS = 8
TOOLS = (
    "search_flights", "get_weather", "read_file", "list_dir", "grep", "run_tests",
    "get_logs", "lookup_order", "query_db", "fetch_url", "job_status", "edit_file",
)  # fmt: skip
T0 = 1_764_900_000_000_000_000


# (run, step, tool, arguments JSON text, result JSON text, error)
Row = tuple[str, int, str, str, str, bool]


def _run(rng: random.Random, name: str) -> list[Row]:
    length = rng.randint(4, 60)
    kind = rng.random()
    rows: list[Row] = []
    stuck_at = rng.randint(1, max(1, length - 5)) if kind < 0.25 else -1
    stuck_tool = rng.choice(TOOLS)
    stuck_args = json.dumps({"q": f"{name}-stuck", "page": 1}, separators=(",", ":"))
    stuck_result = json.dumps({"items": [], "note": "nothing found"}, separators=(",", ":"))
    for step in range(1, length + 1):
        if stuck_at >= 0 and step >= stuck_at:
            tool, args, result = stuck_tool, stuck_args, stuck_result
        elif kind < 0.35:
            tool = "job_status"
            args = json.dumps({"job": f"{name}-build"}, separators=(",", ":"))
            result = json.dumps({"state": "running", "progress": step}, separators=(",", ":"))
        else:
            tool = rng.choice(TOOLS)
            args = json.dumps(
                {"q": f"{tool}-{rng.randrange(10**9)}", "limit": rng.choice((10, 20, 50))},
                separators=(",", ":"),
            )
            body = "x" * rng.randint(40, 400)
            result = json.dumps(
                {"ok": True, "n": rng.randrange(1000), "text": body}, separators=(",", ":")
            )
        rows.append((name, step, tool, args, result, False))
    return rows


def runs(calls: int, seed: int = 29) -> Iterator[list[Row]]:
    """Runs until ``calls`` calls have been made (the last run is cut short to fit)."""
    rng = random.Random(seed)
    made = 0
    index = 0
    while made < calls:
        rows = _run(rng, f"run-{index:07d}")[: calls - made]
        made += len(rows)
        index += 1
        yield rows


def _shards(calls: int, shards: int, seed: int) -> Iterator[tuple[int, list[Row]]]:
    """Each run with the shard it goes to (runs are dealt in turn, whole)."""
    for index, rows in enumerate(runs(calls, seed)):
        yield index % shards, rows


def _names(directory: Path, layout: str, shards: int) -> list[Path]:
    suffix = {
        "jsonl": ".jsonl",
        "parquet": ".parquet",
        "otlp": ".otlp.jsonl",
        "openinference": ".oi.jsonl",
    }
    return [directory / f"{layout}-{i:03d}{suffix[layout]}" for i in range(shards)]


def _event_line(row: Row) -> str:
    run, step, tool, args, result, _ = row
    return (
        json.dumps({"run": run, "step": step, "tool": tool, "args": args, "result": result}) + "\n"
    )


def _attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _otlp_span(row: Row) -> dict[str, Any]:
    run, step, tool, args, result, _ = row
    start = T0 + step * 1_000_000_000
    return {
        "traceId": hashlib.md5(run.encode()).hexdigest(),
        "spanId": f"{step:016x}",
        "name": f"execute_tool {tool}",
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000_000),
        "attributes": [
            _attr("gen_ai.operation.name", "execute_tool"),
            _attr("gen_ai.tool.name", tool),
            _attr("gen_ai.tool.call.id", f"call_{step}"),
            _attr("gen_ai.conversation.id", run),
            _attr("gen_ai.tool.call.arguments", args),
            _attr("gen_ai.tool.call.result", result),
        ],
        "status": {},
    }


def _oi_line(row: Row) -> str:
    run, step, tool, args, result, _ = row
    clock = f"{step // 3600:02d}:{step // 60 % 60:02d}:{step % 60:02d}"
    span = {
        "name": tool,
        "context": {"trace_id": f"t-{run}", "span_id": f"{step:016x}"},
        "span_kind": "TOOL",
        "parent_id": None,
        "start_time": f"2026-12-05T{clock}.000000+00:00",
        "end_time": None,
        "status_code": "OK",
        "status_message": "",
        "attributes": {
            "openinference": {"span": {"kind": "TOOL"}},
            "tool": {"name": tool},
            "input": {"value": args},
            "output": {"value": result},
            "session": {"id": run},
        },
    }
    return json.dumps(span) + "\n"


def write(
    directory: Path,
    calls: int,
    *,
    shards: int = 1,
    seed: int = 29,
    layouts: tuple[str, ...] = LAYOUTS,
) -> dict[str, list[Path]]:
    """Writes the fleet in each layout, ``shards`` files each; their paths by layout."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {layout: _names(directory, layout, shards) for layout in layouts}
    texts = {
        layout: [open(p, "w", encoding="utf-8") for p in paths[layout]]  # noqa: SIM115
        for layout in layouts
        if layout != "parquet"
    }
    spans: list[list[dict[str, Any]]] = [[] for _ in range(shards)]
    tables: list[Any] = []
    batches: list[list[Row]] = [[] for _ in range(shards)]
    pa = pq = None
    if "parquet" in layouts:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [("run", pa.string()), ("step", pa.int64()), ("tool", pa.string()),
             ("arguments", pa.string()), ("result", pa.string()), ("error", pa.bool_())]
        )  # fmt: skip
        tables = [pq.ParquetWriter(p, schema, compression="zstd") for p in paths["parquet"]]

    def flush_parquet(shard: int) -> None:
        rows = batches[shard]
        if rows:
            columns = list(zip(*rows, strict=True))
            tables[shard].write_table(
                pa.table(
                    [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                    schema=schema,
                )
            )
            batches[shard] = []

    for shard, rows in _shards(calls, shards, seed):
        if "jsonl" in texts:
            texts["jsonl"][shard].write("".join(_event_line(row) for row in rows))
        if "openinference" in texts:
            texts["openinference"][shard].write("".join(_oi_line(row) for row in rows))
        if "otlp" in texts:
            spans[shard].extend(_otlp_span(row) for row in rows)
            if len(spans[shard]) >= 200:
                texts["otlp"][shard].write(_otlp_request(spans[shard]))
                spans[shard] = []
        if tables:
            batches[shard].extend(rows)
            if len(batches[shard]) >= 65_536:
                flush_parquet(shard)
    for shard in range(shards):
        if "otlp" in texts and spans[shard]:
            texts["otlp"][shard].write(_otlp_request(spans[shard]))
        if tables:
            flush_parquet(shard)
            tables[shard].close()
    for files in texts.values():
        for file in files:
            file.close()
    return paths


def _otlp_request(spans: list[dict[str, Any]]) -> str:
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "fleet")]},
                "scopeSpans": [{"scope": {"name": "fleet-bench"}, "spans": spans}],
            }
        ]
    }
    return json.dumps(request) + "\n"


# -- the bench ---------------------------------------------------------------------------------


def _replay(paths: list[Path], jobs: int) -> tuple[float, int, dict[str, Any]]:
    """``tripwire replay --json --jobs N`` in a fresh process: wall seconds, peak RSS (KiB) of
    the replaying processes, and the summary."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(jobs), *map(str, paths)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    rss, summary = json.loads(done.stdout.splitlines()[-1])
    return wall, rss, summary


# Replays (the JSON report to a file, as a user would redirect it) and prints [peak RSS of
# this process in KiB, summary]. VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and
# exec, so a child would report its parent's (the generator's) peak.
_CHILD = """
import json, os, sys, tempfile
from tripwire.cli import main
with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
    sys.stdout, real = out, sys.stdout
    main(["replay", "--json", "--jobs", sys.argv[1], *sys.argv[2:]])
    sys.stdout = real
    status = open("/proc/self/status").read()
    hwm = int(status.split("VmHWM:")[1].split()[0])
    out.seek(0)
    summary = json.load(out)["summary"]
print(json.dumps([hwm, {k: summary[k] for k in ("runs", "stopped", "steps", "steps_saved")}]))
"""


def _spin(_: int) -> float:
    started = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - started


def ceiling() -> float:
    """What two processes get on this machine now: two CPU-bound tasks on two processes
    against one after the other (2.0 on two idle cores; the cores are shared)."""
    import multiprocessing

    started = time.perf_counter()
    _spin(0)
    _spin(0)
    serial = time.perf_counter() - started
    with multiprocessing.get_context("forkserver").Pool(2) as pool:
        pool.map(_spin, [0])  # started
        started = time.perf_counter()
        pool.map(_spin, [0, 1], chunksize=1)
        both = time.perf_counter() - started
    return serial / both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--keep", metavar="DIR", default=None)
    args = parser.parse_args()
    directory = Path(args.keep or tempfile.mkdtemp(prefix="tripwire-fleet-"))
    try:
        started = time.perf_counter()
        one = write(directory / "one", args.calls, seed=args.seed, layouts=("jsonl", "parquet"))
        sharded = write(
            directory / "sharded", args.calls, shards=SHARDS, seed=args.seed, layouts=("jsonl",)
        )
        part = write(directory / "part", args.calls * 2 // 5, seed=args.seed, layouts=("jsonl",))
        spans = write(
            directory / "spans",
            args.calls,
            shards=SHARDS,
            seed=args.seed,
            layouts=("otlp", "openinference"),
        )
        print(
            f"generated {args.calls:,} calls in {time.perf_counter() - started:.0f} s"
            f" in {directory}"
        )
        size = one["jsonl"][0].stat().st_size
        jsonl_wall, jsonl_rss, jsonl = _replay(one["jsonl"], 1)
        parquet_wall, _, parquet = _replay(one["parquet"], 1)
        part_wall, part_rss, _ = _replay(part["jsonl"], 1)
        one_job, _, sharded1 = _replay(sharded["jsonl"], 1)
        two_jobs, _, sharded2 = _replay(sharded["jsonl"], 2)
        otlp_wall, _, otlp = _replay(spans["otlp"], 1)
        oi_wall, _, oi = _replay(spans["openinference"], 1)
        assert jsonl == parquet == sharded1 == sharded2 == otlp == oi, (jsonl, parquet, otlp, oi)
        calls = args.calls
        print(
            f"fleet: {jsonl['runs']:,} runs, {calls:,} calls, {jsonl['stopped']:,} stopped, "
            f"{jsonl['steps_saved']:,} steps saved (the same from every layout)"
        )
        print(f"{'':34}{'wall s':>8}{'MB/s':>9}{'calls/s':>11}")
        print(
            f"{'JSONL, one core':34}{jsonl_wall:8.1f}{size / jsonl_wall / 1e6:9.1f}"
            f"{calls / jsonl_wall:11,.0f}"
        )
        print(f"{'Parquet, one core':34}{parquet_wall:8.1f}{'':>9}{calls / parquet_wall:11,.0f}")
        print(f"{'OTLP spans, one core':34}{otlp_wall:8.1f}{'':>9}{calls / otlp_wall:11,.0f}")
        print(f"{'OpenInference spans, one core':34}{oi_wall:8.1f}{'':>9}{calls / oi_wall:11,.0f}")
        print(
            f"{f'JSONL in {SHARDS} files, --jobs 1':34}{one_job:8.1f}{'':>9}"
            f"{calls / one_job:11,.0f}"
        )
        print(
            f"{f'JSONL in {SHARDS} files, --jobs 2':34}{two_jobs:8.1f}{'':>9}"
            f"{calls / two_jobs:11,.0f}"
            f"   {one_job / two_jobs:.2f}x --jobs 1 (two spinning processes: {ceiling():.2f}x)"
        )
        print(
            f"peak memory: {part_rss / 1024:.0f} MiB for {calls * 2 // 5:,} calls "
            f"({part['jsonl'][0].stat().st_size / 1e6:.0f} MB), "
            f"{jsonl_rss / 1024:.0f} MiB for {calls:,} calls ({size / 1e6:.0f} MB)"
        )
        del part_wall
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
