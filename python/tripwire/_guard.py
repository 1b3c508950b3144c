"""The guard in pure Python: the reference for the native ``Guard`` (docs/design/guard.md).

Per check: count the call key's occurrences in a window of recent calls, this one included
(``repeats``). ``repeats >= stop_at``: stop with ``loop_detected``, key not appended.
``repeats >= nudge_at``: nudge (do not run it; tell the model it repeated itself), key
appended. Otherwise allow, key appended. Why a window of 12 and why nudge before stop: the
seed document. Without ``observe``, that is all: the hash-only verdicts (the known
code-editing tools' keys keep their whitespace, as their policy says).

Results, when the harness reports them with ``observe(verdict, result)``, let the guard see
progress, which the hash alone cannot (the seed's last section). What a call may do to the
world comes from its tool's policy, declared or inferred (``tripwire._policy``). The rules,
each a method of ``Guard`` and of ``RunState`` in ``rust/guard.rs``:

**A stop rests on evidence.** A stop is justified only by what the results show: the same
call coming back the same way, with nothing between that could have changed the world, or
laps of a cycle with the same results. A rule that reads more into a trace than that may
nudge, but it stops only on a result seen *after* its nudge that repeats the pattern: a
nudged call never ran, so nothing was learned from it. The public corpus
(``benches/real_traces.py``) is the measure: a stop in a run that succeeded is the worst
mistake the guard can make, a loop caught a step later a small one.

- **Repeats** (``_repeats``). A repeat is counted back to the last change: an earlier
  occurrence with a different result; another call that may have changed the world (a write
  that did not fail, a shell or a tool with no policy, failed or not: ``cat patch.txt``
  after ``sed -i``); a user message (unless the call keeps failing the same way). Transient
  failures (timeouts, rate limits, 5xx: ``tripwire._results``) are retried without counting,
  up to ``TRANSIENT_RETRIES`` a call a run. A failed call retried with other raw arguments is
  a correction, not a repeat (``{"start_date": null}`` failed, ``{}`` has the same key: the
  tool saw a difference). A shell or a tool with no policy may change the world itself, so
  its first repeat runs (allow, allow, nudge). Once a call was nudged, it is stopped only
  when the guard has seen it come back the same way ``stop_at - 1`` times; until then the
  call after the nudge runs, and its result shows whether the nudge was ignored (allow,
  nudge, allow, stop). A write is never run again to find out (a second identical refund):
  it stops as the seed's does (allow, nudge, stop).
- **Shells** (policy ``shell``: Claude Code's ``Bash``, OpenHands' ``execute_bash``, Codex's
  ``shell``, SWE-agent's ``bash``, Gemini's ``run_shell_command``...): a command's output is
  its answer whatever its exit status (``grep`` exits 1 for "no match", ``diff`` for
  "differs"), never a failure and never "empty"; the same error is the same output of the
  same command.
- **Polls**: a tool declared ``"poll"`` may repeat the same call while waiting, up to
  ``max_polls`` times a run (default 20); then it stops with ``loop_detected``. The counts
  of the ``COUNTED_CALLS`` (256) calls counted last are kept (so are transient retries').
- **Cycles** (``_cycle``): when the last ``2p`` calls are two laps of one cycle of ``p``
  calls (at least two different ones) with the same results, and this call would start a
  third lap, the run stops with ``no_progress`` (edit, undo, edit; A-B-A-B). When the cycle
  has writes in it, the same results of its writes suffice (the writes put the world back;
  what the reads in between print, test timings say, is noise).
- **Runs over varied arguments** (``_fruitless_run``): calls in a row that came back empty
  (``None``, ``""``, ``[]``, ``{}``, or a value the tool's policy lists as empty), or that
  failed with one error, *asking the same question* (``tripwire._question``: the same
  argument shape, one-word values such as ids, names and airports the same, free text
  free): after ``nudge_at + 1`` results the next is nudged; it stops with ``no_progress``
  only once ``stop_at + 1`` came back so with one of them after the nudge. "refund policy",
  "refund policy for annual plans", "annual plan refund rules" are one question; flights
  from JFK to SFO, OAK and SJC are three, and empty answers to them are exploration. A tool
  whose empty results are answers (an error-log check that finds nothing) declares
  ``"empty": False``.
- **Call ids**: a retried delivery (the same id and the same call, not yet answered) gets
  its first verdict. A nudge is its call's answer, so the same call asked again under the
  id is counted: ids are a retry signal, never a reason to stop counting.

Cycles and runs over varied arguments do not reach back past a user message. A call's
question is told only where a rule may need it (while a result in the window is empty or
failed, or for that result's call, from the arguments the guard holds until the call is
observed or a snapshot is taken): the check's fast path never computes one.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from tripwire._call_ids import CALL_ID_MEMORY, CallIds
from tripwire._checks import (
    check_call_id,
    check_flag,
    check_limits,
    check_verdict,
    exact,
    unpack_call,
)
from tripwire._keys import (
    UNPARSABLE,
    call_key,
    call_key_json,
    check_name,
    invalid_json,
    verbatim_key,
    verbatim_key_json,
    volatile_set,
)
from tripwire._locking import ChangeLock
from tripwire._messages import (
    DEPRECATED_RECORD,
    REENTERED,
    Action,
    Detail,
    Reason,
    nudge_message,
    stop_message,
    verdict_message,
)
from tripwire._policy import (
    DEFAULT_MAX_POLLS,
    INFERRED_TOOLS,
    POLICIES,
    Policy,
    ToolPolicy,
    annotated_policies,
    check_definitions,
    check_tools,
    policy_by_name,
)
from tripwire._question import Question, question_of, same_question
from tripwire._results import describe_result
from tripwire._snapshot import (
    FULL,
    MAX_U32,
    MAX_U64,
    STATE_ONLY,
    Config,
    RunState,
    SnapshotError,
    config_bytes,
    config_digest,
    frame,
    read_config,
    read_state,
    unframe,
    write_state,
)
from tripwire._state import CACHE_ENTRIES, COUNTED_CALLS, TRANSIENT_RETRIES, Entry
from tripwire._verdict import Verdict, _verdict

# What came after a nudge in a run of empty results or of one error (Guard._run_counts).
AfterNudge = Literal["none", "pending", "shown"]

__all__ = (
    "CACHE_ENTRIES",
    "CALL_ID_MEMORY",
    "COUNTED_CALLS",
    "DEFAULT_MAX_POLLS",
    "DEPRECATED_RECORD",
    "INFERRED_TOOLS",
    "POLICIES",
    "REENTERED",
    "TRANSIENT_RETRIES",
    "Action",
    "Detail",
    "Guard",
    "Policy",
    "Reason",
    "Verdict",
    "_verdict",
    "check_limits",
    "nudge_message",
    "stop_message",
    "verdict_message",
)
# The bounds, REENTERED, Detail, check_limits, the message functions and ``_verdict`` lived
# here before the module was split by concern (``_messages``, ``_checks``, ``_verdict``,
# ``_call_ids``, ``_state``, ``_snapshot``), and are still imported from here: by tests and
# users, and by pickles of verdicts made before the split (``tripwire._guard._verdict``).


class Guard:
    """A loop guard for one agent run. Thread-safe: a guard shared by threads loses no update."""

    def __init__(
        self,
        *,
        window: int = 12,
        nudge_at: int = 2,
        stop_at: int = 3,
        volatile_keys: Iterable[Any] | None = None,
        max_steps: int | None = None,
        tools: Mapping[str, object] | None = None,
        infer: bool | None = True,
        definitions: Iterable[Any] | None = None,
    ) -> None:
        check_limits(window, nudge_at, stop_at, max_steps)
        # None means the default, as for volatile_keys and max_steps.
        self._window_size = 12 if window is None else window
        self._nudge_at = 2 if nudge_at is None else nudge_at
        self._stop_at = 3 if stop_at is None else stop_at
        self._max_steps = max_steps
        self._volatile = volatile_set(volatile_keys)
        self._tools, self._tools_repr = check_tools(tools)
        self._infer = bool(check_flag("infer", infer, True))
        self._definitions = check_definitions(definitions)
        # The annotated tools' policies, resolved once; other names' go through the one
        # cache of inferred policies (``tripwire._policy.policy_by_name``).
        self._annotated = annotated_policies(self._definitions)
        # Allocating a verdict can start a garbage collection whose callbacks may look at
        # this guard from the same thread: reads take the lock, changes are refused there
        # (``_locked``; ``tripwire._locking``).
        self._changes = ChangeLock()
        self._lock = self._changes.lock
        # What the run state lets go of during a change: see ``_let_go``.
        self._released: list[Any] = []
        # The configuration as a snapshot writes it, made when first asked for.
        self._config: bytes | None = None
        self._clear()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, for a change to the run (or a read of all of it, a snapshot): a change
        begun in the middle of another in the same thread is refused (``tripwire._locking``
        says why); the native guard, which runs no Python code while locked, never meets it.
        Reading (``keys``, ``steps``, ``stopped``, ``policy_of``) is always allowed.

        What the change let go of (``_let_go``) is dropped here, and only here: after the
        lock is released and the change is done."""
        with self._changes.change():
            try:
                yield
            finally:
                released, self._released = self._released, []
        del released

    def _let_go(self, *objects: Any) -> None:
        """**The rule for anything the run state stops holding during a change** (an entry
        pushed out of the window, a cached result replaced or evicted, a call id's record, a
        call's held arguments, the whole state on ``reset`` or ``load``): hand it here, never
        drop it in place. It may be, or hold, the harness's object (a result, arguments, a
        verdict's cached value), and dropping the last reference to one runs its finaliser,
        Python code that may use this guard: in the middle of a change, that call would be
        refused (``REENTERED``) or see half a change. ``_locked`` drops them once the change
        is done and the lock released. The native guard keeps the same rule in Rust: what
        ``RunState`` lets go of is handed back as ``Released`` (``rust/guard.rs``) and
        dropped after its lock. ``tests/test_released.py`` holds both to it: finalisers that
        check on the guard, run by every way the state lets go of an object."""
        self._released.extend(objects)

    def _clear(self) -> None:
        self._window: deque[Entry] = deque(maxlen=self._window_size)
        # Checks of each poll tool's call so far this run (not only in the window), and
        # transient failures of each call: the least recently counted first, at most
        # COUNTED_CALLS of each (``_count``).
        self._polls: OrderedDict[str, int] = OrderedDict()
        self._retries: OrderedDict[str, int] = OrderedDict()
        self._steps = 0
        self._turn = 0
        self._stopped: Verdict | None = None
        # Whether a new call's question must be told (tripwire._question): a result in the
        # window came back empty or failed. Read without the lock, before it is taken.
        self._wants_question = False
        self._by_call_id = CallIds()
        self._cache: OrderedDict[str, Any] = OrderedDict()

    # -- policies -------------------------------------------------------------------------

    def _policy(self, name: str) -> ToolPolicy | None:
        """Declared, else (inferring) annotated by a definition, else what the name says."""
        declared = self._tools.get(name)
        if declared is not None or not self._infer:
            return declared
        annotated = self._annotated.get(name)
        return annotated if annotated is not None else policy_by_name(name)

    def policy_of(self, name: str, /) -> tuple[Policy | None, str | None]:
        """The policy the guard uses for a tool, and where it comes from: ``"declared"``
        (``tools=``), ``"definition"`` (its annotations in ``definitions=``), ``"name"`` (a
        well-known harness's tool, or its name's verb); ``(None, None)``: no policy, a tool of
        unknown kind."""
        if not isinstance(name, str):
            raise TypeError(f"tool name must be a str, not {type(name).__name__}")
        policy = self._policy(exact(name))
        if policy is None:
            return None, None
        return policy.kind, policy.source

    def _question(self, name: str, args: Any, text: bool) -> Question | None:
        """The call's question, where the rules may need it: while a result in the window
        is empty or failed (told before the lock is taken; see ``tripwire._question``)."""
        if not self._wants_question:
            return None
        return question_of(name, args, text, self._volatile)

    def _prepare(
        self, name: str, args: Any, text: bool
    ) -> tuple[str, str, ToolPolicy | None, str | None]:
        """The tool's exact name, the call's key, the tool's policy, and what is wrong with
        arguments given as JSON ``text`` that do not parse (then the raw text keys the call).
        Raises for a bad call, before anything changes."""
        name = exact(check_name(name))
        policy = self._policy(name)
        keep = policy is not None and policy.whitespace == "keep"
        if not text:
            if keep:
                return name, verbatim_key(name, args, self._volatile), policy, None
            return name, call_key(name, args, volatile_keys=self._volatile), policy, None
        try:
            if keep:
                key = verbatim_key_json(name, args, self._volatile)
            else:
                key = call_key_json(name, args, volatile_keys=self._volatile)
        except UNPARSABLE as exc:
            key, why = invalid_json(name, args, exc, not keep)
            return name, key, policy, why
        return name, key, policy, None

    # -- the check ------------------------------------------------------------------------

    def check(self, name: str, args: Any, /, *, call_id: str | None = None) -> Verdict:
        """The verdict on one call, before it is dispatched."""
        call_id = check_call_id(call_id)
        name, key, policy, _ = self._prepare(name, args, False)
        question = self._question(name, args, False)
        with self._locked():
            return self._decide(name, key, policy, call_id, None, args, False, question)

    def check_json(
        self, name: str, text: str | bytes | bytearray, /, *, call_id: str | None = None
    ) -> Verdict:
        """``check`` for arguments given as JSON text (OpenAI-style ``arguments``).

        Text that is not valid JSON, nested too deep or too big to parse does not raise: the
        raw text, whitespace collapsed, keys the call (a model that keeps sending the same
        broken arguments is looping too), and ``Verdict.invalid_arguments`` says why."""
        call_id = check_call_id(call_id)
        name, key, policy, invalid = self._prepare(name, text, True)
        question = self._question(name, text, True)
        with self._locked():
            return self._decide(name, key, policy, call_id, invalid, text, True, question)

    def check_turn(self, calls: Iterable[Sequence[Any]], /) -> list[Verdict]:
        """Verdicts for all tool calls of one model response, in order.

        Each call is ``(name, args)`` or ``(name, args, call_id)``; ``args`` given as text
        (``str``, ``bytes``, ``bytearray``) is JSON text, keyed as ``check_json`` keys it
        (OpenAI-style ``arguments``; text that is not valid JSON keys the call by its raw text
        and the verdict's ``invalid_arguments`` says why). Identical calls within the turn
        are one action: counted once, and each later copy's verdict is the first copy's with
        ``duplicate_of`` set to its index, so the harness can give them the same result.
        Every verdict carries its own call's id and tool, a stopped turn's too. Keys are
        computed first: if any call is bad, nothing is counted.
        """
        prepared: list[tuple[str, str, ToolPolicy | None, str | None, str | None, Any, bool]] = []
        for index, call in enumerate(calls):
            name, args, call_id = unpack_call(index, call)
            call_id = check_call_id(call_id)
            text = isinstance(args, (str, bytes, bytearray))
            prepared.append((*self._prepare(name, args, text), call_id, args, text))
        questions = [self._question(p[0], p[5], p[6]) for p in prepared]
        verdicts: list[Verdict] = []
        first_of_key: dict[str, int] = {}
        with self._locked():
            for index, (name, key, policy, invalid, call_id, args, text) in enumerate(prepared):
                earlier = first_of_key.get(key)
                if earlier is None or self._retried(call_id, key):
                    first_of_key.setdefault(key, index)
                    verdicts.append(
                        self._decide(
                            name, key, policy, call_id, invalid, args, text, questions[index]
                        )
                    )
                else:
                    copy = verdicts[earlier]._replace(duplicate_of=earlier, call_id=call_id)
                    if call_id is not None:
                        self._remember_call_id(call_id, key, copy)
                    verdicts.append(copy)
        return verdicts

    def _retried(self, call_id: str | None, key: str) -> bool:
        """A retried delivery (``tripwire._call_ids``)."""
        return self._by_call_id.retried(call_id, key)

    def _decide(
        self,
        name: str,
        key: str,
        policy: ToolPolicy | None,
        call_id: str | None,
        invalid_arguments: str | None,
        args: Any,
        text: bool,
        question: Question | None,
    ) -> Verdict:
        if self._retried(call_id, key):
            assert call_id is not None
            return self._by_call_id.recall(call_id)
        if self._stopped is not None:
            # The run's stop, for this call: its own id, tool and key, the stop's message.
            stop = self._stopped
            after = ("after", stop.tool, stop.repeats, stop._detail)
            return Verdict(
                stop.action,
                stop.reason,
                name,
                key,
                stop.repeats,
                stop.step,
                call_id=call_id,
                invalid_arguments=invalid_arguments,
                window=self._window_size,
                budget=self._max_steps,
                detail=after,
            )
        # Saturates, as every count does (2**64 - 1 checks: never in practice, but a restored
        # state can be there, and a snapshot holds no more).
        step = min(self._steps + 1, MAX_U64)
        kind = policy.kind if policy is not None else None
        action, reason, repeats, detail = self._judge(name, key, policy, question)
        extra: dict[str, Any] = {
            "call_id": call_id,
            "invalid_arguments": invalid_arguments,
            "window": self._window_size,
            "budget": self._max_steps,
            "detail": detail,
        }
        cached = None
        declared = self._tools.get(name)
        if action == "allow":
            if declared is not None and declared.kind == "read":
                cached = self._cache.get(key)
            # A call that may change the world makes every cached read stale.
            if kind in (None, "write", "shell") and self._cache:
                self._let_go(self._cache)
                self._cache = OrderedDict()
            if kind == "poll":
                self._count(self._polls, key, min(self._polls.get(key, 0) + 1, MAX_U32))
        verdict = Verdict(action, reason, name, key, repeats, step, cached=cached, **extra)
        self._steps = step
        if action == "stop":
            self._stopped = verdict._replace(call_id=None)
        else:
            entry = Entry(key, name, step, action == "nudge", kind, self._turn)
            entry.question = question
            if action == "allow" and question is None:
                # Held until the result is observed: its question is told if it comes back
                # empty or failed. A nudged call never runs, so nothing of it is observed.
                entry.held, entry.args, entry.text = True, args, text
            if len(self._window) == self._window.maxlen:
                self._let_go(self._window[0])
            self._window.append(entry)
            self._update_wants()
        if call_id is not None:
            self._remember_call_id(call_id, key, verdict)
        return verdict

    def _count(self, counts: OrderedDict[str, int], key: str, value: int) -> None:
        """Sets a call's count, as the most recently counted; forgets the least recently
        counted call past ``COUNTED_CALLS``."""
        counts[key] = value
        counts.move_to_end(key)
        if len(counts) > COUNTED_CALLS:
            self._let_go(counts.popitem(last=False))

    def _update_wants(self) -> None:
        self._wants_question = any(entry.marked for entry in self._window)

    def _judge(
        self, name: str, key: str, policy: ToolPolicy | None, question: Question | None
    ) -> tuple[Action, Reason | None, int, Detail]:
        """Action, reason, repeats and message detail for a call; changes nothing. The rules,
        each a method of its own: polls, repeats, cycles, fruitless runs, the budget."""
        # A run holds at most 2**64 - 1 steps (what a snapshot holds): past them, as past a
        # budget, every check stops (steps saturate, and no two calls share a step).
        over_budget = self._steps == MAX_U64 or (
            self._max_steps is not None and self._steps >= self._max_steps
        )
        if policy is not None and policy.kind == "poll":
            polls = min(self._polls.get(key, 0) + 1, MAX_U32)
            if polls > policy.max_polls:
                return "stop", "loop_detected", polls, ("poll", policy.max_polls)
            if over_budget:
                return "stop", "budget_exhausted", polls, None
            return "allow", None, polls, None
        kind = policy.kind if policy is not None else None
        repeats, counted, detail = self._repeats(key, question, kind)
        fruitless, after_nudge, fruitless_detail = self._fruitless_run(question)
        if counted >= self._stop_at:
            return "stop", "loop_detected", repeats, detail
        cycle = self._cycle(key)
        if cycle is not None:
            return "stop", "no_progress", repeats, ("cycle", *cycle)
        if fruitless >= self._stop_at + 1 and after_nudge == "shown":
            return "stop", "no_progress", repeats, fruitless_detail
        if over_budget:
            return "stop", "budget_exhausted", repeats, None
        if counted >= self._nudge_at:
            return "nudge", None, repeats, detail
        if fruitless >= self._nudge_at + 1 and after_nudge != "pending":
            return "nudge", None, repeats, fruitless_detail
        return "allow", None, repeats, None

    def _repeats(
        self, key: str, question: Question | None, kind: Policy | None
    ) -> tuple[int, int, Detail]:
        """Occurrences of ``key`` in the window since the world last changed, this one
        included; how many of them count toward a nudge or a stop; and what the message may
        truthfully say of their results.

        Until a result of this call is observed, every occurrence in the window counts (the
        seed's count). Then counting goes back only as far as the last change: an earlier
        occurrence with a different result; another call that may have changed the world
        (a write that did not fail: a re-read after a write is not a repeat; a shell or a tool
        with no policy, failed or not: ``cat patch.txt`` after ``sed -i``); a user message
        (unless the call fails the same way). The call's own occurrences never end the count,
        or a command run over and over could never be a loop; what goes round through other
        calls is the cycle rule's. Occurrences that failed transiently, within the retries a
        call has, do not count, nor do failed ones whose raw arguments differ from this
        call's (a corrected call: the tool saw a difference the key does not). A shell or a
        tool with no policy may change the world itself, so its first repeat is run and
        judged by its result (counted one less: allow, allow, nudge, stop).

        **A stop rests on evidence.** A nudged occurrence never ran and taught nothing. Once
        this call was nudged, it is stopped only when the guard has seen it come back the
        same way ``stop_at - 1`` times (the nudged one would have been the ``stop_at``-th, and
        the model asked again); until then the call after the nudge is run (counted: 0), so
        that its result shows whether the nudge was ignored. The exception is a write: it is
        never run again to find out (a second identical refund), so it stops as the seed's
        does."""
        writes = kind == "write"
        earlier = [
            entry
            for entry in self._window
            if entry.key == key and not entry.retry and not _corrected(entry, question)
        ]
        observed = [entry for entry in earlier if entry.result is not None]
        if not observed:
            return len(earlier) + 1, len(earlier) + 1, None
        latest = observed[-1]
        same = 0
        nudged = 0
        newest_nudged: bool | None = None
        for entry in reversed(self._window):
            if entry.key != key:
                if entry.changed:
                    break
                continue
            if entry.retry or _corrected(entry, question):
                continue
            if newest_nudged is None:
                newest_nudged = entry.nudged
            if entry.nudged:
                nudged += 1
                continue
            if entry.result is not None and entry.result != latest.result:
                break
            if entry.turn != self._turn and not latest.failed:
                break
            same += entry.result is not None
        if latest.failed:
            detail: Detail = ("failed", latest.error, same)
        else:
            detail = ("unchanged",) if same >= 2 else None
        repeats = same + nudged + 1
        if not nudged:
            # A shell or a tool with no policy may change the world itself: its first repeat
            # is run and judged by its result.
            counted = same + 1 - (kind is None or kind == "shell")
        elif writes or same >= self._stop_at - 1:
            counted = self._stop_at
        elif newest_nudged:
            counted = 0
        else:
            counted = max(same + 1, self._nudge_at)
        return repeats, counted, detail

    def _fruitless_run(self, question: Question | None) -> tuple[int, AfterNudge, Detail]:
        """The run of empty results, or else of one error, that this call would extend (see
        the module): how many results it holds, what came after a nudge in it, and the
        message detail."""
        empty = self._empty_run(question)
        if empty[0]:
            return empty
        return self._error_run(question)

    def _tail(self, question: Question | None, fits: Any) -> list[Entry]:
        """The calls at the end of the window, newest first, back to the last user message,
        that ``fits`` or were nudged (so ran no better), each asking the same question as this
        call (``question``) or as a later call of the run (``tripwire._question``)."""
        run: list[Entry] = []
        asked = [question]
        for entry in reversed(self._window):
            if entry.turn != self._turn or not (entry.nudged or fits(entry)):
                break
            if not any(same_question(entry.question, other) for other in asked):
                break
            run.append(entry)
            asked.append(entry.question)
        return run

    @staticmethod
    def _run_counts(run: list[Entry]) -> tuple[int, AfterNudge]:
        """How many calls of a run came back (a nudged one never ran), and what came after
        a nudge in it: ``"none"`` (no nudge: it may nudge, not stop), ``"pending"`` (its
        newest call was nudged: this one runs, to show whether the nudge was ignored) or
        ``"shown"`` (a call came back after the nudge and kept the run going: the evidence
        a stop needs)."""
        results = sum(not entry.nudged for entry in run)
        nudged_at = next((i for i, entry in enumerate(run) if entry.nudged), None)
        if nudged_at is None:
            return results, "none"
        return results, "pending" if nudged_at == 0 else "shown"

    def _empty_run(self, question: Question | None) -> tuple[int, AfterNudge, Detail]:
        """The calls at the end of the window that came back empty (or were nudged) asking
        this call's question; with the message detail: how many came back empty, and the
        tool."""
        run = self._tail(question, lambda entry: entry.empty)
        empties, after_nudge = self._run_counts(run)
        if empties == 0:
            return 0, "none", None
        tools = tuple(dict.fromkeys(entry.tool for entry in reversed(run) if entry.empty))
        return empties, after_nudge, ("empty", empties, tools)

    def _error_run(self, question: Question | None) -> tuple[int, AfterNudge, Detail]:
        """The calls at the end of the window that failed with one error (not a transient
        one), or were nudged, asking this call's question; with the message detail: how many
        failed, and the error."""
        last = next((e for e in reversed(self._window) if not e.nudged), None)
        if last is None or not last.failed or last.retry:
            return 0, "none", None
        run = self._tail(
            question,
            lambda entry: entry.failed and not entry.retry and entry.result == last.result,
        )
        failures, after_nudge = self._run_counts(run)
        if failures == 0:
            return 0, "none", None
        return failures, after_nudge, ("errors", failures, last.error)

    def _cycle(self, key: str) -> tuple[tuple[str, ...], bool] | None:
        """The tools of a cycle the window went round twice, with the same results, that this
        call would start a third round of (the shortest such cycle); and whether it mixes
        writes and reads (then only the writes' results had to be the same)."""
        entries = list(self._window)
        n = len(entries)
        for period in range(2, n // 2 + 1):
            laps = entries[n - 2 * period :]
            # Transient failures retried in between are no lap of a cycle.
            if laps[0].key != key or any(e.result is None or e.retry for e in laps):
                continue
            if laps[0].turn != self._turn:
                continue
            first, second = laps[:period], laps[period:]
            # With writes in the cycle, their results are what must repeat (see the module).
            writes = any(entry.writes for entry in first)
            same = all(
                a.key == b.key and (a.result == b.result or (writes and not a.writes))
                for a, b in zip(first, second, strict=True)
            )
            if same and len({entry.key for entry in first}) > 1:
                # Reads whose results were let differ make it "the same results of its writes".
                mixed = writes and not all(entry.writes for entry in first)
                return tuple(entry.tool for entry in first), mixed
        return None

    def _remember_call_id(self, call_id: str, key: str, verdict: Verdict) -> None:
        # A nudge is its call's answer: the harness gave the model the guard's message as
        # the call's result. The same call asked again under the same id is the model
        # repeating itself, and is counted: ids are a retry signal, never a reason to stop
        # counting (a model that re-issued a nudged call under its id was never stopped).
        answered = verdict.action == "nudge"
        self._let_go(self._by_call_id.remember(call_id, key, verdict, answered))

    # -- results --------------------------------------------------------------------------

    def keep(self, verdict: Verdict, result: Any, /) -> None:
        """Keeps the result of an allowed call to a tool declared ``read`` in the run's read
        cache, so a later allowed check of the same call carries it in ``Verdict.cached``
        (to serve instead of running the tool). Other tools (inferred reads too: whether a
        read outlives the run is for its author to say): nothing."""
        check_verdict("keep", verdict, Verdict)
        policy = self._tools.get(verdict.tool)
        if verdict.action != "allow" or result is None or policy is None or policy.kind != "read":
            return
        with self._locked():
            self._let_go(self._cache.get(verdict.key))
            self._cache[verdict.key] = result
            self._cache.move_to_end(verdict.key)
            if len(self._cache) > CACHE_ENTRIES:
                self._let_go(self._cache.popitem(last=False))

    def record(self, verdict: Verdict, result: Any, /) -> None:
        """Deprecated: ``keep``, under its old name."""
        warnings.warn(DEPRECATED_RECORD, DeprecationWarning, stacklevel=2)
        self.keep(verdict, result)

    def observe(
        self,
        verdict: Verdict,
        result: Any,
        /,
        *,
        error: Any = None,
        transient: bool | None = None,
    ) -> None:
        """Tells the guard what an allowed call returned, so later checks can tell progress
        (a changed result) from a loop (the same result again), and see errors, cycles and
        runs of empty results. ``result`` as the harness holds it (``tripwire._results``);
        ``error``: ``None`` (the result says), ``False``, ``True`` (the result is the error's
        text), or the error (a str or an exception); ``transient``: ``None`` (recognised from
        the error), or what the harness knows. The guard holds a call's arguments until its
        result is observed (or a snapshot is taken), and reads them only if it came back
        empty or failed.
        Verdicts that were not allowed, or whose call has left the window, are ignored."""
        check_verdict("observe", verdict, Verdict)
        transient = check_flag("transient", transient, None)
        if verdict.action != "allow":
            return
        policy = self._policy(verdict.tool)
        digest, empty, failed, is_transient, text = describe_result(
            result, error, transient, policy
        )
        held: tuple[Any, bool] | None = None
        with self._locked():
            if verdict.call_id is not None:
                self._by_call_id.answer(verdict.call_id, verdict.step)
            entry = self._entry_of(verdict)
            if entry is None:
                return
            if digest is None and not failed:
                return  # nothing to compare it by: as if not observed
            entry.result, entry.empty = digest, empty
            entry.failed, entry.error = failed, text
            # A retry is counted once per call, however often it is observed.
            was_retry, entry.retry = entry.retry, False
            if failed and is_transient:
                retries = self._retries.get(entry.key, 0)
                if was_retry or retries < TRANSIENT_RETRIES:
                    if not was_retry:
                        self._count(self._retries, entry.key, retries + 1)
                    entry.retry = True
            if not entry.marked:
                # Only a call that came back empty or failed is read for what it asked: the
                # state keeps no question it will never read (so a snapshot taken between
                # the check and this result gives the same state as none).
                entry.question = None
            elif entry.question is None and entry.held:
                held = (entry.args, entry.text)
            self._let_go(entry.args)
            entry.held, entry.args = False, None
            self._update_wants()
        if held is None:
            return
        # What the call asked, told outside the lock (it reads the arguments, which are the
        # harness's objects), then kept if the call is still in the window.
        question = question_of(verdict.tool, held[0], held[1], self._volatile)
        with self._locked():
            entry = self._entry_of(verdict)
            if entry is not None and entry.question is None:
                entry.question = question

    def _entry_of(self, verdict: Verdict) -> Entry | None:
        """The window's entry of an allowed verdict's call, if it is still in the window. A
        nudged entry is no allowed call's (a verdict given by another state than this one,
        loaded since, can name its step and key): it never ran, so nothing is observed of it."""
        for entry in reversed(self._window):
            if entry.step == verdict.step and entry.key == verdict.key:
                return None if entry.nudged else entry
        return None

    def user_message(self) -> None:
        """Tells the guard a human message arrived: the same successful call once per user
        message is not a loop (a call that keeps failing the same way still is)."""
        with self._locked():
            self._turn = min(self._turn + 1, MAX_U32)

    # -- inspection -----------------------------------------------------------------------

    def reset(self) -> None:
        """Forgets the run: window, steps, stop, call ids and cached results."""
        with self._locked():
            self._let_go(self._stopped, self._by_call_id, self._cache, self._window)
            self._clear()

    # -- state as data (the format: tripwire._snapshot) ----------------------------------

    def _config_bytes(self) -> bytes:
        if self._config is None:
            self._config = config_bytes(
                self._window_size,
                self._nudge_at,
                self._stop_at,
                self._max_steps,
                self._volatile,
                self._tools,
                self._tools_repr,
                self._infer,
                self._definitions,
            )
        return self._config

    def snapshot(self, *, state_only: bool | None = None) -> bytes:
        """The guard as bytes: its configuration and run state (``state_only``: the state
        and a digest of the configuration, for a store that keeps the state of guards made
        alike, to ``load``). The format: ``tripwire._snapshot``."""
        state_only = check_flag("state_only", state_only, False)
        config = self._config_bytes()
        self._tell_questions()
        with self._locked():
            state = write_state(
                RunState(
                    self._window,
                    self._polls,
                    self._retries,
                    self._steps,
                    self._turn,
                    self._stopped,
                    self._by_call_id,
                    self._cache,
                )
            )
        if state_only:
            return frame(STATE_ONLY, config_digest(config), state)
        return frame(FULL, config, state)

    @classmethod
    def from_snapshot(cls, data: bytes | bytearray | memoryview, /) -> Guard:
        """The guard a ``snapshot()`` was taken of, mid-run: it gives the verdicts the
        original would have. ``ValueError`` (``SnapshotError``) for anything else."""
        kind, head, reader = unframe(data)
        if kind != FULL:
            raise SnapshotError(
                "a state-only snapshot has no configuration: load() it into a guard made "
                "with the same one"
            )
        guard = cls._from_config(read_config(head), head)
        guard._restore(read_state(reader, guard._window_size, guard._max_steps))
        return guard

    @classmethod
    def _from_config(cls, config: Config, data: bytes) -> Guard:
        guard = cls(
            window=config.window,
            nudge_at=config.nudge_at,
            stop_at=config.stop_at,
            max_steps=config.max_steps,
            volatile_keys=config.volatile_keys,
            infer=config.infer,
        )
        guard._tools, guard._tools_repr = config.tools, config.tools_repr
        guard._definitions = config.definitions
        guard._annotated = annotated_policies(config.definitions)
        if guard._config_bytes() != data:
            raise SnapshotError(
                "not a tripwire guard snapshot: its configuration is not written as tripwire "
                "writes it"
            )
        return guard

    def load(self, data: bytes | bytearray | memoryview, /) -> None:
        """Replaces the run state with a snapshot's (either kind) of a guard with the same
        configuration; ``ValueError`` (``SnapshotError``), and nothing changed, otherwise."""
        kind, head, reader = unframe(data)
        config = self._config_bytes()
        if head != (config if kind == FULL else config_digest(config)):
            raise SnapshotError(
                "the snapshot is of a guard with another configuration (window, thresholds, "
                "tools, volatile keys or definitions) than this one"
            )
        self._restore(read_state(reader, self._window_size, self._max_steps))

    def _tell_questions(self) -> None:
        """Tells the questions of the calls whose arguments the guard holds, and keeps them
        instead: a snapshot holds no arguments, and the guard restored from it must know what
        its calls asked (told outside the lock, as ``observe`` tells them)."""
        with self._locked():
            held = [entry for entry in self._window if entry.held]
            taken = [(entry, entry.args, entry.text) for entry in held]
            for entry in held:
                entry.held, entry.args = False, None
        told = [
            (entry, question_of(entry.tool, args, text, self._volatile))
            for entry, args, text in taken
        ]
        with self._locked():
            for entry, question in told:
                if entry.question is None:
                    entry.question = question
            self._let_go(taken)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return type(self).from_snapshot, (self.snapshot(),)

    def _restore(self, state: RunState) -> None:
        with self._locked():
            self._let_go(self._stopped, self._by_call_id, self._cache, self._window)
            self._window, self._polls, self._retries = state.window, state.polls, state.retries
            self._steps, self._turn, self._stopped = state.steps, state.turn, state.stopped
            self._by_call_id, self._cache = state.call_ids, state.cache
            self._update_wants()

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def stopped(self) -> bool:
        return self._stopped is not None

    def keys(self) -> list[str]:
        """The window, oldest first."""
        with self._lock:
            return [entry.key for entry in self._window]

    def __len__(self) -> int:
        return len(self._window)

    def __repr__(self) -> str:
        return (
            f"Guard(window={self._window_size}, nudge_at={self._nudge_at}, "
            f"stop_at={self._stop_at}, max_steps={self._max_steps}, "
            f"tools={self._tools_repr}, infer={self._infer}, steps={self._steps})"
        )


def _corrected(entry: Entry, question: Question | None) -> bool:
    """A failed call whose raw arguments differ from this call's (``question``): the tool
    saw a difference the key does not, so this call is a correction, not a repeat."""
    return (
        entry.failed
        and question is not None
        and entry.question is not None
        and entry.question[0] != question[0]
    )
