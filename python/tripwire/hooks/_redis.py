"""Sessions kept in Redis (``tripwire hook HARNESS --redis URL``), for fleets of CI runners
whose hook processes run on different machines.

The record is the file store's (``tripwire.hooks._session``), under
``tripwire:hook:{<harness>-<digest>}`` (the session id hashed as for file names; the braces
are a Redis Cluster hash tag), expiring after the settings' ``ttl_hours``. A use holds a lock
(``SET NX PX`` with a random token, released only by its holder, in one Lua script) for the
read-modify-write, as the file store holds a ``flock``. Redis unreachable: the error goes up
and the hook allows the call (one line on stderr), as for every failure.

The hook speaks RESP itself (``Client``: four commands on one socket, 1 s timeouts):
importing redis-py takes 170 ms or more, which a hook run per tool call cannot pay.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from tripwire.hooks._session import Session
from tripwire.hooks._store import LOCK_WAIT, MAX_RECORD, session_name

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# The lock outlives a hook that died holding it by this much, no more.
LOCK_TTL_MS: Final = 5000


class RedisError(ConnectionError):
    """Redis answered with an error, or not as RESP."""


class Client:
    """A minimal Redis client: ``redis://[:password@]host[:port][/db]``, one connection."""

    def __init__(self, url: str, timeout: float = 1.0) -> None:
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"--redis {url!r}: expected redis://host[:port][/db]")
        self.address = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.sock = socket.create_connection(self.address, timeout=timeout)
        self.reader = self.sock.makefile("rb")
        if parts.password is not None:
            user = unquote(parts.username) if parts.username else None
            self.call("AUTH", *([user] if user else []), unquote(parts.password))
        db = parts.path.strip("/")
        if db and db != "0":
            self.call("SELECT", db)

    def call(self, *args: str | bytes | int) -> Any:
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _reply(self) -> Any:
        line = self.reader.readline(MAX_RECORD)
        if not line.endswith(b"\r\n"):
            raise RedisError(f"redis at {self.address}: connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b":"):
            return int(rest) if kind == b":" else rest
        if kind == b"-":
            raise RedisError(f"redis: {rest.decode('utf-8', 'replace')}")
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            if size > MAX_RECORD:
                raise RedisError("redis: a value bigger than a session record")
            data = self.reader.read(size + 2)
            return data[:-2]
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self._reply() for _ in range(min(count, 16))]
        raise RedisError(f"redis at {self.address}: not RESP")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class RedisStore:
    def __init__(
        self, url: str, ttl_hours: float, make_guard: Callable[[], Any], client: Any = None
    ) -> None:
        # Short timeouts, no retries: a hook must answer inside the harness's timeout.
        self.client = Client(url) if client is None else client
        self.ttl_ms = int(ttl_hours * 3600 * 1000)
        self.make_guard = make_guard

    @contextlib.contextmanager
    def session(self, harness: str, session_id: str) -> Iterator[Session]:
        key = "tripwire:hook:{" + session_name(harness, session_id) + "}"
        lock, token = key + ":lock", secrets.token_hex(16)
        deadline = time.monotonic() + LOCK_WAIT
        while self.client.call("SET", lock, token, "NX", "PX", LOCK_TTL_MS) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{lock}: held by another hook for {LOCK_WAIT} s")
            time.sleep(0.002)
        try:
            raw = self.client.call("GET", key)
            data, problem = None, None
            if raw is not None:
                try:
                    if len(raw) > MAX_RECORD:
                        raise ValueError("too big")
                    data = json.loads(raw)
                    if not isinstance(data, dict):
                        raise ValueError("not an object")
                except (ValueError, RecursionError):
                    data, problem = None, "the session's record in Redis is corrupt"
            session = Session.restore(data, self.make_guard, harness, session_id, problem)
            yield session
            text = json.dumps(session.dump(), separators=(",", ":"), ensure_ascii=True)
            self.client.call("SET", key, text, "PX", self.ttl_ms)
        finally:
            self.client.call("EVAL", _RELEASE, 1, lock, token)
