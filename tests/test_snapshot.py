"""Guard state as data: snapshots, restores, loads and pickling, on both backends.

That a restored guard goes on giving the uninterrupted one's verdicts, across backends, is the
parity state machine's ``restore_from_the_other`` rule; here: the API's edges, and fuzzing
(anything that is not a snapshot raises ``ValueError`` and nothing else, and a failed load
leaves the guard as it was).
"""

from __future__ import annotations

import copy
import pickle
import struct
import zlib
from types import ModuleType
from typing import Any

import pytest
from _guards import BACKENDS, NATIVE, REFERENCE, fields, requires_native
from hypothesis import given
from hypothesis import strategies as st
from tripwire._snapshot import SnapshotError

TOOLS = {"get_logs": "read", "deploy": "write", "build": {"policy": "poll", "max_polls": 3}}


@pytest.fixture(params=BACKENDS)
def impl(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    return module


def busy(impl: ModuleType) -> Any:
    """A guard with every part of its state filled."""
    guard = impl.Guard(tools=TOOLS, max_steps=500, volatile_keys={"session"})
    for i in range(140):
        verdict = guard.check("deploy", {"n": i}, call_id=f"call-{i}")
        guard.observe(verdict, "Error: 503 try again later" if i % 5 == 0 else f"ok {i % 3}")
    read = guard.check("get_logs", {"service": "checkout"}, call_id="r1")
    guard.keep(read, {"rows": [1, 2.5, None, "é\ud800"]})
    guard.observe(read, [])
    guard.check("build", {"id": 1})
    guard.user_message()
    guard.check_turn([("get_logs", {"service": "checkout"}, "r2"), ("Edit", "{broken", "e1")])
    return guard


def test_a_snapshot_restores_the_same_guard(impl: ModuleType) -> None:
    guard = busy(impl)
    data = guard.snapshot()
    assert data[:4] == b"TWGS"
    copy = impl.Guard.from_snapshot(data)
    assert copy.snapshot() == data
    assert repr(copy) == repr(guard)
    # A retried delivery gets its first answer from the copy too.
    retried = copy.check("get_logs", {"service": "checkout"}, call_id="r2")
    assert fields(retried) == fields(guard.check("get_logs", {"service": "checkout"}, call_id="r2"))
    assert retried.step < copy.steps
    for call in [("get_logs", {"service": "checkout"}), ("deploy", {"n": 139}), ("x", {})]:
        assert fields(copy.check(*call)) == fields(guard.check(*call))


def test_pickling_is_the_snapshot(impl: ModuleType) -> None:
    guard = busy(impl)
    copy = pickle.loads(pickle.dumps(guard))
    assert type(copy) is type(guard)
    assert copy.snapshot() == guard.snapshot()


@requires_native
def verdicts_of_every_kind(impl: ModuleType) -> list[Any]:
    """Verdicts with each field set: call ids, a cached read, a duplicate in a turn, broken
    JSON arguments, failures quoted, a nudge, a stop, and a call after the stop."""
    guard = impl.Guard(tools=TOOLS, max_steps=40, nudge_at=3, stop_at=4)
    kept = []
    read = guard.check("get_logs", {"service": "checkout"}, call_id="r1")
    guard.keep(read, {"rows": [1, 2.5, None, "é\ud800"]})
    kept += [read, guard.check("get_logs", {"service": "checkout"}, call_id="r2")]
    kept += guard.check_turn([("ünï", "{broken", "e1"), ("ünï", "{broken", "e2")])
    for i in range(4):
        verdict = guard.check("deploy", {"n": i % 2}, call_id=f"d{i}")
        guard.observe(verdict, None, error=ValueError("disk full \ud800"))
        kept.append(verdict)
    kept += [guard.check("get_logs", {"service": "x"}) for _ in range(3)]
    kept += [guard.check("build", {"id": 1}) for _ in range(5)]
    kept.append(guard.check("anything", 1, call_id="late"))
    assert {v.action for v in kept} == {"allow", "nudge", "stop"}
    assert any(v.cached is not None for v in kept)
    return kept


def test_verdicts_copy_and_pickle(impl: ModuleType) -> None:
    """Issue 26, finding 5: a verdict can be copied and pickled (a fleet checks in one
    worker and observes in another), and comes back equal: every field, its message and
    repr; a deep copy's cached result is an equal copy (equality asks for the same object)."""
    for verdict in verdicts_of_every_kind(impl):
        assert copy.copy(verdict) == verdict
        for twin in (copy.deepcopy(verdict), pickle.loads(pickle.dumps(verdict))):
            assert type(twin) is type(verdict)
            assert fields(twin) | {"cached": None} == fields(verdict) | {"cached": None}
            assert twin.cached == verdict.cached
            assert repr(twin) == repr(verdict)
            if verdict.cached is None:
                assert twin == verdict


_WORKER = """
import pickle, sys
sys.path.insert(0, {tests!r})
from _guards import backend
tw = backend({name!r})
snapshot, verdict, result = pickle.loads(sys.stdin.buffer.read())
guard = tw.Guard.from_snapshot(snapshot)
guard.observe(verdict, result)
sys.stdout.buffer.write(pickle.dumps((guard.snapshot(), guard.check(verdict.tool, 1))))
"""


@pytest.mark.parametrize("name", ["native", "reference"])
def test_a_verdict_checked_in_one_process_is_observed_in_another(name: str) -> None:
    """Issue 26, finding 5, as a fleet does it: one worker checks a call and hands the
    verdict and the guard's snapshot on; another restores the guard and observes the
    call's result with that verdict. The run is the one a single guard would have had."""
    import subprocess
    import sys
    from pathlib import Path

    from _guards import backend

    tw = backend(name)
    alone = tw.Guard(tools=TOOLS)
    shared = tw.Guard(tools=TOOLS)
    for args in (1, 2, 1):
        kept = alone.check("get_logs", args, call_id="c")
        alone.observe(kept, ["same rows"])
        verdict = shared.check("get_logs", args, call_id="c")
        code = _WORKER.format(tests=str(Path(__file__).parent), name=name)
        child = subprocess.run(
            [sys.executable, "-c", code],
            input=pickle.dumps((shared.snapshot(), verdict, ["same rows"])),
            capture_output=True,
            check=True,
            timeout=60,
        )
        snapshot, next_verdict = pickle.loads(child.stdout)
        shared = tw.Guard.from_snapshot(snapshot)
        assert snapshot == alone.snapshot()
    assert fields(next_verdict) == fields(alone.check("get_logs", 1))


def test_each_backend_restores_the_others_snapshots() -> None:
    assert NATIVE is not None
    native, reference = busy(NATIVE), busy(REFERENCE)
    assert native.snapshot() == reference.snapshot()
    assert REFERENCE.Guard.from_snapshot(native.snapshot()).snapshot() == native.snapshot()
    assert NATIVE.Guard.from_snapshot(reference.snapshot()).snapshot() == native.snapshot()


def test_load_replaces_the_state_of_a_guard_made_alike(impl: ModuleType) -> None:
    guard = busy(impl)
    state = guard.snapshot(state_only=True)
    assert len(state) < len(guard.snapshot())
    fresh = impl.Guard(tools=TOOLS, max_steps=500, volatile_keys={"session"})
    fresh.load(state)
    assert fresh.snapshot() == guard.snapshot()
    with pytest.raises(SnapshotError, match="state-only snapshot has no configuration"):
        impl.Guard.from_snapshot(state)
    other = impl.Guard(tools=TOOLS, max_steps=501, volatile_keys={"session"})
    before = other.snapshot()
    with pytest.raises(ValueError, match="another configuration"):
        other.load(state)
    with pytest.raises(ValueError, match="another configuration"):
        other.load(guard.snapshot())
    assert other.snapshot() == before


def test_results_that_are_not_json_values_are_left_out(impl: ModuleType) -> None:
    def guard_with(result: Any) -> Any:
        guard = impl.Guard(tools={"get_logs": "read"}, nudge_at=3, stop_at=4)
        verdict = guard.check("get_logs", {"a": 1})
        if result is not None:
            guard.keep(verdict, result)
        return guard

    assert guard_with(("a", "tuple")).snapshot() == guard_with(None).snapshot()
    kept = impl.Guard.from_snapshot(guard_with({"rows": [1, 2]}).snapshot())
    assert kept.check("get_logs", {"a": 1}).cached == {"rows": [1, 2]}


def test_arguments_are_checked(impl: ModuleType) -> None:
    with pytest.raises(TypeError, match="a snapshot is bytes, not str"):
        impl.Guard.from_snapshot("TWGS")
    with pytest.raises(TypeError, match="state_only must be a bool"):
        impl.Guard().snapshot(state_only=1)
    data = busy(impl).snapshot()
    assert impl.Guard.from_snapshot(bytearray(data)).snapshot() == data
    assert impl.Guard.from_snapshot(memoryview(data)).snapshot() == data


def test_foreign_bytes_say_what_they_are_not(impl: ModuleType) -> None:
    data = busy(impl).snapshot()
    cases = {
        b"": "no tripwire snapshot header",
        pickle.dumps({"a": 1}): "no tripwire snapshot header",
        data[:4] + b"\x02" + data[5:]: "version 2",
        data[:-1]: "checksum",
        data[:30] + bytes([data[30] ^ 1]) + data[31:]: "checksum",
    }
    for bad, why in cases.items():
        with pytest.raises(SnapshotError, match=why):
            impl.Guard.from_snapshot(bad)


def _reframe(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def _outcome(impl: ModuleType, data: bytes) -> str:
    try:
        guard = impl.Guard.from_snapshot(data)
    except ValueError:
        return "refused"
    # Anything it takes, it writes back the same.
    assert guard.snapshot() == data
    return "restored"


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A real snapshot, changed: bytes replaced, cut out or put in, with the checksum made
    to match (so the format's own checks are what must refuse it) or not."""
    body = bytearray(SNAPSHOTS[draw(st.integers(0, len(SNAPSHOTS) - 1))][:-4])
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(body) - 1))
        kind = draw(st.sampled_from(("set", "cut", "put", "bit")))
        if kind == "set":
            body[at] = draw(st.integers(0, 255))
        elif kind == "bit":
            body[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del body[at : at + draw(st.integers(1, 16))]
        else:
            body[at:at] = draw(st.binary(min_size=1, max_size=8))
    data = bytes(body)
    return _reframe(data) if draw(st.booleans()) else data + b"\0\0\0\0"


def _snapshots() -> list[bytes]:
    small = REFERENCE.Guard(window=3, nudge_at=2, stop_at=3)
    small.check("a", {})
    stopped = REFERENCE.Guard()
    for _ in range(3):
        stopped.check("a", {}, call_id="x")
    return [busy(REFERENCE).snapshot(), small.snapshot(), stopped.snapshot()]


SNAPSHOTS = _snapshots()


@given(data=mutated() | st.binary(max_size=64) | st.binary(max_size=64).map(_reframe))
def test_anything_else_is_a_value_error_the_same_on_both_backends(data: bytes) -> None:
    outcomes = {_outcome(REFERENCE, data)}
    if NATIVE is not None:
        outcomes.add(_outcome(NATIVE, data))
    assert len(outcomes) == 1, outcomes


@given(data=mutated())
def test_a_failed_load_leaves_the_guard_as_it_was(data: bytes) -> None:
    for impl in (REFERENCE, NATIVE):
        if impl is None:
            continue
        guard = busy(impl) if impl is REFERENCE else impl.Guard.from_snapshot(SNAPSHOTS[0])
        before = guard.snapshot()
        try:
            guard.load(data)
        except ValueError:
            assert guard.snapshot() == before


def test_a_restored_guard_keeps_what_its_definitions_annotate(impl: ModuleType) -> None:
    """A guard resolves its definitions' tools when it is made (issue 32): one restored from
    a snapshot, or a pickle, is made from the snapshot's configuration and resolves them too."""
    restart = {"name": "restart", "annotations": {"destructiveHint": True}}
    lookup = {"name": "lookup", "annotations": {"readOnlyHint": True, "openWorldHint": True}}
    guard = impl.Guard(definitions=[restart, lookup])
    for copied in (impl.Guard.from_snapshot(guard.snapshot()), pickle.loads(pickle.dumps(guard))):
        assert copied.policy_of("restart") == ("write", "definition")
        assert copied.policy_of("lookup") == ("volatile", "definition")
        assert copied.policy_of("get_user") == ("read", "name")
        assert copied.policy_of("frobnicate") == (None, None)
    blank = impl.Guard(definitions=[restart, lookup])
    blank.load(guard.snapshot(state_only=True))
    assert blank.policy_of("restart") == ("write", "definition")
