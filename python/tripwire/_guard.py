"""The guard in pure Python: the reference for the native ``Guard`` (DESIGN.md §2).

Per check: count the call key's occurrences in a window of recent keys, this one included
(``repeats``). ``repeats >= stop_at``: stop with ``loop_detected``, key not appended.
``repeats >= nudge_at``: nudge (do not run it; tell the model it repeated itself), key
appended. Otherwise allow, key appended. Why a window of 12 and why nudge before stop: the
seed document.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, Literal

from tripwire._keys import call_key, call_key_json, invalid_json_key, volatile_set

Action = Literal["allow", "nudge", "stop"]
Reason = Literal["loop_detected", "budget_exhausted"]
Policy = Literal["read", "write", "volatile"]

POLICIES: Final = ("read", "write", "volatile")

# How many recent call ids a guard remembers, so a retried delivery gets its first answer.
CALL_ID_MEMORY: Final = 128
# How many read results a guard keeps for ``Verdict.cached``; the oldest go first.
CACHE_ENTRIES: Final = 1024

_ORDINALS: Final = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def _ordinal(n: int) -> str:
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


def nudge_message(tool: str, repeats: int) -> str:
    return (
        f"This is the {_ordinal(repeats)} identical call to {tool} with the same arguments. "
        "Do not repeat it. Either use different arguments, use a different tool, "
        "or report what you have so far."
    )


def stop_message(reason: Reason, tool: str, repeats: int, window: int, budget: int | None) -> str:
    if reason == "loop_detected":
        return (
            f"Stopped (loop_detected): {tool} was called {repeats} times with the same "
            f"arguments within the last {window} calls."
        )
    return f"Stopped (budget_exhausted): the budget of {budget} tool calls is spent."


class Verdict:
    """What the guard says about one call. Immutable; ``message`` is built when read."""

    __slots__ = (
        "_budget",
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

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Verdict is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Verdict is immutable; cannot delete {name!r}")

    @property
    def message(self) -> str | None:
        if self.action == "nudge":
            return nudge_message(self.tool, self.repeats)
        if self.action == "stop" and self.reason is not None:
            return stop_message(self.reason, self.tool, self.repeats, self._window, self._budget)
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


def _check_tools(tools: Mapping[str, str] | None) -> dict[str, Policy]:
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        kind = type(tools).__name__
        raise TypeError(f"tools must be a mapping of tool name to policy, not {kind}")
    checked: dict[str, Policy] = {}
    for tool, policy in tools.items():
        if not isinstance(tool, str):
            raise TypeError(f"tool names in tools must be str, not {type(tool).__name__}")
        if policy not in POLICIES:
            raise ValueError(
                f"unknown policy {policy!r} for tool {tool!r}: expected one of "
                + ", ".join(repr(p) for p in POLICIES)
            )
        checked[tool] = policy  # type: ignore[assignment]
    return checked


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
        tools: Mapping[str, str] | None = None,
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
        self._tools = _check_tools(tools)
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
        self._window: deque[str] = deque(maxlen=self._window_size)
        self._steps = 0
        self._stopped: Verdict | None = None
        self._by_call_id: OrderedDict[str, Verdict] = OrderedDict()
        self._cache: OrderedDict[str, Any] = OrderedDict()

    # -- the check ------------------------------------------------------------------------

    def check(self, name: str, args: Any, /, *, call_id: str | None = None) -> Verdict:
        """The verdict on one call, before it is dispatched."""
        _check_call_id(call_id)
        key = call_key(name, args, volatile_keys=self._volatile)
        with self._locked():
            return self._decide(name, key, call_id)

    def check_json(
        self, name: str, text: str | bytes | bytearray, /, *, call_id: str | None = None
    ) -> Verdict:
        """``check`` for arguments given as JSON text (OpenAI-style ``arguments``).

        Text that is not valid JSON does not raise: the raw text, whitespace collapsed, keys
        the call (a model that keeps sending the same broken arguments is looping too), and
        ``Verdict.invalid_arguments`` says what is wrong with it."""
        _check_call_id(call_id)
        invalid: str | None = None
        try:
            key = call_key_json(name, text, volatile_keys=self._volatile)
        except ValueError as exc:
            key = invalid_json_key(name, text)
            invalid = str(exc)
        with self._locked():
            return self._decide(name, key, call_id, invalid)

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
            _check_call_id(call_id)
            prepared.append((name, call_key(name, args, volatile_keys=self._volatile), call_id))
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
        repeats = self._window.count(key) + 1
        extra: dict[str, Any] = {
            "call_id": call_id,
            "invalid_arguments": invalid_arguments,
            "window": self._window_size,
            "budget": self._max_steps,
        }
        if repeats >= self._stop_at:
            verdict = Verdict("stop", "loop_detected", name, key, repeats, step, **extra)
        elif self._max_steps is not None and self._steps >= self._max_steps:
            verdict = Verdict("stop", "budget_exhausted", name, key, repeats, step, **extra)
        elif repeats >= self._nudge_at:
            verdict = Verdict("nudge", None, name, key, repeats, step, **extra)
        else:
            policy = self._tools.get(name)
            cached = self._cache.get(key) if policy == "read" else None
            # A call that may change the world makes every cached read stale.
            if policy in (None, "write") and self._cache:
                self._released.append(self._cache)
                self._cache = OrderedDict()
            verdict = Verdict("allow", None, name, key, repeats, step, cached=cached, **extra)
        self._steps = step
        if verdict.action == "stop":
            self._stopped = verdict._replace(call_id=None)
        else:
            self._window.append(key)
        if call_id is not None:
            self._remember_call_id(call_id, verdict)
        return verdict

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
        if verdict.action != "allow" or result is None or self._tools.get(verdict.tool) != "read":
            return
        with self._locked():
            self._released.append(self._cache.get(verdict.key))
            self._cache[verdict.key] = result
            self._cache.move_to_end(verdict.key)
            if len(self._cache) > CACHE_ENTRIES:
                self._released.append(self._cache.popitem(last=False))

    # -- inspection -----------------------------------------------------------------------

    def reset(self) -> None:
        """Forgets the run: window, steps, stop, call ids and cached results."""
        with self._locked():
            self._released.append((self._stopped, self._by_call_id, self._cache))
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
            return list(self._window)

    def __len__(self) -> int:
        return len(self._window)

    def __repr__(self) -> str:
        return (
            f"Guard(window={self._window_size}, nudge_at={self._nudge_at}, "
            f"stop_at={self._stop_at}, max_steps={self._max_steps}, "
            f"tools={self._tools!r}, steps={self._steps})"
        )


def _check_call_id(call_id: object) -> None:
    if call_id is not None and not isinstance(call_id, str):
        raise TypeError(f"call_id must be a str or None, not {type(call_id).__name__}")


def _unpack_call(index: int, call: Sequence[Any]) -> tuple[str, Any, str | None]:
    if isinstance(call, (str, bytes)) or not isinstance(call, Sequence) or len(call) not in (2, 3):
        raise TypeError(
            f"call {index} of the turn must be (name, args) or (name, args, call_id), "
            f"not {type(call).__name__}"
        )
    call_id = call[2] if len(call) == 3 else None
    return call[0], call[1], call_id
