"""Sessions kept in Redis (``tripwire hook HARNESS --redis URL``), for fleets of CI runners
whose hook processes run on different machines.

The record is the file store's (``tripwire.hooks._session``), under
``tripwire:hook:{<harness>-<digest>}`` (the session id hashed as for file names; the braces
are a Redis Cluster hash tag), expiring after the settings' ``ttl_hours``. A use holds a lock
(``SET NX PX`` with a random token, released only by its holder, in one Lua script) for the
read-modify-write, as the file store holds a ``flock``. Redis unreachable: the error goes up
and the hook allows the call (one line on stderr), as for every failure.
"""

from __future__ import annotations

import contextlib
import json
import secrets
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


class RedisStore:
    def __init__(
        self, url: str, ttl_hours: float, make_guard: Callable[[], Any], client: Any = None
    ) -> None:
        if client is None:
            import redis

            # No retries, short timeouts: a hook must answer inside the harness's timeout.
            client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.client = client
        self.ttl_ms = int(ttl_hours * 3600 * 1000)
        self.make_guard = make_guard

    @contextlib.contextmanager
    def session(self, harness: str, session_id: str) -> Iterator[Session]:
        key = "tripwire:hook:{" + session_name(harness, session_id) + "}"
        lock, token = key + ":lock", secrets.token_hex(16)
        deadline = time.monotonic() + LOCK_WAIT
        while not self.client.set(lock, token, nx=True, px=LOCK_TTL_MS):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{lock}: held by another hook for {LOCK_WAIT} s")
            time.sleep(0.002)
        try:
            raw = self.client.get(key)
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
            self.client.set(key, text, px=self.ttl_ms)
        finally:
            self.client.eval(_RELEASE, 1, lock, token)
