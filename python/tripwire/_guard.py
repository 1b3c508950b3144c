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

import threading
import warnings
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, Literal

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
from tripwire._policy import (
    DEFAULT_MAX_POLLS,
    POLICIES,
    Policy,
    ToolPolicy,
    check_definitions,
    check_int,
    check_tools,
    infer_policy,
)
from tripwire._question import Question, question_of, same_question
from tripwire._results import describe_result, digest
from tripwire._snapshot import (
    ACTIONS,
    CHANGES,
    EMPTY,
    FAILED,
    FULL,
    H_CACHED,
    H_CALL_ID,
    H_DUPLICATE,
    H_INVALID,
    HAS_RESULT,
    MAX_U32,
    MAX_U64,
    NUDGED,
    QUESTION,
    REASONS,
    RETRY,
    STATE_ONLY,
    WRITES,
    Config,
    Reader,
    SnapshotError,
    Writer,
    config_bytes,
    config_digest,
    frame,
    json_text,
    json_value,
    read_config,
    unframe,
)

Action = Literal["allow", "nudge", "stop"]
# What came after a nudge in a run of empty results or of one error (Guard._run_counts).
AfterNudge = Literal["none", "pending", "shown"]
Reason = Literal["loop_detected", "budget_exhausted", "no_progress"]

__all__ = ("DEFAULT_MAX_POLLS", "POLICIES", "Action", "Guard", "Policy", "Reason", "Verdict")

# How many recent call ids a guard remembers, so a retried delivery gets its first answer.
CALL_ID_MEMORY: Final = 128
# How many read results a guard keeps for ``Verdict.cached``; the oldest go first.
CACHE_ENTRIES: Final = 1024
# ``Guard.record`` was ``keep``'s name (it never recorded a call): kept for a while, warned.
# The native guard writes the same text (tests/test_guard.py checks they agree).
DEPRECATED_RECORD: Final = "Guard.record() is deprecated: use Guard.keep(), which does the same"
# How many transient failures of one call a run may retry before they count as repeats.
TRANSIENT_RETRIES: Final = 3
# How many distinct calls' poll counts, and how many distinct calls' transient-retry counts,
# a guard remembers (each). Arguments come from the model, so a run can make up a new poll
# call each check: past this, the least recently counted call is forgotten (its count starts
# again from 0), so memory and snapshots stay bounded (issue 26). A loop is always the most
# recently counted call, so it is never the one forgotten.
COUNTED_CALLS: Final = 256
# How many undeclared tools' inferred policies a guard remembers (tool names come from the
# model, so the memory is bounded; past it, a policy is inferred again on each call).
INFERRED_TOOLS: Final = 1024

_ORDINALS: Final = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


# Why a call made from inside another on the same guard, in the same thread, is refused.
REENTERED: Final = (
    "tripwire: this guard is in the middle of a call in this thread (a signal handler, a "
    "finaliser or a gc callback called it again before that call returned); nothing was "
    "counted: make the call after the first one returns, or give the callback its own guard"
)


def _ordinal(n: int) -> str:
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


# What a verdict's message is about, beyond its action and reason:
#   None                  plain: nothing observed that the message could say
#   ("unchanged",)        the repeats' results were observed, and two or more were equal
#   ("failed", text, n)   the repeats failed: n of them with this error
#   ("errors", n, text)   n calls in a row to this tool failed with this error
#   ("empty", n, tools)   n calls in a row to these tools came back empty
#   ("cycle", tools, w)   the last calls went twice round a cycle of these tools (w: of writes
#                         and reads, where only the writes' results had to be the same)
#   ("poll", limit)       a poll tool reached its limit
#   ("after", tool, n, d) a call checked after the run stopped: the stop's own tool, repeats
#                         and detail, so that its message is the stop's
Detail = tuple[Any, ...] | None

_DO_NOT_REPEAT: Final = (
    "Do not repeat it. Either use different arguments, use a different tool, or report what "
    "you have so far."
)


def _empty_calls(detail: tuple[Any, ...]) -> str:
    count, tools = detail[1], detail[2]
    if len(tools) == 1:
        return f"{count} calls to {tools[0]} in a row"
    return f"{count} calls in a row to {', '.join(tools)}"


def _failed(detail: tuple[Any, ...]) -> str:
    text, times = detail[1], detail[2]
    if times == 1:
        return f'the last one failed with "{text}"'
    return f'it failed {times} times with "{text}"'


def nudge_message(tool: str, repeats: int, detail: Detail = None) -> str:
    if detail is not None and detail[0] == "empty":
        return (
            f"{_empty_calls(detail)} returned nothing. Do not reword the same request again: "
            "try a different tool or approach, or report what you have so far."
        )
    if detail is not None and detail[0] == "errors":
        return (
            f'{detail[1]} calls to {tool} in a row failed with the same error, "{detail[2]}". '
            "Do not retry it with other arguments: try a different tool or approach, or "
            "report what you have so far."
        )
    said = ""
    if detail == ("unchanged",):
        said = ", and the result has not changed"
    elif detail is not None and detail[0] == "failed":
        said = f", and {_failed(detail)}"
    return (
        f"This is the {_ordinal(repeats)} identical call to {tool} with the same "
        f"arguments{said}. {_DO_NOT_REPEAT}"
    )


def stop_message(
    reason: Reason,
    tool: str,
    repeats: int,
    window: int,
    budget: int | str | None,
    detail: Detail = None,
) -> str:
    if detail is not None and detail[0] == "after":
        return stop_message(reason, detail[1], detail[2], window, budget, detail[3])
    if reason == "budget_exhausted":
        # No budget: the run's 2**64 - 1 steps (``Guard._judge``).
        budget = (1 << 64) - 1 if budget is None else budget
        return f"Stopped (budget_exhausted): the budget of {budget} tool calls is spent."
    if reason == "no_progress":
        assert detail is not None
        if detail[0] == "empty":
            return f"Stopped (no_progress): {_empty_calls(detail)} returned nothing."
        if detail[0] == "errors":
            return (
                f"Stopped (no_progress): {detail[1]} calls to {tool} in a row failed with the "
                f'same error, "{detail[2]}".'
            )
        tools = " -> ".join(detail[1])
        same = "the same results from its writes" if detail[2] else "the same results"
        return (
            f"Stopped (no_progress): the last {2 * len(detail[1])} calls went twice round the "
            f"same cycle ({tools}) with {same}; {tool} would start a third round."
        )
    if detail is not None and detail[0] == "poll":
        return (
            f"Stopped (loop_detected): {tool} was polled {repeats} times with the same "
            f"arguments, more than its limit of {detail[1]}."
        )
    said = ""
    if detail == ("unchanged",):
        said = " and the same result"
    text = (
        f"Stopped (loop_detected): {tool} was called {repeats} times with the same "
        f"arguments{said} within the last {window} calls."
    )
    if detail is not None and detail[0] == "failed":
        text = f"{text[:-1]}; {_failed(detail)}."
    return text


def verdict_message(
    action: str,
    reason: Reason | None,
    tool: str,
    repeats: int,
    window: int,
    budget: int | str | None,
    detail: Detail,
) -> str | None:
    """A verdict's message: the one source of the texts, for both backends."""
    if action == "nudge":
        return nudge_message(tool, repeats, detail)
    if action == "stop" and reason is not None:
        return stop_message(reason, tool, repeats, window, budget, detail)
    return None


def check_limits(window: object, nudge_at: object, stop_at: object, max_steps: object) -> None:
    """Validates the guard's numbers (``None`` meaning the default): the one source of these
    checks and their messages, for both backends."""
    window = 12 if window is None else window
    nudge_at = 2 if nudge_at is None else nudge_at
    stop_at = 3 if stop_at is None else stop_at
    window = check_int("window", window, 1)
    nudge_at = check_int("nudge_at", nudge_at, 2)
    stop_at = check_int("stop_at", stop_at, 2)
    if stop_at < nudge_at:
        raise ValueError(f"stop_at ({stop_at}) must not be less than nudge_at ({nudge_at})")
    if stop_at > window + 1:
        raise ValueError(
            f"stop_at ({stop_at}) can never be reached with window={window}: "
            f"a window of {window} holds at most {window + 1} occurrences, this one included"
        )
    if max_steps is not None:
        check_int("max_steps", max_steps, 1)


class Verdict:
    """What the guard says about one call. Immutable; ``message`` is built when read."""

    __slots__ = (
        "_budget",
        "_detail",
        "_window",
        "action",
        "cached",
        "call_id",
        "duplicate_of",
        "invalid_arguments",
        "key",
        "reason",
        "repeats",
        "step",
        "tool",
    )

    action: Action
    reason: Reason | None
    tool: str
    key: str
    repeats: int
    step: int
    cached: Any
    call_id: str | None
    duplicate_of: int | None
    invalid_arguments: str | None
    _window: int
    _budget: int | None
    _detail: Detail

    def __init__(
        self,
        action: Action,
        reason: Reason | None,
        tool: str,
        key: str,
        repeats: int,
        step: int,
        *,
        cached: Any = None,
        call_id: str | None = None,
        duplicate_of: int | None = None,
        invalid_arguments: str | None = None,
        window: int = 12,
        budget: int | None = None,
        detail: Detail = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "action", action)
        setter(self, "reason", reason)
        setter(self, "tool", tool)
        setter(self, "key", key)
        setter(self, "repeats", repeats)
        setter(self, "step", step)
        setter(self, "cached", cached)
        setter(self, "call_id", call_id)
        setter(self, "duplicate_of", duplicate_of)
        setter(self, "invalid_arguments", invalid_arguments)
        setter(self, "_window", window)
        setter(self, "_budget", budget)
        setter(self, "_detail", detail)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Verdict is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Verdict is immutable; cannot delete {name!r}")

    @property
    def message(self) -> str | None:
        return verdict_message(
            self.action,
            self.reason,
            self.tool,
            self.repeats,
            self._window,
            self._budget,
            self._detail,
        )

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.action,
            self.reason,
            self.tool,
            self.key,
            self.repeats,
            self.step,
            self.call_id,
            self.duplicate_of,
            self.invalid_arguments,
            self._detail,
        )

    def __eq__(self, other: object) -> bool:
        """Equal when every field is, and ``cached`` holds the very same result."""
        if not isinstance(other, Verdict):
            return NotImplemented
        return self._fields() == other._fields() and self.cached is other.cached

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle and ``copy`` (a fleet checks in one worker and observes in another):
        rebuilt through ``__init__``, as ``__setattr__`` refuses pickle's default way."""
        return _verdict, (
            self.action,
            self.reason,
            self.tool,
            self.key,
            self.repeats,
            self.step,
            self.cached,
            self.call_id,
            self.duplicate_of,
            self.invalid_arguments,
            self._window,
            self._budget,
            self._detail,
        )

    def _replace(self, **changes: Any) -> Verdict:
        fields: dict[str, Any] = {
            "cached": self.cached,
            "call_id": self.call_id,
            "duplicate_of": self.duplicate_of,
            "invalid_arguments": self.invalid_arguments,
            "window": self._window,
            "budget": self._budget,
            "detail": self._detail,
        }
        fields.update(changes)
        return Verdict(
            self.action, self.reason, self.tool, self.key, self.repeats, self.step, **fields
        )

    def __repr__(self) -> str:
        extra = ""
        if self.reason is not None:
            extra += f", reason={self.reason!r}"
        if self.duplicate_of is not None:
            extra += f", duplicate_of={self.duplicate_of}"
        if self.cached is not None:
            extra += ", cached=..."
        return (
            f"Verdict(action={self.action!r}{extra}, tool={self.tool!r}, key={self.key!r}, "
            f"repeats={self.repeats}, step={self.step})"
        )


def _verdict(
    action: Action,
    reason: Reason | None,
    tool: str,
    key: str,
    repeats: int,
    step: int,
    cached: Any,
    call_id: str | None,
    duplicate_of: int | None,
    invalid_arguments: str | None,
    window: int,
    budget: int | None,
    detail: Detail,
) -> Verdict:
    """A verdict from the fields ``Verdict.__reduce__`` gives pickle."""
    return Verdict(
        action,
        reason,
        tool,
        key,
        repeats,
        step,
        cached=cached,
        call_id=call_id,
        duplicate_of=duplicate_of,
        invalid_arguments=invalid_arguments,
        window=window,
        budget=budget,
        detail=detail,
    )


class _Entry:
    """One call in the window: its key and tool, the step it was checked at, whether it was
    nudged (so never ran), whether it was an allowed call to a ``write`` tool (``writes``) or
    to one that may change the world (``changes``: a write, a shell, or a tool with no
    policy), and the user turn it was made in; once observed, its result's digest, whether it
    came back empty, whether it failed (then ``error`` is the text), and whether the failure
    was a transient one that a retry need not answer for (``retry``). ``question``: what it
    asks (``tripwire._question``), known once it came back empty or failed, or when it was
    checked while such a result was in the window; ``args``: its arguments (``text``: as JSON
    text), held (``held``) until its result is observed, so that the question can be told
    then, or until a snapshot is taken, which tells it."""

    __slots__ = (
        "args",
        "changes",
        "empty",
        "error",
        "failed",
        "held",
        "key",
        "nudged",
        "question",
        "result",
        "retry",
        "step",
        "text",
        "tool",
        "turn",
        "writes",
    )

    def __init__(
        self, key: str, tool: str, step: int, nudged: bool, kind: Policy | None, turn: int
    ) -> None:
        self.key = key
        self.tool = tool
        self.step = step
        self.nudged = nudged
        self.writes = not nudged and kind == "write"
        self.changes = not nudged and kind in (None, "write", "shell")
        self.turn = turn
        self.result: str | None = None
        self.empty = False
        self.failed = False
        self.error: str | None = None
        self.retry = False
        self.question: Question | None = None
        self.held = False
        self.args: Any = None
        self.text = False

    @property
    def changed(self) -> bool:
        """May have changed the world: a write that did not fail, or a shell or tool of
        unknown kind (a command that fails may still have written files: a pre-commit hook
        that reformats them and fails the commit)."""
        return self.changes and not (self.writes and self.failed)

    @property
    def marked(self) -> bool:
        """Came back empty, or failed for good: what the rules over varied arguments read,
        and why later calls' questions are told while it is in the window."""
        return self.empty or (self.failed and not self.retry)


class _Remembered:
    """The verdict given to a call id, the key of the call it was given to, and whether the
    call's result has been observed since (then the id is no longer awaiting a redelivery)."""

    __slots__ = ("answered", "key", "verdict")

    def __init__(self, key: str, verdict: Verdict) -> None:
        self.key = key
        self.verdict = verdict
        self.answered = False


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
        infer = True if infer is None else infer
        if not isinstance(infer, bool):
            raise TypeError(f"infer must be a bool, not {type(infer).__name__}")
        self._infer = infer
        self._definitions = check_definitions(definitions)
        self._inferred: dict[str, ToolPolicy | None] = {}
        # Re-entrant: allocating a verdict can start a garbage collection whose callbacks may
        # look at this guard from the same thread (a Python lock, unlike the native one, lets
        # other threads run while it waits, so threads cannot deadlock on it). A callback
        # that would change the run while a change is half made is refused (``_locked``).
        self._lock = threading.RLock()
        # A change to the run is under way (in the thread that holds the lock).
        self._busy = False
        # Objects the state lets go of while the lock is held. Dropping one can run Python
        # code (a finaliser) that uses this guard again, so they are dropped after release.
        self._released: list[Any] = []
        # The configuration as a snapshot writes it, made when first asked for.
        self._config: bytes | None = None
        self._clear()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, for a change to the run (or a read of all of it, a snapshot). Python
        code can run in the middle of one in the same thread (a signal handler, a gc
        callback, a finaliser: between any two bytecodes), and the RLock lets it in: a
        change it made there would interleave with the half-made one (a step handed out
        twice, the window changed under an iteration). So it is refused, with nothing
        changed; the native guard, which runs no Python code while locked, never meets it.
        Reading (``keys``, ``steps``, ``stopped``, ``policy_of``) is always allowed."""
        with self._lock:
            if self._busy:
                raise RuntimeError(REENTERED)
            self._busy = True
            try:
                yield
            finally:
                self._busy = False
            released, self._released = self._released, []
        del released

    def _clear(self) -> None:
        self._window: deque[_Entry] = deque(maxlen=self._window_size)
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
        self._by_call_id: OrderedDict[str, _Remembered] = OrderedDict()
        self._cache: OrderedDict[str, Any] = OrderedDict()

    # -- policies -------------------------------------------------------------------------

    def _policy(self, name: str) -> ToolPolicy | None:
        declared = self._tools.get(name)
        if declared is not None or not self._infer:
            return declared
        if name in self._inferred:
            return self._inferred[name]
        policy = infer_policy(name, self._definitions)
        if len(self._inferred) < INFERRED_TOOLS:
            self._inferred[name] = policy
        return policy

    def policy_of(self, name: str, /) -> tuple[Policy | None, str | None]:
        """The policy the guard uses for a tool, and where it comes from: ``"declared"``
        (``tools=``), ``"definition"`` (its annotations in ``definitions=``), ``"name"`` (a
        well-known harness's tool, or its name's verb); ``(None, None)``: no policy, a tool of
        unknown kind."""
        if not isinstance(name, str):
            raise TypeError(f"tool name must be a str, not {type(name).__name__}")
        with self._lock:  # a read (an inferred policy is remembered, atomically)
            policy = self._policy(_exact(name))
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
        name = _exact(check_name(name))
        with self._lock:  # a read (an inferred policy is remembered, atomically)
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
        call_id = _check_call_id(call_id)
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
        call_id = _check_call_id(call_id)
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
            name, args, call_id = _unpack_call(index, call)
            call_id = _check_call_id(call_id)
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
        """A retried delivery: the same call id *and* the same call as one checked before,
        whose result has not been observed yet. Providers reuse ids across turns, for other
        calls and for the same call asked again after its answer: both are new calls."""
        if call_id is None:
            return False
        remembered = self._by_call_id.get(call_id)
        return remembered is not None and remembered.key == key and not remembered.answered

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
            return self._by_call_id[call_id].verdict
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
                self._released.append(self._cache)
                self._cache = OrderedDict()
            if kind == "poll":
                self._count(self._polls, key, min(self._polls.get(key, 0) + 1, MAX_U32))
        verdict = Verdict(action, reason, name, key, repeats, step, cached=cached, **extra)
        self._steps = step
        if action == "stop":
            self._stopped = verdict._replace(call_id=None)
        else:
            entry = _Entry(key, name, step, action == "nudge", kind, self._turn)
            entry.question = question
            if action == "allow" and question is None:
                # Held until the result is observed: its question is told if it comes back
                # empty or failed. A nudged call never runs, so nothing of it is observed.
                entry.held, entry.args, entry.text = True, args, text
            if len(self._window) == self._window.maxlen:
                self._released.append(self._window[0])
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
            self._released.append(counts.popitem(last=False))

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

    def _tail(self, question: Question | None, fits: Any) -> list[_Entry]:
        """The calls at the end of the window, newest first, back to the last user message,
        that ``fits`` or were nudged (so ran no better), each asking the same question as this
        call (``question``) or as a later call of the run (``tripwire._question``)."""
        run: list[_Entry] = []
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
    def _run_counts(run: list[_Entry]) -> tuple[int, AfterNudge]:
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
        self._released.append(self._by_call_id.pop(call_id, None))
        remembered = _Remembered(key, verdict)
        # A nudge is its call's answer: the harness gave the model the guard's message as
        # the call's result. The same call asked again under the same id is the model
        # repeating itself, and is counted: ids are a retry signal, never a reason to stop
        # counting (a model that re-issued a nudged call under its id was never stopped).
        remembered.answered = verdict.action == "nudge"
        self._by_call_id[call_id] = remembered
        if len(self._by_call_id) > CALL_ID_MEMORY:
            self._released.append(self._by_call_id.popitem(last=False))

    # -- results --------------------------------------------------------------------------

    def keep(self, verdict: Verdict, result: Any, /) -> None:
        """Keeps the result of an allowed call to a tool declared ``read`` in the run's read
        cache, so a later allowed check of the same call carries it in ``Verdict.cached``
        (to serve instead of running the tool). Other tools (inferred reads too: whether a
        read outlives the run is for its author to say): nothing."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"keep() takes a Verdict, not {type(verdict).__name__}")
        policy = self._tools.get(verdict.tool)
        if verdict.action != "allow" or result is None or policy is None or policy.kind != "read":
            return
        with self._locked():
            self._released.append(self._cache.get(verdict.key))
            self._cache[verdict.key] = result
            self._cache.move_to_end(verdict.key)
            if len(self._cache) > CACHE_ENTRIES:
                self._released.append(self._cache.popitem(last=False))

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
        if not isinstance(verdict, Verdict):
            raise TypeError(f"observe() takes a Verdict, not {type(verdict).__name__}")
        if transient is not None and not isinstance(transient, bool):
            raise TypeError(f"transient must be a bool or None, not {type(transient).__name__}")
        if verdict.action != "allow":
            return
        with self._lock:  # a read (an inferred policy is remembered, atomically)
            policy = self._policy(verdict.tool)
        digest, empty, failed, is_transient, text = describe_result(
            result, error, transient, policy
        )
        held: tuple[Any, bool] | None = None
        with self._locked():
            if verdict.call_id is not None:
                remembered = self._by_call_id.get(verdict.call_id)
                if remembered is not None and remembered.verdict.step == verdict.step:
                    remembered.answered = True
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
            self._released.append(entry.args)
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

    def _entry_of(self, verdict: Verdict) -> _Entry | None:
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
            self._released.append((self._stopped, self._by_call_id, self._cache, self._window))
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
        state_only = False if state_only is None else state_only
        if not isinstance(state_only, bool):
            raise TypeError(f"state_only must be a bool, not {type(state_only).__name__}")
        config = self._config_bytes()
        self._tell_questions()
        with self._locked():
            state = self._write_state()
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
        guard._restore(guard._read_state(reader))
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
        self._restore(self._read_state(reader))

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
            self._released.append(taken)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return type(self).from_snapshot, (self.snapshot(),)

    def _write_state(self) -> bytes:
        out = Writer()
        out.varint(self._steps)
        out.varint(self._turn)
        out.varint(len(self._window))
        for entry in self._window:
            out.key(entry.key)
            out.text(entry.tool)
            out.varint(entry.step)
            out.varint(entry.turn)
            flags = (
                NUDGED * entry.nudged
                | WRITES * entry.writes
                | CHANGES * entry.changes
                | HAS_RESULT * (entry.result is not None)
                | EMPTY * entry.empty
                | FAILED * entry.failed
                | RETRY * entry.retry
                | QUESTION * (entry.question is not None)
            )
            out.u8(flags)
            if entry.result is not None:
                out.key(entry.result)
            if entry.failed:
                out.text(entry.error or "")
            if entry.question is not None:
                for digest in entry.question:
                    out.key(digest)
        out.u8(self._stopped is not None)
        if self._stopped is not None:
            _write_verdict(out, self._stopped)
        out.varint(len(self._by_call_id))
        for call_id, remembered in self._by_call_id.items():
            out.text(call_id)
            out.key(remembered.key)
            out.u8(remembered.answered)
            _write_verdict(out, remembered.verdict)
        for counts in (self._polls, self._retries):
            out.varint(len(counts))
            for key, count in counts.items():
                out.key(key)
                out.varint(count)
        cached = [(key, json_text(value)) for key, value in self._cache.items()]
        kept = [(key, text) for key, text in cached if text is not None]
        out.varint(len(kept))
        for key, text in kept:
            out.key(key)
            out.raw(text)
        return bytes(out.out)

    def _read_state(self, reader: Reader) -> tuple[Any, ...]:
        """A snapshot's run state, validated (its bounds and its consistency: the invariants
        in ``tripwire._snapshot``), without changing anything."""
        steps = reader.varint()
        turn = reader.varint(MAX_U32)
        window: deque[_Entry] = deque(maxlen=self._window_size)
        errors: dict[str, str] = {}
        previous_step, previous_turn = 0, 0
        for _ in range(reader.count(self._window_size)):
            entry = _Entry(reader.key(), reader.text(), reader.varint(), False, "read", 0)
            entry.turn = reader.varint(MAX_U32)
            if not previous_step < entry.step <= steps:
                raise _inconsistent("an entry's step is out of order or past the steps")
            if not previous_turn <= entry.turn <= turn:
                raise _inconsistent("an entry's turn is out of order or past the turn")
            previous_step, previous_turn = entry.step, entry.turn
            flags = reader.u8()
            _check_flags(flags)
            entry.nudged = bool(flags & NUDGED)
            entry.writes = bool(flags & WRITES)
            entry.changes = bool(flags & CHANGES)
            entry.empty = bool(flags & EMPTY)
            entry.failed = bool(flags & FAILED)
            entry.retry = bool(flags & RETRY)
            if flags & HAS_RESULT:
                entry.result = reader.key()
            if entry.failed:
                assert entry.result is not None  # _check_flags
                entry.error = reader.text()
                if errors.setdefault(entry.result, entry.error) != entry.error:
                    raise _inconsistent("one digest, two errors")
                if entry.result != digest("error", entry.error):
                    raise _inconsistent("an error text is not its digest's")
            if flags & QUESTION:
                entry.question = (reader.key(), reader.key())
            window.append(entry)
        stopped = self._read_verdict(reader) if reader.flag() else None
        if stopped is not None and (stopped.action != "stop" or stopped.step > steps):
            raise _inconsistent("the stop is not a stop of this run")
        by_call_id: OrderedDict[str, _Remembered] = OrderedDict()
        for _ in range(reader.count(CALL_ID_MEMORY)):
            call_id = reader.text()
            key = reader.key()
            answered = reader.flag()
            remembered = _Remembered(key, self._read_verdict(reader))
            remembered.answered = answered
            if call_id in by_call_id:
                raise _inconsistent("a call id twice")
            if not 1 <= remembered.verdict.step <= steps:
                raise _inconsistent("a call id's verdict is past the steps")
            by_call_id[call_id] = remembered
        polls = _read_counts(reader, MAX_U32)
        retries = _read_counts(reader, TRANSIENT_RETRIES)
        cache: OrderedDict[str, Any] = OrderedDict()
        for _ in range(reader.count(CACHE_ENTRIES)):
            key = reader.key()
            if key in cache:
                raise _inconsistent("a cached key twice")
            cache[key] = json_value(reader.raw())
        if reader.pos != len(reader.data):
            raise _inconsistent("bytes after the state")
        return window, polls, retries, steps, turn, stopped, by_call_id, cache

    def _restore(self, state: tuple[Any, ...]) -> None:
        with self._locked():
            self._released.append((self._stopped, self._by_call_id, self._cache, self._window))
            (
                self._window,
                self._polls,
                self._retries,
                self._steps,
                self._turn,
                self._stopped,
                self._by_call_id,
                self._cache,
            ) = state
            self._update_wants()

    def _read_verdict(self, reader: Reader) -> Verdict:
        head = reader.u8()
        if head & 3 == 3:
            raise SnapshotError("not a tripwire guard snapshot: an unknown action")
        action: Action = ACTIONS[head & 3]
        reason: Reason | None = REASONS[head >> 2 & 3]
        tool, key = reader.text(), reader.key()
        repeats, step = reader.varint(MAX_U32), reader.varint()
        cached = json_value(reader.raw()) if head & H_CACHED else None
        call_id = reader.text() if head & H_CALL_ID else None
        duplicate_of = reader.varint(MAX_U32) if head & H_DUPLICATE else None
        invalid = reader.text() if head & H_INVALID else None
        return Verdict(
            action,
            reason,
            tool,
            key,
            repeats,
            step,
            cached=cached,
            call_id=call_id,
            duplicate_of=duplicate_of,
            invalid_arguments=invalid,
            window=self._window_size,
            budget=self._max_steps,
            detail=_read_detail(reader, nested=False),
        )

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


def _write_verdict(out: Writer, verdict: Verdict) -> None:
    cached = None if verdict.cached is None else json_text(verdict.cached)
    head = (
        ACTIONS.index(verdict.action)
        | REASONS.index(verdict.reason) << 2
        | H_CACHED * (cached is not None)
        | H_CALL_ID * (verdict.call_id is not None)
        | H_DUPLICATE * (verdict.duplicate_of is not None)
        | H_INVALID * (verdict.invalid_arguments is not None)
    )
    out.u8(head)
    out.text(verdict.tool)
    out.key(verdict.key)
    out.varint(verdict.repeats)
    out.varint(verdict.step)
    if cached is not None:
        out.raw(cached)
    if verdict.call_id is not None:
        out.text(verdict.call_id)
    if verdict.duplicate_of is not None:
        out.varint(verdict.duplicate_of)
    if verdict.invalid_arguments is not None:
        out.text(verdict.invalid_arguments)
    _write_detail(out, verdict._detail)


# Detail tags, by the first item of a Detail tuple (None: 0).
_DETAIL_TAGS: Final = {"unchanged": 1, "failed": 2, "errors": 3, "empty": 4, "cycle": 5}


def _write_detail(out: Writer, detail: Detail) -> None:
    if detail is None:
        out.u8(0)
        return
    kind = detail[0]
    if kind == "poll":
        out.u8(6)
        out.varint(detail[1])
    elif kind == "after":
        out.u8(7)
        out.text(detail[1])
        out.varint(detail[2])
        _write_detail(out, detail[3])
    else:
        out.u8(_DETAIL_TAGS[kind])
        if kind == "failed":
            out.text(detail[1])
            out.varint(detail[2])
        elif kind == "errors":
            out.varint(detail[1])
            out.text(detail[2])
        elif kind == "empty":
            out.varint(detail[1])
            _write_names(out, detail[2])
        elif kind == "cycle":
            _write_names(out, detail[1])
            out.u8(detail[2])


def _write_names(out: Writer, names: tuple[str, ...]) -> None:
    out.varint(len(names))
    for name in names:
        out.text(name)


def _read_names(reader: Reader) -> tuple[str, ...]:
    # Each name takes at least a byte: a count beyond what is left is corrupt.
    return tuple(reader.text() for _ in range(reader.count(len(reader.data) - reader.pos)))


def _read_detail(reader: Reader, nested: bool) -> Detail:
    tag = reader.u8()
    if tag == 0:
        return None
    if tag == 1:
        return ("unchanged",)
    if tag == 2:
        return ("failed", reader.text(), reader.varint(MAX_U32))
    if tag == 3:
        return ("errors", reader.varint(MAX_U32), reader.text())
    if tag == 4:
        return ("empty", reader.varint(MAX_U32), _read_names(reader))
    if tag == 5:
        return ("cycle", _read_names(reader), reader.flag())
    if tag == 6:
        return ("poll", reader.varint(MAX_U32))
    if tag == 7 and not nested:
        return ("after", reader.text(), reader.varint(MAX_U32), _read_detail(reader, True))
    raise SnapshotError(f"not a tripwire guard snapshot: detail tag {tag}")


def _read_counts(reader: Reader, limit: int) -> OrderedDict[str, int]:
    counts: OrderedDict[str, int] = OrderedDict()
    for _ in range(reader.count(COUNTED_CALLS)):
        key = reader.key()
        if key in counts:
            raise _inconsistent("a call counted twice")
        count = reader.varint(limit)
        if count == 0:
            raise _inconsistent("a call counted 0 times")
        counts[key] = count
    return counts


def _inconsistent(why: str) -> SnapshotError:
    return SnapshotError(f"not a tripwire guard snapshot: {why}")


def _check_flags(flags: int) -> None:
    """An entry's flags, as the guard sets them (the invariants in ``tripwire._snapshot``)."""
    if flags & ~(NUDGED | WRITES | CHANGES | HAS_RESULT | EMPTY | FAILED | RETRY | QUESTION):
        raise _inconsistent(f"entry flags {flags:#x}")
    observed = EMPTY | FAILED | RETRY | HAS_RESULT
    if flags & NUDGED and flags & (WRITES | CHANGES | observed):
        raise _inconsistent(f"a nudged call that ran (entry flags {flags:#x})")
    if flags & WRITES and not flags & CHANGES:
        raise _inconsistent(f"a write that changes nothing (entry flags {flags:#x})")
    if flags & (EMPTY | FAILED) and not flags & HAS_RESULT:
        raise _inconsistent(f"a result without digest (entry flags {flags:#x})")
    if flags & EMPTY and flags & FAILED:
        raise _inconsistent(f"a failure that came back empty (entry flags {flags:#x})")
    if flags & RETRY and not flags & FAILED:
        raise _inconsistent(f"a retry of a call that did not fail (entry flags {flags:#x})")
    marked = flags & EMPTY or flags & (FAILED | RETRY) == FAILED
    if flags & QUESTION and flags & HAS_RESULT and not marked:
        raise _inconsistent(f"a question kept for a plain result (entry flags {flags:#x})")


def _corrected(entry: _Entry, question: Question | None) -> bool:
    """A failed call whose raw arguments differ from this call's (``question``): the tool
    saw a difference the key does not, so this call is a correction, not a repeat."""
    return (
        entry.failed
        and question is not None
        and entry.question is not None
        and entry.question[0] != question[0]
    )


def _check_call_id(call_id: object) -> str | None:
    if call_id is not None and not isinstance(call_id, str):
        raise TypeError(f"call_id must be a str or None, not {type(call_id).__name__}")
    return None if call_id is None else _exact(call_id)


def _exact(text: str) -> str:
    """The characters of a str, as an exact str: the guard hashes and compares tool names
    and call ids, and formats them into messages, and a str subclass could override each of
    those (and raise, or lie). ``str.__str__`` copies without calling any override."""
    return text if type(text) is str else str.__str__(text)


def _unpack_call(index: int, call: Sequence[Any]) -> tuple[str, Any, str | None]:
    if isinstance(call, (str, bytes)) or not isinstance(call, Sequence) or len(call) not in (2, 3):
        raise TypeError(
            f"call {index} of the turn must be (name, args) or (name, args, call_id), "
            f"not {type(call).__name__}"
        )
    call_id = call[2] if len(call) == 3 else None
    return call[0], call[1], call_id
