"""``Verdict``: what the guard says about one call, in pure Python (the native one is in
``rust/py_verdict.rs``). Immutable; its message is built when read (``tripwire._messages``)."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Final

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
        _fill(
            self,
            (
                action,
                reason,
                tool,
                key,
                repeats,
                step,
                cached,
                call_id,
                duplicate_of,
                invalid_arguments,
                window,
                budget,
                detail,
            ),
        )

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

    def __eq__(self, other: object) -> bool:
        """Equal when every field is, and ``cached`` holds the very same result."""
        if not isinstance(other, Verdict):
            return NotImplemented
        return _COMPARED(self) == _COMPARED(other) and self.cached is other.cached

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle and ``copy`` (a fleet checks in one worker and observes in another):
        rebuilt through ``__init__``, as ``__setattr__`` refuses pickle's default way."""
        return _verdict, _FIELDS(self)

    def _replace(self, **changes: Any) -> Verdict:
        """A copy with some of the keyword fields (``cached``, ``call_id``...) changed."""
        fields = dict(zip(_ORDER, _FIELDS(self), strict=True))
        fields.update({_SLOT.get(name, name): value for name, value in changes.items()})
        return _verdict(*fields.values())

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


# Every field in ``__init__``'s order (the slots' names): what pickle gets, and ``_verdict``
# takes back.
_ORDER: Final = (
    "action",
    "reason",
    "tool",
    "key",
    "repeats",
    "step",
    "cached",
    "call_id",
    "duplicate_of",
    "invalid_arguments",
    "_window",
    "_budget",
    "_detail",
)
# The keyword arguments whose slot has another name.
_SLOT: Final = {"window": "_window", "budget": "_budget", "detail": "_detail"}
_FIELDS: Final = attrgetter(*_ORDER)
# What equality compares, besides ``cached`` (by identity): all but the message's settings.
_COMPARED: Final = attrgetter(
    *(name for name in _ORDER if name not in ("cached", "_window", "_budget"))
)


def _fill(verdict: Verdict, fields: tuple[Any, ...]) -> None:
    setter = object.__setattr__
    for name, value in zip(_ORDER, fields, strict=True):
        setter(verdict, name, value)


def _verdict(*fields: Any) -> Verdict:
    """A verdict from its fields in ``_ORDER`` (what ``Verdict.__reduce__`` gives pickle, and
    what a snapshot holds), made without ``__init__``'s keyword arguments."""
    verdict: Verdict = object.__new__(Verdict)
    _fill(verdict, fields)
    return verdict
