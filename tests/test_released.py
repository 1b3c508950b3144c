"""The rule for what a guard lets go of (``Guard._let_go`` in ``tripwire/_guard.py``,
``Released`` in ``rust/guard.rs``): a harness's object the run state stops holding is
dropped only after the change is done and the lock released, because dropping it runs its
finaliser, Python code that may use the guard. Each way the state lets go of an object is
driven here with an object whose finaliser *changes* the guard: dropped too early, the
reference refuses that change (``REENTERED``, reported as an unraisable exception) and the
native guard would deadlock on its own lock (the child process then times out)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _guards import BACKEND_NAMES, backend

TESTS = str(Path(__file__).resolve().parent)


class ChecksOnDrop(dict[str, Any]):
    """A harness's object (arguments, a result) whose finaliser checks a call on the guard.
    A dict, so that the guard can key it as arguments."""

    def __init__(self, guard: Any, log: list[str]) -> None:
        super().__init__(query="refund policy")
        self.guard = guard
        self.log = log

    def __del__(self) -> None:
        self.guard.check("probe_on_drop", {"n": len(self.log)})
        self.log.append("dropped")


def _window_pushes_out_held_arguments(g: Any, log: list[str]) -> None:
    g.check("search", ChecksOnDrop(g, log))  # allowed, not observed: its arguments are held
    for n in range(20):
        g.check("search", {"page": n})


def _observe_lets_go_of_the_arguments(g: Any, log: list[str]) -> None:
    verdict = g.check("search", ChecksOnDrop(g, log))
    g.observe(verdict, "3 rows")


def _snapshot_tells_the_question_and_lets_go(g: Any, log: list[str]) -> None:
    g.check("search", ChecksOnDrop(g, log))
    g.snapshot()


def _record_replaces_a_result(g: Any, log: list[str]) -> None:
    verdict = g.check("get_logs", {"service": "a"})
    g.record(verdict, ChecksOnDrop(g, log))
    g.record(verdict, ["replacement"])


def _record_evicts_the_oldest_result(g: Any, log: list[str]) -> None:
    first = g.check("get_logs", {"service": -1})
    g.record(first, ChecksOnDrop(g, log))
    for n in range(1100):
        g.record(g.check("get_logs", {"service": n}), [n])


def _a_write_clears_the_cache(g: Any, log: list[str]) -> None:
    g.record(g.check("get_logs", {"service": "a"}), ChecksOnDrop(g, log))
    g.check("deploy", {"v": 2})


def _reset_lets_go_of_everything(g: Any, log: list[str]) -> None:
    g.record(g.check("get_logs", {"service": "a"}), ChecksOnDrop(g, log))
    g.reset()


def _load_replaces_the_state(g: Any, log: list[str]) -> None:
    empty = g.snapshot()
    g.record(g.check("get_logs", {"service": "a"}), ChecksOnDrop(g, log))
    g.load(empty)


def _a_forgotten_call_id_lets_go_of_its_verdict(g: Any, log: list[str]) -> None:
    first = g.check("get_logs", {"service": "a"})
    g.observe(first, "3 rows")
    g.record(first, ChecksOnDrop(g, log))
    g.user_message()  # so that the same read is allowed again, and served from the cache
    served = g.check("get_logs", {"service": "a"}, call_id="c0")
    assert served.action == "allow" and served.cached is not None
    del served  # the call id's verdict still holds the result
    g.record(g.check("get_logs", {"service": "a"}), ["newer"])  # the cache lets go of it
    for n in range(1, 200):
        g.check("search", {"page": n}, call_id=f"c{n}")


RELEASES = {
    name.strip("_"): function
    for name, function in list(globals().items())
    if name.startswith("_") and callable(function) and not name.startswith("__")
}


def scenario(name: str, release: str) -> None:
    """Runs one way of letting go; fails if the finaliser did not run, or was refused."""
    unraisable: list[str] = []
    sys.unraisablehook = lambda hook: unraisable.append(f"{hook.exc_type}: {hook.exc_value}")
    guard = backend(name).Guard(tools={"get_logs": "read", "deploy": "write"})
    log: list[str] = []
    RELEASES[release](guard, log)
    assert not unraisable, unraisable
    assert log, "the object was never let go of"
    guard.check("after", {})


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_what_the_state_lets_go_of_is_dropped_after_the_lock(name: str, release: str) -> None:
    code = textwrap.dedent(
        f"""
        import faulthandler, sys
        faulthandler.dump_traceback_later(50, exit=True)
        sys.path.insert(0, {TESTS!r})
        import test_released
        test_released.scenario({name!r}, {release!r})
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    hung = "Timeout (" in child.stderr
    assert child.returncode == 0, (
        f"{'hung (a deadlock?)' if hung else 'failed'}:\n{child.stderr[-4000:]}"
    )
