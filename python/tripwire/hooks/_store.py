"""Where sessions live between hook processes: files (the default) or memory (``serve``).

**Files.** One JSON record per session in ``<state dir>/sessions/`` (``tripwire.hooks._config``),
named by a SHA-256 of the harness and the session id, never by the id itself: an id such as
``../../x`` cannot name a path. Directories are 0700, files 0600, opened without following
symbolic links. A use is a read-modify-write under an exclusive ``flock`` on the session's
``.lock`` file (Claude Code runs the hooks of parallel calls at once); the record is written
to a temporary file and renamed over the old one, so a reader never sees half a record. A new
session sweeps the directory of sessions untouched for the settings' ``ttl_hours``.

**Memory.** ``serve`` keeps its sessions as objects, with the guards live; a lock per session.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from tripwire.hooks._session import Session

# The builtin SHA-256 (hashlib would load OpenSSL, ~3 ms a hook process, for one short name).
try:
    from _sha2 import sha256  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    from _sha256 import sha256  # type: ignore[import-not-found, no-redef, unused-ignore]

# A record is small (~20 KB: a window of keys, 128 calls); anything over 1 MiB is not ours.
MAX_RECORD: Final = 1 << 20
# How long a hook waits for another hook of the same session before it gives up (and
# allows the call): well inside Claude Code's hook timeout.
LOCK_WAIT: Final = 5.0
# A temporary file this old was left by a hook that died before its rename.
STALE_TEMPORARY: Final = 3600.0
_OPEN_FLAGS: Final = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


class StoreError(OSError):
    """The state directory cannot be used (not ours, not a directory, not writable)."""


def session_name(harness: str, session_id: str) -> str:
    digest = sha256(f"{harness}\0{session_id}".encode("utf-8", "surrogatepass"))
    return f"{harness}-{digest.hexdigest()[:40]}"


def _private_dir(path: str) -> None:
    """Makes ``path`` a 0700 directory of this user, or raises ``StoreError``."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise StoreError(exc.errno, f"state directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise StoreError(errno.ENOTDIR, f"state directory {path} is not a directory")
    if info.st_uid != os.getuid():
        raise StoreError(errno.EPERM, f"state directory {path} belongs to another user")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)


class FileStore:
    def __init__(self, root: str, ttl_hours: float, make_guard: Callable[[], Any]) -> None:
        self.root = root
        self.dir = os.path.join(root, "sessions")
        self.ttl = ttl_hours * 3600.0
        self.make_guard = make_guard

    def _path(self, harness: str, session_id: str) -> str:
        return os.path.join(self.dir, session_name(harness, session_id))

    @contextlib.contextmanager
    def session(self, harness: str, session_id: str) -> Iterator[Session]:
        """The session, locked; written back when the block ends without an exception."""
        _private_dir(self.root)
        _private_dir(self.dir)
        path = self._path(harness, session_id)
        lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600)
        try:
            _lock(lock, path)
            data, problem = _read(path + ".json")
            if data is None and problem is None:
                self.sweep()
            session = Session.restore(data, self.make_guard, harness, session_id, problem)
            yield session
            _write(path + ".json", session.dump())
        finally:
            os.close(lock)  # releases the flock

    def sweep(self) -> int:
        """Removes the sessions untouched for the TTL; returns how many."""
        removed = 0
        cutoff = time.time() - self.ttl
        try:
            names = os.listdir(self.dir)
        except OSError:
            return 0
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(".tmp"):
                # A record half written by a hook that was killed (its rename never came).
                with contextlib.suppress(OSError):
                    if os.lstat(path).st_mtime < time.time() - STALE_TEMPORARY:
                        os.unlink(path)
                continue
            if not name.endswith(".json"):
                continue
            try:
                if os.lstat(path).st_mtime >= cutoff:
                    continue
                os.unlink(path)
                removed += 1
                with contextlib.suppress(OSError):
                    os.unlink(path[: -len(".json")] + ".lock")
            except OSError:
                continue
        return removed

    def keep_summary(self, record: dict[str, Any]) -> None:
        """Writes a session's record without its guard (``serve`` keeps its guards in
        memory; ``tripwire sessions`` reads the summaries here)."""
        _private_dir(self.root)
        _private_dir(self.dir)
        path = self._path(str(record["harness"]), str(record["session"]))
        lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600)
        try:
            _lock(lock, path)
            _write(path + ".json", {**record, "guard": None, "calls": []})
        finally:
            os.close(lock)

    def records(self) -> list[dict[str, Any]]:
        """Every session's record that can be read, newest first."""
        found: list[dict[str, Any]] = []
        try:
            names = os.listdir(self.dir)
        except OSError:
            return found
        for name in names:
            if name.endswith(".json"):
                data, _ = _read(os.path.join(self.dir, name))
                if data is not None and isinstance(data.get("updated"), (int, float)):
                    found.append(data)
        found.sort(key=lambda record: -float(record["updated"]))
        return found


def _lock(fd: int, path: str) -> None:
    deadline = time.monotonic() + LOCK_WAIT
    pause = 0.0005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}.lock: held by another hook for {LOCK_WAIT} s") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _read(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """The record at ``path``: ``(None, None)`` where there is none, ``(None, problem)``
    where there is something that is not a record."""
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"the session's state file cannot be read ({exc.strerror})"
    try:
        with os.fdopen(fd, "rb") as file:
            raw = file.read(MAX_RECORD + 1)
    except OSError as exc:
        return None, f"the session's state file cannot be read ({exc.strerror})"
    if len(raw) > MAX_RECORD:
        return None, "the session's state file is too big to be one"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, "the session's state file is corrupt"
    if not isinstance(data, dict):
        return None, "the session's state file is not a session record"
    return data, None


def _write(path: str, record: dict[str, Any]) -> None:
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode()
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class MemoryStore:
    """Sessions held in memory by ``serve``: the guards live, one lock per session; sessions
    untouched for the TTL are dropped as new ones come."""

    def __init__(
        self,
        ttl_hours: float,
        make_guard: Callable[[], Any],
        limit: int = 10_000,
        summaries: FileStore | None = None,
    ) -> None:
        self.ttl = ttl_hours * 3600.0
        self.make_guard = make_guard
        self.limit = limit
        # Where a session's record goes, without its guard, when it is nudged, stopped or
        # ended: what ``tripwire sessions`` lists.
        self.summaries = summaries
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], tuple[threading.Lock, Session]] = {}

    @contextlib.contextmanager
    def session(self, harness: str, session_id: str) -> Iterator[Session]:
        key = (harness, session_id)
        with self._lock:
            entry = self._sessions.get(key)
            if entry is None:
                self._sweep()
                entry = (threading.Lock(), Session.new(self.make_guard, harness, session_id))
                self._sessions[key] = entry
        with entry[0]:
            record = entry[1].record
            seen = (len(record["events"]), record["events"][-1:], record.get("ended"))
            yield entry[1]
            record["updated"] = time.time()
            now = (len(record["events"]), record["events"][-1:], record.get("ended"))
            if self.summaries is not None and now != seen:
                # The summary is for people: the verdict does not wait on it.
                with contextlib.suppress(OSError):
                    self.summaries.keep_summary(record)

    def _sweep(self) -> None:
        cutoff = time.time() - self.ttl
        stale = [k for k, (_, s) in self._sessions.items() if s.record["updated"] < cutoff]
        for key in stale:
            del self._sessions[key]
        while len(self._sessions) >= self.limit:  # the oldest go first
            oldest = min(self._sessions, key=lambda k: self._sessions[k][1].record["updated"])
            del self._sessions[oldest]

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            sessions = [s for _, s in self._sessions.values()]
        found = [dict(s.record, guard=None) for s in sessions]
        found.sort(key=lambda record: -float(record["updated"]))
        return found
