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

Then it prints, side by side: JSONL replay MB/s and calls/s on one core (the native core and
the per-call path), Parquet replay calls/s on one core, ``--jobs 2`` against ``--jobs 1``
(the fleet in ``SHARDS`` files, as trace stores shard it; with what two spinning processes
get, as the cores are shared), and the
peak memory (``VmHWM`` of the replaying process) for two fifths of the fleet and for all of
it, in one file: flat, bounded by the largest run and the results kept in memory
(``simulate.SPILL_AFTER`` runs; the rest spill to a temporary file), not by the dataset.
Nothing is asserted about time; this is not part of the test run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

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


class Replayed(NamedTuple):
    wall: float
    # CPU seconds of the replay itself (this process and its workers; not the start-up).
    cpu: float
    rss: int
    summary: dict[str, Any]


def _replay(paths: list[Path], jobs: int, core: str = "native") -> Replayed:
    """``tripwire replay --jobs N`` in a fresh process: wall seconds (start-up included),
    CPU seconds of the replay and its report, peak RSS (KiB) of the replaying process, and
    the summary. ``core``: ``python`` turns the native cores off (``arrow_core``,
    ``events_core``)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(jobs), *map(str, paths)],
        capture_output=True, text=True, check=True,
        env={**os.environ, "TRIPWIRE_REPLAY_CORE": core},
    )  # fmt: skip
    wall = time.perf_counter() - started
    rss, cpu, summary = json.loads(done.stdout.splitlines()[-1])
    return Replayed(wall, cpu, rss, summary)


# Replays as ``tripwire replay --jobs N`` does by default (the terminal report, to a file, as
# a user would redirect it) and prints [peak RSS of this process in KiB, CPU seconds, the
# summary], the summary taken from the report as it is rendered (outside the clock's work:
# a few attributes). VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and exec, so a
# child would report its parent's (the generator's) peak.
_CHILD = """
import json, os, resource, sys, tempfile
import tripwire._entry
tripwire._entry.no_idle_threads()  # as the command's entry point does
import tripwire.cli as cli
import tripwire.replay.arrow_core, pyarrow.parquet  # imported before the clock starts
def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
found = {}
render = cli.render
def rendered(report, **kwargs):
    totals = report.totals
    found.update(runs=totals.runs, stopped=totals.stopped, steps=totals.steps,
                 steps_saved=totals.steps_saved,
                 problems=[p.message for p in report.problems])
    return render(report, **kwargs)
cli.render = rendered
with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
    sys.stdout, real = out, sys.stdout
    started = cpu()
    cli.main(["replay", "--jobs", sys.argv[1], *sys.argv[2:]])
    used = cpu() - started
    sys.stdout = real
status = open("/proc/self/status").read()
hwm = int(status.split("VmHWM:")[1].split()[0])
print(json.dumps([hwm, used, found]))
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


def _row(
    name: str, replayed: Replayed, calls: int, size: int | None, target: str, core: bool = True
) -> None:
    """A line of the table; ``core=False`` for ``--jobs``, whose workers (children of the
    forkserver) this process's CPU time does not count."""
    mbs = f"{size / replayed.cpu / 1e6:9.1f}" if size is not None else f"{'':>9}"
    a_core = f"{calls / replayed.cpu:11,.0f}" if core else f"{'':>11}"
    print(f"{name:40}{replayed.wall:8.1f}{mbs}{calls / replayed.wall:11,.0f}{a_core}   {target}")


HUGE_CELL = 1 << 30


def huge_cell(directory: Path) -> None:
    """A Parquet export with a 1 GB string in one cell among ordinary rows: replayed with
    bounded memory (its row group is skipped from the file's metadata, never decoded), the
    problem naming the file and the column, the other rows replayed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "huge-cell.parquet"
    rows = [row for run in runs(3000) for row in run]
    names = ("run", "step", "tool", "arguments", "result", "error")
    types = (pa.string(), pa.int64(), pa.string(), pa.large_string(), pa.string(), pa.bool_())
    schema = pa.schema(list(zip(names, types, strict=True)))
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, len(rows), 1000):
            chunk = [list(c) for c in zip(*rows[start : start + 1000], strict=True)]
            if start == 1000:
                chunk[3][0] = '{"p":"' + "x" * HUGE_CELL + '"}'
            writer.write_table(pa.table(dict(zip(names, chunk, strict=True)), schema=schema))
            del chunk
    found = _replay([path], 1)
    print(
        f"Parquet with a {HUGE_CELL / 1e9:.1f} GB cell ({path.stat().st_size / 1e6:.1f} MB on "
        f"disk): peak {found.rss / 1024:.0f} MiB, {found.summary['runs']:,} runs replayed; "
        f"{found.summary['problems']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--keep", metavar="DIR", default=None)
    parser.add_argument(
        "--no-huge-cell", action="store_true", help="skip the Parquet file with a 1 GB cell"
    )
    args = parser.parse_args()
    directory = Path(args.keep or tempfile.mkdtemp(prefix="tripwire-fleet-"))
    try:
        started = time.perf_counter()
        one = write(directory / "one", args.calls, seed=args.seed, layouts=("jsonl", "parquet"))
        sharded = write(
            directory / "sharded", args.calls, shards=SHARDS, seed=args.seed,
            layouts=("jsonl", "parquet"),
        )  # fmt: skip
        part = write(
            directory / "part", args.calls * 2 // 5, seed=args.seed, layouts=("jsonl", "parquet")
        )
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
        jsonl = _replay(one["jsonl"], 1)
        jsonl_per_call = _replay(one["jsonl"], 1, core="python")
        from events_core import core_only

        rust_seconds, _ = core_only(one["jsonl"][0], 1)
        jsonl_rust = Replayed(rust_seconds, rust_seconds, 0, jsonl.summary)
        parquet = _replay(one["parquet"], 1)
        per_call = _replay(one["parquet"], 1, core="python")
        part_jsonl = _replay(part["jsonl"], 1)
        part_parquet = _replay(part["parquet"], 1)
        jsonl1, jsonl2 = _replay(sharded["jsonl"], 1), _replay(sharded["jsonl"], 2)
        parquet1, parquet2 = _replay(sharded["parquet"], 1), _replay(sharded["parquet"], 2)
        otlp = _replay(spans["otlp"], 1)
        oi = _replay(spans["openinference"], 1)
        same = [r.summary for r in (jsonl, jsonl_per_call, parquet, per_call, jsonl1, jsonl2,
                                    parquet1, parquet2, otlp, oi)]  # fmt: skip
        assert all(found == same[0] for found in same), same
        calls = args.calls
        summary = jsonl.summary
        print(
            f"fleet: {summary['runs']:,} runs, {calls:,} calls, {summary['stopped']:,} stopped, "
            f"{summary['steps_saved']:,} steps saved (the same from every layout and path)"
        )
        print("a core: calls / CPU seconds of the replay (start-up left out); wall: the command")
        print(f"{'':40}{'wall s':>8}{'MB/s':>9}{'calls/s':>11}{'a core':>11}   target")
        _row("JSONL (events), native core", jsonl, calls, size, "200 MB/s a core")
        _row("JSONL (events), its Rust core alone", jsonl_rust, calls, size, "")
        _row("JSONL (events), per call in Python", jsonl_per_call, calls, size, "")
        _row("Parquet, native core", parquet, calls, None, "2,000,000 calls/s a core")
        _row("Parquet, per call in Python", per_call, calls, None, "")
        _row("OTLP spans", otlp, calls, None, "")
        _row("OpenInference spans", oi, calls, None, "")
        two = ceiling()
        for name, one_job, two_jobs in (
            ("JSONL", jsonl1, jsonl2),
            ("Parquet, native", parquet1, parquet2),
        ):
            _row(f"{name} in {SHARDS} files, --jobs 1", one_job, calls, None, "", core=False)
            _row(f"{name} in {SHARDS} files, --jobs 2", two_jobs, calls, None, "", core=False)
            print(
                f"{'':40}--jobs 2 / --jobs 1: {one_job.wall / two_jobs.wall:.2f}x"
                f" (target 1.8x; two spinning processes get {two:.2f}x here now)"
            )
        part_size = part["jsonl"][0].stat().st_size
        for name, small, big in (
            ("JSONL", part_jsonl, jsonl),
            ("Parquet, native", part_parquet, parquet),
        ):
            print(
                f"peak memory, {name}: {small.rss / 1024:.0f} MiB for {calls * 2 // 5:,} calls "
                f"({part_size / 1e6:.0f} MB as JSONL), {big.rss / 1024:.0f} MiB for {calls:,} "
                f"calls ({size / 1e6:.0f} MB): bounded by the largest run, not the dataset"
            )
        if not args.no_huge_cell:
            huge_cell(directory / "huge")
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
