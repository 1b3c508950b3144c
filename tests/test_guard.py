"""Behaviour of ``Guard`` on both backends.

Every test taking ``tw`` runs on ``tripwire._core`` (id ``native``) and ``tripwire.reference``
(id ``reference``); tests named ``*_agree*`` run both backends side by side and compare.
The reference (``tripwire/_guard.py``) is the spec.
"""

from __future__ import annotations

from enum import IntEnum
from types import ModuleType
from typing import Any

import pytest
from _guards import (
    NATIVE,
    REFERENCE,
    TOOLS,
    VERDICT_FIELDS,
    deep_args,
    fields,
    get_logs_args,
    outcome,
    requires_native,
    state,
)

NUDGE_GET_LOGS = (
    "This is the second identical call to get_logs with the same arguments. Do not repeat it. "
    "Either use different arguments, use a different tool, or report what you have so far."
)
STOP_GET_LOGS = (
    "Stopped (loop_detected): get_logs was called 3 times with the same arguments "
    "within the last 12 calls."
)


def distinct(guard: Any, count: int, tool: str = "search_docs") -> list[Any]:
    """``count`` checks of calls that are all different from each other."""
    return [guard.check(tool, {"query": f"distinct question {i}"}) for i in range(count)]


# -- the seed's triage run ------------------------------------------------------------------


def test_seed_triage_run_stops_at_step_6(tw: ModuleType) -> None:
    guard = tw.Guard(max_steps=40)
    first_three = [
        ("list_services", {}),
        ("get_metrics", {"service": "checkout", "metric": "p99_latency", "since": "2h"}),
        ("get_deploys", {"service": "checkout", "since": "6h"}),
    ]
    verdicts = [guard.check(name, args) for name, args in first_three]
    verdicts += [guard.check("get_logs", get_logs_args(step)) for step in range(4, 41)]
    assert len(verdicts) == 40

    # Every spelling is the same action.
    assert len({v.key for v in verdicts[3:6]}) == 1
    assert [v.action for v in verdicts[:6]] == ["allow"] * 4 + ["nudge", "stop"]
    assert [v.step for v in verdicts[:6]] == [1, 2, 3, 4, 5, 6]

    nudge = verdicts[4]
    assert (nudge.reason, nudge.tool, nudge.repeats, nudge.step) == (None, "get_logs", 2, 5)
    assert nudge.message == NUDGE_GET_LOGS

    stop = verdicts[5]
    assert (stop.action, stop.reason, stop.tool, stop.repeats, stop.step) == (
        "stop",
        "loop_detected",
        "get_logs",
        3,
        6,
    )
    assert stop.key == verdicts[3].key
    assert stop.message == STOP_GET_LOGS

    # Steps 7..40: the run is over, every check answers with that stop.
    for later in verdicts[6:]:
        assert fields(later) == fields(stop)
    assert guard.stopped
    assert guard.steps == 6
    assert len(guard) == 5, "the stopped call is not appended"


def test_seed_triage_spellings_share_one_key(tw: ModuleType) -> None:
    keys = {tw.call_key("get_logs", get_logs_args(step)) for step in range(4, 9)}
    assert len(keys) == 1


def test_reread_after_write_nudges_and_does_not_stop(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"deploy": "write", "status": "read"})
    deploy = guard.check("deploy", {"service": "checkout", "version": "1.4.2"})
    first = guard.check("status", {"service": "checkout"})
    again = guard.check("status", {"service": "checkout"})
    assert [deploy.action, first.action, again.action] == ["allow", "allow", "nudge"]
    assert again.repeats == 2
    assert again.reason is None
    assert not guard.stopped


def test_read_write_read_nudges_and_does_not_stop(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"deploy": "write", "status": "read"})
    verdicts = [
        guard.check("status", {"service": "checkout"}),
        guard.check("deploy", {"service": "checkout", "version": "1.4.2"}),
        guard.check("status", {"service": "checkout"}),
    ]
    assert [v.action for v in verdicts] == ["allow", "allow", "nudge"]
    assert not guard.stopped


def test_paging_never_nudges(tw: ModuleType) -> None:
    guard = tw.Guard()
    verdicts = [guard.check("list_orders", {"cursor": f"p{i}"}) for i in range(1, 10)]
    assert [v.action for v in verdicts] == ["allow"] * 9
    assert [v.repeats for v in verdicts] == [1] * 9
    assert len({v.key for v in verdicts}) == 9
    assert guard.steps == 9
    assert not guard.stopped


# -- the window -----------------------------------------------------------------------------


def test_window_forgets_a_read_twelve_calls_ago(tw: ModuleType) -> None:
    guard = tw.Guard()
    first = guard.check("read_config", {"path": "/etc/app.toml"})
    between = distinct(guard, 12)
    again = guard.check("read_config", {"path": "/etc/app.toml"})
    assert first.step == 1
    assert [v.action for v in between] == ["allow"] * 12
    assert (again.action, again.repeats, again.step) == ("allow", 1, 14)
    assert len(guard) == 12
    assert first.key not in guard.keys()[:-1]


def test_window_still_holds_a_read_eleven_calls_ago(tw: ModuleType) -> None:
    guard = tw.Guard()
    guard.check("read_config", {"path": "/etc/app.toml"})
    distinct(guard, 11)
    again = guard.check("read_config", {"path": "/etc/app.toml"})
    assert (again.action, again.repeats, again.step) == ("nudge", 2, 13)


def test_keys_are_the_window_oldest_first(tw: ModuleType) -> None:
    guard = tw.Guard(window=3)
    verdicts = distinct(guard, 5)
    assert guard.keys() == [v.key for v in verdicts[-3:]]
    assert len(guard) == 3
    assert guard.steps == 5


def test_window_of_one(tw: ModuleType) -> None:
    guard = tw.Guard(window=1, nudge_at=2, stop_at=2)
    assert guard.check("a", {}).action == "allow"
    assert guard.check("b", {}).action == "allow"
    assert guard.check("a", {}).action == "allow"
    stop = guard.check("a", {})
    assert (stop.action, stop.reason, stop.repeats) == ("stop", "loop_detected", 2)


# -- the budget -----------------------------------------------------------------------------


def test_budget_exhausted_is_not_loop_detected(tw: ModuleType) -> None:
    guard = tw.Guard(max_steps=3)
    verdicts = distinct(guard, 3)
    assert [v.action for v in verdicts] == ["allow"] * 3
    over = guard.check("get_logs", {"service": "checkout"})
    assert (over.action, over.reason, over.tool, over.repeats, over.step) == (
        "stop",
        "budget_exhausted",
        "get_logs",
        1,
        4,
    )
    assert over.message == "Stopped (budget_exhausted): the budget of 3 tool calls is spent."
    assert guard.stopped
    assert guard.steps == 4
    assert len(guard) == 3
    assert same_stop(guard.check("other", {}), over, "other")


def same_stop(verdict: Any, stop: Any, tool: str, call_id: str | None = None) -> bool:
    """``verdict`` is the run's stop, answering a call checked after it: the stop's action,
    reason, step, repeats and message, with the call's own tool and id (issue 19: a harness
    must answer every call id of a stopped turn, and match them by id, not position)."""
    same = ("action", "reason", "step", "repeats", "message")
    return (
        all(getattr(verdict, f) == getattr(stop, f) for f in same)
        and (verdict.tool, verdict.call_id) == (tool, call_id)
        and (verdict.cached, verdict.duplicate_of) == (None, None)
    )


def test_budget_stop_of_a_repeated_call(tw: ModuleType) -> None:
    guard = tw.Guard(max_steps=1)
    guard.check("a", {})
    over = guard.check("a", {})
    assert (over.action, over.reason, over.repeats, over.step) == (
        "stop",
        "budget_exhausted",
        2,
        2,
    )


def test_loop_detected_wins_over_budget_at_the_same_step(tw: ModuleType) -> None:
    guard = tw.Guard(max_steps=2)
    assert [guard.check("a", {}).action for _ in range(2)] == ["allow", "nudge"]
    stop = guard.check("a", {})
    assert (stop.action, stop.reason, stop.repeats, stop.step) == ("stop", "loop_detected", 3, 3)


# -- stop latch and reset -------------------------------------------------------------------


def test_stop_latches_until_reset(tw: ModuleType) -> None:
    guard = tw.Guard(tools=TOOLS)
    verdicts = [guard.check("get_logs", {"service": "checkout"}) for _ in range(3)]
    stop = verdicts[-1]
    assert stop.action == "stop"
    for name, args, call_id in [
        ("get_logs", {"service": "payments"}, None),
        ("issue_refund", {"order": 7}, None),
        ("list_services", {}, "fresh-id"),
    ]:
        again = guard.check(name, args, call_id=call_id)
        assert same_stop(again, stop, name, call_id)
        assert again.key == tw.call_key(name, args)
    assert same_stop(guard.check_turn([("a", {}), ("b", {}, "c2")])[1], stop, "b", "c2")
    assert guard.steps == 3
    assert guard.stopped

    guard.reset()
    assert state(guard) == {"steps": 0, "stopped": False, "len": 0, "keys": []}
    assert "steps=0" in repr(guard)
    after = guard.check("get_logs", {"service": "checkout"})
    assert (after.action, after.repeats, after.step, after.reason) == ("allow", 1, 1, None)


def test_reset_forgets_call_ids_and_cache(tw: ModuleType) -> None:
    guard = tw.Guard(nudge_at=3, stop_at=4, tools=TOOLS)
    first = guard.check("get_logs", {"service": "checkout"}, call_id="call_1")
    guard.keep(first, ["cached line"])
    guard.reset()
    retried = guard.check("get_logs", {"service": "checkout"}, call_id="call_1")
    assert retried.step == 1, "a call id from before the reset is a new call"
    assert retried.cached is None
    assert guard.steps == 1


def test_reset_on_a_fresh_guard(tw: ModuleType) -> None:
    guard = tw.Guard()
    guard.reset()
    assert state(guard) == {"steps": 0, "stopped": False, "len": 0, "keys": []}


# -- call ids -------------------------------------------------------------------------------


def test_call_id_retry_returns_the_same_verdict(tw: ModuleType) -> None:
    guard = tw.Guard()
    distinct(guard, 2)
    first = guard.check("get_logs", get_logs_args(4), call_id="toolu_01")
    before = state(guard)
    for step in range(5, 9):
        retried = guard.check("get_logs", get_logs_args(step), call_id="toolu_01")
        assert fields(retried) == fields(first)
        assert retried.call_id == "toolu_01"
        assert state(guard) == before
    assert (first.action, first.step) == ("allow", 3)


@requires_native
def test_retried_verdicts_are_equal(tw: ModuleType) -> None:
    """A retried call id, and every check after a stop, get a verdict equal to the first
    (Verdicts compare by value; whether it is the same object is not part of the API)."""
    guard = tw.Guard()
    first = guard.check("a", {}, call_id="c1")
    retried = guard.check("a", {}, call_id="c1")
    assert retried == first
    assert (retried != first) is False
    assert guard.check("a", {}, call_id="c2") != first
    stops = [guard.check("b", {}) for _ in range(5)]
    assert stops[-1] == stops[-2]
    assert stops[-1] != retried
    assert first != "not a verdict"
    with pytest.raises(TypeError):
        hash(first)


def test_call_id_reissued_after_its_nudge_is_counted(tw: ModuleType) -> None:
    """Issue 25: a nudge is its call id's answer, so the same call asked again under that id
    is the model repeating itself, and is counted (it used to get the same nudge forever:
    a loop that could never be stopped)."""
    guard = tw.Guard()
    guard.check("get_logs", {"service": "checkout"}, call_id="c1")
    nudge = guard.check("get_logs", {"service": "checkout"}, call_id="c2")
    assert nudge.action == "nudge"
    again = guard.check("get_logs", {"service": "checkout"}, call_id="c2")
    assert (again.action, again.reason, again.repeats, again.step, again.call_id) == (
        "stop",
        "loop_detected",
        3,
        3,
        "c2",
    )
    assert guard.stopped and guard.steps == 3
    # The stop is that id's answer now: delivered again, it is given again, uncounted.
    assert fields(guard.check("get_logs", {"service": "checkout"}, call_id="c2")) == fields(again)
    assert guard.steps == 3


def test_new_call_id_is_counted(tw: ModuleType) -> None:
    guard = tw.Guard()
    guard.check("get_logs", {"service": "checkout"}, call_id="c1")
    second = guard.check("get_logs", {"service": "checkout"}, call_id="c2")
    third = guard.check("get_logs", {"service": "checkout"}, call_id="c3")
    assert [second.action, third.action] == ["nudge", "stop"]
    assert third.call_id == "c3"


def test_call_id_retry_is_the_same_id_and_the_same_call(tw: ModuleType) -> None:
    guard = tw.Guard()
    first = guard.check("get_logs", {"service": "checkout"}, call_id="c1")
    # A retried delivery (the same id and the same call) gets its first answer.
    again = guard.check("get_logs", {"service": "checkout "}, call_id="c1")
    assert fields(again) == fields(first)
    assert guard.steps == 1
    # Providers reuse ids across turns: the same id on another call is a new call, counted.
    other = guard.check("issue_refund", {"order": 1}, call_id="c1")
    assert (other.tool, other.step, other.action) == ("issue_refund", 2, "allow")
    assert guard.steps == 2
    # ... and the id now answers for that call.
    assert fields(guard.check("issue_refund", {"order": 1}, call_id="c1")) == fields(other)
    repeat = guard.check("get_logs", {"service": "checkout"}, call_id="c1")
    assert (repeat.step, repeat.repeats, repeat.action) == (3, 2, "nudge")


def test_call_id_retry_after_stop_gets_its_first_answer(tw: ModuleType) -> None:
    guard = tw.Guard()
    allowed = guard.check("a", {}, call_id="c1")
    guard.check("a", {}, call_id="c2")
    stop = guard.check("a", {}, call_id="c3")
    assert stop.action == "stop"
    assert stop.call_id == "c3"
    assert fields(guard.check("a", {}, call_id="c1")) == fields(allowed)
    assert fields(guard.check("a", {}, call_id="c3")) == fields(stop)
    latched = guard.check("a", {}, call_id="c4")
    assert same_stop(latched, stop, "a", "c4"), "the run's stop, answering call c4"


def test_call_id_memory_is_bounded(tw: ModuleType) -> None:
    memory = 128  # CALL_ID_MEMORY in both backends
    guard = tw.Guard()
    first = [guard.check("search_docs", {"page": i}, call_id=f"id{i}") for i in range(memory + 1)]
    steps = guard.steps
    # The newest 128 ids are remembered; the oldest has been forgotten.
    assert fields(guard.check("search_docs", {"page": 1}, call_id="id1")) == fields(first[1])
    assert guard.steps == steps
    forgotten = guard.check("search_docs", {"page": 0}, call_id="id0")
    assert forgotten.step == steps + 1


def test_call_id_memory_matches_the_constant() -> None:
    from tripwire import _guard

    assert _guard.CALL_ID_MEMORY == 128
    assert _guard.CACHE_ENTRIES == 1024
    if NATIVE is not None:
        assert NATIVE.CALL_ID_MEMORY == _guard.CALL_ID_MEMORY
        assert NATIVE.CACHE_ENTRIES == _guard.CACHE_ENTRIES


# -- check_turn -----------------------------------------------------------------------------


def test_check_turn_counts_identical_calls_once(tw: ModuleType) -> None:
    guard = tw.Guard()
    verdicts = guard.check_turn(
        [
            ("get_logs", get_logs_args(4), "call_a"),
            ("get_logs", get_logs_args(5), "call_b"),
            ("list_services", {}, "call_c"),
            ("get_logs", get_logs_args(6), "call_d"),
        ]
    )
    assert [v.duplicate_of for v in verdicts] == [None, 0, None, 0]
    assert [v.call_id for v in verdicts] == ["call_a", "call_b", "call_c", "call_d"]
    assert [v.action for v in verdicts] == ["allow"] * 4
    assert [v.step for v in verdicts] == [1, 1, 2, 1]
    assert [v.repeats for v in verdicts] == [1, 1, 1, 1]
    assert verdicts[1].key == verdicts[0].key == verdicts[3].key
    assert guard.steps == 2
    assert len(guard) == 2


def test_parallel_duplicates_do_not_trip_the_guard(tw: ModuleType) -> None:
    # Goose's complaint: a model that issues the same call several times in one response
    # is not looping.
    guard = tw.Guard()
    call = ("read_file", {"path": "src/app.py"})
    verdicts = guard.check_turn([call] * 5)
    assert [v.action for v in verdicts] == ["allow"] * 5
    assert [v.duplicate_of for v in verdicts] == [None, 0, 0, 0, 0]
    assert not guard.stopped
    assert guard.steps == 1

    # The next turn asking again is a repeat: counted once more.
    second = guard.check_turn([call, call])
    assert [(v.action, v.repeats, v.duplicate_of) for v in second] == [
        ("nudge", 2, None),
        ("nudge", 2, 0),
    ]
    third = guard.check_turn([call, call, ("other", {})])
    assert [(v.action, v.duplicate_of) for v in third] == [
        ("stop", None),
        ("stop", 0),
        ("stop", None),
    ]
    # The stop answers the rest of the turn, each call by its own tool.
    assert third[2].tool == "other"
    assert third[2].message == third[0].message
    assert guard.steps == 3


def test_check_turn_retry_returns_the_same_verdicts(tw: ModuleType) -> None:
    guard = tw.Guard()
    turn = [("a", {"x": 1}, "c1"), ("a", {"x": 1}, "c2"), ("b", {}, "c3")]
    first = guard.check_turn(turn)
    before = state(guard)
    again = guard.check_turn(turn)
    assert [fields(v) for v in again] == [fields(v) for v in first]
    assert state(guard) == before


def test_check_turn_accepts_pairs_lists_and_generators(tw: ModuleType) -> None:
    guard = tw.Guard()
    verdicts = guard.check_turn(iter([["a", {}], ("b", {}, None), ("a", {})]))
    assert [v.duplicate_of for v in verdicts] == [None, None, 0]
    assert [v.call_id for v in verdicts] == [None, None, None]
    assert guard.steps == 2


def test_check_turn_of_nothing(tw: ModuleType) -> None:
    guard = tw.Guard()
    assert guard.check_turn([]) == []
    assert state(guard) == {"steps": 0, "stopped": False, "len": 0, "keys": []}


def test_check_turn_after_single_checks(tw: ModuleType) -> None:
    guard = tw.Guard()
    guard.check("a", {})
    verdicts = guard.check_turn([("a", {}), ("a", {})])
    assert [(v.action, v.repeats, v.step) for v in verdicts] == [
        ("nudge", 2, 2),
        ("nudge", 2, 2),
    ]


# -- keep and cached ------------------------------------------------------------------------


@pytest.fixture
def cache_guard(tw: ModuleType) -> Any:
    """A guard whose second identical call is still allowed, so a cached result shows."""
    return tw.Guard(nudge_at=3, stop_at=4, tools=TOOLS)


def test_read_result_is_served_from_the_cache(cache_guard: Any) -> None:
    guard = cache_guard
    first = guard.check("get_logs", get_logs_args(4))
    assert first.cached is None
    result = [{"level": "error", "line": "timeout"}]
    guard.keep(first, result)
    again = guard.check("get_logs", get_logs_args(5))
    assert again.action == "allow"
    assert again.cached is result
    assert "cached=..." in repr(again)


@pytest.mark.parametrize("tool", ["issue_refund", "build_status", "unknown_tool"])
def test_write_volatile_and_unknown_are_never_cached(cache_guard: Any, tool: str) -> None:
    guard = cache_guard
    first = guard.check(tool, {"id": 1})
    guard.keep(first, "result")
    again = guard.check(tool, {"id": 1})
    assert again.action == "allow"
    assert again.cached is None


@pytest.mark.parametrize("tool", ["issue_refund", "unknown_tool"])
def test_a_call_that_may_write_clears_cached_reads(cache_guard: Any, tool: str) -> None:
    guard = cache_guard
    guard.keep(guard.check("get_logs", {"service": "checkout"}), ["old"])
    guard.check(tool, {"order": 1})
    assert guard.check("get_logs", {"service": "checkout"}).cached is None


@pytest.mark.parametrize("tool", ["build_status", "get_logs"])
def test_reads_do_not_clear_cached_reads(cache_guard: Any, tool: str) -> None:
    guard = cache_guard
    result = ["kept"]
    guard.keep(guard.check("get_logs", {"service": "checkout"}), result)
    guard.check(tool, {"other": 1})
    assert guard.check("get_logs", {"service": "checkout"}).cached is result


def test_keep_of_none_is_not_stored(tw: ModuleType) -> None:
    guard = tw.Guard(window=2, tools=TOOLS)
    guard.keep(guard.check("get_logs", {"service": "checkout"}), None)
    guard.check("build_status", {"n": 1})
    guard.check("build_status", {"n": 2})
    later = guard.check("get_logs", {"service": "checkout"})
    assert later.action == "allow"
    assert later.cached is None


def test_keep_of_a_nudge_is_not_stored(tw: ModuleType) -> None:
    guard = tw.Guard(window=2, tools=TOOLS)
    guard.check("get_logs", {"service": "checkout"})
    nudge = guard.check("get_logs", {"service": "checkout"})
    assert nudge.action == "nudge"
    assert nudge.cached is None
    guard.keep(nudge, ["from a nudge"])
    guard.check("build_status", {"n": 1})
    guard.check("build_status", {"n": 2})
    later = guard.check("get_logs", {"service": "checkout"})
    assert later.action == "allow"
    assert later.cached is None


def test_keep_of_a_stop_is_ignored(tw: ModuleType) -> None:
    guard = tw.Guard(tools=TOOLS)
    stop = [guard.check("get_logs", {}) for _ in range(3)][-1]
    guard.keep(stop, ["from a stop"])
    guard.reset()
    guard.check("get_logs", {})
    assert guard.check_turn([("get_logs", {})] * 2)[0].cached is None


def test_nudged_write_does_not_clear_cached_reads(tw: ModuleType) -> None:
    guard = tw.Guard(window=3, nudge_at=2, stop_at=3, tools=TOOLS)
    result = ["kept"]
    guard.check("issue_refund", {"order": 1})
    guard.keep(guard.check("get_logs", {"service": "checkout"}), result)
    assert guard.check("issue_refund", {"order": 1}).action == "nudge"
    # Push get_logs out of the window with calls that do not clear the cache.
    guard.check("build_status", {"n": 1})
    guard.check("build_status", {"n": 2})
    again = guard.check("get_logs", {"service": "checkout"})
    assert again.action == "allow"
    assert again.cached is result


def test_duplicate_in_a_turn_carries_the_cached_result(cache_guard: Any) -> None:
    guard = cache_guard
    result = ["cached"]
    guard.keep(guard.check("get_logs", {"service": "checkout"}), result)
    verdicts = guard.check_turn([("get_logs", {"service": "checkout"})] * 2)
    assert [v.cached for v in verdicts] == [result, result]
    assert verdicts[1].cached is result


def test_keep_takes_a_verdict(tw: ModuleType) -> None:
    guard = tw.Guard(tools=TOOLS)
    with pytest.raises(TypeError, match="keep\\(\\) takes a Verdict"):
        guard.keep({"action": "allow"}, ["x"])


def test_cache_is_bounded(tw: ModuleType) -> None:
    entries = 1024  # CACHE_ENTRIES in both backends
    guard = tw.Guard(tools=TOOLS)
    for i in range(entries + 1):
        guard.keep(guard.check("get_logs", {"page": i}), i)
    # Page 0 was the oldest entry: evicted. Page 1 is still there.
    assert guard.check("get_logs", {"page": 0}).cached is None
    assert guard.check("get_logs", {"page": 1}).cached == 1


def test_keep_refreshes_an_entry(tw: ModuleType) -> None:
    entries = 1024
    guard = tw.Guard(tools=TOOLS)
    first = guard.check("get_logs", {"page": 0})
    guard.keep(first, "old")
    for i in range(1, entries):
        guard.keep(guard.check("get_logs", {"page": i}), i)
    guard.keep(first, "new")  # page 0 becomes the newest entry
    guard.keep(guard.check("get_logs", {"page": entries}), entries)
    assert guard.check("get_logs", {"page": 0}).cached == "new"
    assert guard.check("get_logs", {"page": 1}).cached is None


def test_record_is_keep_under_its_old_name(tw: ModuleType) -> None:
    """``Guard.record`` was ``keep``'s name: it still keeps, with a DeprecationWarning whose
    text is the reference's on both backends."""
    guard = tw.Guard(tools=TOOLS)
    verdict = guard.check("get_logs", {"service": "checkout"})
    guard.observe(verdict, ["kept"])
    with pytest.warns(DeprecationWarning) as warned:
        guard.record(verdict, ["kept"])
    assert [str(w.message) for w in warned] == [
        "Guard.record() is deprecated: use Guard.keep(), which does the same"
    ]
    assert warned[0].filename == __file__  # the caller's line, not tripwire's
    guard.user_message()
    assert guard.check("get_logs", {"service": "checkout"}).cached == ["kept"]
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError):
        guard.record({"action": "allow"}, ["x"])


# -- configuration --------------------------------------------------------------------------


class Number(IntEnum):
    ZERO = 0


INVALID_CONFIGURATIONS = [
    pytest.param(
        {"window": 0},
        ValueError,
        "window must be at least 1, got 0",
        id="window=0",
    ),
    pytest.param(
        {"window": -3},
        ValueError,
        "window must be at least 1, got -3",
        id="window<0",
    ),
    pytest.param(
        {"nudge_at": 1},
        ValueError,
        "nudge_at must be at least 2, got 1",
        id="nudge_at=1",
    ),
    pytest.param(
        {"nudge_at": 0},
        ValueError,
        "nudge_at must be at least 2, got 0",
        id="nudge_at=0",
    ),
    pytest.param(
        {"stop_at": 1},
        ValueError,
        "stop_at must be at least 2, got 1",
        id="stop_at=1",
    ),
    pytest.param(
        {"nudge_at": 3, "stop_at": 2},
        ValueError,
        "stop_at (2) must not be less than nudge_at (3)",
        id="stop_at<nudge_at",
    ),
    pytest.param(
        {"window": 1, "stop_at": 3},
        ValueError,
        "stop_at (3) can never be reached with window=1: "
        "a window of 1 holds at most 2 occurrences, this one included",
        id="stop_at-unreachable",
    ),
    pytest.param(
        {"window": 4, "nudge_at": 5, "stop_at": 6},
        ValueError,
        "stop_at (6) can never be reached with window=4: "
        "a window of 4 holds at most 5 occurrences, this one included",
        id="nudge-unreachable",
    ),
    pytest.param(
        {"max_steps": 0},
        ValueError,
        "max_steps must be at least 1, got 0",
        id="max_steps=0",
    ),
    pytest.param(
        {"max_steps": -1},
        ValueError,
        "max_steps must be at least 1, got -1",
        id="max_steps<0",
    ),
    pytest.param(
        {"tools": {"get_logs": "readonly"}},
        ValueError,
        "unknown policy 'readonly' for tool 'get_logs': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="unknown-policy",
    ),
    pytest.param(
        {"tools": {"get_logs": "READ"}},
        ValueError,
        "unknown policy 'READ' for tool 'get_logs': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="policy-case",
    ),
    pytest.param(
        {"tools": {"get_logs": None}},
        ValueError,
        "unknown policy None for tool 'get_logs': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="policy-None",
    ),
    pytest.param(
        {"tools": {"get_logs": 1}},
        ValueError,
        "unknown policy 1 for tool 'get_logs': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="policy-int",
    ),
    pytest.param(
        {"tools": [("get_logs", "read")]},
        TypeError,
        "tools must be a mapping of tool name to policy, not list",
        id="tools-list",
    ),
    pytest.param(
        {"tools": {1: "read"}},
        TypeError,
        "tool names in tools must be str, not int",
        id="tool-name-int",
    ),
    pytest.param(
        {"window": True},
        TypeError,
        "window must be an int, not bool",
        id="window=True",
    ),
    pytest.param(
        {"window": "12"},
        TypeError,
        "window must be an int, not str",
        id="window=str",
    ),
    pytest.param(
        {"window": 12.0},
        TypeError,
        "window must be an int, not float",
        id="window=float",
    ),
    pytest.param(
        {"nudge_at": True},
        TypeError,
        "nudge_at must be an int, not bool",
        id="nudge_at=True",
    ),
    pytest.param(
        {"stop_at": "3"},
        TypeError,
        "stop_at must be an int, not str",
        id="stop_at=str",
    ),
    pytest.param(
        {"max_steps": "40"},
        TypeError,
        "max_steps must be an int, not str",
        id="max_steps=str",
    ),
    pytest.param(
        {"max_steps": False},
        TypeError,
        "max_steps must be an int, not bool",
        id="max_steps=False",
    ),
    pytest.param(
        {"volatile_keys": "request_id"},
        TypeError,
        "volatile_keys must be an iterable of keys such as {'request_id'}, not a single str",
        id="volatile_keys=str",
    ),
    pytest.param(
        {"volatile_keys": 5},
        TypeError,
        "'int' object is not iterable",
        id="volatile_keys=int",
    ),
    # The corners below are where the native guard has disagreed with the reference.
    pytest.param(
        {"window": Number.ZERO},
        ValueError,
        "window must be at least 1, got 0",
        id="window=IntEnum-0",
    ),
    pytest.param(
        {"window": -(10**30)},
        ValueError,
        "window must be at least 1, got -1000000000000000000000000000000",
        id="window-huge-negative",
    ),
    pytest.param(
        {"nudge_at": 2**40, "stop_at": 2**40},
        ValueError,
        "stop_at (1099511627776) can never be reached with window=12: "
        "a window of 12 holds at most 13 occurrences, this one included",
        id="nudge_at-huge",
    ),
    pytest.param(
        {"nudge_at": 3, "stop_at": 2, "max_steps": 0},
        ValueError,
        "stop_at (2) must not be less than nudge_at (3)",
        id="order-of-checks",
    ),
    pytest.param(
        {"nudge_at": 3, "stop_at": 2, "max_steps": "x"},
        ValueError,
        "stop_at (2) must not be less than nudge_at (3)",
        id="order-of-types",
    ),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), INVALID_CONFIGURATIONS)
def test_invalid_configuration_raises(
    tw: ModuleType, kwargs: dict[str, Any], error: type, message: str
) -> None:
    """Each backend raises the error and the message written here (the native guard checks
    the numbers and tools with the reference's helpers, but reads the volatile keys and
    converts the numbers itself)."""
    with pytest.raises(error) as caught:
        tw.Guard(**kwargs)
    assert type(caught.value) is error
    assert str(caught.value) == message


def test_configuration_messages(tw: ModuleType) -> None:
    cases = [
        ({"window": 0}, "window must be at least 1, got 0"),
        ({"nudge_at": 1}, "nudge_at must be at least 2, got 1"),
        ({"nudge_at": 3, "stop_at": 2}, "stop_at (2) must not be less than nudge_at (3)"),
        ({"window": True}, "window must be an int, not bool"),
        ({"max_steps": "40"}, "max_steps must be an int, not str"),
        (
            {"tools": {"get_logs": "readonly"}},
            "unknown policy 'readonly' for tool 'get_logs': "
            "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises((ValueError, TypeError)) as caught:
            tw.Guard(**kwargs)
        assert str(caught.value) == message


VALID_CONFIGURATIONS = [
    pytest.param({}, id="defaults"),
    pytest.param({"window": 1, "nudge_at": 2, "stop_at": 2}, id="smallest"),
    pytest.param({"window": 12, "nudge_at": 13, "stop_at": 13}, id="largest-stop"),
    pytest.param({"max_steps": 1}, id="max_steps=1"),
    pytest.param({"max_steps": None, "tools": None, "volatile_keys": None}, id="explicit-None"),
    pytest.param({"window": None, "nudge_at": None, "stop_at": None}, id="None-is-default"),
    pytest.param({"max_steps": 2**63}, id="max_steps=2**63"),
    # The reference takes any int; the native guard has refused these with OverflowError.
    pytest.param({"max_steps": 2**64}, id="max_steps=2**64"),
    pytest.param({"max_steps": 10**30}, id="max_steps=10**30"),
    pytest.param({"tools": {}}, id="tools-empty"),
    pytest.param({"volatile_keys": ["session"]}, id="volatile_keys-list"),
]


@pytest.mark.parametrize("kwargs", VALID_CONFIGURATIONS)
def test_valid_configuration(tw: ModuleType, kwargs: dict[str, Any]) -> None:
    guard = tw.Guard(**kwargs)
    assert guard.check("a", {}).action == "allow"


@requires_native
@pytest.mark.parametrize("kwargs", VALID_CONFIGURATIONS)
def test_valid_configuration_reprs_agree(kwargs: dict[str, Any]) -> None:
    assert NATIVE is not None
    assert outcome(lambda: repr(NATIVE.Guard(**kwargs))) == outcome(
        lambda: repr(REFERENCE.Guard(**kwargs))
    )


def test_volatile_keys_replace_the_default(tw: ModuleType) -> None:
    guard = tw.Guard(volatile_keys={"session"})
    a = guard.check("get_logs", {"service": "checkout", "session": "s1"})
    b = guard.check("get_logs", {"service": "checkout", "session": "s2"})
    c = guard.check("get_logs", {"service": "checkout", "session": "s3", "request_id": "r"})
    assert [a.action, b.action, c.action] == ["allow", "nudge", "allow"]


def test_data_arguments_are_positional_only(tw: ModuleType) -> None:
    guard = tw.Guard(tools=TOOLS)
    with pytest.raises(TypeError):
        guard.check(name="a", args={})
    with pytest.raises(TypeError):
        guard.check_turn(calls=[("a", {})])
    verdict = guard.check("get_logs", {})
    with pytest.raises(TypeError):
        guard.keep(verdict=verdict, result=["x"])
    assert guard.steps == 1


def test_options_are_keyword_only(tw: ModuleType) -> None:
    with pytest.raises(TypeError):
        tw.Guard(12)
    guard = tw.Guard()
    with pytest.raises(TypeError):
        guard.check("a", {}, "call_1")
    assert guard.steps == 0


# -- Verdict --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*VERDICT_FIELDS, "not_a_field"])
def test_verdict_is_immutable(tw: ModuleType, name: str) -> None:
    guard = tw.Guard()
    verdict = guard.check("get_logs", {"service": "checkout"})
    before = fields(verdict)
    with pytest.raises(AttributeError):
        setattr(verdict, name, "stop")
    with pytest.raises(AttributeError):
        delattr(verdict, name)
    assert fields(verdict) == before


def test_nudge_message_names_the_tool(tw: ModuleType) -> None:
    guard = tw.Guard()
    allow = guard.check("get_logs", get_logs_args(4))
    nudge = guard.check("get_logs", get_logs_args(5))
    assert allow.message is None
    assert nudge.message == NUDGE_GET_LOGS
    assert "get_logs" in nudge.message


def test_nudge_messages_count_the_repeats(tw: ModuleType) -> None:
    guard = tw.Guard(window=12, nudge_at=2, stop_at=13)
    messages = [guard.check("poll", {}).message for _ in range(12)]
    assert messages[0] is None
    ordinals = [m.split()[3] for m in messages[1:]]
    assert ordinals == [
        "second",
        "third",
        "fourth",
        "fifth",
        "sixth",
        "seventh",
        "eighth",
        "9th",
        "10th",
        "11th",
        "12th",
    ]
    stop = guard.check("poll", {})
    assert stop.message == (
        "Stopped (loop_detected): poll was called 13 times with the same arguments "
        "within the last 12 calls."
    )


TOOL_NAMES = [
    pytest.param("get_logs", id="ascii"),
    pytest.param("données", id="latin1"),
    pytest.param("検索", id="cjk"),
    pytest.param("\U0001f501tool", id="astral"),
    pytest.param("tab\tname ", id="whitespace"),
    pytest.param("", id="empty"),
    pytest.param("bad\ud800name", id="lone-surrogate"),
]


def _messages(module: ModuleType, tool: str) -> list[Any]:
    guard = module.Guard(max_steps=4, window=5)
    out = []
    for _ in range(3):
        verdict = guard.check(tool, {"q": 1})
        out.append((verdict.message, repr(verdict)))
    guard = module.Guard(max_steps=1)
    guard.check(tool, {"q": 1})
    verdict = guard.check(tool, {"q": 2})
    out.append((verdict.message, repr(verdict)))
    return out


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_messages_name_the_tool_exactly(tw: ModuleType, tool: str) -> None:
    messages = _messages(tw, tool)
    assert messages[0][0] is None
    assert f"identical call to {tool} with" in messages[1][0]
    assert f"Stopped (loop_detected): {tool} was called 3 times" in messages[2][0]
    assert "within the last 5 calls" in messages[2][0]
    assert messages[3][0] == "Stopped (budget_exhausted): the budget of 1 tool calls is spent."


@requires_native
@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_messages_and_reprs_agree(tool: str) -> None:
    assert NATIVE is not None
    assert _messages(NATIVE, tool) == _messages(REFERENCE, tool)


def test_verdict_repr(tw: ModuleType) -> None:
    guard = tw.Guard(nudge_at=3, stop_at=4, tools=TOOLS)
    first = guard.check("get_logs", {"service": "checkout"})
    key = first.key
    assert repr(first) == (
        f"Verdict(action='allow', tool='get_logs', key='{key}', repeats=1, step=1)"
    )
    guard.keep(first, ["line"])
    turn = guard.check_turn([("get_logs", {"service": "checkout"})] * 2)
    assert repr(turn[1]) == (
        f"Verdict(action='allow', duplicate_of=0, cached=..., tool='get_logs', key='{key}', "
        "repeats=2, step=2)"
    )
    guard.check("get_logs", {"service": "checkout"})
    stop = guard.check("get_logs", {"service": "checkout"})
    assert repr(stop) == (
        f"Verdict(action='stop', reason='loop_detected', tool='get_logs', key='{key}', "
        "repeats=4, step=4)"
    )


def test_verdict_key_is_the_call_key(tw: ModuleType) -> None:
    guard = tw.Guard(volatile_keys={"session"})
    args = {"service": "checkout", "session": "s", "request_id": "r"}
    verdict = guard.check("get_logs", args)
    assert verdict.key == tw.call_key("get_logs", args, volatile_keys={"session"})
    assert guard.keys() == [verdict.key]


# -- inspection -----------------------------------------------------------------------------


def test_guard_repr_shows_configuration(tw: ModuleType) -> None:
    guard = tw.Guard(
        window=5,
        nudge_at=2,
        stop_at=4,
        max_steps=10,
        tools={"get_logs": "read", "issue_refund": "write"},
    )
    assert repr(guard) == (
        "Guard(window=5, nudge_at=2, stop_at=4, max_steps=10, "
        "tools={'get_logs': 'read', 'issue_refund': 'write'}, infer=True, steps=0)"
    )
    distinct(guard, 2)
    assert repr(guard).endswith("steps=2)")
    assert repr(tw.Guard()) == (
        "Guard(window=12, nudge_at=2, stop_at=3, max_steps=None, tools={}, infer=True, steps=0)"
    )
    # Whether undeclared tools get an inferred policy (issue 16) is configuration too.
    assert "tools={}, infer=False, steps=0)" in repr(tw.Guard(infer=False))


def test_len_steps_and_keys(tw: ModuleType) -> None:
    guard = tw.Guard(window=4)
    assert (len(guard), guard.steps, guard.keys(), guard.stopped) == (0, 0, [], False)
    verdicts = distinct(guard, 6)
    assert (len(guard), guard.steps) == (4, 6)
    assert guard.keys() == [v.key for v in verdicts[2:]]
    window = guard.keys()
    assert isinstance(window, list)
    assert all(isinstance(key, str) and len(key) == 16 for key in window)


# -- failed checks change nothing -----------------------------------------------------------

BAD_CALLS = [
    pytest.param(
        lambda g: g.check("get_logs", {"service": {"checkout"}}), TypeError, id="set-in-args"
    ),
    pytest.param(lambda g: g.check(42, {}), TypeError, id="int-name"),
    pytest.param(lambda g: g.check(None, {}), TypeError, id="None-name"),
    pytest.param(lambda g: g.check(b"get_logs", {}), TypeError, id="bytes-name"),
    pytest.param(lambda g: g.check("get_logs", deep_args()), RecursionError, id="too-deep"),
    pytest.param(lambda g: g.check("get_logs", {"x": object()}), TypeError, id="unserialisable"),
    pytest.param(lambda g: g.check("get_logs", {}, call_id=7), TypeError, id="int-call-id"),
    pytest.param(lambda g: g.check("get_logs", {}, call_id=b"c"), TypeError, id="bytes-call-id"),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}, "c9"), ("get_logs", {1, 2})]),
        TypeError,
        id="turn-set-in-args",
    ),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}), "get_logs"]),
        TypeError,
        id="turn-str-call",
    ),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}), ("get_logs",)]),
        TypeError,
        id="turn-short-call",
    ),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}), ("a", {}, None, 1)]),
        TypeError,
        id="turn-long-call",
    ),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}), (7, {})]),
        TypeError,
        id="turn-int-name",
    ),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}, "c9"), ("a", {}, 5)]),
        TypeError,
        id="turn-int-call-id",
    ),
    pytest.param(
        lambda g: g.check_turn([("issue_refund", {"order": 1}), ("a", deep_args())]),
        RecursionError,
        id="turn-too-deep",
    ),
    pytest.param(lambda g: g.check_turn(5), TypeError, id="turn-not-iterable"),
    pytest.param(lambda g: g.keep("verdict", ["x"]), TypeError, id="keep-not-a-verdict"),
]


def _raising_turn() -> Any:
    yield ("issue_refund", {"order": 1}, "c9")
    raise RuntimeError("the transport dropped the turn")


BAD_CALLS.append(
    pytest.param(lambda g: g.check_turn(_raising_turn()), RuntimeError, id="turn-iter-raises")
)


@pytest.mark.parametrize(("bad", "error"), BAD_CALLS)
def test_failed_check_changes_nothing(tw: ModuleType, bad: Any, error: type) -> None:
    guard = tw.Guard(nudge_at=3, stop_at=4, tools=TOOLS)
    result = ["the cached result"]
    # list_services is an unknown tool: an allowed call clears the cache, so it goes first.
    remembered = guard.check("list_services", {}, call_id="c1")
    guard.check("build_status", {"build": 7})
    guard.keep(guard.check("get_logs", {"service": "checkout"}), result)
    before = state(guard)
    text = repr(guard)

    with pytest.raises(error):
        bad(guard)

    assert state(guard) == before
    assert repr(guard) == text
    # The call ids and the cache are as they were.
    assert fields(guard.check("list_services", {}, call_id="c1")) == fields(remembered)
    assert guard.steps == before["steps"]
    again = guard.check("get_logs", {"service": "checkout"})
    assert (again.action, again.repeats, again.step) == ("allow", 2, before["steps"] + 1)
    assert again.cached is result
    # A call id seen only by the failed turn is not remembered.
    fresh = guard.check("search_docs", {"q": "x"}, call_id="c9")
    assert fresh.step == before["steps"] + 2


def test_failed_check_on_a_stopped_guard_raises_and_stays_stopped(tw: ModuleType) -> None:
    guard = tw.Guard()
    stop = [guard.check("a", {}) for _ in range(3)][-1]
    before = state(guard)
    with pytest.raises(TypeError):
        guard.check("a", {"s": {1}})
    with pytest.raises(TypeError):
        guard.check_turn([("a", {}), ("b", {}, 1)])
    assert state(guard) == before
    assert fields(guard.check("a", {})) == fields(stop)


@requires_native
@pytest.mark.parametrize(("bad", "error"), BAD_CALLS)
def test_failed_check_errors_agree(bad: Any, error: type) -> None:
    assert NATIVE is not None
    outcomes = []
    for module in (NATIVE, REFERENCE):
        guard = module.Guard(tools=TOOLS)
        guard.check("get_logs", {})
        outcomes.append(outcome(bad, guard))
    assert outcomes[1][0] == error.__name__
    assert outcomes[0] == outcomes[1]


# -- both backends, one sequence ------------------------------------------------------------


@requires_native
def test_triage_run_verdicts_agree() -> None:
    assert NATIVE is not None
    runs = []
    for module in (NATIVE, REFERENCE):
        guard = module.Guard(max_steps=40, tools=TOOLS)
        verdicts = [guard.check("list_services", {}), guard.check("get_metrics", {"s": 1})]
        verdicts += guard.check_turn([("get_logs", get_logs_args(4), "t1")] * 2)
        for step in range(5, 41):
            verdicts.append(guard.check("get_logs", get_logs_args(step), call_id=f"s{step}"))
        runs.append(([fields(v) for v in verdicts], state(guard), repr(guard)))
    assert runs[0] == runs[1]


def test_check_turn_takes_json_text_arguments(tw: ModuleType) -> None:
    """Issue 19: OpenAI-style ``arguments`` strings go to ``check_turn`` as they are. They are
    keyed as their JSON value (respelled copies of one call are duplicates), broken text is
    keyed by its raw text and answered, and every verdict carries its own id."""
    guard = tw.Guard()
    turn = [
        ("get_logs", '{"service": "checkout", "since": "15m"}', "call_a"),
        ("get_logs", b'{"since":"15m","service":"checkout "}', "call_b"),
        ("search", '{"q": "refund', "call_c"),
        ("get_logs", {"service": "checkout", "since": "15m"}, "call_d"),
    ]
    verdicts = guard.check_turn(turn)
    assert [(v.call_id, v.action, v.duplicate_of) for v in verdicts] == [
        ("call_a", "allow", None),
        ("call_b", "allow", 0),
        ("call_c", "allow", None),
        ("call_d", "allow", 0),
    ]
    assert verdicts[0].key == tw.call_key("get_logs", {"service": "checkout", "since": "15m"})
    assert verdicts[2].invalid_arguments is not None
    assert guard.steps == 2
    # The same broken text again is the same call.
    again = guard.check_turn([("search", '{"q": "refund', "call_e")])
    assert (again[0].action, again[0].repeats) == ("nudge", 2)


def test_broken_arguments_of_an_editing_tool_keep_their_whitespace(tw: ModuleType) -> None:
    """Issue 16: broken JSON text is keyed by its raw text, whitespace collapsed, except for
    the tools that see their arguments' whitespace: a retried edit with other indentation is
    another edit, broken or not."""
    guard = tw.Guard()
    first = guard.check_json("Edit", '{"old_string": "x\n    return 1"')
    second = guard.check_json("Edit", '{"old_string": "x\n        return 1"')
    assert first.invalid_arguments is not None and first.key != second.key
    assert second.action == "allow"
    read = tw.Guard()
    a = read.check_json("Read", '{"file_path": "a.py",  ')
    b = read.check_json("Read", '{"file_path":  "a.py", ')
    assert a.key == b.key and b.action == "nudge"
