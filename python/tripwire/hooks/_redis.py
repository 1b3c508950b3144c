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
import os
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


def parse_url(url: str) -> tuple[str, int, str | None, str | None, str]:
    """``redis://[[user]:password@]host[:port][/db]`` -> host, port, user, password, db
    (parsed here: urllib.parse would cost a hook 2 ms)."""
    if not url.startswith("redis://"):
        raise ValueError(f"--redis {url!r}: expected redis://[:password@]host[:port][/db]")
    auth, _, location = url[len("redis://") :].rpartition("@")
    address, _, db = location.partition("/")
    if address.startswith("["):  # [IPv6]:port
        host, _, port = address[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = address.partition(":")
    user: str | None = None
    password: str | None = None
    if auth:
        name, colon, secret = auth.partition(":")
        user, password = (name, secret) if colon else (None, name)
        if "%" in auth:
            from urllib.parse import unquote

            user = unquote(user) if user else None
            password = unquote(password)
    if not port.isdigit() and port:
        raise ValueError(f"--redis {url!r}: the port is not a number")
    return host or "127.0.0.1", int(port or 6379), user or None, password, db.strip("/")


class Client:
    """A minimal Redis client, one connection. It uses ``_socket``, the C module under
    ``socket`` (whose enum conversions cost a hook 3 ms), and reads replies itself."""

    def __init__(self, url: str, timeout: float = 1.0) -> None:
        import _socket

        host, port, user, password, db = parse_url(url)
        self.address = (host, port)
        found = _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM)
        if not found:
            raise RedisError(f"redis at {host}:{port}: no address")
        family, kind, proto, _, address = found[0]
        self.sock = _socket.socket(family, kind, proto)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(address)
        except BaseException:
            self.sock.close()
            raise
        self.sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        self.buffer = b""
        if password is not None:
            self.call("AUTH", *([user] if user else []), password)
        if db and db != "0":
            self.call("SELECT", db)

    def call(self, *args: str | bytes | int) -> Any:
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RedisError(f"redis at {self.address}: connection closed")
        self.buffer += chunk
        if len(self.buffer) > MAX_RECORD + 64:
            raise RedisError("redis: a reply bigger than a session record")

    def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        line, self.buffer = self.buffer[:end], self.buffer[end + 2 :]
        return line

    def _reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
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
            while len(self.buffer) < size + 2:
                self._fill()
            data, self.buffer = self.buffer[:size], self.buffer[size + 2 :]
            return data
        if kind == b"*":
            count = int(rest)
            if count > 16:
                raise RedisError("redis: a longer reply than any command here gets")
            return None if count < 0 else [self._reply() for _ in range(count)]
        raise RedisError(f"redis at {self.address}: not RESP")

    def close(self) -> None:
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
        # os.urandom, not secrets: secrets imports hmac and hashlib (OpenSSL, ~3 ms a hook).
        lock, token = key + ":lock", os.urandom(16).hex()
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
