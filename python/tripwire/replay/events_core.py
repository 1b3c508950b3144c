"""The native replay of the events format's JSONL (``formats.events``): a file's lines read and
replayed in Rust (``tripwire._core.EventsReplay``, over ``rust/events_replay.rs``, which puts
each call through the same per-run core as ``arrow_core``), no Python object a line, the GIL
released. ``Fleet`` fed by ``formats.files.Reader`` (one call at a time, in Python) is the
reference, and this path must give byte-identical results (``tests/test_events_native.py``).

Taken where it applies, else the per-call path is (``replay_events`` returns ``None``): the
native guard, no ``on_call`` sink (``--calls-out``, ``--html``), a file on disk (not stdin),
no binary format (gzip is read through, every member), no byte-order mark, whose first line
the events format claims, and every line of which the native reader reads as ``Lines.feed``
would without a problem: blank, or one JSON object with a ``tool`` (a non-empty string), a
``run``/``run_id`` that is a name or none, no ``turn`` (a ``usage`` read as
``cost.parse_usage`` reads it: plain counts in Rust, ``rust/usage.rs``, any other by
``_usage``), strings free of lone surrogates, no line over ``files.MAX_LINE_BYTES``; or an
earlier call's result on a line of its own (``{"run", "result_of": ID, "result"}``, the id a
string or an integer). A line that is not JSON, after the first, is reported and skipped as
the per-call path does. Rust gives up at the first line that is none of these, and says why
(``EventsReplay.replay``); the file was replayed into a fleet aside (``Fleet.aside``), which
is thrown away, and the per-call path reads the file whole, which reports what it reports.
One pass over the file, then: deciding first cost a second one, a tenth of the native
replay's time.
``TRIPWIRE_REPLAY_CORE=python`` turns the native path off.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from collections.abc import Callable
from typing import IO, Any, Final, cast

from tripwire.replay import arrow_core
from tripwire.replay import simulate as _simulate
from tripwire.replay.cost import UsageError, parse_usage
from tripwire.replay.formats import FileStats, Problem, location
from tripwire.replay.formats import events as _events
from tripwire.replay.formats import files as _files
from tripwire.replay.formats._base import FORMATS

# Bytes looked at for a binary format's magic (``files.Reader._read`` peeks at 8).
_HEAD: Final = 8


def _first_line_is_events(path: str) -> bool:
    """Whether the file starts as a JSONL file of the events format as ``files.Reader`` sees
    it: no other format's magic, gzip or not, no byte-order mark (in what gzip holds too),
    and a first non-blank line that is an object the events format claims before any other
    format does (``Reader._line_value``)."""
    limit = _files.MAX_LINE_BYTES
    try:
        # A regular file only: a pipe (``<(...)``) read here would lose what was read.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as raw:
            head = raw.read(_HEAD)
            if any(fmt.magic is not None and head.startswith(fmt.magic) for fmt in FORMATS):
                return False
            raw.seek(0)
            stream: IO[bytes] = raw
            if head.startswith(_files.GZIP_MAGIC):
                stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
            if stream.read(len(_files._BOM)).startswith(_files._BOM):
                return False
            stream.seek(0)
            while True:
                line = stream.readline(limit + 1)
                if not line or len(line) > limit:
                    return False  # empty, or a line the native replay refuses too
                if line.strip():
                    break
    except (OSError, EOFError, zlib.error):
        return False  # the per-call path reports it (gzip.BadGzipFile is an OSError)
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    if type(value) is not dict:
        return False
    for fmt in FORMATS:
        if fmt.document is not None and fmt.read is not None and fmt.document(value):
            return False
        if fmt.is_record is not None and fmt.is_record(value):
            return fmt is _events.FORMAT
    return False


# Token counts past this are left to the per-call path (Python's integers do not overflow;
# the native core sums a run's in 64 bits): a trillion tokens a model call.
_MAX_TOKENS: Final = 1 << 40


def _usage(raw: bytes) -> tuple[int, int, int, int] | str | None:
    """A line's ``usage`` (its JSON text) as ``Lines.feed`` reads it (``cost.parse_usage``):
    the counts, or why they are not (the problem, which the line's turn is estimated after),
    or ``None``: counts too big for the native core."""
    try:
        usage = parse_usage(json.loads(raw))
    except UsageError as exc:
        return str(exc)
    except (ValueError, RecursionError):
        return None  # text the native scanner took and json does not: the per-call path says
    if usage is None:  # not reached: the native core asks only of a usage that is not null
        return None
    counts = (usage.input, usage.output, usage.cached, usage.cache_write)
    return counts if max(counts) < _MAX_TOKENS else None


class _Sink(arrow_core._Sink):
    """Finished runs, problems and the tools first heard of, into the fleet as ``Fleet.feed``
    would have put them; progress to ``tick``."""

    format = _events.NAME

    def __init__(
        self,
        fleet: _simulate.Fleet,
        stats: FileStats,
        tick: Callable[[FileStats, int], None] | None,
    ) -> None:
        super().__init__(fleet, stats)
        self.tick = tick

    def __call__(  # type: ignore[override]
        self,
        runs: list[tuple[tuple[Any, ...], int, int]],
        problems: list[tuple[int, str]],
        tools: list[str],
        progress: int,
    ) -> None:
        fleet, stats = self.fleet, self.stats
        # Made in the order the per-call path makes them (a tool's first nudge or stop).
        for tool in tools:
            fleet.tool(tool)
        for line, message in problems:
            stats.problems += 1
            fleet.problem(Problem(stats.path, line, message))
        for item, line, part in runs:
            self._run(*(*item, line, part))
        # Bytes of the file on disk read (compressed ones of gzip), as the per-call path ticks.
        if self.tick is not None:
            self.tick(stats, progress)

    def _location(self, row: int) -> str:
        return location(self.stats.path, row, None)


def replay_events(
    fleet: _simulate.Fleet,
    index: int,
    path: str,
    tick: Callable[[FileStats, int], None] | None = None,
) -> FileStats | None:
    """Replays an events JSONL file natively into ``fleet``; ``None``: the per-call path
    must (nothing was replayed). The file is replayed into a fleet aside (``Fleet.aside``),
    taken into ``fleet`` once every line was read natively, thrown away at the first line
    that is not."""
    if not arrow_core.enabled() or fleet.on_call is not None:
        return None
    if _simulate.MAX_OPEN_RUNS < 1 or not _first_line_is_events(path):
        return None
    from tripwire import _core

    settings = fleet.settings
    stats = FileStats(path)
    aside = fleet.aside()
    core = _core.EventsReplay(
        settings.guard(),
        observe=settings.observe,
        prices=arrow_core._prices(fleet),
        sink=_Sink(aside, stats, tick),
        default_run=path,
        max_open=_simulate.MAX_OPEN_RUNS,
        max_evicted=_simulate.MAX_EVICTED,
        line_limit=_files.MAX_LINE_BYTES,
        max_pending=_simulate.MAX_PENDING,
        usage=_usage,
    )
    try:
        stats.size = os.path.getsize(path)  # for the progress bar, which ticks on it
    except OSError:
        return None
    aside.register_file(index, stats)
    try:
        given_up = core.replay(path)
    except BaseException:
        aside.close()
        raise
    if given_up is not None:
        aside.close()
        return None
    stats.formats.add(_events.NAME)
    stats.lines = core.lines
    stats.position = core.position
    stats.turns += core.turns
    fleet.register_file(index, stats)
    fleet.take(aside.outcome(in_memory=True))
    fleet.split_runs += core.split_runs
    fleet.orphan_results += core.orphan_results
    return stats
