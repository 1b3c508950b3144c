"""Guard state as data (issue 18): snapshot and restore of a full guard, and a RedisGuard check
on loopback next to a bare PING. Prints times and ratios; asserts nothing about time.

    python benches/state.py            # needs redis-server on PATH for the second part
    python benches/state.py --polls    # only the third: a long run of distinct polls

A full guard: a window of 12 full, 128 call ids remembered (the most it keeps), the ids short
(``call_0001``) and, natively, as long as OpenAI's (29 bytes). Targets:
snapshot and restore each under 5 us natively; a RedisGuard check's p50 at most 2.5x PING's.

Third (issue 26): a RedisGuard with a poll tool over 50,000 checks, each a poll with new
arguments observed as a timeout (the worst case for the per-call counts, which are part of
the state written each check). Target: flat, the last 5,000 checks' median within 1.2x the
second 5,000's (the counts are bounded at 256 calls each, reached after 256 checks).
"""

from __future__ import annotations

import random
import shutil
import socket
import statistics
import string
import subprocess
import time
from collections.abc import Callable
from typing import Any

import tripwire.reference

try:
    import tripwire._core as native
except ImportError:  # pragma: no cover
    native = None


def openai_id(i: int) -> str:
    """A call id as OpenAI's API gives them: ``call_`` and 24 letters and digits."""
    return "call_" + "".join(random.Random(i).choices(string.ascii_letters + string.digits, k=24))


def full(module: Any, call_id: Callable[[int], str] = lambda i: f"call_{i:04d}") -> Any:
    guard = module.Guard(tools={"get_logs": "read", "deploy": "write"})
    for i in range(140):
        verdict = guard.check("deploy", {"n": i}, call_id=call_id(i))
        guard.observe(verdict, f"ok {i % 3}")
    return guard


def per_call(fn: Callable[[], Any], n: int) -> list[float]:
    """Microseconds per call, for ``n`` calls timed in batches of 100."""
    times = []
    for _ in range(max(1, n // 100)):
        start = time.perf_counter_ns()
        for _ in range(100):
            fn()
        times.append((time.perf_counter_ns() - start) / 100 / 1000)
    return times


def snapshots() -> None:
    print("snapshot / restore of a full guard (window 12 full, 128 call ids), us per call")
    rows = []
    cases: list[tuple[str, Any, Callable[[int], str]]] = [
        ("native", native, lambda i: f"call_{i:04d}"),
        ("reference", tripwire.reference, lambda i: f"call_{i:04d}"),
        # The same with ids as long as real ones (29 bytes, where call_0001 is 9).
        ("native, OpenAI ids", native, openai_id),
    ]
    for name, module, call_id in cases:
        if module is None:
            continue
        guard = full(module, call_id)
        data = guard.snapshot()
        state = guard.snapshot(state_only=True)
        twin = module.Guard(tools={"get_logs": "read", "deploy": "write"})
        n = 20_000 if module is native else 1_000
        results = {
            "snapshot()": per_call(guard.snapshot, n),
            "snapshot(state_only)": per_call(lambda g=guard: g.snapshot(state_only=True), n),
            "from_snapshot()": per_call(lambda d=data, m=module: m.Guard.from_snapshot(d), n),
            "load(state)": per_call(lambda t=twin, s=state: t.load(s), n),
        }
        for what, times in results.items():
            rows.append((name, what, statistics.median(times)))
        print(f"  {name}: {len(data)} bytes in full, {len(state)} state only")
    for name, what, median in rows:
        ratio = ""
        if name == "reference" and native is not None:
            base = next(m for n, w, m in rows if n == "native" and w == what)
            ratio = f"  ({median / base:.0f}x native)"
        print(f"  {name:18} {what:22} {median:8.2f}{ratio}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class RedisServer:
    """A redis-server on a free loopback port, for as long as the ``with`` block runs."""

    def __enter__(self) -> Any:
        import redis

        server = shutil.which("redis-server")
        assert server is not None
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        flags = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen([server, *flags], stdout=subprocess.DEVNULL)
        client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.01)
        return client

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def redis_polls(checks: int = 50_000, block: int = 5_000) -> None:
    try:
        import redis
    except ImportError:
        redis = None
    if shutil.which("redis-server") is None or redis is None:
        print("redis polls: skipped (needs redis-server and the redis package)")
        return
    from tripwire.redis import RedisGuard

    with RedisServer() as client:
        guard = RedisGuard(client, "bench-polls", tools={"job_status": "poll"})
        medians = []
        times: list[float] = []
        for i in range(checks):
            start = time.perf_counter_ns()
            verdict = guard.check("job_status", {"job": i})
            guard.observe(verdict, None, error="timed out", transient=True)
            times.append((time.perf_counter_ns() - start) / 1000)
            if len(times) == block:
                medians.append(statistics.median(times))
                times = []
        size = len(client.get(guard.key) or b"")
    print(
        f"RedisGuard, {checks:,} distinct polls each observed as a timeout: "
        f"us per check + observe (median of each {block:,})"
    )
    for n, median in enumerate(medians):
        print(f"  checks {n * block + 1:>6,}-{(n + 1) * block:>6,}  {median:7.1f}")
    ratio = medians[-1] / medians[1]
    verdict = "flat" if ratio <= 1.2 else "GROWS"
    print(f"  last / second block: {ratio:.2f}x ({verdict}); the state in redis: {size:,} bytes")


def redis_checks() -> None:
    server = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        redis = None
    if server is None or redis is None:
        print("redis: skipped (needs redis-server and the redis package)")
        return
    from tripwire.redis import RedisGuard

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    flags = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([server, *flags], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.01)
        n = 5_000

        def timed(fn: Callable[[int], Any]) -> list[float]:
            times = []
            for i in range(n):
                start = time.perf_counter_ns()
                fn(i)
                times.append((time.perf_counter_ns() - start) / 1000)
            return times

        ping = timed(lambda i: client.ping())
        guard = RedisGuard(client, "bench")
        # A run as agents make them: a few tools, arguments that vary, call ids, results
        # observed (each observe is a round trip too, timed apart).
        check = timed(lambda i: guard.check("get_logs", {"q": i % 7, "i": i}, call_id=f"c{i}"))
        guard.reset()
        cold = RedisGuard(client, "bench-cold")
        # A worker that has not seen the run's latest state: two round trips.
        other = RedisGuard(client, "bench-cold")

        def alternate(i: int) -> Any:
            return (cold if i % 2 else other).check("get_logs", {"i": i})

        alternating = timed(alternate)
        print("redis on loopback, us per call (p50 / p99)")
        base = statistics.median(ping)
        for what, times in (
            ("PING", ping),
            ("RedisGuard.check", check),
            ("check, two workers", alternating),
        ):
            p50, p99 = statistics.median(times), percentile(times, 0.99)
            print(f"  {what:22} {p50:7.1f} / {p99:7.1f}   p50 {p50 / base:.2f}x PING")
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--polls"]:
        snapshots()
        redis_checks()
    redis_polls()
