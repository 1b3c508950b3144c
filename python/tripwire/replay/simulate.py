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
* Arguments given as JSON text (OpenAI-style) are checked with ``Guard.check_json``, whose
  key is that of the parsed value, so broken JSON is keyed by its text and a model repeating
  the same broken arguments is caught too; arguments given as values use ``Guard.check``.
  Inside a parallel turn, text is parsed first and the turn goes through ``check_turn``; a turn
  with broken JSON text is checked call by call with the same one-action-per-key rule.
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
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import tempfile
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final

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
)

MAX_OPEN_RUNS: Final = 10_000
# Verdicts of calls waiting for their results, per run (see the module's docstring).
MAX_PENDING: Final = 256
MAX_EVICTED: Final = 50_000
# Finished runs kept in memory before they go to a temporary file (see ``RunStore``).
SPILL_AFTER: Final = 10_000
CHUNK: Final = 1000
CALL_PREVIEW: Final = 160


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


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run, replayed. Token and cost figures cover every model call of the run;
    ``*_saved`` the model calls after the stopping one."""

    run: str
    file: str
    line: int | None
    format: str
    part: int
    steps: int
    turns: int
    nudge_step: int | None
    nudges: int
    stop_step: int | None
    reason: str | None
    tool: str | None
    repeats: int | None
    key: str | None
    # Where the stopped call is in the trace ("file:line", or "file (messages[12])"), and the
    # call itself, its arguments in canonical JSON clipped to ``CALL_PREVIEW`` characters;
    # the guard's message (why it stopped).
    stop_location: str | None
    stop_call: str | None
    stop_message: str | None
    steps_saved: int
    turns_saved: int
    tokens_source: Source
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    input_tokens_saved: int
    output_tokens_saved: int
    cost: float
    cost_guarded: float
    invalid_arguments: int
    skipped_calls: int
    # Tool results linked to a call checked before the stop; results that matched no call.
    results: int = 0
    results_unlinked: int = 0

    @property
    def stopped(self) -> bool:
        return self.stop_step is not None

    @property
    def looped(self) -> bool:
        return self.reason == "loop_detected"

    @property
    def no_progress(self) -> bool:
        return self.reason == "no_progress"

    @property
    def cost_saved(self) -> float:
        return self.cost - self.cost_guarded

    @property
    def tokens_saved(self) -> int:
        return self.input_tokens_saved + self.output_tokens_saved


@dataclass(slots=True)
class ToolStats:
    """One tool across the fleet: how often the guard stopped or nudged a run on it (``stops``
    of any reason; ``no_progress`` of them for that reason, the rest ``loop_detected``)."""

    stops: int = 0
    no_progress: int = 0
    nudges: int = 0
    steps_saved: int = 0
    cost_saved: float = 0.0


class _Run:
    """A run being replayed."""

    __slots__ = (
        "cached",
        "cost",
        "cost_guarded",
        "file",
        "file_index",
        "format",
        "guard",
        "in_saved",
        "input",
        "invalid",
        "line",
        "name",
        "nudge_step",
        "nudges",
        "out_saved",
        "output",
        "part",
        "pending",
        "results",
        "seq",
        "skipped",
        "source",
        "steps",
        "stop",
        "stop_call",
        "stop_location",
        "transcript",
        "turns",
        "turns_saved",
        "unlinked",
    )

    def __init__(
        self, name: str, file: str, line: int | None, fmt: str, part: int, seq: int, index: int
    ) -> None:
        self.name = name
        self.seq = seq
        self.file_index = index
        self.file = file
        self.line = line
        self.format = fmt
        self.part = part
        self.guard: tripwire.Guard | None = None
        self.steps = 0
        self.turns = 0
        self.turns_saved = 0
        self.nudge_step: int | None = None
        self.nudges = 0
        self.stop: tripwire.Verdict | None = None
        self.stop_location: str | None = None
        self.stop_call: str | None = None
        self.source: Source = "none"
        self.input = self.output = self.cached = 0
        self.in_saved = self.out_saved = 0
        self.cost = self.cost_guarded = 0.0
        self.transcript = 0
        self.invalid = 0
        self.skipped = 0
        # Call id -> verdict of a call whose result has not come yet (created when needed).
        self.pending: dict[str, tripwire.Verdict] | None = None
        self.results = 0
        self.unlinked = 0

    def result(self) -> RunResult:
        stop = self.stop
        stop_step = stop.step if stop is not None else None
        return RunResult(
            run=self.name,
            file=self.file,
            line=self.line,
            format=self.format,
            part=self.part,
            steps=self.steps,
            turns=self.turns,
            nudge_step=self.nudge_step,
            nudges=self.nudges,
            stop_step=stop_step,
            reason=stop.reason if stop is not None else None,
            tool=stop.tool if stop is not None else None,
            repeats=stop.repeats if stop is not None else None,
            key=stop.key if stop is not None else None,
            stop_location=self.stop_location,
            stop_call=self.stop_call,
            stop_message=stop.message if stop is not None else None,
            steps_saved=self.steps - (stop_step - 1) if stop_step is not None else 0,
            turns_saved=self.turns_saved,
            tokens_source=self.source,
            input_tokens=self.input,
            output_tokens=self.output,
            cached_tokens=self.cached,
            input_tokens_saved=self.in_saved,
            output_tokens_saved=self.out_saved,
            cost=self.cost,
            cost_guarded=self.cost_guarded,
            invalid_arguments=self.invalid,
            skipped_calls=self.skipped,
            results=self.results,
            results_unlinked=self.unlinked,
        )


@dataclass(slots=True)
class Totals:
    """Fleet totals, summed as runs finish."""

    runs: int = 0
    stopped: int = 0
    looped: int = 0
    no_progress: int = 0
    nudged: int = 0
    nudged_only: int = 0
    steps: int = 0
    steps_saved: int = 0
    turns: int = 0
    turns_saved: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    input_tokens_saved: int = 0
    output_tokens_saved: int = 0
    cost: float = 0.0
    cost_guarded: float = 0.0
    tokens_source: Source = "none"
    results: int = 0
    results_unlinked: int = 0

    def add(self, run: RunResult) -> None:
        self.runs += 1
        self.stopped += run.stopped
        self.looped += run.looped
        self.no_progress += run.no_progress
        self.nudged += run.nudges > 0
        self.nudged_only += run.nudges > 0 and run.stop_step is None
        self.steps += run.steps
        self.steps_saved += run.steps_saved
        self.turns += run.turns
        self.turns_saved += run.turns_saved
        self.input_tokens += run.input_tokens
        self.output_tokens += run.output_tokens
        self.cached_tokens += run.cached_tokens
        self.input_tokens_saved += run.input_tokens_saved
        self.output_tokens_saved += run.output_tokens_saved
        self.cost += run.cost
        self.cost_guarded += run.cost_guarded
        self.tokens_source = combine(self.tokens_source, run.tokens_source)
        self.results += run.results
        self.results_unlinked += run.results_unlinked


class RunStore:
    """The replayed runs, in the order they finished, in bounded memory: the first
    ``SPILL_AFTER`` are kept in a list; past that, all go to a private temporary file in
    pickled chunks of ``CHUNK`` and are read back for each iteration. Iterable any number of
    times; ``close()`` (or garbage collection) removes the file."""

    def __init__(self, spill_after: int | None = None) -> None:
        self._spill_after = SPILL_AFTER if spill_after is None else spill_after
        self._memory: list[RunResult] = []
        self._path: str | None = None
        self._file: IO[bytes] | None = None
        self._count = 0
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def append(self, run: RunResult) -> None:
        self._memory.append(run)
        self._count += 1
        if self._file is None:
            if len(self._memory) > self._spill_after:
                fd, self._path = tempfile.mkstemp(prefix="tripwire-replay-", suffix=".runs")
                self._file = os.fdopen(fd, "wb")
                self._finalizer = weakref.finalize(self, _remove, self._file, self._path)
                self._spill()
        elif len(self._memory) >= CHUNK:
            self._spill()

    def _spill(self) -> None:
        assert self._file is not None
        for start in range(0, len(self._memory), CHUNK):
            pickle.dump(self._memory[start : start + CHUNK], self._file, pickle.HIGHEST_PROTOCOL)
        self._memory = []

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[RunResult]:
        if self._file is not None and self._path is not None:
            self._file.flush()
            with open(self._path, "rb") as spilled:
                while True:
                    try:
                        chunk: list[RunResult] = pickle.load(spilled)
                    except EOFError:
                        break
                    yield from chunk
        yield from list(self._memory)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


def _remove(file: IO[bytes], path: str) -> None:
    file.close()
    with contextlib.suppress(OSError):
        os.unlink(path)


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

    @property
    def bad_input(self) -> bool:
        return self.problems_total > 0


class Fleet:
    """Replays turns as they come, one guard per open run, and collects the results."""

    def __init__(
        self,
        settings: Settings,
        *,
        keep_problems: int = 1000,
        on_problem: Callable[[Problem], None] | None = None,
    ) -> None:
        self.settings = settings
        self._cost = settings.prices.cost
        self._volatile = settings.volatile_keys
        self._observe = settings.observe
        self._open: OrderedDict[tuple[int, str], _Run] = OrderedDict()
        # Runs finished early, to number their parts should they come back; the oldest are
        # forgotten past MAX_EVICTED (one coming back after that is reported as a new run).
        self._evicted: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._runs = RunStore()
        self._totals = Totals()
        self._files: dict[int, FileStats] = {}
        self._started = 0
        self.tools: dict[str, ToolStats] = {}
        self.problems: list[Problem] = []
        self.problems_total = 0
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

    def feed(self, file_index: int, stats: FileStats, events: Iterable[Event]) -> None:
        """Replays one file's events; its runs are finished when they end or the file does."""
        self._files[file_index] = stats
        path = stats.path
        open_runs = self._open
        for event in events:
            if type(event) is Turn:
                key = (file_index, event.run)
                run = open_runs.get(key)
                if run is None:
                    run = self._start(key, path, event)
                else:
                    open_runs.move_to_end(key)
                self._turn(run, event, path)
            elif type(event) is Result:
                if self._observe:
                    self._result(file_index, event, path)
            elif type(event) is UserMessage:
                if self._observe:
                    self._user_message(file_index, event)
            elif type(event) is Problem:
                self.problem(event)
            elif type(event) is RunEnd:
                ended = open_runs.pop((file_index, event.run), None)
                if ended is not None:
                    self._finish(ended)
        self.close_file(file_index)

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
        run = _Run(turn.run, path, turn.line, turn.format, part, self._started, key[0])
        self._started += 1
        run.guard = self.settings.guard()
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
        result = run.result()
        self._runs.append(result)
        self._totals.add(result)
        stats = self._files.get(run.file_index)
        if stats is not None:
            stats.runs += 1
        if result.stop_step is not None and result.tool is not None:
            tool = self._tool(result.tool)
            tool.stops += 1
            tool.no_progress += result.no_progress
            tool.steps_saved += result.steps_saved
            tool.cost_saved += result.cost_saved

    def _tool(self, name: str) -> ToolStats:
        stats = self.tools.get(name)
        if stats is None:
            stats = self.tools[name] = ToolStats()
        return stats

    # -- one turn ---------------------------------------------------------------------------

    def _turn(self, run: _Run, turn: Turn, path: str) -> None:
        ran = run.stop is None  # this model call was made, guard or no guard
        calls = turn.calls
        if calls:
            if ran:
                self._check(run, turn, path)
            else:
                run.steps += self._distinct(calls)
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
        cost = self._cost(usage)
        run.turns += 1
        run.input += usage.input
        run.output += usage.output
        run.cached += usage.cached
        run.cost += cost
        if ran:
            run.cost_guarded += cost
        else:
            run.turns_saved += 1
            run.in_saved += usage.input
            run.out_saved += usage.output

    def _check(self, run: _Run, turn: Turn, path: str) -> None:
        guard = run.guard
        assert guard is not None
        calls = turn.calls
        steps_before = run.steps
        # (index of the call in the turn, its verdict, whether it is the first of its key).
        verdicts: Sequence[tuple[int, tripwire.Verdict, bool]]
        try:
            if len(calls) == 1:
                name, args, is_text = calls[0]
                only = guard.check_json(name, args) if is_text else guard.check(name, args)
                verdicts = ((0, only, True),)
            else:
                verdicts = self._check_turn(guard, calls)
        except (RecursionError, TypeError, ValueError) as exc:
            verdicts = self._check_each(run, guard, turn, path, exc)
        for _, verdict, first in verdicts:
            if not first:
                continue
            if verdict.invalid_arguments is not None:
                run.invalid += 1
            action = verdict.action
            if action == "nudge":
                run.nudges += 1
                if run.nudge_step is None:
                    run.nudge_step = verdict.step
                self._tool(verdict.tool).nudges += 1
            elif action == "stop":
                # Without the guard, the whole turn would have run, one step per distinct call.
                run.stop = verdict
                run.guard = None  # the run is over as far as the guard is concerned
                run.pending = None
                run.stop_location = location(path, turn.line, turn.where)
                run.stop_call = _preview(verdict.tool, calls, verdict.key, self._volatile)
                run.steps = steps_before + self._distinct(calls)
                return
        run.steps = guard.steps
        ids = turn.call_ids
        if ids is not None and self._observe:
            self._await_results(run, ids, verdicts)

    def _await_results(
        self,
        run: _Run,
        ids: list[str | None],
        verdicts: Sequence[tuple[int, tripwire.Verdict, bool]],
    ) -> None:
        """Remembers the verdicts of the turn's calls that have ids, for their results."""
        pending = run.pending
        if pending is None:
            pending = run.pending = {}
        if len(verdicts) == 1 and len(ids) == 1:  # the common case, quickly
            call_id = ids[0]
            if call_id is not None:
                pending.pop(call_id, None)
                pending[call_id] = verdicts[0][1]
                if len(pending) > MAX_PENDING:
                    del pending[next(iter(pending))]
            return
        for index, verdict, _ in verdicts:
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
            run.unlinked += 1
            return
        run.results += 1
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

    def _check_turn(
        self, guard: tripwire.Guard, calls: list[Call]
    ) -> list[tuple[int, tripwire.Verdict, bool]]:
        prepared: list[tuple[str, Any]] = []
        for name, args, is_text in calls:
            if is_text:
                try:
                    args = json.loads(args)
                except ValueError:
                    return self._check_each_turn(guard, calls)
            prepared.append((name, args))
        verdicts = guard.check_turn(prepared)
        return [(i, v, v.duplicate_of is None) for i, v in enumerate(verdicts)]

    def _check_each_turn(
        self, guard: tripwire.Guard, calls: list[Call]
    ) -> list[tuple[int, tripwire.Verdict, bool]]:
        """``check_turn``'s rule (identical calls of a turn are one action) applied call by
        call, for a turn with arguments that are not valid JSON text."""
        verdicts: list[tuple[int, tripwire.Verdict, bool]] = []
        seen: dict[object, tripwire.Verdict] = {}
        for index, call in enumerate(calls):
            key = self._key(call)
            first = seen.get(key)
            if first is not None:
                verdicts.append((index, first, False))
                continue
            name, args, is_text = call
            verdict = guard.check_json(name, args) if is_text else guard.check(name, args)
            seen[key] = verdict
            verdicts.append((index, verdict, True))
        return verdicts

    def _check_each(
        self, run: _Run, guard: tripwire.Guard, turn: Turn, path: str, error: BaseException
    ) -> list[tuple[int, tripwire.Verdict, bool]]:
        """A turn the guard refused as a whole: check its calls one at a time, skipping and
        reporting the ones it refuses (a failed check leaves the guard as it was)."""
        verdicts: list[tuple[int, tripwire.Verdict, bool]] = []
        seen: dict[object, tripwire.Verdict] = {}
        for index, (name, args, is_text) in enumerate(turn.calls):
            try:
                key = self._key((name, args, is_text))
                first = seen.get(key)
                if first is not None:
                    verdicts.append((index, first, False))
                    continue
                verdict = guard.check_json(name, args) if is_text else guard.check(name, args)
            except (RecursionError, TypeError, ValueError) as exc:
                run.skipped += 1
                self.problem(Problem(path, turn.line, f"call to {name} skipped: {exc}", turn.where))
                continue
            seen[key] = verdict
            verdicts.append((index, verdict, True))
            if verdict.action == "stop":
                break
        return verdicts

    def _key(self, call: Call) -> object:
        name, args, is_text = call
        if is_text:
            try:
                return tripwire.call_key_json(name, args, volatile_keys=self._volatile)
            except ValueError:
                return ("invalid", name, " ".join(str(args).split()))
        return tripwire.call_key(name, args, volatile_keys=self._volatile)

    def _distinct(self, calls: Sequence[Call]) -> int:
        """Steps a turn's calls take: one per distinct call key, as ``check_turn`` counts."""
        if len(calls) == 1:
            return 1
        seen: set[object] = set()
        count = 0
        for call in calls:
            try:
                key = self._key(call)
            except (RecursionError, TypeError, ValueError):
                continue  # refused by the guard before the stop: not a step after it either
            if key not in seen:
                seen.add(key)
                count += 1
        return count

    # -- output -----------------------------------------------------------------------------

    def report(self, files: list[FileStats]) -> Report:
        for key in sorted(self._open, key=lambda k: self._open[k].seq):
            self._finish(self._open.pop(key))
        self._totals.results_unlinked += self.orphan_results
        self.orphan_results = 0
        return Report(
            settings=self.settings,
            runs=self._runs,
            totals=self._totals,
            files=files,
            tools=self.tools,
            problems=self.problems,
            problems_total=self.problems_total,
            split_runs=self.split_runs,
        )


def _preview(
    tool: str, calls: Sequence[Call], key: str, volatile: frozenset[str] | None
) -> str | None:
    """The stopped call as ``tool {canonical args}``, clipped: what the run was stuck on."""
    for name, args, is_text in calls:
        if name != tool:
            continue
        try:
            value = json.loads(args) if is_text else args
            if tripwire.call_key(name, value, volatile_keys=volatile) != key:
                continue
            text = tripwire.canonical_json(name, value, volatile_keys=volatile).decode()
            text = json.dumps(json.loads(text)["args"], ensure_ascii=False, separators=(",", ":"))
        except (ValueError, TypeError, RecursionError, UnicodeDecodeError):
            text = " ".join(str(args).split())
        preview = f"{name} {text}"
        if len(preview) > CALL_PREVIEW:
            preview = preview[: CALL_PREVIEW - 1] + "…"
        return preview
    return None


STDIN: Final = "-"


def replay(
    paths: Iterable[str],
    settings: Settings | None = None,
    *,
    stdin: IO[bytes] | None = None,
    on_problem: Callable[[Problem], None] | None = None,
    tick: Callable[[FileStats, int], None] | None = None,
) -> Report:
    """Replays every trace file in ``paths`` (``"-"`` is ``stdin``) and reports.

    ``on_problem`` hears of bad input as it is found; ``tick(file, position)`` of progress."""
    fleet = Fleet(settings or Settings(), on_problem=on_problem)
    files: list[FileStats] = []
    for index, path in enumerate(_expand(paths, fleet)):
        label = "<stdin>" if path == STDIN else path
        stats = FileStats(label)
        files.append(stats)
        if path == STDIN and stdin is None:
            stats.unreadable = True
            fleet.problem(Problem(label, None, "no stdin to read"))
            continue
        file_tick = None if tick is None else _bind(tick, stats)
        reader = Reader(
            label,
            stats,
            stdin=stdin if path == STDIN else None,
            tick=file_tick,
            results=fleet.settings.observe,
        )
        fleet.feed(index, stats, reader)
    return fleet.report(files)


TRACE_SUFFIXES: Final = (".json", ".jsonl", ".ndjson")


def _expand(paths: Iterable[str], fleet: Fleet) -> Iterator[str]:
    """The paths, with each directory replaced by the trace files under it, in name order."""
    for path in paths:
        if path == STDIN or not os.path.isdir(path):
            yield path
            continue
        found = False
        # os.walk skips what it cannot list unless told: an unreadable directory is a
        # problem to report as such, not a directory without trace files.
        unlisted: list[OSError] = []
        for root, dirs, names in os.walk(path, onerror=unlisted.append):
            dirs.sort()
            for name in sorted(names):
                if name.removesuffix(".gz").endswith(TRACE_SUFFIXES):
                    found = True
                    yield os.path.join(root, name)
        for exc in unlisted:
            where = exc.filename if isinstance(exc.filename, str) else path
            fleet.problem(Problem(where, None, f"cannot list directory: {exc.strerror or exc}"))
        if not found and not unlisted:
            fleet.problem(Problem(path, None, "no *.json, *.jsonl or *.ndjson files in directory"))


def _bind(tick: Callable[[FileStats, int], None], stats: FileStats) -> Callable[[int], None]:
    return lambda position: tick(stats, position)
