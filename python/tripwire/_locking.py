"""The lock of a guard's changes, in pure Python: one thread at a time, and no change begun
inside another in the same thread.

Python code can run in the middle of a change in the thread that makes it (a signal
handler, a gc callback, a finaliser: between any two bytecodes). A plain lock would deadlock
on itself there; a re-entrant one would let the second change interleave with the
half-made first (a step handed out twice, a window changed under an iteration). So the lock
is re-entrant and the re-entered change is refused with ``REENTERED``, nothing changed.
Reads may still take ``lock`` itself, re-entered or not."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tripwire._messages import REENTERED


class ChangeLock:
    __slots__ = ("_busy", "lock")

    def __init__(self) -> None:
        # Re-entrant: a Python lock, unlike the native guard's, lets other threads run while
        # it waits, so threads cannot deadlock on it.
        self.lock = threading.RLock()
        # A change is under way (in the thread that holds the lock).
        self._busy = False

    @contextmanager
    def change(self) -> Iterator[None]:
        """Held for one change; ``RuntimeError(REENTERED)`` if this thread is making one."""
        with self.lock:
            if self._busy:
                raise RuntimeError(REENTERED)
            self._busy = True
            try:
                yield
            finally:
                self._busy = False
