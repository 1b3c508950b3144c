"""A progress bar on stderr, for large inputs read from a terminal session.

Shown only when stderr is a TTY and the input is at least ``MIN_BYTES`` (or of unknown size:
stdin), redrawn at most every ``INTERVAL`` seconds, and erased when done, so nothing of it is
left in logs or in piped output. Problems are printed above it.
"""

from __future__ import annotations

import time
from typing import Final, TextIO

from tripwire.replay.formats import FileStats

MIN_BYTES: Final = 64 * 1024 * 1024
INTERVAL: Final = 0.2
WIDTH: Final = 24


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


class Progress:
    """``tick(file, position)`` as files are read; ``close()`` at the end."""

    def __init__(self, stream: TextIO, total: int | None) -> None:
        self._stream = stream
        self._total = total
        self._done = 0  # bytes of files already finished
        self._current: FileStats | None = None
        # The first draw waits one interval too, so that quick runs never show a bar.
        self._start = self._last = time.monotonic()
        self._shown = False

    def tick(self, stats: FileStats, position: int) -> None:
        if stats is not self._current:
            if self._current is not None:
                self._done += self._current.size or 0
            self._current = stats
        now = time.monotonic()
        if now - self._last < INTERVAL:
            return
        self._last = now
        done = self._done + position
        elapsed = now - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        if self._total:
            share = min(done / self._total, 1.0)
            filled = int(share * WIDTH)
            bar = "#" * filled + "." * (WIDTH - filled)
            text = f"replay [{bar}] {share:4.0%}  {_size(done)} of {_size(self._total)}"
        else:
            text = f"replay  {_size(done)}"
        text += f"  {_size(rate)}/s  {stats.path}"
        self._stream.write("\r\x1b[K" + text[:200])
        self._stream.flush()
        self._shown = True

    def clear(self) -> None:
        """Erases the bar (before other output on the same stream)."""
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False
            self._last = 0.0  # redraw at the next tick

    def close(self) -> None:
        self.clear()
