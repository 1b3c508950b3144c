"""A guard shared by threads loses no update and never deadlocks (DESIGN.md §2).

Every thread join has a timeout, and a thread still alive after it fails the test rather
than hanging the run. Threads record their failures; the main thread re-raises the first.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from _guards import BACKENDS, NATIVE, REFERENCE, fields, requires_native

JOIN_TIMEOUT = 60.0  # seconds; the biggest test takes about 2 s on 2 cores


@pytest.fixture(params=BACKENDS)
def tw(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    return module


@pytest.fixture(autouse=True)
def _fast_thread_switches() -> Any:
    """Switch threads every 10 µs instead of every 5 ms, so they really interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def run_threads(count: int, work: Callable[[int], Any], timeout: float = JOIN_TIMEOUT) -> list[Any]:
    """Runs ``work(0)`` .. ``work(count - 1)`` in threads started together; their results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT)
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


# -- one guard, many threads ----------------------------------------------------------------


def hammer(guard: Any, threads: int, checks: int) -> None:
    """``threads`` threads each check ``checks`` calls of their own: no two calls are equal,
    so nothing repeats and nothing stops."""

    def work(index: int) -> list[int]:
        name = f"tool_{index}"
        check = guard.check
        steps = [check(name, i).step for i in range(checks)]
        return steps

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


@requires_native
def test_native_guard_8_threads_x_100k_checks() -> None:
    assert NATIVE is not None
    hammer(NATIVE.Guard(), threads=8, checks=100_000)


def test_reference_guard_8_threads() -> None:
    hammer(REFERENCE.Guard(), threads=8, checks=5_000)


def test_shared_guard_final_window_is_the_last_calls(tw: ModuleType) -> None:
    """Each check is decided and appended in one piece: the window ends up holding the
    keys of the last 12 steps, in step order."""
    guard = tw.Guard(window=12)
    checks = 2_000

    def work(index: int) -> list[tuple[int, str]]:
        return [
            (v.step, v.key) for v in (guard.check(f"tool_{index}", {"i": i}) for i in range(checks))
        ]

    results = run_threads(4, work)
    by_step = dict(pair for thread in results for pair in thread)
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
        for v in (guard.check(name, args) for name, args in RUN)
    ]


def test_many_guards_across_threads(tw: ModuleType) -> None:
    expected = play(tw.Guard(window=5, max_steps=30))
    rounds = 50

    def work(index: int) -> int:
        guard = tw.Guard(window=5, max_steps=30)
        for _ in range(rounds):
            assert play(guard) == expected
            guard.reset()
            assert guard.steps == 0
        play(guard)
        return guard.steps

    totals = run_threads(8, work)
    assert totals == [expected[-1][3]] * 8
    assert any(v[0] == "nudge" for v in expected)
    assert expected[-1][:2] == ("stop", "budget_exhausted")


# -- call ids and turns, shared ---------------------------------------------------------------


def test_shared_guard_with_call_ids_and_turns(tw: ModuleType) -> None:
    """Threads share a guard, each with its own call ids and turns. Every verdict either is
    new (and counted) or was given before to the same call id (and not counted); each turn
    is decided in one piece."""
    guard = tw.Guard()
    iterations = 1_000 if tw is REFERENCE else 4_000

    def work(index: int) -> tuple[list[int], int]:
        counted: list[int] = []
        retried_again = 0
        for i in range(iterations):
            call_id = f"t{index}-c{i}"
            first = guard.check(f"tool_{index}", {"i": i}, call_id=call_id)
            counted.append(first.step)
            retry = guard.check(f"tool_{index}", {"i": i}, call_id=call_id)
            if retry is first or fields(retry) == fields(first):
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


def test_threads_share_one_stop(tw: ModuleType) -> None:
    """Threads repeating one call: exactly one stop, and everyone sees it afterwards."""
    guard = tw.Guard()

    def work(index: int) -> list[Any]:
        return [guard.check("get_logs", {"service": "checkout"}) for _ in range(200)]

    results = run_threads(8, work)
    verdicts = [v for thread in results for v in thread]
    assert guard.steps == 3
    assert sorted(v.step for v in verdicts if v.action != "stop") == [1, 2]
    stops = {v.step for v in verdicts if v.action == "stop"}
    assert stops == {3}
    assert [thread[-1].action for thread in results] == ["stop"] * 8


def test_record_reset_and_inspection_under_threads(tw: ModuleType) -> None:
    """Readers, writers, recorders and resets all at once: no exception, no deadlock, and
    the state is consistent afterwards."""
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"get_logs": "read", "deploy": "write"})

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
                guard.record(verdict, [index, i])
            else:
                guard.check("deploy", {"n": index * 10_000 + i})
            done += 1
        return done

    assert run_threads(6, work) == [1_500] * 6
    assert len(guard) <= 12
    assert len(guard.keys()) == len(guard)
    guard.reset()
    assert (guard.steps, len(guard), guard.stopped) == (0, 0, False)


# -- re-entrancy ----------------------------------------------------------------------------


class CallsBack:
    """A result whose finaliser asks the guard something, as a logging hook might."""

    def __init__(self, guard: Any, seen: list[Any]) -> None:
        self.guard = guard
        self.seen = seen

    def __del__(self) -> None:
        self.seen.append((len(self.guard.keys()), self.guard.stopped))


@pytest.mark.parametrize(
    "release",
    [
        pytest.param(lambda g, v: g.check("deploy", {"v": 2}), id="write-clears-cache"),
        pytest.param(lambda g, v: g.record(v, ["replacement"]), id="record-replaces"),
        pytest.param(lambda g, v: g.reset(), id="reset"),
    ],
)
def test_result_finaliser_may_call_back_into_the_guard(
    tw: ModuleType, release: Callable[[Any, Any], Any]
) -> None:
    """A cached result let go of by the guard can run Python code; that code may use the
    guard. Run in a thread so a deadlock fails the test instead of hanging it."""
    guard = tw.Guard(tools={"get_logs": "read", "deploy": "write"})
    seen: list[Any] = []
    verdict = guard.check("get_logs", {"service": "checkout"})
    guard.record(verdict, CallsBack(guard, seen))

    def work(index: int) -> None:
        release(guard, verdict)

    # A deadlocked thread is left behind as a daemon, blocked on this test's guard only.
    run_threads(1, work, timeout=3.0)
    assert len(seen) == 1
