"""A guard shared by threads loses no update and never deadlocks (docs/design/guard.md).

Each threaded scenario runs in a fresh interpreter (``isolated``): a guard that deadlocks
while holding the GIL freezes every thread of its process, the test runner's included, so
join timeouts alone cannot report it. In the child, threads are joined with a timeout
(a thread still alive fails the scenario), and ``faulthandler`` dumps every thread's stack
and exits if the whole process stops; the parent fails with that dump.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _guards import BACKEND_NAMES, backend, fields, requires_native

TESTS = str(Path(__file__).resolve().parent)
JOIN_TIMEOUT = 30.0  # seconds; the biggest scenario takes about 1 s on 2 cores


def isolated(scenario: str, name: str, timeout: float = 60.0) -> None:
    """Runs ``scenario(name)`` from this module in a new interpreter; fails on an error
    or when the child hangs."""
    code = textwrap.dedent(
        f"""
        import faulthandler, sys
        faulthandler.dump_traceback_later({timeout - 5.0}, exit=True)
        sys.path.insert(0, {TESTS!r})
        import test_concurrency
        test_concurrency.{scenario}({name!r})
        """
    )
    try:
        child = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - faulthandler goes first
        pytest.fail(f"{scenario}({name!r}) hung for {timeout} s:\n{exc.stderr}")
    if child.returncode != 0:
        hung = "Timeout (" in child.stderr
        pytest.fail(
            f"{scenario}({name!r}) {'hung (deadlock?)' if hung else 'failed'}, "
            f"exit status {child.returncode}:\n{child.stderr[-6000:]}"
        )


def run_threads(count: int, work: Callable[[int], Any], timeout: float = JOIN_TIMEOUT) -> list[Any]:
    """Runs ``work(0)`` .. ``work(count - 1)`` in threads started together; their results.
    Re-raises the first error of any thread; fails if a thread is still running after
    ``timeout``."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=body, args=(i,), name=f"guard-{i}", daemon=True)
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    alive = [thread.name for thread in threads if thread.is_alive()]
    assert not alive, f"threads still running after {timeout} s (deadlock?): {alive}"
    if errors:
        raise errors[0]
    return results


def interleave_often() -> None:
    """Switch threads every 10 µs instead of every 5 ms, so they really interleave."""
    sys.setswitchinterval(1e-5)


# -- one guard, many threads ----------------------------------------------------------------


def scenario_hammer(name: str, threads: int = 8, checks: int = 100_000) -> None:
    """``threads`` threads each check ``checks`` calls of their own: no two calls are equal,
    so nothing repeats and nothing stops."""
    interleave_often()
    guard = backend(name).Guard()

    def work(index: int) -> list[int]:
        tool, check = f"tool_{index}", guard.check
        return [check(tool, i).step for i in range(checks)]

    results = run_threads(threads, work)
    total = threads * checks
    assert guard.steps == total
    assert not guard.stopped
    assert len(guard) == min(12, total)
    window = guard.keys()
    assert len(set(window)) == len(window), "the window holds only distinct calls"
    # Every check got its own step: no update lost, none counted twice.
    steps = sorted(step for thread_steps in results for step in thread_steps)
    assert steps == list(range(1, total + 1))
    # Each thread saw its own steps in increasing order.
    for thread_steps in results:
        assert thread_steps == sorted(thread_steps)


def scenario_hammer_small(name: str) -> None:
    scenario_hammer(name, threads=8, checks=5_000)


@requires_native
def test_native_guard_8_threads_x_100k_checks() -> None:
    isolated("scenario_hammer", "native")


def test_reference_guard_8_threads_x_5k_checks() -> None:
    isolated("scenario_hammer_small", "reference")


def scenario_window_is_the_last_steps(name: str) -> None:
    """Each check is decided and appended in one piece: the window ends up holding the
    keys of the last 12 steps, in step order."""
    interleave_often()
    guard = backend(name).Guard(window=12)

    def work(index: int) -> list[tuple[int, str]]:
        out = []
        for i in range(2_000):
            verdict = guard.check(f"tool_{index}", {"i": i})
            out.append((verdict.step, verdict.key))
        return out

    results = run_threads(4, work)
    by_step = dict(pair for thread in results for pair in thread)
    assert len(by_step) == guard.steps == 8_000
    assert guard.keys() == [by_step[s] for s in range(guard.steps - 11, guard.steps + 1)]


# -- many guards, many threads --------------------------------------------------------------

# One run: a few distinct calls, then a cycle of four calls that a window of 5 sees twice
# (nudges), until the budget of 30 runs out. The same verdicts however threads interleave.
RUN = [("list_services", {}), ("get_metrics", {"m": "p99"})] + [
    ("get_logs", {"service": "checkout", "i": i % 4}) for i in range(40)
]


def play(guard: Any) -> list[tuple[Any, ...]]:
    return [
        (v.action, v.reason, v.repeats, v.step, v.key)
        for v in (guard.check(tool, args) for tool, args in RUN)
    ]


def scenario_many_guards(name: str) -> None:
    interleave_often()
    module = backend(name)
    expected = play(module.Guard(window=5, max_steps=30))
    assert any(v[0] == "nudge" for v in expected)
    assert expected[-1][:2] == ("stop", "budget_exhausted")

    def work(index: int) -> int:
        guard = module.Guard(window=5, max_steps=30)
        for _ in range(50):
            assert play(guard) == expected
            guard.reset()
            assert guard.steps == 0
        play(guard)
        return guard.steps

    assert run_threads(8, work) == [expected[-1][3]] * 8


# -- call ids and turns, shared -------------------------------------------------------------


def scenario_call_ids_and_turns(name: str) -> None:
    """Threads share a guard, each with its own call ids and turns. Every verdict either is
    new (and counted) or was given before to the same call id (and not counted); each turn
    is decided in one piece."""
    interleave_often()
    module = backend(name)
    guard = module.Guard()
    iterations = 4_000 if name == "native" else 1_000

    def work(index: int) -> tuple[list[int], int]:
        counted: list[int] = []
        retried_again = 0
        for i in range(iterations):
            call_id = f"t{index}-c{i}"
            first = guard.check(f"tool_{index}", {"i": i}, call_id=call_id)
            counted.append(first.step)
            retry = guard.check(f"tool_{index}", {"i": i}, call_id=call_id)
            if fields(retry) == fields(first):
                assert retry.call_id == call_id
            else:
                # 128 call ids are remembered; other threads may have pushed this one out.
                retried_again += 1
                assert retry.step > first.step
                counted.append(retry.step)

            turn = guard.check_turn(
                [
                    (f"turn_{index}", {"i": i}, f"t{index}-a{i}"),
                    (f"turn_{index}", {"i": i}, f"t{index}-b{i}"),
                    (f"other_{index}", {"i": i}, f"t{index}-d{i}"),
                ]
            )
            assert [v.duplicate_of for v in turn] == [None, 0, None]
            assert turn[1].step == turn[0].step
            assert turn[2].step == turn[0].step + 1, "a turn is decided under one lock"
            assert [v.call_id for v in turn] == [
                f"t{index}-a{i}",
                f"t{index}-b{i}",
                f"t{index}-d{i}",
            ]
            counted += [turn[0].step, turn[2].step]
        return counted, retried_again

    results = run_threads(8, work)
    steps = sorted(step for counted, _ in results for step in counted)
    assert steps == list(range(1, guard.steps + 1))
    assert guard.steps == 8 * iterations * 3 + sum(again for _, again in results)
    assert not guard.stopped


def scenario_one_stop(name: str) -> None:
    """Threads repeating one call: exactly one stop, and everyone sees it afterwards."""
    interleave_often()
    guard = backend(name).Guard()

    def work(index: int) -> list[Any]:
        return [guard.check("get_logs", {"service": "checkout"}) for _ in range(200)]

    results = run_threads(8, work)
    verdicts = [v for thread in results for v in thread]
    assert guard.steps == 3
    assert sorted(v.step for v in verdicts if v.action != "stop") == [1, 2]
    assert {v.step for v in verdicts if v.action == "stop"} == {3}
    assert [thread[-1].action for thread in results] == ["stop"] * 8


def scenario_mixed(name: str) -> None:
    """Readers, writers, recorders and resets all at once: no exception, no deadlock, and
    the state is consistent afterwards."""
    interleave_often()
    guard = backend(name).Guard(
        nudge_at=3, stop_at=4, tools={"get_logs": "read", "deploy": "write"}
    )

    def work(index: int) -> int:
        done = 0
        for i in range(1_500):
            if index == 0 and i % 100 == 0:
                guard.reset()
            elif index == 1:
                guard.keys()
                len(guard)
                repr(guard)
                _ = guard.steps, guard.stopped
            elif index % 2 == 0:
                verdict = guard.check("get_logs", {"page": i % 30})
                guard.keep(verdict, [index, i])
                guard.check_turn([("get_logs", {"page": i % 30})] * 2)
            else:
                guard.check("deploy", {"n": index * 10_000 + i})
            done += 1
        return done

    assert run_threads(6, work) == [1_500] * 6
    assert len(guard) <= 12
    assert len(guard.keys()) == len(guard)
    guard.reset()
    assert (guard.steps, len(guard), guard.stopped) == (0, 0, False)


SCENARIOS = [
    "scenario_window_is_the_last_steps",
    "scenario_many_guards",
    "scenario_call_ids_and_turns",
    "scenario_one_stop",
    "scenario_mixed",
]


@pytest.mark.parametrize("name", BACKEND_NAMES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_threads(scenario: str, name: str) -> None:
    isolated(scenario, name)


# -- Python code running while the guard holds its lock ---------------------------------------


def scenario_gc_callback_uses_the_guard(name: str) -> None:
    """A garbage-collector callback (tracemalloc-style profilers and hypothesis install
    them) that looks at the guard. Allocating a verdict can start a collection, so the
    callback may run in the middle of a check: the guard must not be locked then."""
    import gc

    guard = backend(name).Guard()
    seen: list[int] = []
    gc.callbacks.append(lambda phase, info: seen.append(len(guard.keys())))
    gc.set_threshold(1)
    keep = [guard.check("t", i) for i in range(200)]
    assert guard.steps == len(keep) == 200
    assert seen


def scenario_gc_callback_with_threads(name: str) -> None:
    """A gc callback that never touches tripwire, and threads sharing a guard. If the
    callback runs while one thread holds the guard's lock, it can hand the GIL to another
    thread, which must not then block on that lock while holding the GIL."""
    import gc

    def callback(phase: str, info: dict[str, int]) -> None:
        for _ in range(20):
            pass

    gc.callbacks.append(callback)
    sys.setswitchinterval(1e-6)
    guard = backend(name).Guard()

    checks = 50_000 if name == "native" else 4_000

    def work(index: int) -> int:
        # Verdicts are kept, so allocations outrun deallocations and collections happen.
        keep = [guard.check(f"t{index}", i) for i in range(checks)]
        return len(keep)

    assert run_threads(4, work, timeout=10.0) == [checks] * 4
    assert guard.steps == 4 * checks


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_gc_callback_may_use_the_guard(name: str) -> None:
    isolated("scenario_gc_callback_uses_the_guard", name, timeout=8.0)


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_gc_callback_with_threads(name: str) -> None:
    isolated("scenario_gc_callback_with_threads", name, timeout=10.0)


def scenario_gc_callback_checks_on_the_guard(name: str) -> None:
    """Issue 26, finding 4: Python code that runs in the middle of a call on the same
    thread (a signal handler, a gc callback: between any two bytecodes) and itself checks
    a call on the guard. The native guard runs no Python code while locked, so such a call
    just comes before or after. The reference refuses it with a clear RuntimeError where it
    would interleave with a half-made change, counting nothing. Either way no step is
    handed out twice, and the run adds up."""
    import gc

    from tripwire._guard import REENTERED

    guard = backend(name).Guard(window=40, nudge_at=40, stop_at=41, tools={"read": "read"})
    steps: list[int] = []
    refused: list[str] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        try:
            steps.append(guard.check("inner", len(steps)).step)
        except RuntimeError as exc:
            refused.append(str(exc))

    gc.callbacks.append(callback)
    gc.set_threshold(1)
    try:
        for i in range(400):
            verdict = guard.check("read", i % 7)
            steps.append(verdict.step)
            guard.observe(verdict, [i % 3])
            steps.extend(v.step for v in guard.check_turn([("read", {"a": i}), ("read", 1)]))
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(700)
    assert refused == [REENTERED] * len(refused), sorted(set(refused))
    assert sorted(steps) == list(range(1, guard.steps + 1)), "a step handed out twice"
    assert len(guard.keys()) == len(guard) == 40
    assert steps and (name == "reference" or not refused)
    # The guard goes on, and a snapshot of it restores.
    guard.check("after", 1)
    type(guard).from_snapshot(guard.snapshot())


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_a_call_inside_a_call_on_one_thread(name: str) -> None:
    isolated("scenario_gc_callback_checks_on_the_guard", name, timeout=30.0)


def scenario_signal_handler_checks_on_the_guard(name: str) -> None:
    """Issue 26, finding 4, as reported: a signal handler (an interval timer firing every
    50 us) checks a call on the guard while the main thread checks and observes calls. The
    handler runs between any two bytecodes of the reference, so some of its calls land in
    the middle of a change: refused, never interleaved. No step is handed out twice."""
    import signal

    from tripwire._guard import REENTERED

    guard = backend(name).Guard(window=40, nudge_at=40, stop_at=41)
    steps: list[int] = []
    refused: list[str] = []

    nested = [0]

    def handler(signum: int, frame: Any) -> None:
        # On a slow machine the next signal can come before a handler returns, and Python
        # runs handlers inside handlers until its recursion limit (a RecursionError is a
        # RuntimeError too): a handler under way lets the next one go.
        if nested[0]:
            return
        nested[0] = 1
        try:
            steps.append(guard.check("from_handler", len(steps)).step)
        except RuntimeError as exc:
            refused.append(str(exc))
        finally:
            nested[0] = 0

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    try:
        for i in range(20_000):
            verdict = guard.check("main", i % 9)
            steps.append(verdict.step)
            guard.observe(verdict, [i % 4])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert refused == [REENTERED] * len(refused), sorted(set(refused))
    assert sorted(steps) == list(range(1, guard.steps + 1)), "a step handed out twice"
    assert name == "reference" or not refused
    print(f"{len(steps)} steps, {len(refused)} refused")


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="no setitimer")
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_a_signal_handler_checking_on_the_guard(name: str) -> None:
    isolated("scenario_signal_handler_checks_on_the_guard", name, timeout=60.0)


class CallsBack:
    """A result whose finaliser asks the guard something, as a logging hook might."""

    def __init__(self, guard: Any, seen: list[Any]) -> None:
        self.guard = guard
        self.seen = seen

    def __del__(self) -> None:
        self.seen.append((len(self.guard.keys()), self.guard.stopped))


RELEASES = {
    "write-clears-cache": lambda g, v: g.check("deploy", {"v": 2}),
    "keep-replaces": lambda g, v: g.keep(v, ["replacement"]),
    "reset": lambda g, v: g.reset(),
}


def scenario_result_finaliser(name: str, release: str) -> None:
    guard = backend(name).Guard(tools={"get_logs": "read", "deploy": "write"})
    seen: list[Any] = []
    verdict = guard.check("get_logs", {"service": "checkout"})
    guard.keep(verdict, CallsBack(guard, seen))
    run_threads(1, lambda index: RELEASES[release](guard, verdict), timeout=3.0)
    assert len(seen) == 1


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_result_finaliser_may_call_back_into_the_guard(name: str, release: str) -> None:
    """A cached result the guard lets go of can run Python code, and that code may use
    the guard. Only one thread uses the guard, so a deadlock shows as a live thread."""
    scenario_result_finaliser(name, release)


@requires_native
@pytest.mark.skipif(
    not hasattr(sys, "_is_gil_enabled"), reason="Python before 3.13 always has the GIL"
)
def test_free_threaded_python_keeps_the_gil_for_the_native_core() -> None:
    """Issue 17: the module is declared ``gil_used = true`` (rust/lib.rs says why), so a
    free-threaded CPython (3.13t, 3.14t) re-enables the GIL when it is imported rather than
    run the dict walk, which borrows entries, without it. On a GIL build: trivially so."""
    code = "import sys, tripwire._core; print(sys._is_gil_enabled())"
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    child = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert (child.returncode, child.stdout.strip()) == (0, "True"), child.stderr
