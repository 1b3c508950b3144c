"""``volatile_result_keys``: result fields that change between identical calls (a fetch
time, a request id), dropped before ``observe`` compares results.

Without the setting a tool whose every answer carries the current time looks like progress
to ``observe``: the same call repeated with nothing between is never stopped. Every test
runs on both backends (``tw``), and snapshots carry the setting across them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import tripwire
from _guards import NATIVE, REFERENCE, backend, requires_native
from _traces import run_calls

TIME = "get_current_time"
ARGS = {"timezone": "Europe/London"}
POLICY = {TIME: {"policy": "read", "volatile_result_keys": ["datetime"]}}


def clock_result(second: int) -> dict[str, Any]:
    """What mcp-server-time answers, as an MCP CallToolResult dict, at a given second."""
    value = {
        "timezone": "Europe/London",
        "datetime": f"2026-12-05T03:00:{second:02d}+00:00",
        "day_of_week": "Saturday",
        "is_dst": False,
    }
    return {"content": [{"type": "text", "text": "..."}], "structuredContent": value}


def run(guard: Any, results: list[Any], name: str = TIME, args: Any = ARGS) -> list[str]:
    """A cycle: the call, then a shell command whose output never changes, once per result;
    each allowed call observed. The verdicts, as action[/reason]."""
    calls = []
    for result in results:
        calls.append({"tool": name, "args": args, "result": result})
        calls.append({"tool": "Bash", "args": {"command": "ls"}, "result": "a"})
    return [v.action + (f"/{v.reason}" if v.reason else "") for v in run_calls(guard, calls)]


# Laps of a cycle with the same results stop it (no_progress) at the fifth call; with a clock
# in one result the laps never match, and only the shell command's own repeats stop it,
# three calls later.
CYCLE_STOP = ["allow"] * 4 + ["stop/no_progress"]
REPEAT_STOP = ["allow"] * 5 + ["nudge", "nudge", "stop/loop_detected"]


def test_a_clock_in_the_result_hides_the_cycle_without_the_setting(tw: ModuleType) -> None:
    guard = tw.Guard(tools={TIME: "volatile"})
    assert run(guard, [clock_result(s) for s in range(6)]) == REPEAT_STOP


def test_the_setting_lets_the_laps_match(tw: ModuleType) -> None:
    guard = tw.Guard(tools=POLICY)
    assert run(guard, [clock_result(s) for s in range(6)]) == CYCLE_STOP


def test_other_fields_still_tell_progress(tw: ModuleType) -> None:
    guard = tw.Guard(tools=POLICY)
    results = [clock_result(s) for s in range(6)]
    for n, result in enumerate(results):
        result["structuredContent"]["day_of_week"] = f"day {n}"
    assert run(guard, results) == REPEAT_STOP


@pytest.mark.parametrize(
    "results",
    [
        # A plain list (the short-cut path of both backends' result readers).
        pytest.param([[{"id": 1, "fetched_at": n}] for n in range(6)], id="plain-list"),
        # Nested at any depth, inside lists too.
        pytest.param(
            [{"page": {"items": [{"id": 1, "meta": {"fetched_at": n}}]}} for n in range(6)],
            id="nested",
        ),
        # JSON text, as many tools answer.
        pytest.param([f'{{"rows": [], "fetched_at": {n}}}' for n in range(6)], id="json-text"),
    ],
)
def test_keys_are_dropped_at_any_depth(tw: ModuleType, results: list[Any]) -> None:
    plain = tw.Guard(tools={"get_logs": "read"})
    assert run(plain, results, "get_logs", {"q": "x"}) == REPEAT_STOP
    told = tw.Guard(tools={"get_logs": {"policy": "read", "volatile_result_keys": ["fetched_at"]}})
    assert run(told, results, "get_logs", {"q": "x"}) == CYCLE_STOP


@pytest.mark.parametrize("key", ["native", "reference"])
def test_the_digest_drops_the_keys(key: str) -> None:
    from tripwire._policy import check_tools
    from tripwire._results import describe_result

    call_key = backend(key).call_key
    policies, _ = check_tools({"t": {"policy": "read", "volatile_result_keys": ["at"]}})
    told = policies["t"]
    one = {"rows": [{"id": 1, "at": 1}], "request_id": "a"}
    two = {"rows": [{"id": 1, "at": 2}], "request_id": "b"}
    assert (
        describe_result(one, None, None, told, call_key)[0]
        == describe_result(two, None, None, told, call_key)[0]
    )
    # The default volatile keys are still dropped; without the setting "at" counts.
    assert (
        describe_result(one, None, None, None, call_key)[0]
        != describe_result(two, None, None, None, call_key)[0]
    )


def test_empty_results_are_compared_without_the_keys() -> None:
    from tripwire._policy import check_tools
    from tripwire._results import describe_result

    policies, _ = check_tools(
        {
            "search": {
                "policy": "read",
                "empty": [{"hits": [], "took_ms": 0}],
                "volatile_result_keys": ["took_ms"],
            }
        }
    )
    assert describe_result({"hits": [], "took_ms": 9}, None, None, policies["search"])[1]
    assert not describe_result({"hits": [1], "took_ms": 0}, None, None, policies["search"])[1]


def test_repr_names_the_setting(tw: ModuleType) -> None:
    guard = tw.Guard(tools={TIME: {"policy": "read", "volatile_result_keys": ["b", "a"]}})
    assert "'volatile_result_keys': ['a', 'b']" in repr(guard)


def test_snapshots_carry_the_setting(tw: ModuleType) -> None:
    guard = tw.Guard(tools=POLICY)
    shown = run(guard, [clock_result(0)])
    restored = tw.Guard.from_snapshot(guard.snapshot())
    shown += run(restored, [clock_result(s) for s in range(1, 6)])
    assert shown == CYCLE_STOP


def test_a_configuration_without_the_setting_is_written_as_before(tw: ModuleType) -> None:
    guard = tw.Guard(tools={TIME: "read"})
    snapshot = guard.snapshot()
    assert b'"get_current_time":["read",20,false,[],"collapse"]' in snapshot
    told = tw.Guard(tools=POLICY).snapshot()
    assert b'"get_current_time":["read",20,false,[],"collapse",["datetime"]]' in told


@requires_native
def test_each_backend_restores_the_others_setting() -> None:
    assert NATIVE is not None
    for writer, reader in ((NATIVE, REFERENCE), (REFERENCE, NATIVE)):
        guard = writer.Guard(tools=POLICY)
        shown = run(guard, [clock_result(0)])
        restored = reader.Guard.from_snapshot(guard.snapshot())
        shown += run(restored, [clock_result(s) for s in range(1, 6)])
        assert shown == CYCLE_STOP


@pytest.mark.parametrize("bad", ['["datetime",1]', "[]", '"datetime"', '["a"],1'])
def test_a_corrupt_setting_in_a_configuration_is_refused(bad: str) -> None:
    # Both backends read configurations with this one function.
    from tripwire._snapshot import SnapshotError, read_config

    config = tripwire.reference.Guard(tools=POLICY)._config_bytes()
    assert read_config(config).tools[TIME].volatile_result_keys == {"datetime"}
    forged = config.replace(b'["datetime"]', bad.encode())
    with pytest.raises(SnapshotError, match="configuration does not parse"):
        read_config(forged)


def test_the_facade_guard_takes_it() -> None:
    guard = tripwire.Guard(tools=POLICY)
    assert run(guard, [clock_result(s) for s in range(6)]) == CYCLE_STOP
