"""One guard for a run whose steps run in different workers (Celery tasks, serverless
functions, hook processes), its state kept in Redis (or Valkey) (issue 18).

``RedisGuard(client, run_id, ...)`` has ``Guard``'s methods and gives its verdicts: each call
reads the run's state, decides with a local ``tripwire.Guard`` (the one implementation of
the rules; nothing is decided in Lua), and writes the state back with a compare-and-set on
its version, in one short Lua script; a worker that lost the race gets the winner's state in
the same reply and decides again (at most ``attempts`` times). The state is the guard's
``snapshot(state_only=True)``, behind an 8-byte version, under ``tripwire:{RUN_ID}`` (the
braces are a Redis Cluster hash tag), and expires ``ttl`` seconds after the run's last call.
The call-id memory is part of the state, so a retried delivery gets its first answer from
any worker. Cached read results are kept only where they are JSON values.

When Redis cannot be reached (refused, reset, timed out), or the run's state there is not
this guard's (written by a worker whose guard has another configuration, or corrupt):

- ``on_error="raise"`` (the default): ``GuardUnavailable`` (a ``ConnectionError``) naming
  the server and the cause, or ``GuardStateError`` (a ``SnapshotError``, so a
  ``ValueError``) saying how to recover: delete the run's key, use another run id, or give
  every worker the same configuration.
- ``on_error="allow"``: the call goes ahead. ``check`` returns an ``Unguarded`` verdict:
  ``action == "allow"``, ``step == 0`` and ``repeats == 0`` (which no consulted verdict
  has), ``consulted`` False and ``error`` the cause, with the call's own tool, key and call
  id. ``observe``/``keep`` ignore it; ``observe``, ``keep``, ``user_message`` and
  ``reset`` are dropped while the guard cannot be consulted. Each outage is logged once
  (warning, logger ``tripwire.redis``), and its end too.

Delivery is at-least-once. A call that timed out may still have been counted: its write
was sent, and a server that was only slow runs it when it wakes. A call with a ``call_id``
is idempotent: a retry with the same id (from any worker) gets the first answer, the
verdict the timed-out call was given, not a repeat's. A call without one, retried, is
counted again (as a repeat) if the first write landed.

``timeout`` (default 1 s) bounds every call: a URL makes a client with it for connecting and
reading, and no retries (redis-py's default retries ten times, for seconds); a client you
built is used through a pool of the guard's own to the same server, with the same connection
settings but reads and connects bounded by ``timeout`` and no retries (``close()`` or
``aclose()`` closes it; it does not decode replies, whatever yours does). ``timeout=None``:
your client as it is, with its own timeouts and retries (also what a client without a
connection pool, a cluster client, gets); it must not decode replies.
Inspection (``steps``, ``stopped``, ``keys()``, ``len``) always raises when the guard cannot
be consulted. Redis without persistence loses its runs when it restarts: a run then goes on
from an empty state (its steps counted from 1 again).

``AsyncRedisGuard`` is the same for ``redis.asyncio`` clients, its methods coroutines.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

try:
    import redis
    import redis.asyncio
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "tripwire.redis needs the redis package: pip install 'tripwire[redis]'"
    ) from exc

import tripwire
from tripwire._locking import ChangeLock
from tripwire._messages import DEPRECATED_RECORD
from tripwire._snapshot import SnapshotError

__all__ = (
    "AsyncRedisGuard",
    "GuardContention",
    "GuardStateError",
    "GuardUnavailable",
    "RedisGuard",
    "Unguarded",
)

log = logging.getLogger("tripwire.redis")

T = TypeVar("T")

# Compare-and-set by version. KEYS[1]: the run's state, KEYS[2]: its turn (below). ARGV[1]:
# the version the state was decided on ("" for none), ARGV[2]: the new version and state,
# ARGV[3]: the TTL in ms, ARGV[4]: this worker's token, ARGV[5]: "1" when it has lost many
# races in a row. Returns {1} when written, else {0, the current value ("" for none), 1 if
# the turn is this worker's}: the loser decides again on it without another round trip.
#
# The turn makes it fair: a worker that keeps calling wins every race against one that has
# to catch up (its next write is always on its way first), so a worker that lost too often
# takes the turn, for at most 100 ms, and the others' writes wait until it has written.
_CAS: Final = """
local turn = redis.call('GET', KEYS[2])
local current = redis.call('GET', KEYS[1])
local seen = ''
if current then seen = string.sub(current, 1, 8) end
if (turn and turn ~= ARGV[4]) or seen ~= ARGV[1] then
  if ARGV[5] == '1' and not turn then
    redis.call('SET', KEYS[2], ARGV[4], 'PX', 100)
    turn = ARGV[4]
  end
  return {0, current or '', turn == ARGV[4] and 1 or 0}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if turn then redis.call('DEL', KEYS[2]) end
return {1}
"""
# Races lost in a row before a worker takes the turn.
_PATIENCE: Final = 4

_UNREACHABLE: Final = (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError)


class GuardUnavailable(ConnectionError):
    """Redis could not be reached, so the guard was not consulted (``on_error="raise"``).
    A call that timed out may still have been counted (see the module: at-least-once)."""


class GuardStateError(SnapshotError):
    """The run's state in Redis is not this guard's: written by a guard with another
    configuration, or corrupt (``on_error="raise"``). Nothing was counted."""


class GuardContention(RuntimeError):
    """Other workers changed the run's state every time this one decided, ``attempts`` times
    in a row."""


class Unguarded:
    """The verdict on a call the guard could not be consulted about (``on_error="allow"``):
    allowed, counted nowhere; ``step`` and ``repeats`` 0, ``consulted`` False, ``error``
    what went wrong."""

    __slots__ = ("call_id", "error", "invalid_arguments", "key", "tool")

    action: Final = "allow"
    reason: Final = None
    repeats: Final = 0
    step: Final = 0
    message: Final = None
    cached: Final = None
    duplicate_of: Final = None
    consulted: Final = False

    def __init__(
        self, tool: str, key: str, call_id: str | None, invalid_arguments: str | None, error: str
    ) -> None:
        self.tool = tool
        self.key = key
        self.call_id = call_id
        self.invalid_arguments = invalid_arguments
        self.error = error

    def __repr__(self) -> str:
        return f"Unguarded(tool={self.tool!r}, key={self.key!r}, error={self.error!r})"


def _server(client: Any) -> str:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return repr(client)
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


# Connection settings a pool makes for itself (bound to that pool, or the originals it
# remembers when it relaxes timeouts), not to be handed to another pool.
_POOL_OWN: Final = frozenset({"maint_notifications_pool_handler"})


def _no_retry(asynchronous: bool) -> Any:
    return AsyncRetry(NoBackoff(), 0) if asynchronous else Retry(NoBackoff(), 0)


def _bounded(client: Any, timeout: float | None, asynchronous: bool) -> tuple[Any, Any]:
    """The client the guard talks through, and the pool it made (for ``close``), if any.

    A URL makes a client bounded by ``timeout``, that does not retry (the guard's caller
    decides what an outage means). A client with a connection pool is used through a pool
    of the guard's own, with its connection class and settings, reads and connects bounded
    by ``timeout`` and no retries: its own settings (redis-py's default is 5 s, retried ten
    times) would otherwise decide how long a check may hang. Any other client, or
    ``timeout=None``: as it is."""
    module = redis.asyncio if asynchronous else redis
    if isinstance(client, str):
        made = module.Redis.from_url(
            client,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=_no_retry(asynchronous),
        )
        return made, made.connection_pool
    pool: Any = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if timeout is None or not isinstance(kwargs, dict):
        return client, None
    settings = {
        name: value
        for name, value in kwargs.items()
        if name not in _POOL_OWN and not name.startswith("orig_")
    }
    for name in ("socket_timeout", "socket_connect_timeout"):
        given = settings.get(name)
        settings[name] = timeout if given is None else min(given, timeout)
    settings["retry"] = _no_retry(asynchronous)
    # The state is bytes: a client that decodes replies to str cannot carry it.
    settings["decode_responses"] = False
    try:
        own = module.ConnectionPool(connection_class=pool.connection_class, **settings)
    except (TypeError, ValueError) as exc:
        log.warning(
            "tripwire: cannot bound the timeouts of %r (%s); its own settings apply",
            client,
            exc,
        )
        return client, None
    return module.Redis(connection_pool=own), own


def _options(ttl: object, timeout: object, attempts: object) -> None:
    """Raises ``TypeError`` or ``ValueError`` for options that would fail late or oddly."""

    def number(name: str, value: object, optional: bool) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
        # Redis takes expiries in whole ms up to about 2**62; 2**53 ms is 285,000 years.
        if not (math.isfinite(value) and 0 < value <= 2**53 / 1000):
            raise ValueError(f"{name} must be a positive, finite number of seconds, not {value!r}")

    number("ttl", ttl, False)
    number("timeout", timeout, True)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise TypeError(f"attempts must be an int, not {type(attempts).__name__}")
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")


class _Base:
    """What the two clients share: the local guard, and one decision on a state."""

    def __init__(
        self,
        client: Any,
        run_id: str,
        *,
        window: int | None = None,
        nudge_at: int | None = None,
        stop_at: int | None = None,
        tools: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        volatile_keys: Iterable[Any] | None = None,
        ttl: float = 86400.0,
        on_error: Literal["raise", "allow"] = "raise",
        infer: bool | None = None,
        definitions: Iterable[Any] | None = None,
        timeout: float | None = 1.0,
        attempts: int = 256,
        asynchronous: bool = False,
    ) -> None:
        if not isinstance(run_id, str) or not run_id:
            raise TypeError("run_id must be a non-empty str")
        if on_error not in ("raise", "allow"):
            raise ValueError(f"on_error must be 'raise' or 'allow', not {on_error!r}")
        _options(ttl, timeout, attempts)
        self._guard = tripwire.Guard(
            window=window,
            nudge_at=nudge_at,
            stop_at=stop_at,
            tools=tools,
            max_steps=max_steps,
            volatile_keys=volatile_keys,
            infer=infer,
            definitions=definitions,
        )
        self.client, self._own_pool = _bounded(client, timeout, asynchronous)
        self.run_id = run_id
        self.key = f"tripwire:{{{run_id}}}"
        self._keys = [self.key, f"{self.key}:turn"]
        self._token = os.urandom(8).hex()
        self._ttl_ms = max(1, round(ttl * 1000))
        self._on_error = on_error
        self._attempts = attempts
        self._cas = self.client.register_script(_CAS)
        # The run's value as this worker last wrote or saw it: usually still current, so a
        # call is one round trip.
        self._seen: bytes | None = None
        self._down = False
        self._mine = False

    def _decide(self, value: bytes | None, op: Callable[[Any], T]) -> tuple[T, bytes]:
        """``op`` on the local guard loaded with ``value``'s state; the new value."""
        guard = self._guard
        if value:
            try:
                guard.load(value[8:])
            except SnapshotError as exc:
                raise self._foreign(exc) from exc
        else:
            guard.reset()
        result = op(guard)
        version = int.from_bytes(value[:8], "big") + 1 if value else 1
        return result, version.to_bytes(8, "big") + guard.snapshot(state_only=True)

    def _args(self, value: bytes | None, new: bytes, attempt: int) -> list[Any]:
        late = b"1" if attempt >= _PATIENCE else b"0"
        return [value[:8] if value else b"", new, self._ttl_ms, self._token, late]

    def _written(self, reply: Any, new: bytes) -> tuple[bool, bytes | None]:
        """Whether the write went through; else the current value, and whether this worker
        may go again at once (it has the turn) rather than pause."""
        if reply[0] == 1:
            self._seen = new
            if self._down:
                self._down = False
                log.info("tripwire: Redis at %s is back", _server(self.client))
            return True, None
        self._mine = reply[2] == 1
        return False, bytes(reply[1]) or None

    def _contention(self) -> GuardContention:
        return GuardContention(
            f"tripwire: the state of run {self.run_id!r} changed under each of "
            f"{self._attempts} attempts to decide"
        )

    def _foreign(self, exc: SnapshotError) -> GuardStateError:
        return GuardStateError(
            f"tripwire: the state of run {self.run_id!r} in Redis at {_server(self.client)} "
            f"is not this guard's ({exc}): a worker whose guard has another configuration "
            "(window, thresholds, tools, volatile keys or definitions) wrote it, or it is "
            "corrupt. Nothing was counted. To recover: give every worker of the run the same "
            f"configuration, use another run_id, or delete the key (redis-cli DEL "
            f"'{self.key}') to start the run's state afresh"
        )

    def _unreachable(self, exc: BaseException) -> str:
        self._seen = None
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, GuardStateError):
            if self._on_error == "raise":
                raise exc
            message = str(exc)
        else:
            # A timeout may come after the write reached the server: at-least-once.
            maybe = isinstance(exc, (redis.TimeoutError, TimeoutError))
            message = (
                f"tripwire: Redis at {_server(self.client)} is unreachable ({text}); the guard "
                "was not consulted"
                + (
                    ", though the call may have been counted (a slow server still runs the "
                    "write): retry it with the same call_id to get its first answer"
                    if maybe
                    else "; nothing was counted"
                )
            )
            if self._on_error == "raise":
                raise GuardUnavailable(message) from exc
        if not self._down:
            self._down = True
            log.warning("%s; allowing calls until it is back", message)
        return text

    def _unguarded(self, calls: Sequence[tuple[Any, Any, str | None]], error: str) -> list[Any]:
        """Verdicts for calls the guard could not be consulted about: their keys from a
        guard of this configuration that forgets them."""
        guard = self._guard
        verdicts = []
        for name, args, call_id in calls:
            guard.reset()
            if isinstance(args, (str, bytes, bytearray)):
                seen = guard.check_json(name, args, call_id=call_id)
            else:
                seen = guard.check(name, args, call_id=call_id)
            verdicts.append(Unguarded(seen.tool, seen.key, call_id, seen.invalid_arguments, error))
        guard.reset()
        return verdicts

    def _pause(self, attempt: int) -> float:
        # A lost race is retried at once; more in a row back off, randomly (so that workers
        # fall out of lockstep) and exponentially up to 5 ms (so that a busy run's workers
        # take turns rather than starve one of them).
        if attempt == 0 or self._mine:
            return 0.0
        return random.random() * min(0.005, 0.00005 * 2.0 ** min(attempt, 10))

    def policy_of(self, name: str, /) -> tuple[str | None, str | None]:
        return self._guard.policy_of(name)


def _turn(calls: Iterable[Sequence[Any]]) -> list[tuple[Any, Any, str | None]]:
    return [(c[0], c[1], c[2] if len(c) > 2 else None) for c in calls]


class RedisGuard(_Base):
    """``Guard`` for a run shared by workers, its state in Redis; see the module."""

    def __init__(self, client: Any, run_id: str, **options: Any) -> None:
        super().__init__(client, run_id, asynchronous=False, **options)
        # The local guard and what this worker saw are one thread's at a time. Re-entrant,
        # with a flag: a signal handler (or gc callback) that uses the guard in the middle of
        # a call on the same thread gets a clear RuntimeError, not a deadlock on itself.
        self._lock = ChangeLock().change

    def _run(self, op: Callable[[Any], T], fallback: Callable[[str], T]) -> T:
        with self._lock():
            try:
                value = self._seen
                for attempt in range(self._attempts):
                    result, new = self._decide(value, op)
                    reply = self._cas(self._keys, self._args(value, new, attempt))
                    written, value = self._written(reply, new)
                    if written:
                        return result
                    time.sleep(self._pause(attempt))
                raise self._contention()
            except (*_UNREACHABLE, GuardStateError) as exc:
                return fallback(self._unreachable(exc))

    def _read(self) -> Any:
        """The local guard with the run's current state (for inspection)."""
        try:
            value = self.client.get(self.key)
        except _UNREACHABLE as exc:
            self._seen = None
            raise GuardUnavailable(
                f"tripwire: Redis at {_server(self.client)} is unreachable ({exc})"
            ) from exc
        self._decide(value, lambda guard: None)
        return self._guard

    def check(self, name: str, args: Any, /, *, call_id: str | None = None) -> Any:
        return self._run(
            lambda g: g.check(name, args, call_id=call_id),
            lambda e: self._unguarded([(name, args, call_id)], e)[0],
        )

    def check_json(
        self, name: str, text: str | bytes | bytearray, /, *, call_id: str | None = None
    ) -> Any:
        return self._run(
            lambda g: g.check_json(name, text, call_id=call_id),
            lambda e: self._unguarded([(name, text, call_id)], e)[0],
        )

    def check_turn(self, calls: Iterable[Sequence[Any]], /) -> list[Any]:
        calls = list(calls)
        return self._run(lambda g: g.check_turn(calls), lambda e: self._unguarded(_turn(calls), e))

    def observe(
        self, verdict: Any, result: Any, /, *, error: Any = None, transient: bool | None = None
    ) -> None:
        if isinstance(verdict, Unguarded):
            return
        self._run(lambda g: g.observe(verdict, result, error=error, transient=transient), _none)

    def keep(self, verdict: Any, result: Any, /) -> None:
        if isinstance(verdict, Unguarded):
            return
        self._run(lambda g: g.keep(verdict, result), _none)

    def record(self, verdict: Any, result: Any, /) -> None:
        """Deprecated: ``keep``, under its old name."""
        warnings.warn(DEPRECATED_RECORD, DeprecationWarning, stacklevel=2)
        self.keep(verdict, result)

    def user_message(self) -> None:
        self._run(lambda g: g.user_message(), _none)

    def reset(self) -> None:
        self._run(lambda g: g.reset(), _none)

    @property
    def steps(self) -> int:
        with self._lock():
            return self._read().steps  # type: ignore[no-any-return]

    @property
    def stopped(self) -> bool:
        with self._lock():
            return self._read().stopped  # type: ignore[no-any-return]

    def keys(self) -> list[str]:
        with self._lock():
            return self._read().keys()  # type: ignore[no-any-return]

    def __len__(self) -> int:
        with self._lock():
            return len(self._read())

    def snapshot(self, *, state_only: bool = False) -> bytes:
        """The run's guard as ``Guard.snapshot`` writes it (to debug, or to move a run)."""
        with self._lock():
            return self._read().snapshot(state_only=state_only)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Closes the connections the guard made (a client you gave stays open)."""
        if self._own_pool is not None:
            self._own_pool.disconnect()


def _none(error: str) -> None:
    return None


class AsyncRedisGuard(_Base):
    """``RedisGuard`` for ``redis.asyncio`` clients: the same, its methods coroutines."""

    def __init__(self, client: Any, run_id: str, **options: Any) -> None:
        super().__init__(client, run_id, asynchronous=True, **options)
        self._lock = asyncio.Lock()

    async def _run(self, op: Callable[[Any], T], fallback: Callable[[str], T]) -> T:
        async with self._lock:
            try:
                value = self._seen
                for attempt in range(self._attempts):
                    result, new = self._decide(value, op)
                    reply = await self._cas(self._keys, self._args(value, new, attempt))
                    written, value = self._written(reply, new)
                    if written:
                        return result
                    await asyncio.sleep(self._pause(attempt))
                raise self._contention()
            except (*_UNREACHABLE, GuardStateError) as exc:
                return fallback(self._unreachable(exc))

    async def _read(self) -> Any:
        try:
            value = await self.client.get(self.key)
        except _UNREACHABLE as exc:
            self._seen = None
            raise GuardUnavailable(
                f"tripwire: Redis at {_server(self.client)} is unreachable ({exc})"
            ) from exc
        self._decide(value, lambda guard: None)
        return self._guard

    async def check(self, name: str, args: Any, /, *, call_id: str | None = None) -> Any:
        return await self._run(
            lambda g: g.check(name, args, call_id=call_id),
            lambda e: self._unguarded([(name, args, call_id)], e)[0],
        )

    async def check_json(
        self, name: str, text: str | bytes | bytearray, /, *, call_id: str | None = None
    ) -> Any:
        return await self._run(
            lambda g: g.check_json(name, text, call_id=call_id),
            lambda e: self._unguarded([(name, text, call_id)], e)[0],
        )

    async def check_turn(self, calls: Iterable[Sequence[Any]], /) -> list[Any]:
        calls = list(calls)
        return await self._run(
            lambda g: g.check_turn(calls), lambda e: self._unguarded(_turn(calls), e)
        )

    async def observe(
        self, verdict: Any, result: Any, /, *, error: Any = None, transient: bool | None = None
    ) -> None:
        if isinstance(verdict, Unguarded):
            return
        await self._run(
            lambda g: g.observe(verdict, result, error=error, transient=transient), _none
        )

    async def keep(self, verdict: Any, result: Any, /) -> None:
        if isinstance(verdict, Unguarded):
            return
        await self._run(lambda g: g.keep(verdict, result), _none)

    async def record(self, verdict: Any, result: Any, /) -> None:
        """Deprecated: ``keep``, under its old name."""
        warnings.warn(DEPRECATED_RECORD, DeprecationWarning, stacklevel=2)
        await self.keep(verdict, result)

    async def user_message(self) -> None:
        await self._run(lambda g: g.user_message(), _none)

    async def reset(self) -> None:
        await self._run(lambda g: g.reset(), _none)

    async def steps(self) -> int:
        async with self._lock:
            return (await self._read()).steps  # type: ignore[no-any-return]

    async def snapshot(self, *, state_only: bool = False) -> bytes:
        async with self._lock:
            guard = await self._read()
            return guard.snapshot(state_only=state_only)  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Closes the connections the guard made (a client you gave stays open)."""
        if self._own_pool is not None:
            await self._own_pool.disconnect()
