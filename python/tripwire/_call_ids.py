"""The call-id memory (``rust/call_ids.rs`` is the native one): the verdict given to each
recent call id, so that a retried delivery (the same id *and* the same call, not yet
answered) gets its first verdict. Providers reuse ids across turns, for other calls and for
the same call asked again after its answer: both are new calls. Bounded: the oldest id goes
past ``CALL_ID_MEMORY``.

Nothing here drops what it lets go of: ``remember`` hands back the records it replaced or
evicted, for the guard to drop once its lock is released (``Guard._let_go``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Final

from tripwire._verdict import Verdict

# How many recent call ids a guard remembers, so a retried delivery gets its first answer.
CALL_ID_MEMORY: Final = 128


class Remembered:
    """The verdict given to a call id, the key of the call it was given to, and whether the
    call's result has been observed since (then the id is no longer awaiting a redelivery)."""

    __slots__ = ("answered", "key", "verdict")

    def __init__(self, key: str, verdict: Verdict, answered: bool = False) -> None:
        self.key = key
        self.verdict = verdict
        self.answered = answered


class CallIds:
    """Remembered verdicts by call id, oldest first."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: OrderedDict[str, Remembered] = OrderedDict()

    def retried(self, call_id: str | None, key: str) -> bool:
        """A retried delivery: the same call id *and* the same call as one checked before,
        whose result has not been observed yet."""
        if call_id is None:
            return False
        remembered = self._by_id.get(call_id)
        return remembered is not None and remembered.key == key and not remembered.answered

    def recall(self, call_id: str) -> Verdict:
        """The verdict remembered for an id that ``retried`` found."""
        return self._by_id[call_id].verdict

    def __getitem__(self, call_id: str) -> Remembered:
        return self._by_id[call_id]

    def remember(self, call_id: str, key: str, verdict: Verdict, answered: bool) -> list[Any]:
        """Remembers an id as the newest; hands back what it let go of (the id's former
        record, the oldest id's past the bound)."""
        dropped: list[Any] = [self._by_id.pop(call_id, None)]
        self._by_id[call_id] = Remembered(key, verdict, answered)
        if len(self._by_id) > CALL_ID_MEMORY:
            dropped.append(self._by_id.popitem(last=False))
        return dropped

    def answer(self, call_id: str, step: int) -> None:
        """The result of the call the id's verdict was given to (at ``step``) was observed:
        the id awaits no redelivery."""
        remembered = self._by_id.get(call_id)
        if remembered is not None and remembered.verdict.step == step:
            remembered.answered = True

    def push_read(self, call_id: str, remembered: Remembered) -> bool:
        """Appends an id read from a snapshot; false if it is there already."""
        if call_id in self._by_id:
            return False
        self._by_id[call_id] = remembered
        return True

    def values(self) -> Iterator[Remembered]:
        """The records, oldest first."""
        return iter(self._by_id.values())

    def items(self) -> Iterator[tuple[str, Remembered]]:
        """The ids and their records, oldest first."""
        return iter(self._by_id.items())

    def __len__(self) -> int:
        return len(self._by_id)
