"""tripwire.redis against a real redis-server: no mocks.

The server is Debian's ``redis-server`` (``.ci/run`` installs it), started on loopback on a
free port by the ``server`` fixture, without persistence, and stopped after. Parity: random
call sequences give ``RedisGuard`` the verdicts of a local ``Guard``. Concurrency: 4
processes x 2,000 checks of one run, no step lost or counted twice, the final state that of
a serial order, call-id retries from different processes counted once. Faults: the server
killed and restarted mid-run.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import tripwire
from _guards import VERDICT_FIELDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

redis = pytest.importorskip("redis")
from tripwire.redis import (  # noqa: E402
    AsyncRedisGuard,
    GuardStateError,
    GuardUnavailable,
    RedisGuard,
    Unguarded,
)

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


# Loopback only, no persistence (a test's data goes with the process).
SERVER_FLAGS: tuple[str, ...] = (
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--protected-mode",
    "no",
)


def _major_version() -> int:
    assert REDIS_SERVER is not None
    text = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"v=(\d+)\.", text)
    return int(found.group(1)) if found else 0


# DEBUG (SLEEP) from loopback: a server that is slow, not gone. Redis 7 asks for it to be
# enabled (and before 7 it was always on, and the option unknown).
if REDIS_SERVER is not None and _major_version() >= 7:
    SERVER_FLAGS += ("--enable-debug-command", "local")


class Server:
    """A redis-server process on 127.0.0.1:port, restartable on the same port."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [REDIS_SERVER, *SERVER_FLAGS, "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    server = Server()
    server.start()
    yield server
    server.kill()


@pytest.fixture
def client(server: Server) -> Iterator[Any]:
    client = redis.Redis.from_url(server.url)
    yield client
    client.close()


RUNS = iter(range(10**9))


def run_id() -> str:
    return f"run-{os.getpid()}-{next(RUNS)}"


def same(a: Any, b: Any) -> None:
    for name in VERDICT_FIELDS:
        assert getattr(a, name) == getattr(b, name), name


# -- parity -----------------------------------------------------------------------------------

TOOLS = {"get_logs": "read", "deploy": "write", "build": {"policy": "poll", "max_polls": 3}}
NAMES = ("get_logs", "deploy", "build", "Bash", "Edit")
ARGS = ({"a": 1}, {"a": 2}, {"b": "x"})
RESULTS = ("ok", "ok", "changed", [], "Error: 503 Service Unavailable", {"rows": 1})

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("check"),
            st.sampled_from(NAMES),
            st.sampled_from(ARGS),
            st.sampled_from((None, None, "c1", "c2")),
        ),
        st.tuples(st.just("json"), st.sampled_from(NAMES), st.sampled_from(('{"a": 1}', "{bad"))),
        st.tuples(
            st.just("turn"),
            st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(ARGS)), max_size=3),
        ),
        st.tuples(st.just("observe"), st.sampled_from(RESULTS)),
        st.tuples(st.just("keep"), st.sampled_from(RESULTS)),
        st.tuples(st.just("user_message")),
        st.tuples(st.just("reset")),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=operations, window=st.integers(3, 12))
def test_redis_guard_gives_the_guards_verdicts(server: Server, ops: list[Any], window: int) -> None:
    kwargs: dict[str, Any] = {"window": window, "nudge_at": 2, "stop_at": 3, "tools": TOOLS}
    local = tripwire.Guard(**kwargs)
    shared = RedisGuard(server.url, run_id(), **kwargs)
    # A second worker on the same run: each call goes to one of them.
    other = RedisGuard(server.url, shared.run_id, **kwargs)
    last: tuple[Any, Any] | None = None
    for i, op in enumerate(ops):
        worker = shared if i % 2 else other
        kind = op[0]
        if kind == "check":
            a, b = (
                local.check(op[1], op[2], call_id=op[3]),
                worker.check(op[1], op[2], call_id=op[3]),
            )
            same(a, b)
            last = (a, b)
        elif kind == "json":
            a, b = local.check_json(op[1], op[2]), worker.check_json(op[1], op[2])
            same(a, b)
            last = (a, b)
        elif kind == "turn":
            turn_a, turn_b = local.check_turn(op[1]), worker.check_turn(op[1])
            for a, b in zip(turn_a, turn_b, strict=True):
                same(a, b)
        elif kind in ("observe", "keep") and last is not None:
            getattr(local, kind)(last[0], op[1])
            getattr(worker, kind)(last[1], op[1])
        elif kind == "user_message":
            local.user_message()
            worker.user_message()
        elif kind == "reset":
            local.reset()
            worker.reset()
    assert shared.snapshot() == local.snapshot()
    assert (shared.steps, shared.stopped, shared.keys()) == (
        local.steps,
        local.stopped,
        local.keys(),
    )


def test_keys_carry_the_run_id_as_a_hash_tag_and_expire(client: Any, server: Server) -> None:
    guard = RedisGuard(server.url, "checkout-7", ttl=30)
    guard.check("get_logs", {"a": 1})
    assert client.exists("tripwire:{checkout-7}")
    assert 0 < client.pttl("tripwire:{checkout-7}") <= 30_000
    short = RedisGuard(server.url, "short", ttl=0.05)
    short.check("get_logs", {"a": 1})
    time.sleep(0.15)
    assert not client.exists("tripwire:{short}")
    assert short.steps == 0


def test_the_async_twin_gives_the_same_verdicts(server: Server) -> None:
    steps: list[int] = []

    async def main() -> list[Any]:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(server.url)
        guard = AsyncRedisGuard(client, run_id(), tools=TOOLS)
        verdicts = []
        for args in (ARGS[0], ARGS[0], ARGS[1], ARGS[0]):
            verdict = await guard.check("get_logs", args, call_id=None)
            await guard.observe(verdict, "ok")
            verdicts.append(verdict)
        verdicts.append(await guard.check("get_logs", ARGS[0], call_id="r"))
        verdicts.append(await guard.check("get_logs", ARGS[0], call_id="r"))
        steps.append(await guard.steps())
        await guard.aclose()
        await client.aclose()
        return verdicts

    local = tripwire.Guard(tools=TOOLS)
    expected = []
    for args in (ARGS[0], ARGS[0], ARGS[1], ARGS[0]):
        verdict = local.check("get_logs", args)
        local.observe(verdict, "ok")
        expected.append(verdict)
    expected += [local.check("get_logs", ARGS[0], call_id="r")] * 2
    for a, b in zip(asyncio.run(main()), expected, strict=True):
        same(a, b)
    assert steps == [local.steps]


def test_record_is_keep_under_its_old_name(server: Server) -> None:
    """``RedisGuard.record`` and ``AsyncRedisGuard.record``: ``keep``, with a warning."""
    guard = RedisGuard(server.url, run_id(), tools=TOOLS)
    verdict = guard.check("get_logs", ARGS[0])
    guard.observe(verdict, ["kept"])
    with pytest.warns(DeprecationWarning, match=r"Guard\.keep\(\)"):
        guard.record(verdict, ["kept"])
    guard.user_message()
    assert guard.check("get_logs", ARGS[0]).cached == ["kept"]

    async def main() -> Any:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(server.url)
        guard = AsyncRedisGuard(client, run_id(), tools=TOOLS)
        verdict = await guard.check("get_logs", ARGS[0])
        await guard.observe(verdict, ["kept"])
        with pytest.warns(DeprecationWarning, match=r"Guard\.keep\(\)"):
            await guard.record(verdict, ["kept"])
        await guard.user_message()
        again = await guard.check("get_logs", ARGS[0])
        await guard.aclose()
        await client.aclose()
        return again.cached

    assert asyncio.run(main()) == ["kept"]


# -- concurrency ------------------------------------------------------------------------------

PROCESSES, CHECKS, EVERY = 4, 2000, 50


def _worker(url: str, run: str, index: int, queue: Any) -> None:
    try:
        queue.put(_checks(url, run, index))
    except BaseException as exc:
        queue.put(repr(exc))


def _checks(url: str, run: str, index: int) -> list[Any]:
    guard = RedisGuard(url, run)
    seen = []
    for i in range(CHECKS):
        if i % EVERY == 0:
            # The same call id, the same call, from every process: a retried delivery.
            call = ("deploy", {"n": i}, f"r{i}")
        else:
            call = ("get_logs", {"p": index, "i": i}, None)
        verdict = guard.check(call[0], call[1], call_id=call[2])
        seen.append((verdict.step, verdict.action, call))
    return seen


def test_four_processes_lose_no_step_and_count_retries_once(server: Server) -> None:
    run = run_id()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [
        context.Process(target=_worker, args=(server.url, run, index, queue))
        for index in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    started = time.monotonic()
    results = [queue.get(timeout=120) for _ in workers]
    elapsed = time.monotonic() - started
    for result in results:
        assert isinstance(result, list), result
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    by_step: dict[int, Any] = {}
    for seen in results:
        for step, action, call in seen:
            assert action == "allow"
            # A step is one call's: the retried deliveries share their first one's step.
            assert by_step.setdefault(step, call) == call
    retried = CHECKS // EVERY
    total = PROCESSES * CHECKS - (PROCESSES - 1) * retried
    assert sorted(by_step) == list(range(1, total + 1))
    # The final state is that of the calls made one by one in their steps' order.
    serial = tripwire.Guard()
    for step in sorted(by_step):
        name, args, call_id = by_step[step]
        assert serial.check(name, args, call_id=call_id).step == step
    assert RedisGuard(server.url, run).snapshot() == serial.snapshot()
    print(f"{PROCESSES} x {CHECKS} checks of one run in {elapsed:.1f} s")


# -- faults -----------------------------------------------------------------------------------


def test_a_dead_server_is_a_clear_error_or_an_unguarded_allow_and_the_run_goes_on() -> None:
    server = Server()
    server.start()
    try:
        raising = RedisGuard(server.url, "faulty", timeout=0.5)
        allowing = RedisGuard(server.url, "faulty", timeout=0.5, on_error="allow")
        assert raising.check("get_logs", {"a": 1}).step == 1
        server.kill()
        started = time.monotonic()
        with pytest.raises(GuardUnavailable, match=f"Redis at 127.0.0.1:{server.port}"):
            raising.check("get_logs", {"a": 1})
        verdict = allowing.check("get_logs", {"a": 1}, call_id="c")
        assert isinstance(verdict, Unguarded)
        assert (verdict.action, verdict.step, verdict.consulted) == ("allow", 0, False)
        assert verdict.key == "bc4770e0b85eecc8"  # the call's key, as the live guard gives it
        allowing.observe(verdict, "ok")  # ignored
        allowing.user_message()  # dropped
        assert time.monotonic() - started < 5, "nothing hangs"
        server.start()
        # Without persistence the run's state went with the server: it goes on from empty.
        assert raising.check("get_logs", {"a": 1}).step == 1
        assert allowing.check("get_logs", {"a": 1}).action == "nudge"
    finally:
        server.kill()


# -- a server that does not answer, or answers late (issue 26) ------------------------------


class Silent:
    """A TCP server on loopback that accepts connections and never answers."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.port = self.socket.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_client_you_built_is_bounded_by_the_guards_timeout(silent: Silent, on_error: str) -> None:
    """Issue 26, finding 7: a client built with redis-py's defaults (5 s a read, retried ten
    times: about a minute against a server that never answers) is used through the guard's
    own pool, bounded by ``timeout`` and without retries. The client stays the user's."""
    client = redis.Redis(host="127.0.0.1", port=silent.port)
    guard = RedisGuard(client, run_id(), timeout=0.2, on_error=on_error)  # type: ignore[arg-type]
    started = time.monotonic()
    if on_error == "raise":
        with pytest.raises(GuardUnavailable, match="may have been counted"):
            guard.check("get_logs", {"a": 1}, call_id="c1")
    else:
        verdict = guard.check("get_logs", {"a": 1}, call_id="c1")
        assert isinstance(verdict, Unguarded) and "Timeout" in verdict.error
    assert time.monotonic() - started < 5, "the guard's timeout, not the client's minute"
    assert guard.client is not client
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 5
    guard.close()
    client.close()


def test_timeout_none_keeps_the_client_as_it_is(server: Server) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=3)
    guard = RedisGuard(client, run_id(), timeout=None)
    assert guard.client is client
    assert guard.check("get_logs", {"a": 1}).step == 1
    client.close()


def test_a_client_that_decodes_replies_is_used_through_one_that_does_not(
    server: Server,
) -> None:
    """The run's state is bytes: a client built with ``decode_responses=True`` failed on
    the first check (UnicodeDecodeError); the guard's own pool does not decode."""
    client = redis.Redis.from_url(server.url, decode_responses=True)
    guard = RedisGuard(client, run_id())
    assert [guard.check("get_logs", {"a": 1}).action for _ in range(2)] == ["allow", "nudge"]
    assert guard.steps == 2
    assert (
        client.get("absent") is None
        and client.connection_pool.connection_kwargs["decode_responses"]
    )
    guard.close()
    client.close()


def _sleep(url: str, seconds: float) -> threading.Thread:
    """Puts the server to sleep for ``seconds`` (``DEBUG SLEEP``), from a thread; returns
    once it sleeps (a ping with a short timeout times out)."""
    sleeper = redis.Redis.from_url(url)
    try:
        sleeper.execute_command("DEBUG", "SLEEP", 0)
    except redis.ResponseError as exc:
        pytest.skip(f"this redis-server refuses DEBUG SLEEP: {exc}")
    thread = threading.Thread(target=sleeper.execute_command, args=("DEBUG", "SLEEP", seconds))
    thread.start()
    probe = redis.Redis.from_url(url, socket_timeout=0.05, retry=None)
    for _ in range(200):
        try:
            probe.ping()
        except redis.TimeoutError:
            break
        time.sleep(0.005)
    else:
        raise AssertionError("the server did not go to sleep")
    probe.close()
    return thread


@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_retry_after_a_timeout_gets_the_first_answer(
    server: Server, client: Any, on_error: str
) -> None:
    """Issue 26, finding 8, against a real server that sleeps (``DEBUG SLEEP``): the check
    times out, but its write was sent and runs when the server wakes, so the call was
    counted (at-least-once). The harness retries it with the same call id: it gets the
    verdict the first try was given (step 2, allowed), not a repeat's nudge; and the run
    goes on as a guard that saw each call once."""
    run = run_id()
    user_client = redis.Redis.from_url(server.url)
    guard = RedisGuard(user_client, run, timeout=0.2, on_error=on_error)  # type: ignore[arg-type]
    local = tripwire.Guard()
    same(
        guard.check("deploy", {"v": 1}, call_id="c0"), local.check("deploy", {"v": 1}, call_id="c0")
    )
    version = client.get(guard.key)[:8]
    sleeper = _sleep(server.url, 1.0)
    if on_error == "raise":
        with pytest.raises(GuardUnavailable, match="retry it with the same call_id"):
            guard.check("search", {"q": "x"}, call_id="c1")
    else:
        assert isinstance(guard.check("search", {"q": "x"}, call_id="c1"), Unguarded)
    sleeper.join()
    for _ in range(400):  # the sleeping server's first act: the timed-out write
        if client.get(guard.key)[:8] != version:
            break
        time.sleep(0.005)
    first = local.check("search", {"q": "x"}, call_id="c1")
    retried = guard.check("search", {"q": "x"}, call_id="c1")
    same(retried, first)
    assert (retried.action, retried.step) == ("allow", 2)
    same(guard.check("search", {"q": "y"}), local.check("search", {"q": "y"}))
    assert guard.snapshot() == local.snapshot()
    guard.close()
    user_client.close()


# -- a state that is not this guard's (issue 26, finding 9) ----------------------------------


@pytest.mark.parametrize("cause", ["another-configuration", "corrupt"])
def test_a_foreign_state_follows_on_error_and_says_how_to_recover(
    server: Server, client: Any, cause: str
) -> None:
    run = run_id()
    first = RedisGuard(server.url, run, window=12)
    first.check("get_logs", {"a": 1})
    if cause == "corrupt":
        client.set(first.key, b"\x00" * 8 + b"not a snapshot")
    raising = RedisGuard(server.url, run, window=6)
    allowing = RedisGuard(server.url, run, window=6, on_error="allow")
    with pytest.raises(GuardStateError, match=r"redis-cli DEL 'tripwire:\{run-") as raised:
        raising.check("get_logs", {"a": 1})
    assert isinstance(raised.value, tripwire.SnapshotError)
    assert "another run_id" in str(raised.value) and "same configuration" in str(raised.value)
    verdict = allowing.check("get_logs", {"a": 1}, call_id="c")
    assert isinstance(verdict, Unguarded) and "GuardStateError" in verdict.error
    allowing.observe(verdict, "ok")  # ignored
    allowing.user_message()  # dropped
    with pytest.raises(GuardStateError):
        _ = allowing.steps  # inspection always raises
    # The recovery the message names: the run starts afresh.
    client.delete(first.key)
    assert raising.check("get_logs", {"a": 1}).step == 1
    assert allowing.check("get_logs", {"a": 1}).action == "nudge"


# -- options (issue 26, finding 10) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"timeout": 0}, ValueError),
        ({"timeout": -1}, ValueError),
        ({"timeout": float("nan")}, ValueError),
        ({"timeout": float("inf")}, ValueError),
        ({"timeout": "1"}, TypeError),
        ({"timeout": True}, TypeError),
        ({"attempts": 0}, ValueError),
        ({"attempts": -3}, ValueError),
        ({"attempts": 1.5}, TypeError),
        ({"attempts": True}, TypeError),
        ({"ttl": float("inf")}, ValueError),
        ({"ttl": float("nan")}, ValueError),
        ({"ttl": 0}, ValueError),
        ({"ttl": 1e300}, ValueError),
        ({"ttl": "60"}, TypeError),
    ],
    ids=repr,
)
def test_options_are_checked_when_the_guard_is_made(
    server: Server, options: dict[str, Any], error: type[Exception]
) -> None:
    name = next(iter(options))
    with pytest.raises(error, match=name):
        RedisGuard(server.url, run_id(), **options)
    with pytest.raises(error, match=name):
        AsyncRedisGuard(server.url, run_id(), **options)


def test_the_async_guard_from_a_url_warns_of_nothing(server: Server) -> None:
    """Issue 26, finding 10: AsyncRedisGuard(url) gave redis.asyncio a sync Retry, and it
    warned about converting it."""

    async def main() -> int:
        guard = AsyncRedisGuard(server.url, run_id())
        step = (await guard.check("get_logs", {"a": 1})).step
        await guard.aclose()
        return step

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert asyncio.run(main()) == 1


_SIGNALLED = """
import signal, sys
from tripwire.redis import RedisGuard
from tripwire._guard import REENTERED

guard = RedisGuard({url!r}, {run!r})
steps, refused, nested = [], [], [0]

def handler(signum, frame):
    # A handler under way lets the next signal go: Python would run handlers inside
    # handlers on a slow machine, up to a RecursionError (a RuntimeError too).
    if nested[0]:
        return
    nested[0] = 1
    try:
        steps.append(guard.check("from_handler", len(steps)).step)
    except RuntimeError as exc:
        assert str(exc) == REENTERED, exc
        refused.append(1)
    finally:
        nested[0] = 0

signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
for i in range(1500):
    steps.append(guard.check("main", i % 9).step)
signal.setitimer(signal.ITIMER_REAL, 0, 0)
assert sorted(steps) == list(range(1, guard.steps + 1)), "a step handed out twice"
print(len(steps), len(refused))
"""


def test_a_signal_handler_using_the_guard_is_refused_not_deadlocked(server: Server) -> None:
    """Issue 26, finding 4, for RedisGuard: its lock was not re-entrant, so a signal handler
    that checks a call while a check runs on the same thread waited on itself for ever. It
    now gets a clear RuntimeError (nothing counted), or runs whole between two calls."""
    code = _SIGNALLED.format(url=server.url, run=run_id())
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr[-3000:]
    steps, refused = map(int, child.stdout.split())
    assert steps > 1500 and refused > 0
