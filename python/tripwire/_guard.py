"""The guard in pure Python: the reference for the native ``Guard`` (DESIGN.md §2).

Per check: count the call key's occurrences in a window of recent calls, this one included
(``repeats``). ``repeats >= stop_at``: stop with ``loop_detected``, key not appended.
``repeats >= nudge_at``: nudge (do not run it; tell the model it repeated itself), key
appended. Otherwise allow, key appended. Why a window of 12 and why nudge before stop: the
seed document.

Results, when the harness reports them with ``observe(verdict, result)``, let the guard see
progress, which the hash alone cannot (the seed's last section):

- Repeats are counted only back to the last change: a repeat whose result changed since the
  occurrence before it, or that follows an allowed call to a ``write`` tool, is progress, not
  a loop. An unchanged one is a loop, and the messages say so.
- A tool declared ``"poll"`` may repeat the same call while waiting, up to ``max_polls``
  times a run (default 20); then it stops with ``loop_detected``.
- Oscillation: when the last ``2p`` calls are two laps of one cycle of ``p`` calls (at least
  two different ones) and this call would start a third lap, the run stops with
  ``no_progress`` (edit, undo, edit; A-B-A-B). The laps must have the same results; when the
  cycle has writes in it, the same results of its writes suffice (the writes put the world
  back; what the reads in between print, test timings say, is noise).
- Fruitless rewording: calls in a row that all came back empty (``None``, ``""``, ``[]``,
  ``{}``, or a value the tool's policy lists as empty), this call's tool among them: after
  ``nudge_at + 1`` of them (nudged calls included) the next is nudged, after ``stop_at + 1``
  it stops with ``no_progress``. A tool whose empty results are answers (an error-log check
  that finds nothing) declares ``"empty": False``.

Without ``observe``, verdicts are exactly the hash-only ones.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, Literal

from tripwire._keys import UNPARSABLE, call_key, call_key_json, invalid_json, volatile_set

Action = Literal["allow", "nudge", "stop"]
Reason = Literal["loop_detected", "budget_exhausted", "no_progress"]
Policy = Literal["read", "write", "volatile", "poll"]

POLICIES: Final = ("read", "write", "volatile", "poll")
# How many times a run may repeat one call to a "poll" tool, unless its policy says.
DEFAULT_MAX_POLLS: Final = 20

# How many recent call ids a guard remembers, so a retried delivery gets its first answer.
CALL_ID_MEMORY: Final = 128
# How many read results a guard keeps for ``Verdict.cached``; the oldest go first.
CACHE_ENTRIES: Final = 1024

_ORDINALS: Final = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def _ordinal(n: int) -> str:
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


# What a verdict's message is about, beyond its action and reason:
#   None                 plain (no results observed)
#   ("unchanged",)       repeats whose results were observed and did not change
#   ("empty", n, tools)  n calls in a row to these tools came back empty
#   ("cycle", tools, w)  the last calls went twice round a cycle of these tools (w: of writes
#                        and reads, where only the writes' results had to be the same)
#   ("poll", limit)      a poll tool reached its limit
Detail = tuple[Any, ...] | None


def _empty_calls(detail: tuple[Any, ...]) -> str:
    count, tools = detail[1], detail[2]
    if len(tools) == 1:
        return f"{count} calls to {tools[0]} in a row"
    return f"{count} calls in a row to {', '.join(tools)}"


def nudge_message(tool: str, repeats: int, detail: Detail = None) -> str:
    if detail is not None and detail[0] == "empty":
        return (
            f"{_empty_calls(detail)} returned nothing. Do not reword the same request again: "
            "try a different tool or approach, or report what you have so far."
        )
    unchanged = ", and the result has not changed" if detail == ("unchanged",) else ""
    return (
        f"This is the {_ordinal(repeats)} identical call to {tool} with the same "
        f"arguments{unchanged}. Do not repeat it. Either use different arguments, use a "
        "different tool, or report what you have so far."
    )


def stop_message(
    reason: Reason,
    tool: str,
    repeats: int,
    window: int,
    budget: int | None,
    detail: Detail = None,
) -> str:
    if reason == "budget_exhausted":
        return f"Stopped (budget_exhausted): the budget of {budget} tool calls is spent."
    if reason == "no_progress":
        assert detail is not None
        if detail[0] == "empty":
            return f"Stopped (no_progress): {_empty_calls(detail)} returned nothing."
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
    same = " and the same result" if detail == ("unchanged",) else ""
    return (
        f"Stopped (loop_detected): {tool} was called {repeats} times with the same "
        f"arguments{same} within the last {window} calls."
    )


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
        if self.action == "nudge":
            return nudge_message(self.tool, self.repeats, self._detail)
        if self.action == "stop" and self.reason is not None:
            return stop_message(
                self.reason, self.tool, self.repeats, self._window, self._budget, self._detail
            )
        return None

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


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


class ToolPolicy:
    """A tool's policy: its kind, for polls the most times one call may repeat in a run, and
    what counts as an empty result: nothing at all (``empty_answers``: empty results are
    answers for this tool), or the built-in empties plus the digests of listed values."""

    __slots__ = ("empty_answers", "empty_digests", "kind", "max_polls")

    def __init__(
        self,
        kind: Policy,
        max_polls: int = DEFAULT_MAX_POLLS,
        empty_digests: frozenset[str] = frozenset(),
        empty_answers: bool = False,
    ) -> None:
        self.kind = kind
        self.max_polls = max_polls
        self.empty_digests = empty_digests
        self.empty_answers = empty_answers


def _check_tool_policy(tool: str, spec: object) -> tuple[ToolPolicy, object]:
    """The policy, and its form for ``repr``."""
    if not isinstance(spec, Mapping):
        return ToolPolicy(_check_policy_name(tool, spec)), spec
    unknown = sorted(repr(k) for k in spec if k not in ("policy", "max_polls", "empty"))
    if unknown:
        raise ValueError(
            f"unknown setting {', '.join(unknown)} in the policy for tool {tool!r}: "
            "expected 'policy', 'max_polls' or 'empty'"
        )
    kind = _check_policy_name(tool, spec.get("policy"))
    shown: dict[str, object] = {"policy": kind}
    policy = ToolPolicy(kind)
    if "max_polls" in spec:
        if kind != "poll":
            raise ValueError(f"max_polls is for 'poll' tools, not {kind!r} ({tool!r})")
        policy.max_polls = _check_int("max_polls", spec["max_polls"], 1)
        shown["max_polls"] = policy.max_polls
    if "empty" in spec:
        empty = spec["empty"]
        if empty is False:
            policy.empty_answers = True
            shown["empty"] = False
        elif isinstance(empty, (list, tuple)):
            policy.empty_digests = frozenset(result_digest(result_value(v)) for v in empty)
            shown["empty"] = list(empty)
        else:
            raise TypeError(
                f"empty for tool {tool!r} must be a list of results that count as empty, "
                f"or False, not {type(empty).__name__}"
            )
    return policy, shown


def _check_policy_name(tool: str, policy: object) -> Policy:
    # Spelled out, so that the type checker knows which Literal comes back.
    if policy == "read" or policy == "write" or policy == "volatile" or policy == "poll":
        return policy
    raise ValueError(
        f"unknown policy {policy!r} for tool {tool!r}: expected one of "
        + ", ".join(repr(p) for p in POLICIES)
    )


def _check_tools(tools: Mapping[str, object] | None) -> tuple[dict[str, ToolPolicy], str]:
    """The policies by tool name, and their ``repr``."""
    if tools is None:
        return {}, "{}"
    if not isinstance(tools, Mapping):
        kind = type(tools).__name__
        raise TypeError(f"tools must be a mapping of tool name to policy, not {kind}")
    checked: dict[str, ToolPolicy] = {}
    shown: dict[str, object] = {}
    for tool, spec in tools.items():
        if not isinstance(tool, str):
            raise TypeError(f"tool names in tools must be str, not {type(tool).__name__}")
        checked[tool], shown[tool] = _check_tool_policy(tool, spec)
    return checked, repr(shown)


def result_value(result: Any) -> Any:
    """What of a tool's result the guard compares: plain values as they are, bytes as text,
    SDK objects (pydantic models: OpenAI, Anthropic, MCP results) as their JSON form, and
    anything else as its ``str``."""
    if result is None or isinstance(result, (str, int, float, bool, list, dict, tuple)):
        return result
    if isinstance(result, (bytes, bytearray)):
        return bytes(result).decode("utf-8", "replace")
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except (TypeError, ValueError):
            pass
    return str(result)


def result_digest(value: Any) -> str:
    """The key of a result value; one that cannot be keyed is keyed by its ``repr``."""
    try:
        return call_key("result", value)
    except (TypeError, ValueError, RecursionError):
        return call_key("result", repr(value))


def is_empty_result(value: Any, digest: str, policy: ToolPolicy | None) -> bool:
    """``None``, an empty or blank text, an empty list, dict or tuple, or a value the tool's
    policy lists as empty; never, for a tool whose empty results are answers."""
    if policy is not None:
        if policy.empty_answers:
            return False
        if digest in policy.empty_digests:
            return True
    if value is None:
        return True
    if isinstance(value, str):
        return not value.split()
    if isinstance(value, (list, dict, tuple)):
        return len(value) == 0
    return False


class _Entry:
    """One call in the window: its key and tool, the step it was checked at, whether it was
    nudged (so never ran), whether it was an allowed call to a ``write`` tool, and once
    observed, its result's digest and whether it was empty."""

    __slots__ = ("empty", "key", "nudged", "result", "step", "tool", "writes")

    def __init__(self, key: str, tool: str, step: int, nudged: bool, writes: bool) -> None:
        self.key = key
        self.tool = tool
        self.step = step
        self.nudged = nudged
        self.writes = writes
        self.result: str | None = None
        self.empty = False


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
    ) -> None:
        # None means the default, as for volatile_keys and max_steps.
        window = 12 if window is None else window
        nudge_at = 2 if nudge_at is None else nudge_at
        stop_at = 3 if stop_at is None else stop_at
        self._window_size = _check_int("window", window, 1)
        self._nudge_at = _check_int("nudge_at", nudge_at, 2)
        self._stop_at = _check_int("stop_at", stop_at, 2)
        if stop_at < nudge_at:
            raise ValueError(f"stop_at ({stop_at}) must not be less than nudge_at ({nudge_at})")
        if stop_at > window + 1:
            raise ValueError(
                f"stop_at ({stop_at}) can never be reached with window={window}: "
                f"a window of {window} holds at most {window + 1} occurrences, this one included"
            )
        self._max_steps = None if max_steps is None else _check_int("max_steps", max_steps, 1)
        self._volatile = volatile_set(volatile_keys)
        self._tools, self._tools_repr = _check_tools(tools)
        # Re-entrant: allocating a verdict can start a garbage collection whose callbacks may
        # use this guard from the same thread (a Python lock, unlike the native one, lets
        # other threads run while it waits, so threads cannot deadlock on it).
        self._lock = threading.RLock()
        # Objects the state lets go of while the lock is held. Dropping one can run Python
        # code (a finaliser) that uses this guard again, so they are dropped after release.
        self._released: list[Any] = []
        self._clear()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            yield
            released, self._released = self._released, []
        del released

    def _clear(self) -> None:
        self._window: deque[_Entry] = deque(maxlen=self._window_size)
        # Checks of each poll tool's call so far this run (not only in the window).
        self._polls: dict[str, int] = {}
        self._steps = 0
        self._stopped: Verdict | None = None
        self._by_call_id: OrderedDict[str, Verdict] = OrderedDict()
        self._cache: OrderedDict[str, Any] = OrderedDict()

    # -- the check ------------------------------------------------------------------------

    def check(self, name: str, args: Any, /, *, call_id: str | None = None) -> Verdict:
        """The verdict on one call, before it is dispatched."""
        call_id = _check_call_id(call_id)
        key = call_key(name, args, volatile_keys=self._volatile)
        with self._locked():
            return self._decide(_exact(name), key, call_id)

    def check_json(
        self, name: str, text: str | bytes | bytearray, /, *, call_id: str | None = None
    ) -> Verdict:
        """``check`` for arguments given as JSON text (OpenAI-style ``arguments``).

        Text that is not valid JSON, nested too deep or too big to parse does not raise: the
        raw text, whitespace collapsed, keys the call (a model that keeps sending the same
        broken arguments is looping too), and ``Verdict.invalid_arguments`` says why."""
        call_id = _check_call_id(call_id)
        invalid: str | None = None
        try:
            key = call_key_json(name, text, volatile_keys=self._volatile)
        except UNPARSABLE as exc:
            key, invalid = invalid_json(name, text, exc)
        with self._locked():
            return self._decide(_exact(name), key, call_id, invalid)

    def check_turn(self, calls: Iterable[Sequence[Any]], /) -> list[Verdict]:
        """Verdicts for all tool calls of one model response, in order.

        Each call is ``(name, args)`` or ``(name, args, call_id)``. Identical calls within
        the turn are one action: counted once, and each later copy's verdict is the first
        copy's with ``duplicate_of`` set to its index, so the harness can give them the same
        result. Keys are computed first: if any call is bad, nothing is counted.
        """
        prepared: list[tuple[str, str, str | None]] = []
        for index, call in enumerate(calls):
            name, args, call_id = _unpack_call(index, call)
            call_id = _check_call_id(call_id)
            key = call_key(name, args, volatile_keys=self._volatile)
            prepared.append((_exact(name), key, call_id))
        verdicts: list[Verdict] = []
        first_of_key: dict[str, int] = {}
        with self._locked():
            for index, (name, key, call_id) in enumerate(prepared):
                earlier = first_of_key.get(key)
                if earlier is None or (call_id is not None and call_id in self._by_call_id):
                    first_of_key.setdefault(key, index)
                    verdicts.append(self._decide(name, key, call_id))
                else:
                    copy = verdicts[earlier]._replace(duplicate_of=earlier, call_id=call_id)
                    if call_id is not None:
                        self._remember_call_id(call_id, copy)
                    verdicts.append(copy)
        return verdicts

    def _decide(
        self, name: str, key: str, call_id: str | None, invalid_arguments: str | None = None
    ) -> Verdict:
        if call_id is not None:
            remembered = self._by_call_id.get(call_id)
            if remembered is not None:
                return remembered
        if self._stopped is not None:
            return self._stopped
        step = self._steps + 1
        policy = self._tools.get(name)
        kind = policy.kind if policy is not None else None
        action, reason, repeats, detail = self._judge(name, key, policy)
        extra: dict[str, Any] = {
            "call_id": call_id,
            "invalid_arguments": invalid_arguments,
            "window": self._window_size,
            "budget": self._max_steps,
            "detail": detail,
        }
        cached = None
        if action == "allow":
            cached = self._cache.get(key) if kind == "read" else None
            # A call that may change the world makes every cached read stale.
            if kind in (None, "write") and self._cache:
                self._released.append(self._cache)
                self._cache = OrderedDict()
            if kind == "poll":
                self._polls[key] = self._polls.get(key, 0) + 1
        verdict = Verdict(action, reason, name, key, repeats, step, cached=cached, **extra)
        self._steps = step
        if action == "stop":
            self._stopped = verdict._replace(call_id=None)
        else:
            writes = action == "allow" and kind == "write"
            self._window.append(_Entry(key, name, step, action == "nudge", writes))
        if call_id is not None:
            self._remember_call_id(call_id, verdict)
        return verdict

    def _judge(
        self, name: str, key: str, policy: ToolPolicy | None
    ) -> tuple[Action, Reason | None, int, Detail]:
        """Action, reason, repeats and message detail for a call; changes nothing."""
        over_budget = self._max_steps is not None and self._steps >= self._max_steps
        if policy is not None and policy.kind == "poll":
            polls = self._polls.get(key, 0) + 1
            if polls > policy.max_polls:
                return "stop", "loop_detected", polls, ("poll", policy.max_polls)
            if over_budget:
                return "stop", "budget_exhausted", polls, None
            return "allow", None, polls, None
        repeats, unchanged = self._unchanged_repeats(key)
        detail: Detail = ("unchanged",) if unchanged else None
        empty_run, empty_detail = self._empty_run(name)
        if repeats >= self._stop_at:
            return "stop", "loop_detected", repeats, detail
        cycle = self._cycle(key)
        if cycle is not None:
            return "stop", "no_progress", repeats, ("cycle", *cycle)
        if empty_run >= self._stop_at + 1:
            return "stop", "no_progress", repeats, empty_detail
        if over_budget:
            return "stop", "budget_exhausted", repeats, None
        if repeats >= self._nudge_at:
            return "nudge", None, repeats, detail
        if empty_run >= self._nudge_at + 1:
            return "nudge", None, repeats, empty_detail
        return "allow", None, repeats, None

    def _unchanged_repeats(self, key: str) -> tuple[int, bool]:
        """Occurrences of ``key`` in the window since the world last changed, this one
        included; and whether any of them had its result observed.

        Once results are observed, counting goes back only as far as the last change: an
        earlier occurrence with a different result, or an allowed call to a ``write`` tool in
        between (a re-read after a write is not a repeat). Tools with no policy do not count
        as writes here, or a tool that is called over and over could never be a loop."""
        earlier = [entry for entry in self._window if entry.key == key]
        observed = [entry.result for entry in earlier if entry.result is not None]
        if not observed:
            return len(earlier) + 1, False
        count = 0
        wrote = False
        for entry in reversed(self._window):
            if entry.key == key:
                if wrote or (entry.result is not None and entry.result != observed[-1]):
                    break
                count += 1
            wrote = wrote or entry.writes
        return count + 1, True

    def _empty_run(self, name: str) -> tuple[int, Detail]:
        """The calls at the end of the window that came back empty or were nudged (so ran
        no better), if at least one came back empty and ``name`` is among their tools; with
        the message detail: how many came back empty, and their tools in order."""
        run: list[_Entry] = []
        for entry in reversed(self._window):
            if not (entry.empty or entry.nudged):
                break
            run.append(entry)
        empties = sum(entry.empty for entry in run)
        # The tools that came back empty; a tool that was only nudged returned nothing at all.
        tools = tuple(dict.fromkeys(entry.tool for entry in reversed(run) if entry.empty))
        if empties == 0 or name not in tools:
            return 0, None
        return len(run), ("empty", empties, tools)

    def _cycle(self, key: str) -> tuple[tuple[str, ...], bool] | None:
        """The tools of a cycle the window went round twice, with the same results, that this
        call would start a third round of (the shortest such cycle); and whether it mixes
        writes and reads (then only the writes' results had to be the same)."""
        entries = list(self._window)
        n = len(entries)
        for period in range(2, n // 2 + 1):
            laps = entries[n - 2 * period :]
            if laps[0].key != key or any(entry.result is None for entry in laps):
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

    def _remember_call_id(self, call_id: str, verdict: Verdict) -> None:
        self._released.append(self._by_call_id.get(call_id))
        self._by_call_id[call_id] = verdict
        if len(self._by_call_id) > CALL_ID_MEMORY:
            self._released.append(self._by_call_id.popitem(last=False))

    # -- results --------------------------------------------------------------------------

    def record(self, verdict: Verdict, result: Any, /) -> None:
        """Remembers the result of an allowed call to a ``read`` tool, so a later allowed
        check of the same call carries it in ``Verdict.cached``. Other tools: nothing."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"record() takes a Verdict, not {type(verdict).__name__}")
        policy = self._tools.get(verdict.tool)
        if verdict.action != "allow" or result is None or policy is None or policy.kind != "read":
            return
        with self._locked():
            self._released.append(self._cache.get(verdict.key))
            self._cache[verdict.key] = result
            self._cache.move_to_end(verdict.key)
            if len(self._cache) > CACHE_ENTRIES:
                self._released.append(self._cache.popitem(last=False))

    def observe(self, verdict: Verdict, result: Any, /) -> None:
        """Tells the guard what an allowed call returned, so later checks can tell progress
        (a changed result) from a loop (the same result again), and see cycles and runs of
        empty results. Verdicts that were not allowed, or whose call has left the window,
        are ignored."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"observe() takes a Verdict, not {type(verdict).__name__}")
        if verdict.action != "allow":
            return
        value = result_value(result)
        digest = result_digest(value)
        empty = is_empty_result(value, digest, self._tools.get(verdict.tool))
        with self._locked():
            for entry in reversed(self._window):
                if entry.step == verdict.step and entry.key == verdict.key:
                    entry.result, entry.empty = digest, empty
                    break

    # -- inspection -----------------------------------------------------------------------

    def reset(self) -> None:
        """Forgets the run: window, steps, stop, call ids and cached results."""
        with self._locked():
            self._released.append((self._stopped, self._by_call_id, self._cache, self._window))
            self._clear()

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
            f"tools={self._tools_repr}, steps={self._steps})"
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
