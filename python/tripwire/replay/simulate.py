"""The replay itself: each run's recorded tool calls put through a fresh ``tripwire.Guard``.

Semantics, chosen to match the guard's own:

* A **step** is one tool call checked, numbered as ``Verdict.step`` numbers it. Parallel calls
  of one model turn go through ``Guard.check_turn``, where identical calls of the turn are one
  action and count as one step; the steps of a turn are numbered in the order the model listed
  its calls. A turn without tool calls (a final answer) is no step, but it is a model call and
  it costs money.
* The guard's verdicts are only applied to the trace as recorded: after a nudge the real model
  got the tool's real answer, so the replay cannot know what it would have done instead, and
  reports what the guard would have done to the calls the model actually made.
* The **stop** step is the first step that would not have run. Steps after it are not checked
  (the run would have ended) but are still counted: ``steps_saved = steps - (stop_step - 1)``.
  Later calls of the stopping turn are counted the same way (by distinct call key).
* **Money**: each model call costs what its usage says (or what its transcript size suggests:
  see ``tripwire.replay.cost``). The model call whose tool call was stopped had already been
  made and paid for when the guard refused the call, so the guarded run's cost includes the
  stopping turn; every later model call is saved.
* Arguments given as JSON text (OpenAI-style) go to the guard as text (``check_json``, or
  ``check_turn`` for a turn of several calls), whose key is that of the parsed value, so broken
  JSON is keyed by its text and a model repeating the same broken arguments is caught too;
  arguments given as values use ``Guard.check``. Nothing is parsed or keyed here: the guard's
  verdicts say which calls of a turn are one action (``duplicate_of``), after a stop too (a
  stopped guard answers every check with its stop, counting nothing).
* A call whose arguments the guard refuses (nested deeper than it allows) is reported as bad
  input and is not a step.
* Each run's guard is ``Settings.guard()``: window, thresholds and volatile keys as given, no
  step budget, and the tool policies given (``Settings.tools``, as ``Guard(tools=...)`` takes
  them: a trace does not say which tools only read, write or poll). Call ids are not passed to
  the guard (see ``tripwire.replay.formats``).
* **Results** (``Settings.observe``, the default): each tool result in the trace is given to
  ``Guard.observe`` with the verdict of the call it belongs to (linked by call id), when it
  comes, so before the next check, as a harness would. Then the guard tells progress from
  loops: a repeat whose result changed is not one, polls may wait, and cycles and runs of
  empty results stop with ``no_progress``. The results of calls the guard nudged are not
  observed (it would not have run them; the model got the real answer in the trace). A result
  no call of its run is waiting for (an unknown id, an answered one, a call before a resumed
  log began) is ignored and counted (``results_unlinked``), not reported as bad input: real
  traces have such results. Results after a run's stop are not looked at: the run is over.
  ``observe=False`` is the hash-only guard from before results (issue #6), for comparison:
  results and tool policies are ignored, and verdicts rest on call keys alone.

Runs are identified by file and run name: the same name in two files is two runs. A run ends
with its conversation, or else with its file. Memory is bounded whatever the trace's size:

* At most ``MAX_OPEN_RUNS`` runs are held open at once (a guard and a few counters each,
  about 2 KB, and the verdicts of calls whose results have not come yet: at most
  ``MAX_PENDING`` a run, the oldest forgotten first, as the guard's window is shorter
  anyway; dropped as they are answered and when the run ends). Past that, the run not seen
  for longest is finished early: in a trace whose runs are contiguous it is long over, so
  nothing changes; should it appear again it goes on as a new part (``RunResult.part``) with
  a fresh guard, and the report counts such splits (the last ``MAX_EVICTED`` runs finished
  early are remembered for that).
* Finished runs go to a ``RunStore``, which keeps the first ``SPILL_AFTER`` in memory and
  spills the rest to a temporary file; fleet totals and per-tool figures are summed as runs
  finish (``Totals``, ``ToolStats``), so nothing needs all runs in memory at once.

A run's figures are one ``Counts``, filled as the run is replayed, kept in its ``RunResult``
and summed into the fleet's ``Totals`` field by field: a new figure is one new field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import json
import operator
import os
import pickle
import shutil
import stat
import tempfile
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final, NamedTuple

import tripwire
from tripwire.replay.cost import Prices, Source, combine, estimate
from tripwire.replay.formats import (
    Call,
    Event,
    FileStats,
    Problem,
    Reader,
    Result,
    RunEnd,
    Turn,
    UserMessage,
    location,
    trace_suffixes,
)
from tripwire.replay.formats.table import PARQUET_MAGIC

MAX_OPEN_RUNS: Final = 10_000
# Verdicts of calls waiting for their results, per run (see the module's docstring).
MAX_PENDING: Final = 256
MAX_EVICTED: Final = 50_000
# Finished runs kept in memory before they go to a temporary file (see ``RunStore``).
SPILL_AFTER: Final = 10_000
CHUNK: Final = 1000
CALL_PREVIEW: Final = 160
# Steps of a run's timeline kept (one character each: see ``RunResult.timeline``).
MAX_TIMELINE: Final = 2000
# Timeline characters: the guard's action on each step; ``SAVED`` a step after the stop.
ALLOW, NUDGE, STOP, SAVED = "a", "n", "s", "."
_CODE: Final = {"allow": ord(ALLOW), "nudge": ord(NUDGE), "stop": ord(STOP)}


@dataclass(frozen=True, slots=True)
class Settings:
    """The guard's configuration for every run, and the prices."""

    window: int = 12
    nudge_at: int = 2
    stop_at: int = 3
    # None: the guard's default volatile keys.
    volatile_keys: frozenset[str] | None = None
    prices: Prices = field(default_factory=Prices)
    # Give the guard the traces' tool results (False: the hash-only guard).
    observe: bool = True
    # Tool name -> policy, as ``Guard(tools=...)`` takes them; not applied in hash-only mode.
    tools: Mapping[str, Any] | None = None

    @property
    def mode(self) -> str:
        """``observe`` (results observed) or ``hash-only``."""
        return "observe" if self.observe else "hash-only"

    def guard(self) -> tripwire.Guard:
        return tripwire.Guard(
            window=self.window,
            nudge_at=self.nudge_at,
            stop_at=self.stop_at,
            volatile_keys=self.volatile_keys,
            tools=self.tools if self.observe else None,
        )

    def check(self) -> None:
        """Raises what ``Guard`` raises for these settings (the tool policies too, in either
        mode): ``TypeError``, ``ValueError`` or ``OverflowError``."""
        tripwire.Guard(
            window=self.window,
            nudge_at=self.nudge_at,
            stop_at=self.stop_at,
            volatile_keys=self.volatile_keys,
            tools=self.tools,
        )


@dataclass(slots=True)
class Counts:
    """Figures of a run, summed over its model calls; the fleet's are the sum of its runs'
    (``add``, field by field). Token and cost figures cover every model call; ``*_saved``
    the model calls after the stopping one."""

    steps: int = 0
    steps_saved: int = 0
    turns: int = 0
    turns_saved: int = 0
    nudges: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # Parts of input_tokens: read from, and written to, a prompt cache.
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    input_tokens_saved: int = 0
    output_tokens_saved: int = 0
    cost: float = 0.0
    cost_guarded: float = 0.0
    invalid_arguments: int = 0
    skipped_calls: int = 0
    # Tool results linked to a call checked before the stop; results that matched no call.
    results: int = 0
    results_unlinked: int = 0

    def add(self, other: Counts) -> None:
        # Field by field, written out: a loop of getattr/setattr costs 3 µs a run, which a
        # fleet of a million runs (and the parent of ``--jobs``) pays for every run.
        self.steps += other.steps
        self.steps_saved += other.steps_saved
        self.turns += other.turns
        self.turns_saved += other.turns_saved
        self.nudges += other.nudges
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.input_tokens_saved += other.input_tokens_saved
        self.output_tokens_saved += other.output_tokens_saved
        self.cost += other.cost
        self.cost_guarded += other.cost_guarded
        self.invalid_arguments += other.invalid_arguments
        self.skipped_calls += other.skipped_calls
        self.results += other.results
        self.results_unlinked += other.results_unlinked

    def __reduce__(self) -> tuple[Any, ...]:
        # A flat tuple: the dataclass's own pickling (``fields()`` on every object) made
        # spilling and ``--jobs``' hand-over of runs the replay's biggest Python cost.
        return (Counts, _count_values(self))

    @property
    def cost_saved(self) -> float:
        return self.cost - self.cost_guarded

    @property
    def tokens_saved(self) -> int:
        return self.input_tokens_saved + self.output_tokens_saved


_COUNT_FIELDS: Final = tuple(f.name for f in dataclasses.fields(Counts))
_count_values: Final = operator.attrgetter(*_COUNT_FIELDS)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run, replayed: where it is, what the guard did, and its ``counts`` (also read as
    attributes: ``run.steps`` is ``run.counts.steps``)."""

    run: str
    file: str
    line: int | None
    format: str
    part: int
    counts: Counts
    # The first nudge: its step and the tool it was on.
    nudge_step: int | None = None
    nudge_tool: str | None = None
    stop_step: int | None = None
    reason: str | None = None
    tool: str | None = None
    repeats: int | None = None
    key: str | None = None
    # Where the stopped call is in the trace ("file:line", or "file (messages[12])"), and the
    # call itself, its arguments in canonical JSON clipped to ``CALL_PREVIEW`` characters;
    # the guard's message (why it stopped).
    stop_location: str | None = None
    stop_call: str | None = None
    stop_message: str | None = None
    # The calls that led to the stop (the last ``window`` steps, the stop last): (step,
    # action, ``tool {arguments}`` clipped).
    stop_lead: tuple[tuple[int, str, str], ...] = ()
    tokens_source: Source = "none"
    # The guard's action on each step, one character (``ALLOW``, ``NUDGE``, ``STOP``,
    # ``SAVED``), the first ``MAX_TIMELINE`` steps.
    timeline: str = ""
    # The model of the run's last model call that named one; the outcome the trace gives.
    model: str | None = None
    reward: float | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # A flat tuple, as ``Counts``' (see there).
        return (RunResult, _run_values(self))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: the counts'. ("counts" itself is
        # missing only while pickle restores the object: no recursion then.)
        if name == "counts" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.counts, name)

    @property
    def stopped(self) -> bool:
        return self.stop_step is not None

    def lead(self) -> list[tuple[int, str, str]]:
        """The calls that led to the stop: (step, action, ``tool {arguments}`` clipped)."""
        return list(self.stop_lead)

    @property
    def looped(self) -> bool:
        return self.reason == "loop_detected"

    @property
    def no_progress(self) -> bool:
        return self.reason == "no_progress"


_run_values: Final = operator.attrgetter(*(f.name for f in dataclasses.fields(RunResult)))


@dataclass(slots=True)
class ToolStats:
    """One tool across the fleet: how often the guard stopped or nudged a run on it (``stops``
    of any reason; ``no_progress`` of them for that reason, the rest ``loop_detected``)."""

    stops: int = 0
    no_progress: int = 0
    nudges: int = 0
    steps_saved: int = 0
    cost_saved: float = 0.0

    def merge(self, other: ToolStats) -> None:
        self.stops += other.stops
        self.no_progress += other.no_progress
        self.nudges += other.nudges
        self.steps_saved += other.steps_saved
        self.cost_saved += other.cost_saved


class _Run:
    """A run being replayed."""

    __slots__ = (
        "counts",
        "file",
        "file_index",
        "format",
        "guard",
        "lead",
        "line",
        "model",
        "name",
        "nudge_step",
        "nudge_tool",
        "part",
        "pending",
        "reward",
        "seq",
        "source",
        "stop",
        "stop_call",
        "stop_lead",
        "stop_location",
        "timeline",
        "transcript",
    )

    def __init__(
        self,
        name: str,
        file: str,
        line: int | None,
        fmt: str,
        part: int,
        seq: int,
        index: int,
        window: int,
    ) -> None:
        self.name = name
        self.seq = seq
        self.file_index = index
        self.file = file
        self.line = line
        self.format = fmt
        self.part = part
        self.guard: tripwire.Guard | None = None
        self.counts = Counts()
        self.nudge_step: int | None = None
        self.nudge_tool: str | None = None
        self.stop: tripwire.Verdict | None = None
        self.stop_location: str | None = None
        self.stop_call: str | None = None
        self.stop_lead: tuple[tuple[int, str, str], ...] = ()
        self.source: Source = "none"
        self.transcript = 0
        self.model: str | None = None
        self.reward: float | None = None
        self.timeline = bytearray()
        # The last steps checked: (step, action, call), for the calls that led to a stop.
        self.lead: deque[tuple[int, str, Call]] = deque(maxlen=window)
        # Call id -> verdict of a call whose result has not come yet (created when needed).
        self.pending: dict[str, tripwire.Verdict] | None = None

    def result(self) -> RunResult:
        stop = self.stop
        counts = self.counts
        if stop is not None:
            counts.steps_saved = counts.steps - (stop.step - 1)
        return RunResult(
            run=self.name,
            file=self.file,
            line=self.line,
            format=self.format,
            part=self.part,
            counts=counts,
            nudge_step=self.nudge_step,
            nudge_tool=self.nudge_tool,
            stop_step=stop.step if stop is not None else None,
            reason=stop.reason if stop is not None else None,
            tool=stop.tool if stop is not None else None,
            repeats=stop.repeats if stop is not None else None,
            key=stop.key if stop is not None else None,
            stop_location=self.stop_location,
            stop_call=self.stop_call,
            stop_message=stop.message if stop is not None else None,
            stop_lead=self.stop_lead,
            tokens_source=self.source,
            timeline=self.timeline.decode("ascii"),
            model=self.model,
            reward=self.reward,
        )


@dataclass(slots=True)
class Totals:
    """Fleet totals, summed as runs finish: the runs' ``counts`` and how many runs were
    stopped, nudged, labelled. Read ``totals.steps`` for ``totals.counts.steps``."""

    counts: Counts = field(default_factory=Counts)
    runs: int = 0
    stopped: int = 0
    looped: int = 0
    no_progress: int = 0
    nudged: int = 0
    nudged_only: int = 0
    tokens_source: Source = "none"
    # Runs the trace gives an outcome (reward), of them successes (reward > 0), and the
    # stopped ones among each: a stop on a run that succeeded is the guard's worst mistake.
    labelled: int = 0
    succeeded: int = 0
    stopped_labelled: int = 0
    stopped_succeeded: int = 0

    def __getattr__(self, name: str) -> Any:
        if name == "counts" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.counts, name)

    def add(self, run: RunResult) -> None:
        self.add_figures(
            run.counts, run.stop_step is not None, run.reason, run.tokens_source, run.reward
        )

    def add_figures(
        self,
        counts: Counts,
        stopped: bool,
        reason: str | None,
        source: Source,
        reward: float | None,
    ) -> None:
        """A run's figures, of a ``RunResult`` (``add``) or of a run not made into one (a
        run no one will see: ``Fleet.add_run`` without one)."""
        self.counts.add(counts)
        self.runs += 1
        self.stopped += stopped
        self.looped += reason == "loop_detected"
        self.no_progress += reason == "no_progress"
        self.nudged += counts.nudges > 0
        self.nudged_only += counts.nudges > 0 and not stopped
        self.tokens_source = combine(self.tokens_source, source)
        if reward is not None:
            self.labelled += 1
            self.succeeded += reward > 0
            self.stopped_labelled += stopped
            self.stopped_succeeded += stopped and reward > 0

    def merge(self, other: Totals) -> None:
        """Another's totals (a file's) added to these."""
        self.counts.add(other.counts)
        self.runs += other.runs
        self.stopped += other.stopped
        self.looped += other.looped
        self.no_progress += other.no_progress
        self.nudged += other.nudged
        self.nudged_only += other.nudged_only
        self.tokens_source = combine(self.tokens_source, other.tokens_source)
        self.labelled += other.labelled
        self.succeeded += other.succeeded
        self.stopped_labelled += other.stopped_labelled
        self.stopped_succeeded += other.stopped_succeeded


class Detached(NamedTuple):
    """A ``RunStore``'s runs handed over (``RunStore.detach``): segment files and how many
    runs they hold, then the latest runs, in memory (none for another process)."""

    paths: list[str]
    in_files: int
    memory: list[RunResult]


class RunStore:
    """The replayed runs, in the order they finished, in bounded memory: the first
    ``SPILL_AFTER`` are kept in a list; past that, all go to private temporary files
    (segments) in pickled chunks of ``CHUNK`` and are read back for each iteration. A
    segment another process wrote (a ``--jobs`` worker's runs, ``detach``) is taken over
    whole by ``adopt``: moved, not read. Iterable any number of times; ``close()`` (or
    garbage collection) removes the files.

    ``keep=False``: the runs are counted, not kept (the terminal report lists the runs its
    ``Selection`` chose and needs only their number: pickling every run to read none back
    was 7% of a native replay of a million calls); iterating is an error."""

    def __init__(
        self, spill_after: int | None = None, directory: str | None = None, *, keep: bool = True
    ) -> None:
        self._spill_after = SPILL_AFTER if spill_after is None else spill_after
        self._directory = directory
        self.keep = keep
        self._memory: list[RunResult] = []
        # The segments in order, and the last one's file while it is being written.
        self._files = _Segments()
        self._count = 0
        self._finalizer = weakref.finalize(self, self._files.remove)

    def count_one(self) -> None:
        """A run counted and not kept, never made into a ``RunResult`` (``keep=False``)."""
        assert not self.keep
        self._count += 1

    def append(self, run: RunResult) -> None:
        self._count += 1
        if not self.keep:
            return
        self._memory.append(run)
        if self._files.writing is None:
            if len(self._memory) > self._spill_after:
                self._spill()
        elif len(self._memory) >= CHUNK:
            self._spill()

    def _spill(self) -> None:
        file = self._files.writing
        if file is None:
            fd, path = tempfile.mkstemp(
                prefix="tripwire-replay-", suffix=".runs", dir=self._directory
            )
            self._files.paths.append(path)
            file = self._files.writing = os.fdopen(fd, "wb")
        for start in range(0, len(self._memory), CHUNK):
            pickle.dump(self._memory[start : start + CHUNK], file, pickle.HIGHEST_PROTOCOL)
        self._memory = []

    def detach(self, *, in_memory: bool = False) -> Detached:
        """The runs, for another store to ``adopt``; this store is empty after. As segment
        files only (everything written out first: for another process), or, ``in_memory``,
        the latest runs as they are (for a store in this process)."""
        if self._memory and not in_memory:
            self._spill()
        self._files.close_writing()
        memory, paths = self._memory, self._files.paths
        detached = Detached(paths, self._count - len(memory), memory)
        self._files.paths, self._memory, self._count = [], [], 0
        return detached

    def adopt(self, runs: Detached) -> None:
        """Runs ``detach`` handed over (in this process or another), after the runs already
        here: segment files moved into this store's own temporary files, never read."""
        if runs.paths:
            if self._memory:
                self._spill()
            self._files.close_writing()
            for path in runs.paths:
                fd, own = tempfile.mkstemp(
                    prefix="tripwire-replay-", suffix=".runs", dir=self._directory
                )
                os.close(fd)
                self._files.paths.append(own)
                shutil.move(path, own)
        self._count += runs.in_files
        for run in runs.memory:
            self.append(run)

    def sibling(self) -> RunStore:
        """An empty store like this one: counting or keeping, its files in the same place
        (a ``--jobs`` worker's: the parent's private directory, removed whole at the end)."""
        return RunStore(directory=self._directory, keep=self.keep)

    @property
    def spilled(self) -> bool:
        return bool(self._files.paths)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[RunResult]:
        if not self.keep:
            raise RuntimeError(
                f"the {self._count:,} runs were counted, not kept: replay(keep_runs=True)"
            )
        if self._files.writing is not None:
            self._files.writing.flush()
        for path in list(self._files.paths):
            with open(path, "rb") as spilled:
                while True:
                    try:
                        chunk: list[RunResult] = pickle.load(spilled)
                    except EOFError:
                        break
                    yield from chunk
        yield from list(self._memory)

    def close(self) -> None:
        self._finalizer()


class _Segments:
    """A ``RunStore``'s files (kept apart from it, for its finalizer)."""

    __slots__ = ("paths", "writing")

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.writing: IO[bytes] | None = None

    def close_writing(self) -> None:
        if self.writing is not None:
            self.writing.close()
            self.writing = None

    def remove(self) -> None:
        self.close_writing()
        for path in self.paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.paths = []


# Runs listed in the terminal table unless asked otherwise (``Selection``).
DEFAULT_LIMIT: Final = 20


class Selection:
    """The runs the terminal report lists, chosen in one pass as runs finish: stopped runs
    first, most money saved first (the earlier run on a tie); then runs that were nudged;
    then the rest, in the order they finished. At most ``limit`` (0: all, every run kept).

    A fleet chooses them as its runs finish, so that the report need not read every run back;
    a ``--jobs`` worker's choice among its file's runs is merged into the parent's (``merge``)
    as if its runs had finished there: the top runs of the whole are among each file's."""

    __slots__ = ("_count", "_nudged", "_rest", "_stopped", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count = 0
        # A min-heap of (money saved, -number, run): the best ``limit`` at the end.
        self._stopped: list[tuple[float, int, RunResult]] = []
        self._nudged: list[RunResult] = []
        self._rest: list[RunResult] = []

    def add(self, run: RunResult) -> None:
        number = self._count
        self._count += 1
        self._place(run, -number)

    def _place(self, run: RunResult, rank: int) -> None:
        """``rank`` orders stopped runs of equal money saved: minus the run's number."""
        limit = self.limit
        if run.stop_step is not None:
            item = (run.counts.cost_saved, rank, run)
            stopped = self._stopped
            if not limit or len(stopped) < limit:
                heapq.heappush(stopped, item)
            elif item[:2] > stopped[0][:2]:
                heapq.heapreplace(stopped, item)
        elif self.takes(False, run.counts.nudges > 0, 0.0):
            (self._nudged if run.counts.nudges else self._rest).append(run)

    def merge(self, other: Selection) -> None:
        """``other``'s runs (chosen with the same limit), as if they finished here next."""
        offset = self._count
        for _, rank, run in other._stopped:
            self._place(run, rank - offset)
        for run in other._nudged + other._rest:
            self._place(run, 0)
        self._count += other._count

    def takes(self, stopped: bool, nudged: bool, cost_saved: float) -> bool:
        """Whether a run finishing next would be chosen: ``_place``'s rule, told before the
        run is made (a stopped run ranks below every run before it of the same money)."""
        limit = self.limit
        if not limit:
            return True
        if stopped:
            chosen = self._stopped
            return len(chosen) < limit or cost_saved > chosen[0][0]
        return len(self._nudged if nudged else self._rest) < limit

    def skip(self) -> None:
        """A run finished that ``takes`` said would not be chosen: numbered all the same, so
        that the runs after it rank as they would have."""
        self._count += 1

    def runs(self) -> list[RunResult]:
        ordered = [run for *_, run in sorted(self._stopped, key=lambda i: i[:2], reverse=True)]
        ordered += self._nudged + self._rest
        return ordered[: self.limit] if self.limit else ordered


@dataclass(slots=True)
class Aside:
    """What a fleet of its own found in a file (``Fleet.outcome``), for the fleet the file
    belongs to to ``take`` as if it had replayed it: sums, runs, the runs chosen for the
    report, problems."""

    totals: Totals
    tools: dict[str, ToolStats]
    runs: Detached
    selection: Selection | None
    problems: list[Problem]
    problems_total: int
    without_calls: list[Problem]
    without_calls_total: int
    models: dict[str | None, int]
    split_runs: int
    orphan_results: int


@dataclass(slots=True)
class Report:
    """Everything a replay found: per run, per file, per tool, the totals and the bad input."""

    settings: Settings
    runs: RunStore
    totals: Totals
    files: list[FileStats]
    tools: dict[str, ToolStats]
    problems: list[Problem]
    problems_total: int
    split_runs: int = 0
    models: dict[str | None, int] = field(default_factory=dict)
    # Files and directories read whole that held nothing to replay (empty, messages only, no
    # trace files): counted and reported, not bad input; the first ``keep_problems`` listed.
    without_calls: list[Problem] = field(default_factory=list)
    without_calls_total: int = 0
    # The runs the terminal report lists with this limit, chosen as they finished (else the
    # report chooses them, reading every run back).
    selection: Selection | None = None

    @property
    def bad_input(self) -> bool:
        """Some input could not be read (unreadable, not JSON, of no known shape): the exit
        status says so. Input read whole that held no tool calls is not bad input."""
        return self.problems_total > 0


class CallRow(NamedTuple):
    """One call with the guard's verdict, as ``--calls-out`` writes it. ``action``: allow,
    nudge, stop, or ``not_run`` (after the stop: the guarded run would have ended); ``step``:
    the guard's step (``None`` after the stop); ``duplicate_of``: the index in its turn of
    the identical call it is one action with."""

    file: str
    run: str
    part: int
    turn: int
    step: int | None
    tool: str
    action: str
    reason: str | None
    duplicate_of: int | None
    line: int | None
    where: str | None


CallSink = Callable[[CallRow], None]
NOT_RUN: Final = "not_run"


class Fleet:
    """Replays turns as they come, one guard per open run, and collects the results."""

    def __init__(
        self,
        settings: Settings,
        *,
        keep_problems: int = 1000,
        on_problem: Callable[[Problem], None] | None = None,
        on_call: CallSink | None = None,
        runs: RunStore | None = None,
        limit: int = 0,
    ) -> None:
        self.settings = settings
        # The runs the report will list, chosen as they finish (none: ``limit`` 0, where
        # every run would be kept in memory).
        self.selection = Selection(limit) if limit > 0 else None
        self.on_call = on_call
        self._cost = settings.prices.cost
        self._volatile = settings.volatile_keys
        self._observe = settings.observe
        self._open: OrderedDict[tuple[int, str], _Run] = OrderedDict()
        # Runs finished early, to number their parts should they come back; the oldest are
        # forgotten past MAX_EVICTED (one coming back after that is reported as a new run).
        self._evicted: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._runs = RunStore() if runs is None else runs
        self._files: dict[int, FileStats] = {}
        self._started = 0
        # The fleet's totals and tools, and those of the file being replayed: a file's runs
        # are summed apart, then the file's sums into the fleet's (``_fold``), so that a file
        # replayed in another process (``--jobs``) adds exactly what it would have added
        # here: float sums depend on their order.
        self._totals = Totals()
        self.tools: dict[str, ToolStats] = {}
        self._file_index: int | None = None
        self._file_totals = Totals()
        self._file_tools: dict[str, ToolStats] = {}
        # Model calls per model named in the traces (None: not named), for the price note.
        self.models: dict[str | None, int] = {}
        self.problems: list[Problem] = []
        self.problems_total = 0
        self.without_calls: list[Problem] = []
        self.without_calls_total = 0
        self.split_runs = 0
        # Results of runs with no open run (before their first call, or after it was split).
        self.orphan_results = 0
        self._keep = keep_problems
        self._on_problem = on_problem

    # -- input ------------------------------------------------------------------------------

    def problem(self, problem: Problem) -> None:
        self.problems_total += 1
        if len(self.problems) < self._keep:
            self.problems.append(problem)
        if self._on_problem is not None:
            self._on_problem(problem)

    def nothing_to_replay(self, where: Problem) -> None:
        """Input read whole that held no tool calls: counted and reported, not a problem (a
        session of user messages only, an empty file, a directory of other files)."""
        self.without_calls_total += 1
        if len(self.without_calls) < self._keep:
            self.without_calls.append(where)

    def feed(self, file_index: int, stats: FileStats, events: Iterable[Event]) -> None:
        """Replays one file's events; its runs are finished when they end or the file does."""
        self._files[file_index] = stats
        self._enter_file(file_index)
        path = stats.path
        open_runs = self._open
        formats = stats.formats
        turns = 0
        for event in events:
            if type(event) is Turn:
                turns += 1
                key = (file_index, event.run)
                run = open_runs.get(key)
                if run is None:
                    run = self._start(key, path, event)
                else:
                    open_runs.move_to_end(key)
                if event.format not in formats:
                    formats.add(event.format)
                self._turn(run, event, path)
            elif type(event) is Result:
                if self._observe:
                    self._result(file_index, event, path)
            elif type(event) is UserMessage:
                if self._observe:
                    self._user_message(file_index, event)
            elif type(event) is Problem:
                stats.problems += 1
                self.problem(event)
            elif type(event) is RunEnd:
                ended = open_runs.pop((file_index, event.run), None)
                if ended is not None:
                    ended.reward = event.reward
                    self._finish(ended)
        stats.turns += turns
        self.close_file(file_index)

    def register_file(self, file_index: int, stats: FileStats) -> None:
        """A file replayed elsewhere (``tripwire.replay.parallel``, ``arrow_core``): its
        figures."""
        self._files[file_index] = stats
        self._enter_file(file_index)

    def _enter_file(self, file_index: int) -> None:
        if file_index != self._file_index:
            self._fold()
            self._file_index = file_index

    def _fold(self) -> None:
        """The file's sums into the fleet's."""
        if self._file_totals.runs or self._file_tools:
            self._totals.merge(self._file_totals)
            for name, stats in self._file_tools.items():
                tool = self.tools.get(name)
                if tool is None:
                    tool = self.tools[name] = ToolStats()
                tool.merge(stats)
            self._file_totals = Totals()
            self._file_tools = {}

    def aside(self) -> Fleet:
        """A fleet for a file replayed aside, which this one ``take``s once it is done (the
        native events replay, which may give up part way): these settings, its own runs,
        kept or not as here, chosen with this limit, problems held until taken."""
        return Fleet(
            self.settings,
            keep_problems=self._keep,
            runs=self._runs.sibling(),
            limit=0 if self.selection is None else self.selection.limit,
        )

    def close(self) -> None:
        """Throws away the runs (a fleet aside given up): their temporary files removed."""
        self._runs.close()

    def outcome(self, *, in_memory: bool = False) -> Aside:
        """What this fleet (a fleet aside, a ``--jobs`` worker's) found in the files given it,
        for the fleet they belong to to ``take``; its runs go with it (``RunStore.detach``,
        ``in_memory`` for a fleet in this process)."""
        self._fold()
        return Aside(
            totals=self._totals,
            tools=self.tools,
            runs=self._runs.detach(in_memory=in_memory),
            selection=self.selection,
            problems=self.problems,
            problems_total=self.problems_total,
            without_calls=self.without_calls,
            without_calls_total=self.without_calls_total,
            models=self.models,
            split_runs=self.split_runs,
            orphan_results=self.orphan_results,
        )

    def take(self, aside: Aside) -> None:
        """A file replayed aside (``outcome``, after ``register_file``), as if replayed here:
        its problems told, its sums added as this fleet adds a file's, its runs after this
        fleet's, and the runs it chose for the report merged into this fleet's choice (both
        made with this fleet's limit)."""
        for problem in aside.problems:
            self.problem(problem)
        self.problems_total += aside.problems_total - len(aside.problems)
        for where in aside.without_calls:
            self.nothing_to_replay(where)
        self.without_calls_total += aside.without_calls_total - len(aside.without_calls)
        for model, count in aside.models.items():
            self.models[model] = self.models.get(model, 0) + count
        self.split_runs += aside.split_runs
        self.orphan_results += aside.orphan_results
        self._file_totals.merge(aside.totals)
        for name, stats in aside.tools.items():
            self._tool(name).merge(stats)
        self._runs.adopt(aside.runs)
        if self.selection is not None:
            assert aside.selection is not None  # chosen with this fleet's limit
            self.selection.merge(aside.selection)

    def close_file(self, file_index: int) -> None:
        # Runs still open are finished in the order they started.
        ending = sorted(
            (key for key in self._open if key[0] == file_index), key=lambda k: self._open[k].seq
        )
        for key in ending:
            self._finish(self._open.pop(key))
        for key in [key for key in self._evicted if key[0] == file_index]:
            del self._evicted[key]

    def _start(self, key: tuple[int, str], path: str, turn: Turn) -> _Run:
        part = self._evicted.pop(key, 0) + 1
        if part > 1:
            self.split_runs += 1
        settings = self.settings
        run = _Run(
            turn.run, path, turn.line, turn.format, part, self._started, key[0], settings.window
        )
        self._started += 1
        run.guard = settings.guard()
        self._open[key] = run
        if len(self._open) > MAX_OPEN_RUNS:
            old_key, old = self._open.popitem(last=False)
            self._evicted[old_key] = old.part
            if len(self._evicted) > MAX_EVICTED:
                self._evicted.popitem(last=False)
            self._finish(old)
        return run

    def _finish(self, run: _Run) -> None:
        run.guard = None
        run.pending = None
        run.lead.clear()
        result = run.result()
        stats = self._files.get(run.file_index)
        if stats is not None:
            stats.runs += 1
        self.add_result(result)

    def add_result(self, result: RunResult) -> None:
        """A finished run into the fleet's results, totals and tools."""
        self.add_run(
            result.counts, result.stop_step, result.reason, result.tool,
            result.tokens_source, result.reward, result,
        )  # fmt: skip

    def shows(self, stopped: bool, nudged: bool, cost_saved: float) -> bool:
        """Whether a run finishing next will be seen: kept with the runs, or chosen for the
        terminal report. One that will not need not be made into a ``RunResult`` (2.2 us,
        the costliest part of a run in the native cores' Python): ``add_run`` without it."""
        selection = self.selection
        return self._runs.keep or (
            selection is not None and selection.takes(stopped, nudged, cost_saved)
        )

    def add_run(
        self,
        counts: Counts,
        stop_step: int | None,
        reason: str | None,
        tool: str | None,
        source: Source,
        reward: float | None,
        result: RunResult | None,
    ) -> None:
        """A finished run's figures into the totals and tools, and the run into the results
        and the report's choice; ``result`` ``None``: a run ``shows`` said no one will see,
        counted and numbered, never made into a ``RunResult``."""
        selection = self.selection
        if result is None:
            self._runs.count_one()
            if selection is not None:
                selection.skip()
        else:
            self._runs.append(result)
            if selection is not None:
                selection.add(result)
        stopped = stop_step is not None
        self._file_totals.add_figures(counts, stopped, reason, source, reward)
        if stopped and tool is not None:
            stats = self._tool(tool)
            stats.stops += 1
            stats.no_progress += reason == "no_progress"
            stats.steps_saved += counts.steps_saved
            stats.cost_saved += counts.cost_saved

    @property
    def keeps_runs(self) -> bool:
        """Whether the report will hold every run (else it counts them: ``RunStore``)."""
        return self._runs.keep

    def tool(self, name: str) -> ToolStats:
        """A tool's figures in the file being replayed, made when first needed (in the order
        tools first come); the fleet's are ``tools``, complete in the report."""
        return self._tool(name)

    @property
    def runs(self) -> RunStore:
        return self._runs

    def _tool(self, name: str) -> ToolStats:
        stats = self._file_tools.get(name)
        if stats is None:
            stats = self._file_tools[name] = ToolStats()
        return stats

    # -- one turn ---------------------------------------------------------------------------

    def _turn(self, run: _Run, turn: Turn, path: str) -> None:
        ran = run.stop is None  # this model call was made, guard or no guard
        counts = run.counts
        calls = turn.calls
        if calls:
            if ran:
                self._check(run, turn, path)
            else:
                saved = self._distinct(run, turn, path)
                if self.on_call is not None:
                    self._calls_not_run(run, turn, path, 0)
                counts.steps += saved
                timeline = run.timeline
                if len(timeline) < MAX_TIMELINE:
                    timeline += SAVED.encode() * min(saved, MAX_TIMELINE - len(timeline))
        usage = turn.usage
        if usage is None:
            sent = run.transcript if turn.sent is None else turn.sent
            usage = estimate(sent, turn.produced)
            source: Source = "estimated"
        else:
            source = "usage"
        if turn.sent is None:
            run.transcript += turn.produced
        if run.source != source:
            run.source = combine(run.source, source)
        model = turn.model
        if model is not None:
            # Unnamed ones are counted at the end (all model calls less the named).
            run.model = model
            models = self.models
            models[model] = models.get(model, 0) + 1
        cost = self._cost(usage, model)
        counts.turns += 1
        counts.input_tokens += usage.input
        counts.output_tokens += usage.output
        counts.cached_tokens += usage.cached
        counts.cache_write_tokens += usage.cache_write
        counts.cost += cost
        if ran:
            counts.cost_guarded += cost
        else:
            counts.turns_saved += 1
            counts.input_tokens_saved += usage.input
            counts.output_tokens_saved += usage.output

    def _verdicts(self, run: _Run, turn: Turn, path: str) -> list[tuple[int, tripwire.Verdict]]:
        """The guard's verdict on each call of the turn (index in the turn, verdict), the
        calls it refused as bad input left out and reported."""
        guard = run.guard
        assert guard is not None
        calls = turn.calls
        try:
            if len(calls) == 1:
                name, args, is_text = calls[0]
                only = guard.check_json(name, args) if is_text else guard.check(name, args)
                return [(0, only)]
            return list(enumerate(guard.check_turn([_as_checked(call) for call in calls])))
        except (RecursionError, TypeError, ValueError):
            pass
        # The guard refused the turn as a whole (and counted nothing): find the calls it
        # refuses, one at a time, by their keys alone, and check the rest as the turn.
        good: list[int] = []
        for index, (name, args, is_text) in enumerate(calls):
            try:
                if is_text:
                    tripwire.call_key_json(name, args, volatile_keys=self._volatile)
                else:
                    tripwire.call_key(name, args, volatile_keys=self._volatile)
            except ValueError as exc:
                if is_text and not isinstance(exc, RecursionError):
                    good.append(index)  # broken text: the guard keys it by the text itself
                    continue
                self._skip(run, turn, path, name, exc)
                continue
            except (RecursionError, TypeError) as exc:
                self._skip(run, turn, path, name, exc)
                continue
            good.append(index)
        if not good:
            return []
        checked = guard.check_turn([_as_checked(calls[index]) for index in good])
        return list(zip(good, checked, strict=True))

    def _skip(self, run: _Run, turn: Turn, path: str, name: str, exc: BaseException) -> None:
        if run.stop is None:
            run.counts.skipped_calls += 1
            self.problem(Problem(path, turn.line, f"call to {name} skipped: {exc}", turn.where))

    def _check(self, run: _Run, turn: Turn, path: str) -> None:
        guard = run.guard
        assert guard is not None
        counts = run.counts
        calls = turn.calls
        verdicts = self._verdicts(run, turn, path)
        if self.on_call is not None:
            self._calls(run, turn, path, verdicts)
        timeline = run.timeline
        lead = run.lead
        for index, verdict in verdicts:
            if verdict.duplicate_of is not None:
                continue  # one action with an earlier call of the turn: counted once
            if verdict.invalid_arguments is not None:
                counts.invalid_arguments += 1
            action = verdict.action
            if len(timeline) < MAX_TIMELINE:
                timeline.append(_CODE[action])
            lead.append((verdict.step, action, calls[index]))
            if action == "nudge":
                counts.nudges += 1
                if run.nudge_step is None:
                    run.nudge_step = verdict.step
                    run.nudge_tool = verdict.tool
                self._tool(verdict.tool).nudges += 1
            elif action == "stop":
                self._stopped(run, turn, path, verdict, index, verdicts)
                return
        counts.steps = guard.steps
        ids = turn.call_ids
        if ids is not None and self._observe:
            self._await_results(run, ids, verdicts)

    def _calls(
        self,
        run: _Run,
        turn: Turn,
        path: str,
        verdicts: Sequence[tuple[int, tripwire.Verdict]],
    ) -> None:
        """Each call of a checked turn, with its verdict, to ``on_call``: calls after the
        stopping one did not run."""
        sink = self.on_call
        assert sink is not None
        number = run.counts.turns + 1
        stopped = False
        for index, verdict in verdicts:
            if stopped:
                self._calls_not_run(run, turn, path, index, only=index)
                continue
            sink(
                CallRow(
                    path, run.name, run.part, number, verdict.step, turn.calls[index][0],
                    verdict.action, verdict.reason, verdict.duplicate_of, turn.line, turn.where,
                )
            )  # fmt: skip
            stopped = verdict.action == "stop"

    def _calls_not_run(
        self, run: _Run, turn: Turn, path: str, start: int, only: int | None = None
    ) -> None:
        sink = self.on_call
        assert sink is not None
        number = run.counts.turns + 1
        indexes = range(start, len(turn.calls)) if only is None else (only,)
        for index in indexes:
            sink(
                CallRow(
                    path, run.name, run.part, number, None, turn.calls[index][0], NOT_RUN,
                    None, None, turn.line, turn.where,
                )
            )  # fmt: skip

    def _stopped(
        self,
        run: _Run,
        turn: Turn,
        path: str,
        verdict: tripwire.Verdict,
        index: int,
        verdicts: Sequence[tuple[int, tripwire.Verdict]],
    ) -> None:
        """The guard stopped the run at this call. Without the guard the whole turn would
        have run: one step per distinct call (the stopped guard's verdicts say which)."""
        steps_before = run.counts.steps  # as the last turn left it
        distinct = sum(1 for _, v in verdicts if v.duplicate_of is None)
        run.counts.steps = steps_before + distinct
        saved = sum(1 for i, v in verdicts if i > index and v.duplicate_of is None)
        timeline = run.timeline
        if len(timeline) < MAX_TIMELINE:
            timeline += SAVED.encode() * min(saved, MAX_TIMELINE - len(timeline))
        run.stop = verdict
        run.pending = None
        run.stop_location = location(path, turn.line, turn.where)
        run.stop_call = _preview(turn.calls[index], self._volatile)
        # Written out now, clipped: a few hundred bytes a run, where the calls as logged
        # (their argument objects) would keep megabytes alive across a fleet.
        run.stop_lead = tuple((step, action, lead_preview(call)) for step, action, call in run.lead)
        run.lead.clear()

    def _distinct(self, run: _Run, turn: Turn, path: str) -> int:
        """Steps a turn after the stop would have taken: one per distinct call, as the
        stopped guard's ``check_turn`` says (it answers with its stop and counts nothing)."""
        if len(turn.calls) == 1:
            return 1
        return sum(1 for _, v in self._verdicts(run, turn, path) if v.duplicate_of is None)

    def _await_results(
        self,
        run: _Run,
        ids: list[str | None],
        verdicts: Sequence[tuple[int, tripwire.Verdict]],
    ) -> None:
        """Remembers the verdicts of the turn's calls that have ids, for their results."""
        pending = run.pending
        if pending is None:
            pending = run.pending = {}
        for index, verdict in verdicts:
            call_id = ids[index] if index < len(ids) else None
            if call_id is None:
                continue
            # A reused id belongs to its latest call: the older one's result is long in.
            pending.pop(call_id, None)
            pending[call_id] = verdict
            if len(pending) > MAX_PENDING:
                del pending[next(iter(pending))]

    def _result(self, file_index: int, result: Result, path: str) -> None:
        """A tool result: to the guard, with the verdict of the call it belongs to."""
        key = (file_index, result.run)
        run = self._open.get(key)
        if run is None:
            self.orphan_results += 1
            return
        self._open.move_to_end(key)
        if run.stop is not None:
            return  # the run is over: what it did next is not replayed
        verdict = run.pending.pop(result.call_id, None) if run.pending else None
        if verdict is None:
            run.counts.results_unlinked += 1
            return
        run.counts.results += 1
        if verdict.action != "allow":
            return
        guard = run.guard
        assert guard is not None
        try:
            guard.observe(verdict, result.value, error=result.error)
        except (RecursionError, TypeError, ValueError) as exc:
            self.problem(Problem(path, result.line, f"result not observed: {exc}", result.where))

    def _user_message(self, file_index: int, message: UserMessage) -> None:
        """A person spoke: the same successful call once per user message is no loop."""
        run = self._open.get((file_index, message.run))
        if run is not None and run.stop is None and run.guard is not None:
            run.guard.user_message()

    # -- output -----------------------------------------------------------------------------

    def report(self, files: list[FileStats]) -> Report:
        for key in sorted(self._open, key=lambda k: self._open[k].seq):
            self._finish(self._open.pop(key))
        self._fold()
        self._totals.counts.results_unlinked += self.orphan_results
        self.orphan_results = 0
        unnamed = self._totals.counts.turns - sum(self.models.values())
        if unnamed:
            self.models[None] = unnamed
        return Report(
            settings=self.settings,
            runs=self._runs,
            totals=self._totals,
            files=files,
            tools=self.tools,
            problems=self.problems,
            problems_total=self.problems_total,
            split_runs=self.split_runs,
            models=self.models,
            without_calls=self.without_calls,
            without_calls_total=self.without_calls_total,
            selection=self.selection,
        )


def _as_checked(call: Call) -> tuple[str, Any]:
    """A call as ``check_turn`` takes it: text is JSON text; a free-text input (a custom
    tool's, keyed as a string) is written as the JSON string it is."""
    name, args, is_text = call
    if not is_text and isinstance(args, (str, bytes, bytearray)):
        args = json.dumps(args if isinstance(args, str) else args.decode("utf-8", "replace"))
    return (name, args)


def lead_preview(call: Call) -> str:
    """A call as logged, clipped: cheaper than ``_preview`` (no canonical form), for the
    calls before a stop, which are many across a fleet."""
    name, args, is_text = call
    if is_text:
        text = " ".join(str(args).split())
    else:
        try:
            text = json.dumps(args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            text = " ".join(str(args).split())
    preview = f"{name} {text}"
    return preview if len(preview) <= CALL_PREVIEW else preview[: CALL_PREVIEW - 1] + "…"


def _preview(call: Call, volatile: frozenset[str] | None) -> str | None:
    """A call as ``tool {canonical args}``, clipped: what the run was stuck on."""
    name, args, is_text = call
    try:
        value = json.loads(args) if is_text else args
        text = tripwire.canonical_json(name, value, volatile_keys=volatile).decode()
        text = json.dumps(json.loads(text)["args"], ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError):
        text = " ".join(str(args).split())
    preview = f"{name} {text}"
    if len(preview) > CALL_PREVIEW:
        preview = preview[: CALL_PREVIEW - 1] + "…"
    return preview


STDIN: Final = "-"


def replay(
    paths: Iterable[str | Any],
    settings: Settings | None = None,
    *,
    stdin: IO[bytes] | None = None,
    on_problem: Callable[[Problem], None] | None = None,
    tick: Callable[[FileStats, int], None] | None = None,
    columns: Mapping[str, str] | None = None,
    jobs: int = 1,
    on_call: CallSink | None = None,
    limit: int = DEFAULT_LIMIT,
    keep_runs: bool = True,
) -> Report:
    """Replays every trace file in ``paths`` (``"-"`` is ``stdin``; an object with
    ``__arrow_c_stream__`` is a table of calls) and reports.

    ``on_problem`` hears of bad input as it is found; ``tick(file, position)`` of progress;
    ``columns``: a table's column names for ours (see ``formats.table``); ``jobs``: processes
    the files are shared among (``tripwire.replay.parallel``; the report is the same);
    ``on_call`` hears of every call with its verdict (``CallRow``); ``limit``: the runs the
    terminal report will list (``render``'s ``limit``), chosen as runs finish (0: none chosen
    ahead; the report chooses them itself, whatever its limit); ``keep_runs=False``: the
    report's ``runs`` are counted, not kept (enough for ``render`` with this ``limit``,
    not 0; not for ``--json``, the page or ``--out``)."""
    if not keep_runs and limit <= 0:
        raise ValueError("keep_runs=False needs a limit: the report would list every run")
    fleet = Fleet(
        settings or Settings(),
        on_problem=on_problem,
        on_call=on_call,
        limit=limit,
        runs=None if keep_runs else RunStore(keep=False),
    )
    if jobs > 1:
        from tripwire.replay import parallel

        return parallel.replay(fleet, paths, jobs, columns=columns, tick=tick, stdin=stdin)
    files: list[FileStats] = []
    for index, path in enumerate(_expand(paths, fleet)):
        files.append(replay_file(fleet, index, path, stdin=stdin, tick=tick, columns=columns))
    return fleet.report(files)


def replay_file(
    fleet: Fleet,
    index: int,
    path: str | Any,
    *,
    stdin: IO[bytes] | None = None,
    tick: Callable[[FileStats, int], None] | None = None,
    columns: Mapping[str, str] | None = None,
) -> FileStats:
    """Replays one file (the ``index``-th of the replay) into ``fleet``; its figures."""
    if not isinstance(path, str):
        return _replay_stream(fleet, index, path, columns)
    label = "<stdin>" if path == STDIN else path
    stats = FileStats(label)
    if path == STDIN and stdin is None:
        stats.unreadable = True
        fleet.problem(Problem(label, None, "no stdin to read"))
        return stats
    if path != STDIN and _is_parquet(path):
        from tripwire.replay import arrow_core

        native = arrow_core.replay_parquet(fleet, index, path, columns)
        if native is not None:
            return _finished(fleet, native)
    elif path != STDIN:
        from tripwire.replay import events_core

        native = events_core.replay_events(fleet, index, path, tick)
        if native is not None:
            return _finished(fleet, native)
    file_tick = None if tick is None else _bind(tick, stats)
    reader = Reader(
        label,
        stats,
        stdin=stdin if path == STDIN else None,
        tick=file_tick,
        results=fleet.settings.observe,
        columns=columns,
    )
    fleet.feed(index, stats, reader)
    if not stats.turns and not stats.problems and not stats.unreadable:
        fleet.nothing_to_replay(Problem(label, None, _nothing_read(stats)))
    return stats


def _replay_stream(
    fleet: Fleet, index: int, stream: Any, columns: Mapping[str, str] | None
) -> FileStats:
    """An Arrow stream (``__arrow_c_stream__``) given instead of a path: a table of calls."""
    from tripwire.replay import arrow_core
    from tripwire.replay.formats import table

    label = f"<arrow stream {index}: {type(stream).__name__}>"
    try:
        native = arrow_core.replay_stream(fleet, index, stream, label, columns)
    except arrow_core._Fallback as opened:
        native, stream = None, opened.reader
    if native is not None:
        return _finished(fleet, native)
    stats = FileStats(label)
    reader = Reader(label, stats, results=fleet.settings.observe, columns=columns)
    fleet.feed(index, stats, table.read_stream(reader, stream))
    return _finished(fleet, stats)


def _finished(fleet: Fleet, stats: FileStats) -> FileStats:
    if not stats.turns and not stats.problems and not stats.unreadable:
        fleet.nothing_to_replay(Problem(stats.path, None, _nothing_read(stats)))
    return stats


def _head(path: str) -> bytes:
    """A file's first 4 bytes, where formats are told apart (Parquet's, gzip's magic). Only a
    regular file is looked into (else nothing): the bytes read from a pipe (``<(zcat ...)``)
    would be lost to the reader that comes next, and no binary format is read from one."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return b""
        with open(path, "rb") as raw:
            return raw.read(4)
    except OSError:
        return b""  # the per-call path reports it


def _is_parquet(path: str) -> bool:
    """A Parquet file by its first bytes, as the readers detect it (``formats.table``)."""
    return _head(path) == PARQUET_MAGIC


def _nothing_read(stats: FileStats) -> str:
    """Why a file that raised no problem gave no run: it must not add nothing in silence."""
    if not stats.lines and not stats.formats:
        return "empty"
    found = f"{', '.join(sorted(stats.formats))} records, " if stats.formats else ""
    return f"{found}no tool calls"


def _expand(paths: Iterable[str | Any], fleet: Fleet | Any) -> Iterator[str | Any]:
    """The paths, with each directory replaced by the trace files under it, in name order."""
    suffixes = trace_suffixes()
    for path in paths:
        if not isinstance(path, str) or path == STDIN or not os.path.isdir(path):
            yield path
            continue
        found = False
        # os.walk skips what it cannot list unless told: an unreadable directory is a
        # problem to report as such, not a directory without trace files.
        unlisted: list[OSError] = []
        for root, dirs, names in os.walk(path, onerror=unlisted.append):
            dirs.sort()
            for name in sorted(names):
                if name.removesuffix(".gz").endswith(suffixes):
                    found = True
                    yield os.path.join(root, name)
        for exc in unlisted:
            where = exc.filename if isinstance(exc.filename, str) else path
            fleet.problem(Problem(where, None, f"cannot list directory: {exc.strerror or exc}"))
        if not found and not unlisted:
            wanted = ", ".join(f"*{suffix}" for suffix in suffixes)
            fleet.nothing_to_replay(Problem(path, None, f"no trace files ({wanted}) in directory"))


def _bind(tick: Callable[[FileStats, int], None], stats: FileStats) -> Callable[[int], None]:
    return lambda position: tick(stats, position)
