"""``tripwire replay --jobs N``: the files shared among N processes, the report the same.

Runs are identified by file and run name (``simulate``), so the runs of one file are
replayed wholly by one process, independently of every other file's: each file is one
task. A worker replays its file into a fleet of its own, which writes the runs to private
temporary files in pickled chunks (``RunStore.detach``), and the calls with ``--calls-out``
to another; it sends back what its fleet found (``Fleet.outcome``: the file's sums, totals
and per-tool figures, its problems, the runs it chose for the report) and those files. The
parent takes the files' outcomes back in the order of the files (``Fleet.take``): it adds
each file's sums as the sequential replay adds a file's (a fleet sums each file's runs apart
and then the files', so float sums, which depend on their order, come out the same), and
takes each file's runs over whole (``RunStore.adopt``: the files are moved, not read):
totals, per-tool figures and the lists of runs and problems come out in the same order, so
the terminal report, ``--json`` and ``--html`` are byte-identical to ``--jobs 1``. The
parent does no work per run while the workers replay. Memory: each process holds one file's
open runs (as the sequential replay does), and the parent one chunk of calls at a time.

Standard input and Arrow streams given from Python are replayed in the parent, one at a time
(``--jobs`` is ignored for them); so is a single file (it is one task), and input under
``MIN_BYTES`` (the workers would cost more than they save). A fleet in one huge
file uses one core: write it as several (most trace stores shard by day or by partition).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final

from tripwire.replay.formats import FileStats, Problem
from tripwire.replay.formats.files import GZIP_MAGIC
from tripwire.replay.formats.table import PARQUET_MAGIC
from tripwire.replay.simulate import (
    STDIN,
    Aside,
    CallRow,
    Fleet,
    Report,
    RunStore,
    Settings,
    _expand,
    _head,
    replay_file,
)

# Calls written per pickled chunk by a worker.
CALL_CHUNK: Final = 8192
# Input smaller than this is replayed in this process: starting the workers (up to ~0.3 s)
# would cost more than they save. The report is the same either way.
MIN_BYTES = 16 << 20


@dataclass(slots=True)
class Outcome:
    """What a worker found in one file: its figures, what its fleet found (its runs in
    temporary files), and the temporary file holding its calls in chunks."""

    stats: FileStats
    aside: Aside
    spill: str


@dataclass(slots=True)
class _Job:
    settings: Settings
    columns: Mapping[str, str] | None
    calls: bool
    keep: int
    # The parent's ``Fleet.selection`` limit (0: none), and whether it keeps its runs.
    limit: int
    keep_runs: bool
    # The parent's private directory for the workers' files: removed whole at the end, so
    # an interrupted replay leaves nothing behind.
    directory: str


_JOB: _Job | None = None


def _start(job: _Job) -> None:
    global _JOB
    _JOB = job


@dataclass(slots=True)
class _Spill:
    file: IO[bytes]
    calls: list[CallRow] = field(default_factory=list)

    def call(self, row: CallRow) -> None:
        self.calls.append(row)
        if len(self.calls) >= CALL_CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.calls:
            pickle.dump(self.calls, self.file, pickle.HIGHEST_PROTOCOL)
            self.calls = []


def _work(task: tuple[int, str]) -> Outcome:
    """Replays one file in a worker."""
    index, path = task
    job = _JOB
    assert job is not None
    fd, spill_path = tempfile.mkstemp(suffix=".part", dir=job.directory)
    # The runs straight to files of their own in the parent's directory (spilled from the
    # first: the parent takes them over).
    runs = RunStore(spill_after=0, directory=job.directory, keep=job.keep_runs)
    try:
        with os.fdopen(fd, "wb") as file:
            spill = _Spill(file)
            fleet = Fleet(
                job.settings,
                keep_problems=job.keep,
                on_call=spill.call if job.calls else None,
                runs=runs,
                limit=job.limit,
            )
            stats = replay_file(fleet, index, path, columns=job.columns)
            spill.flush()
            aside = fleet.outcome()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(spill_path)
        runs.close()
        raise
    return Outcome(stats, aside, spill_path)


def _chunks(path: str) -> Iterator[list[Any]]:
    try:
        with open(path, "rb") as file:
            while True:
                try:
                    yield pickle.load(file)
                except EOFError:
                    return
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _absorb(fleet: Fleet, outcome: Outcome) -> None:
    """A file's outcome into the parent's fleet, as the sequential replay would have left it."""
    fleet.take(outcome.aside)
    sink = fleet.on_call
    for items in _chunks(outcome.spill):
        if sink is not None:
            for row in items:
                sink(row)


# A compressed file's bytes count this many times, so that the threshold means work: tables
# of calls compress about that much (the generated fleet's 12.8 MB of zstd decode to 212 MB),
# and JSONL under gzip more (its 304 MB to 14 MB).
COMPRESSION: Final = 16


def _size(paths: Iterable[str]) -> int:
    """The input's size as text, roughly: a Parquet or gzip file counts ``COMPRESSION`` times
    its bytes (a Parquet footer would say exactly, but reading it means importing pyarrow,
    0.15 s the parent would spend before any worker starts), any other file its bytes."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            size = os.path.getsize(path)
            head = _head(path)
            compressed = head == PARQUET_MAGIC or head.startswith(GZIP_MAGIC)
            total += size * COMPRESSION if compressed else size
    return total


def _start_method() -> str:
    """How the workers start. Forked, a pool of two answered its first task in 10 to 14 ms here;
    started from the forkserver (a fresh interpreter importing this package, as with spawn), in
    0.14 to 0.15 s, a seventh of a million-call replay with ``--jobs 2``. A fork is safe only in
    a process with one thread: a child forked from a threaded one can hang on a lock held by a
    thread it lacks, and the parent may have started threads (pyarrow's pools, or an embedding
    program's; the command asks pyarrow for none of its idle ones, ``_entry.no_idle_threads``).
    Linux lists a process's threads in ``/proc/self/task``; elsewhere (macOS's system libraries
    are not safe to fork either) every worker is a fresh interpreter."""
    if sys.platform != "linux":
        return "spawn"
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 0
    return "fork" if threads == 1 else "forkserver"


class _Expansion:
    """Stands for the fleet while directories are listed: what listing them finds (a
    directory that cannot be listed, one without trace files) is kept in order among the
    files, and told the fleet when the sequential replay would have told it."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []

    def problem(self, problem: Problem) -> None:
        self.items.append(("problem", problem))

    def nothing_to_replay(self, where: Problem) -> None:
        self.items.append(("nothing", where))


def replay(
    fleet: Fleet,
    paths: Iterable[str | Any],
    jobs: int,
    *,
    columns: Mapping[str, str] | None = None,
    tick: Callable[[FileStats, int], None] | None = None,
    stdin: IO[bytes] | None = None,
) -> Report:
    """``simulate.replay`` over ``jobs`` processes (see the module's docstring)."""
    expansion = _Expansion()
    for path in _expand(paths, expansion):
        expansion.items.append(("file", path))
    tasks = [
        (index, path)
        for index, path in enumerate(item for kind, item in expansion.items if kind == "file")
    ]
    files: list[FileStats] = []
    parallel = (
        len(tasks) > 1
        and all(isinstance(path, str) and path != STDIN for _, path in tasks)
        and _size(path for _, path in tasks) >= MIN_BYTES
    )
    directory: str | None = None
    if not parallel:
        outcomes: Iterator[Outcome] | None = None
    else:
        directory = tempfile.mkdtemp(prefix="tripwire-replay-")
        limit = 0 if fleet.selection is None else fleet.selection.limit
        job = _Job(
            fleet.settings,
            columns,
            fleet.on_call is not None,
            1000,
            limit,
            fleet.keeps_runs,
            directory,
        )
        method = _start_method()
        context = multiprocessing.get_context(method)
        if method == "forkserver":
            context.set_forkserver_preload(["tripwire.replay.parallel"])
        pool = context.Pool(min(jobs, len(tasks)), initializer=_start, initargs=(job,))
        outcomes = pool.imap(_work, tasks, chunksize=1)
    try:
        index = 0
        for kind, item in expansion.items:
            if kind == "problem":
                fleet.problem(item)
            elif kind == "nothing":
                fleet.nothing_to_replay(item)
            elif outcomes is None:
                files.append(
                    replay_file(fleet, index, item, stdin=stdin, tick=tick, columns=columns)
                )
                index += 1
            else:
                outcome = next(outcomes)
                fleet.register_file(index, outcome.stats)
                _absorb(fleet, outcome)
                files.append(outcome.stats)
                if tick is not None and outcome.stats.size is not None:
                    tick(outcome.stats, outcome.stats.size)
                index += 1
    finally:
        if outcomes is not None:
            pool.terminate()
            pool.join()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
    return fleet.report(files)
