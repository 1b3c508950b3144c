"""``Verdict``: what the guard says about one call, in pure Python (the native one is in
``rust/py_guard.rs``). Immutable; its message is built when read (``tripwire._messages``)."""

from __future__ import annotations

from typing import Any

from tripwire._messages import Action, Detail, Reason, verdict_message


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
