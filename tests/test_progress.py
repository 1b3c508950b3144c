"""Progress-aware verdicts: ``Guard.observe`` on both backends.

``tests/scenarios/progress.json`` is a labelled suite of short agent runs. A replay runs the
steps in order through a guard: check; if allowed, ``observe(verdict, result)``; if nudged,
the call is not run (the model is told, and, as a model that ignores the nudge would, goes
on with its next scripted step); if stopped, the run ends. A *stuck* run's steps never make
progress: the guard must stop it, with the reason the scenario names. A *healthy* run must
not be stopped (nudges are allowed). Scenarios with a ``known_gap`` are runs the reference
misjudges, kept as data and expected to fail (strictly, so a fix shows up as XPASS).

The *hash-only* baseline is the pre-#6 guard: no ``observe`` calls, and policies mapped to
their pre-#6 equivalents (``poll`` becomes ``volatile``; ``max_polls`` and ``empty`` are
dropped). Without ``observe`` today's guard must give exactly those verdicts: the seed's
window count, its messages, nothing else.

Every test taking ``tw`` runs on ``tripwire._core`` (id ``native``) and ``tripwire.reference``
(id ``reference``); ``*_agree`` tests run both side by side and compare every field.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from enum import IntEnum
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import (
    HASH_NUDGE,
    HASH_STOP,
    NATIVE,
    REFERENCE,
    baseline_tools,
    deep_args,
    fields,
    get_logs_args,
    outcome,
    requires_native,
    state,
)
from _traces import run_calls
from tripwire._results import unwrap

SUITE = Path(__file__).parent / "scenarios" / "progress.json"
SCENARIOS: list[dict[str, Any]] = json.loads(SUITE.read_text(encoding="utf-8"))

# The kinds the issue asks for, each covered several times.
REQUIRED_KINDS = (
    "polling",
    "paging",
    "reread_after_write",
    "file_edits",
    "stuck_repeat",
    "abab",
    "edit_undo",
    "reworded_empty",
)
REASONS = ("loop_detected", "no_progress")


def _scenario_params() -> list[Any]:
    params = []
    for scenario in SCENARIOS:
        gap = scenario.get("known_gap")
        marks = [pytest.mark.xfail(reason=f"known gap: {gap}", strict=True)] if gap else []
        params.append(pytest.param(scenario, id=scenario["name"], marks=marks))
    return params


SCENARIO_PARAMS = _scenario_params()
SCENARIO_IDS = [scenario["name"] for scenario in SCENARIOS]


# -- replaying ------------------------------------------------------------------------------


def replay(module: ModuleType, scenario: dict[str, Any], *, progress: bool = True) -> list[Any]:
    """The verdicts of one replay: progress-aware (the scenario's policies, ``observe`` after
    each allowed call) or hash-only (baseline policies, no ``observe``)."""
    tools = scenario["tools"] if progress else baseline_tools(scenario["tools"])
    return run_calls(module.Guard(tools=tools), scenario["steps"], observe=progress)


def hash_only_model(steps: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The seed's guard, written out: a window of 12 keys, nudge at 2, stop at 3."""
    recent: deque[str] = deque(maxlen=12)
    verdicts: list[tuple[Any, ...]] = []
    for number, step in enumerate(steps, start=1):
        tool = step["tool"]
        key = REFERENCE.call_key(tool, step["args"])
        repeats = recent.count(key) + 1
        if repeats >= 3:
            message = HASH_STOP.format(tool=tool, repeats=repeats)
            verdicts.append(("stop", "loop_detected", repeats, number, message))
            break
        action = "nudge" if repeats == 2 else "allow"
        message = HASH_NUDGE.format(tool=tool) if action == "nudge" else None
        verdicts.append((action, None, repeats, number, message))
        recent.append(key)
    return verdicts


def summary(verdicts: list[Any]) -> list[tuple[Any, ...]]:
    return [(v.action, v.reason, v.repeats, v.step, v.message) for v in verdicts]


# -- the suite itself -----------------------------------------------------------------------


def test_suite_shape() -> None:
    assert len(SCENARIOS) >= 48
    names = [scenario["name"] for scenario in SCENARIOS]
    assert len(set(names)) == len(names)
    for scenario in SCENARIOS:
        name = scenario["name"]
        assert scenario["label"] in ("healthy", "stuck"), name
        assert isinstance(scenario["kind"], str) and scenario["kind"], name
        assert isinstance(scenario["note"], str) and scenario["note"], name
        assert isinstance(scenario["tools"], dict), name
        if scenario["label"] == "stuck":
            assert scenario["reason"] in REASONS, name
        else:
            assert "reason" not in scenario, name
        assert isinstance(scenario.get("known_gap", ""), str), name
        assert len(scenario["steps"]) >= 3, name
        for step in scenario["steps"]:
            assert set(step) == {"tool", "args", "result"}, name
            assert isinstance(step["tool"], str), name
        # The policies are valid, as given and mapped to the baseline.
        REFERENCE.Guard(tools=scenario["tools"])
        REFERENCE.Guard(tools=baseline_tools(scenario["tools"]))


def test_suite_covers_every_kind_several_times() -> None:
    kinds = Counter(scenario["kind"] for scenario in SCENARIOS)
    for kind in REQUIRED_KINDS:
        assert kinds[kind] >= 3, kind
    labels = Counter(scenario["label"] for scenario in SCENARIOS)
    assert labels["healthy"] >= 20
    assert labels["stuck"] >= 20


def _poll_counts(scenario: dict[str, Any]) -> list[int]:
    """How often each call to a tool declared "poll" is made in the scenario."""
    polls = {
        tool
        for tool, spec in scenario["tools"].items()
        if (spec["policy"] if isinstance(spec, dict) else spec) == "poll"
    }
    counts = Counter(
        REFERENCE.call_key(step["tool"], step["args"])
        for step in scenario["steps"]
        if step["tool"] in polls
    )
    return list(counts.values())


def test_suite_has_every_kind_of_run_it_must_judge() -> None:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for scenario in SCENARIOS:
        by_kind.setdefault(scenario["kind"], []).append(scenario)
    healthy_polls = [s for s in by_kind["polling"] if s["label"] == "healthy"]
    stuck_polls = [s for s in by_kind["polling"] if s["label"] == "stuck"]
    # Polls that finish after 3 to 15 polls, both ends of the range included.
    counts = [count for s in healthy_polls for count in _poll_counts(s)]
    assert counts and min(counts) == 3 and max(counts) == 15
    assert all(3 <= count <= 15 for count in counts)
    # Polls that never finish, bounded by max_polls.
    assert any(
        isinstance(spec, dict) and "max_polls" in spec
        for s in stuck_polls
        for spec in s["tools"].values()
    )
    # Paging through p1..p9.
    cursors = {step["args"].get("cursor") for s in by_kind["paging"] for step in s["steps"]} - {
        None
    }
    assert {f"p{i}" for i in range(1, 10)} <= cursors
    # A long mixed healthy run.
    assert any(s["label"] == "healthy" and len(s["steps"]) >= 20 for s in by_kind["long_mixed"])
    # The seed's get_logs, always [].
    assert any(
        all(step["result"] == [] for step in s["steps"] if step["tool"] == "get_logs")
        for s in by_kind["stuck_repeat"]
    )
    # Healthy runs with an empty search that then finds something.
    assert len(by_kind["empty_then_found"]) >= 3
    # Policies that list a non-text value as empty, and that take empty results as answers.
    empties = [
        spec["empty"]
        for s in SCENARIOS
        for spec in s["tools"].values()
        if isinstance(spec, dict) and "empty" in spec
    ]
    assert any(isinstance(v, dict) for values in empties if values is not False for v in values)
    assert False in empties


# -- the scenarios, on each backend ---------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIO_PARAMS)
def test_scenario(tw: ModuleType, scenario: dict[str, Any]) -> None:
    """The progress-aware guard stops every stuck run, with the reason the scenario names,
    and no healthy one."""
    verdicts = replay(tw, scenario)
    last = verdicts[-1]
    if scenario["label"] == "healthy":
        assert last.action != "stop", last.message
        assert len(verdicts) == len(scenario["steps"])
    else:
        assert last.action == "stop", "ran every step and was never stopped"
        assert last.reason == scenario["reason"], last.message


def test_the_hash_only_guard_misreads_polls_and_rewordings() -> None:
    """The seed's two blind spots, on the suite: it stops every healthy poll that is polled
    three times, and misses every reworded empty search."""
    for scenario in SCENARIOS:
        stopped = replay(REFERENCE, scenario, progress=False)[-1].action == "stop"
        if scenario["kind"] == "polling" and scenario["label"] == "healthy":
            assert stopped, scenario["name"]
        if scenario["kind"] == "reworded_empty":
            assert not stopped, scenario["name"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_without_observe_verdicts_are_hash_only(tw: ModuleType, scenario: dict[str, Any]) -> None:
    """No ``observe``, pre-#6 policies: exactly the seed's window count and messages."""
    verdicts = replay(tw, scenario, progress=False)
    assert summary(verdicts) == hash_only_model(scenario["steps"])


@requires_native
@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
@pytest.mark.parametrize("progress", [True, False], ids=["progress", "hash-only"])
def test_scenario_verdicts_agree(scenario: dict[str, Any], progress: bool) -> None:
    assert NATIVE is not None
    native = [fields(v) for v in replay(NATIVE, scenario, progress=progress)]
    reference = [fields(v) for v in replay(REFERENCE, scenario, progress=progress)]
    assert native == reference


# -- messages -------------------------------------------------------------------------------

NUDGE_UNCHANGED = (
    "This is the third identical call to get_logs with the same arguments, and the result "
    "has not changed. Do not repeat it. Either use different arguments, use a different "
    "tool, or report what you have so far."
)
STOP_UNCHANGED = (
    "Stopped (loop_detected): get_logs was called 5 times with the same arguments and the "
    "same result within the last 12 calls."
)


def test_unchanged_result_messages_say_so(tw: ModuleType) -> None:
    # "The result has not changed" once two equal results were seen (issue 16): with
    # nudge_at=3 the second call runs, and its result is the first's.
    # After the nudge, the call is run once more (issue 25: a stop rests on a result seen
    # after the nudge), and stopped when it has come back the same way stop_at - 1 times.
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"get_logs": "read"})
    ran = []
    for step in (4, 5):
        verdict = guard.check("get_logs", get_logs_args(step))
        guard.observe(verdict, [])
        ran.append(verdict.action)
    nudge = guard.check("get_logs", get_logs_args(6))
    again = guard.check("get_logs", get_logs_args(7))
    guard.observe(again, [])
    stop = guard.check("get_logs", get_logs_args(8))
    assert (*ran, nudge.action, again.action, stop.action) == (
        "allow",
        "allow",
        "nudge",
        "allow",
        "stop",
    )
    assert (nudge.repeats, stop.repeats, stop.reason) == (3, 5, "loop_detected")
    assert nudge.message == NUDGE_UNCHANGED
    assert stop.message == STOP_UNCHANGED


def test_one_observed_result_is_not_said_to_be_unchanged(tw: ModuleType) -> None:
    # One result seen, the repeat refused unseen: nothing is known to be unchanged, so the
    # message is the seed's (issue 16: the messages tell the truth). Nor is one result the
    # evidence a stop needs (issue 25): the call after the nudge is run, and the one after
    # that, its result the first's again, is stopped, saying so.
    guard = tw.Guard(tools={"get_logs": "read"})
    first = guard.check("get_logs", get_logs_args(4))
    guard.observe(first, [])
    nudge = guard.check("get_logs", get_logs_args(5))
    again = guard.check("get_logs", get_logs_args(6))
    assert (first.action, nudge.action, again.action) == ("allow", "nudge", "allow")
    assert nudge.repeats == 2
    assert nudge.message == HASH_NUDGE.format(tool="get_logs")
    guard.observe(again, [])
    stop = guard.check("get_logs", get_logs_args(7))
    assert (stop.action, stop.reason, stop.repeats) == ("stop", "loop_detected", 4)
    assert stop.message == (
        "Stopped (loop_detected): get_logs was called 4 times with the same arguments and the "
        "same result within the last 12 calls."
    )


def test_without_observe_the_messages_are_the_seeds(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"get_logs": "read"})
    verdicts = [guard.check("get_logs", get_logs_args(step)) for step in (4, 5, 6)]
    assert [v.message for v in verdicts] == [
        None,
        HASH_NUDGE.format(tool="get_logs"),
        HASH_STOP.format(tool="get_logs", repeats=3),
    ]


def test_a_changed_result_is_progress(tw: ModuleType) -> None:
    # With nudge_at=3 a second identical call runs, so its result can be seen to change.
    # (Declared: undeclared, "job_status" has no policy, and its repeats would be run and
    # judged with the thresholds one higher; issue 16.)
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"job_status": "volatile"})
    for status in ("queued", "running", "running"):
        verdict = guard.check("job_status", {"job": "j-1"})
        assert verdict.action == "allow"
        guard.observe(verdict, {"status": status})
    # Counted back to the last change: running, running, and this one.
    verdict = guard.check("job_status", {"job": "j-1"})
    assert (verdict.action, verdict.repeats) == ("nudge", 3)
    assert verdict.message is not None
    assert "third identical call" in verdict.message
    assert "the result has not changed" in verdict.message


def test_a_changed_result_resets_the_count(tw: ModuleType) -> None:
    guard = tw.Guard(nudge_at=3, stop_at=4)
    repeats = []
    for percent in (10, 40, 70, 90, 100):
        verdict = guard.check("job_status", {"job": "j-1"})
        repeats.append((verdict.action, verdict.repeats))
        guard.observe(verdict, {"percent": percent})
    assert repeats == [("allow", 1), ("allow", 2), ("allow", 2), ("allow", 2), ("allow", 2)]


def test_unchanged_results_count_as_repeats(tw: ModuleType) -> None:
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"job_status": "volatile"})
    actions = []
    for _ in range(5):
        verdict = guard.check("job_status", {"job": "j-1"})
        actions.append((verdict.action, verdict.repeats, verdict.reason))
        if verdict.action == "allow":
            guard.observe(verdict, {"status": "queued"})
    # After the nudge, one more run shows the nudge ignored (issue 25).
    assert actions == [
        ("allow", 1, None),
        ("allow", 2, None),
        ("nudge", 3, None),
        ("allow", 4, None),
        ("stop", 5, "loop_detected"),
    ]


def test_a_write_in_between_is_progress(tw: ModuleType) -> None:
    tools = {"deploy": "write", "status": "read"}
    calls = [
        ("status", {"service": "checkout"}, {"version": "1.4.1"}),
        ("deploy", {"service": "checkout", "version": "1.4.2"}, "ok"),
        ("status", {"service": "checkout"}, {"version": "1.4.2"}),
        ("deploy", {"service": "checkout", "version": "1.4.3"}, "ok"),
        ("status", {"service": "checkout"}, {"version": "1.4.3"}),
    ]
    observed, plain = tw.Guard(tools=tools), tw.Guard(tools=tools)
    with_observe, without = [], []
    for name, args, result in calls:
        verdict = observed.check(name, args)
        observed.observe(verdict, result)
        with_observe.append((verdict.action, verdict.repeats))
        without.append(plain.check(name, args).action)
    assert with_observe == [("allow", 1)] * 5
    # Without results the guard cannot tell: the seed's re-read after a write is nudged.
    assert without == ["allow", "allow", "nudge", "allow", "stop"]


def test_a_write_in_between_resets_even_an_unchanged_read(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"write_file": "write", "read_file": "read"})
    readme = {"path": "README.md"}
    for step in range(3):
        read = guard.check("read_file", readme)
        assert (read.action, read.repeats) == ("allow", 1)
        guard.observe(read, "# checkout")
        write = guard.check("write_file", {"path": f"notes/{step}.md", "content": "x"})
        assert write.action == "allow"
        guard.observe(write, "wrote 1 byte")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("get_logs", "read"),
        ("getUser", "read"),
        ("search-docs", "read"),
        ("cancel_reservation", "write"),
        ("github.create_issue", "write"),
        ("mcp__github__create_issue", "write"),
        # <service>_<verb>_<object>: the reference Slack MCP server, mcp-server-kubernetes.
        ("slack_get_channel_history", "read"),
        ("slack_post_message", "write"),
        ("kubectl_get", "read"),
        ("kubectl_get_pods", "read"),
        ("kubectl_apply", "write"),
        # A provider's server tool, by its exact name: a search's answer moves on its own.
        ("web_search", "volatile"),
        ("file_search", "read"),
        # No verb in the first two words: no policy (each repeat judged by its result).
        ("slack_reply_to_thread", None),
        ("kubectl_logs", None),
        ("job_status", None),
        ("deploy", None),
        ("restart_the_service", None),
    ],
)
def test_a_name_says_its_policy_by_its_verb(tw: ModuleType, name: str, kind: str | None) -> None:
    inferred = tw.Guard().policy_of(name)
    assert inferred == ((kind, "name") if kind else (None, None))


@pytest.mark.parametrize("between", ["inferred-read", "read", "volatile"])
def test_only_a_write_is_progress(tw: ModuleType, between: str) -> None:
    tools = {"status": "read", "lookup": "read", "clock": "volatile"}
    guard = tw.Guard(tools=tools)
    guard.observe(guard.check("status", {"service": "checkout"}), {"version": "1.4.1"})
    # search_docs is undeclared: a read by its name's verb (issue 16).
    tool = {"inferred-read": "search_docs", "read": "lookup", "volatile": "clock"}[between]
    guard.observe(guard.check(tool, {"q": 1}), [1])
    again = guard.check("status", {"service": "checkout"})
    assert (again.action, again.repeats) == ("nudge", 2)
    # One result seen: the message does not claim it is unchanged (issue 16).
    assert again.message == HASH_NUDGE.format(tool="status")


def test_a_tool_of_unknown_kind_in_between_lets_the_repeat_run(tw: ModuleType) -> None:
    # Issue 16: a tool with no policy (infer=False here; a shell command in real runs) may
    # have changed the world, so the repeat after it is run and judged by its result: on
    # real traces, `cat patch.txt` after a `sed -i` is a new question. Issue 25: the count
    # starts again after it (the trace shows nothing that says the world stayed the same),
    # so the repeats are counted from there, nudged at the second and stopped once the
    # result came back the same way after the nudge.
    guard = tw.Guard(tools={"status": "read"}, infer=False)
    guard.observe(guard.check("status", {"service": "checkout"}), {"version": "1.4.1"})
    guard.observe(guard.check("search_docs", {"q": 1}), [1])
    again = guard.check("status", {"service": "checkout"})
    assert (again.action, again.repeats, again.message) == ("allow", 1, None)
    guard.observe(again, {"version": "1.4.1"})
    nudge = guard.check("status", {"service": "checkout"})
    assert (nudge.action, nudge.repeats) == ("nudge", 2)
    run = guard.check("status", {"service": "checkout"})
    assert run.action == "allow"
    guard.observe(run, {"version": "1.4.1"})
    stop = guard.check("status", {"service": "checkout"})
    assert (stop.action, stop.reason, stop.repeats) == ("stop", "loop_detected", 4)
    assert stop.message == (
        "Stopped (loop_detected): status was called 4 times with the same arguments and the "
        "same result within the last 12 calls."
    )


def test_a_tool_of_unknown_kind_is_run_and_judged_by_its_result(tw: ModuleType) -> None:
    # Issue 16: "job_status" has no policy (no known verb); each repeat may follow a change
    # it made itself, so the thresholds move up by one: allow, allow, nudge at the third
    # occurrence, stop at the fourth while the results stay the same.
    guard = tw.Guard()
    verdicts = []
    for _ in range(4):
        verdict = guard.check("job_status", {"job": "j-1"})
        verdicts.append(verdict)
        if verdict.action == "allow":
            guard.observe(verdict, {"status": "queued"})
    assert [(v.action, v.repeats, v.reason) for v in verdicts] == [
        ("allow", 1, None),
        ("allow", 2, None),
        ("nudge", 3, None),
        ("stop", 4, "loop_detected"),
    ]
    assert verdicts[2].message is not None
    assert "third identical call" in verdicts[2].message
    assert "the result has not changed" in verdicts[2].message


def test_a_nudged_write_is_not_progress(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"status": "read", "deploy": "write"})
    deploy = {"service": "checkout", "version": "1.4.2"}
    guard.observe(guard.check("deploy", deploy), "ok")
    guard.observe(guard.check("status", {"service": "checkout"}), {"version": "1.4.2"})
    assert guard.check("deploy", deploy).action == "nudge"  # never ran
    again = guard.check("status", {"service": "checkout"})
    assert (again.action, again.repeats) == ("nudge", 2)


def test_a_repeated_write_is_still_a_repeat(tw: ModuleType) -> None:
    # A write's own repeat, with nothing between, is refused unseen as the seed's is: a
    # second identical refund is not run (issue 16 keeps this for declared and inferred
    # writes; only tools with no policy get one more).
    guard = tw.Guard(tools={"write_file": "write"})
    args = {"path": "src/tax.py", "content": "def vat(x): ..."}
    first = guard.check("write_file", args)
    guard.observe(first, "wrote 15 bytes")
    again = guard.check("write_file", args)
    assert (again.action, again.repeats) == ("nudge", 2)
    # One result seen: the message does not claim it has not changed.
    assert again.message is not None and "has not changed" not in again.message
    stop = guard.check("write_file", args)
    assert (stop.action, stop.reason, stop.repeats) == ("stop", "loop_detected", 3)
    # An inferred write is the same.
    guard = tw.Guard()
    guard.observe(guard.check("cancel_order", {"order": 7}), "cancelled")
    assert guard.check("cancel_order", {"order": 7}).action == "nudge"


# -- polls ----------------------------------------------------------------------------------


def test_poll_runs_up_to_max_polls_then_stops(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"build_status": {"policy": "poll", "max_polls": 5}})
    verdicts = []
    for _ in range(6):
        verdict = guard.check("build_status", {"build_id": "b-5003"})
        verdicts.append(verdict)
        guard.observe(verdict, {"status": "queued"})
    assert [(v.action, v.repeats) for v in verdicts[:5]] == [("allow", n) for n in range(1, 6)]
    stop = verdicts[5]
    assert (stop.action, stop.reason, stop.repeats, stop.step) == ("stop", "loop_detected", 6, 6)
    assert stop.message == (
        "Stopped (loop_detected): build_status was polled 6 times with the same arguments, "
        "more than its limit of 5."
    )
    assert guard.stopped


def test_poll_default_limit_is_20(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"build_status": "poll"})
    actions = [guard.check("build_status", {"build_id": "b-1"}).action for _ in range(21)]
    assert actions == ["allow"] * 20 + ["stop"]


@pytest.mark.parametrize("observe", [True, False], ids=["observed", "not-observed"])
def test_poll_is_never_nudged(tw: ModuleType, observe: bool) -> None:
    guard = tw.Guard(tools={"build_status": {"policy": "poll", "max_polls": 12}})
    for _ in range(12):
        verdict = guard.check("build_status", {"build_id": "b-1"})
        assert (verdict.action, verdict.message) == ("allow", None)
        if observe:
            guard.observe(verdict, "pending")


def test_polls_are_counted_per_call(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"job_status": {"policy": "poll", "max_polls": 3}})
    verdicts = [guard.check("job_status", {"job": job}) for _ in range(3) for job in ("eu", "us")]
    assert [v.action for v in verdicts] == ["allow"] * 6
    assert guard.check("job_status", {"job": "eu"}).action == "stop"


def test_polls_are_counted_over_the_run_not_the_window(tw: ModuleType) -> None:
    guard = tw.Guard(window=4, tools={"job_status": {"policy": "poll", "max_polls": 2}})
    actions = []
    for round_ in range(3):
        actions.append(guard.check("job_status", {"job": "j"}).action)
        for i in range(5):  # more than the window: the earlier poll has left it
            guard.check("search_docs", {"query": f"round {round_} question {i}"})
    assert actions == ["allow", "allow", "stop"]


def test_reset_forgets_polls(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"job_status": {"policy": "poll", "max_polls": 1}})
    assert guard.check("job_status", {"job": "j"}).action == "allow"
    guard.reset()
    assert guard.check("job_status", {"job": "j"}).action == "allow"
    assert guard.check("job_status", {"job": "j"}).action == "stop"


def test_poll_limit_before_budget(tw: ModuleType) -> None:
    guard = tw.Guard(max_steps=1, tools={"job_status": {"policy": "poll", "max_polls": 1}})
    guard.check("job_status", {"job": "j"})
    stop = guard.check("job_status", {"job": "j"})
    assert (stop.reason, stop.repeats) == ("loop_detected", 2)
    guard = tw.Guard(max_steps=1, tools={"job_status": "poll"})
    guard.check("job_status", {"job": "j"})
    stop = guard.check("job_status", {"job": "j"})
    assert (stop.reason, stop.repeats) == ("budget_exhausted", 2)


# -- cycles ---------------------------------------------------------------------------------


def _edit(old: str, new: str) -> dict[str, Any]:
    return {"path": "src/checkout/rates.py", "old": old, "new": new}


def test_edit_undo_stops_with_no_progress(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"edit_file": "write"})
    verdicts = []
    for i in range(5):
        args = _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20")
        verdict = guard.check("edit_file", args)
        verdicts.append(verdict)
        guard.observe(verdict, "applied 1 edit")
    assert [v.action for v in verdicts] == ["allow"] * 4 + ["stop"]
    stop = verdicts[4]
    assert (stop.reason, stop.tool, stop.repeats, stop.step) == ("no_progress", "edit_file", 1, 5)
    assert stop.message == (
        "Stopped (no_progress): the last 4 calls went twice round the same cycle "
        "(edit_file -> edit_file) with the same results; edit_file would start a third round."
    )


def test_cycle_names_every_tool_of_the_cycle(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"read_file": "read", "edit_file": "write"})
    cycle = [
        ("read_file", {"path": "rates.py"}, "TAX = 0.20"),
        ("edit_file", _edit("0.20", "0.2"), "ok"),
        ("read_file", {"path": "rates.py"}, "TAX = 0.2"),
        ("edit_file", _edit("0.2", "0.20"), "ok"),
    ]
    for name, args, result in cycle * 2:
        verdict = guard.check(name, args)
        assert verdict.action == "allow"
        guard.observe(verdict, result)
    stop = guard.check("read_file", {"path": "rates.py"})
    assert stop.reason == "no_progress"
    assert stop.message == (
        "Stopped (no_progress): the last 8 calls went twice round the same cycle "
        "(read_file -> edit_file -> read_file -> edit_file) with the same results from its writes; "
        "read_file would start a third round."
    )


def test_a_cycle_of_reads_whose_results_change_is_progress(tw: ModuleType) -> None:
    # No writes in the cycle: every result must repeat, and here none does. (nudge_at=3, so
    # that the re-reads run and their results can be seen to change.)
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"queue_depth": "read", "error_rate": "read"})
    for i in range(8):
        depth = guard.check("queue_depth", {"queue": "refunds"})
        guard.observe(depth, {"depth": 900 - 100 * i})
        errors = guard.check("error_rate", {"service": "refunds"})
        assert (depth.action, errors.action) == ("allow", "allow")
        guard.observe(errors, {"rate": 0.3 - 0.03 * i})


def test_a_cycle_whose_writes_results_change_is_progress(tw: ModuleType) -> None:
    # Writes in the cycle: their results are what must repeat; here each edit saves a new
    # revision, so the world does move on, whatever the reads in between say.
    guard = tw.Guard(tools={"edit_file": "write", "run_tests": "read"})
    for i in range(8):
        args = _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20")
        edit = guard.check("edit_file", args)
        guard.observe(edit, f"saved revision {i + 1}")
        tests = guard.check("run_tests", {"path": "tests"})
        assert (edit.action, tests.action) == ("allow", "allow")
        guard.observe(tests, "1 failed in 0.42s")


def _edit_and_test(tw: ModuleType, edit_results: list[str], test_results: list[str]) -> list[Any]:
    """Edit, test, undo, test, ... (one edit and one test run per result), then the edit
    that would start the next lap."""
    guard = tw.Guard(tools={"edit_file": "write", "run_tests": "read"})
    verdicts = []
    for i, (edited, tested) in enumerate(zip(edit_results, test_results, strict=True)):
        args = _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20")
        for name, call, result in (
            ("edit_file", args, edited),
            ("run_tests", {"path": "tests/test_tax.py"}, tested),
        ):
            verdict = guard.check(name, call)
            verdicts.append(verdict)
            if verdict.action == "allow":
                guard.observe(verdict, result)
    verdicts.append(guard.check("edit_file", _edit("0.20", "0.2")))
    return verdicts


TIMED_TESTS = [
    "FAILED test_vat_half_cent\n1 failed, 11 passed in 0.42s",
    "FAILED test_vat_cents\n1 failed, 11 passed in 0.47s",
    "FAILED test_vat_half_cent\n1 failed, 11 passed in 0.44s",
    "FAILED test_vat_cents\n1 failed, 11 passed in 0.51s",
]


def test_a_write_cycle_stops_though_the_reads_in_between_differ(tw: ModuleType) -> None:
    # The test runs print their timings, so no two laps read the same; the edits put the
    # file back each lap, and their results repeat: edit, test, undo, test, twice round.
    verdicts = _edit_and_test(tw, ["applied 1 edit"] * 4, TIMED_TESTS)
    assert [v.action for v in verdicts] == ["allow"] * 8 + ["stop"]
    stop = verdicts[8]
    assert (stop.reason, stop.tool, stop.repeats, stop.step) == ("no_progress", "edit_file", 1, 9)
    assert stop.message is not None
    assert stop.message.startswith(
        "Stopped (no_progress): the last 8 calls went twice round the same cycle "
        "(edit_file -> run_tests -> edit_file -> run_tests)"
    )
    assert stop.message.endswith("edit_file would start a third round.")


def test_a_write_cycle_needs_the_writes_results_to_repeat(tw: ModuleType) -> None:
    # The same run, but one edit of the second lap did something else: not the same cycle.
    edits = ["applied 1 edit", "applied 1 edit", "applied 1 edit", "old text not found"]
    verdicts = _edit_and_test(tw, edits, TIMED_TESTS)
    assert [v.action for v in verdicts] == ["allow"] * 9


@pytest.mark.parametrize(
    ("edit_policy", "infer"),
    [("write", True), (None, True), (None, False)],
    ids=["write", "inferred-write", "no-policy"],
)
def test_only_writes_let_the_reads_of_a_cycle_differ(
    tw: ModuleType, edit_policy: str | None, infer: bool
) -> None:
    # The same edit, test, undo, test run; only when the edits are writes (declared, or
    # inferred from the verb "edit": issue 16) may the test runs' results differ between the
    # laps. (nudge_at=4: the edits with no policy repeat their results, and would be nudged
    # as repeats before a cycle could show.)
    tools = {"run_tests": "read"} | ({"edit_file": edit_policy} if edit_policy else {})
    guard = tw.Guard(nudge_at=4, stop_at=5, tools=tools, infer=infer)
    for i in range(4):
        args = _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20")
        edit = guard.check("edit_file", args)
        guard.observe(edit, "applied 1 edit")
        tests = guard.check("run_tests", {"path": "tests/test_tax.py"})
        guard.observe(tests, TIMED_TESTS[i])
        assert (edit.action, tests.action) == ("allow", "allow")
    verdict = guard.check("edit_file", _edit("0.20", "0.2"))
    if infer:
        assert (verdict.action, verdict.reason) == ("stop", "no_progress")
    else:
        # Issue 25: the other edit (a tool of unknown kind) may have changed the world, so
        # the count starts again after it.
        assert (verdict.action, verdict.reason, verdict.repeats) == ("allow", None, 1)


def test_a_cycle_needs_observed_results(tw: ModuleType) -> None:
    # Without results, writes do not reset the count: the seed's rule nudges the third edit.
    guard = tw.Guard(tools={"edit_file": "write"})
    actions = [
        guard.check("edit_file", _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20"))
        for i in range(5)
    ]
    assert [(v.action, v.reason) for v in actions] == [
        ("allow", None),
        ("allow", None),
        ("nudge", None),
        ("nudge", None),
        ("stop", "loop_detected"),
    ]


# -- runs of empty results ------------------------------------------------------------------

EMPTY_NUDGE = (
    "3 calls to search_docs in a row returned nothing. Do not reword the same request again: "
    "try a different tool or approach, or report what you have so far."
)
# The count is of the calls that ran and came back empty: the nudged one is left out. The
# stop comes after a search that ran after the nudge (issue 25), so four came back empty.
EMPTY_STOP = "Stopped (no_progress): 4 calls to search_docs in a row returned nothing."
# An envelope that a search API sends when it finds nothing.
NO_HITS = {"results": [], "total": 0}
MARKERS = ["No results", NO_HITS, ["-"]]


def _searches(
    guard: Any, results: list[Any], tool: str = "search_docs", start: int = 0
) -> list[Any]:
    """One search per result, each worded differently (from wording ``start`` on)."""
    verdicts = []
    for i, result in enumerate(results, start=start):
        verdict = guard.check(tool, {"query": f"refund policy, wording {i}"})
        verdicts.append(verdict)
        if verdict.action == "allow":
            guard.observe(verdict, result)
    return verdicts


def test_reworded_empty_searches_nudge_then_stop(tw: ModuleType) -> None:
    # Issue 25: after the nudge, the next rewording runs; when it comes back empty too, the
    # one after it is stopped.
    guard = tw.Guard(tools={"search_docs": "read"})
    verdicts = _searches(guard, [[]] * 7)
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge", "allow", "stop", "stop"]
    nudge, stop = verdicts[3], verdicts[5]
    assert nudge.message == EMPTY_NUDGE
    assert (stop.reason, stop.step) == ("no_progress", 6)
    assert stop.message == EMPTY_STOP


EMPTY_RESULTS = [
    pytest.param(None, id="None"),
    pytest.param("", id="empty-str"),
    pytest.param(" \n\t", id="blank-str"),
    pytest.param([], id="empty-list"),
    pytest.param({}, id="empty-dict"),
    pytest.param((), id="empty-tuple"),
    pytest.param(b"", id="empty-bytes"),
    pytest.param(bytearray(), id="empty-bytearray"),
    pytest.param("No results", id="policy-text"),
    pytest.param("  No   results\n", id="policy-text-respaced"),
    pytest.param(b"No results", id="policy-text-as-bytes"),
    pytest.param({"results": [], "total": 0}, id="policy-dict"),
    pytest.param({"total": 0, "results": []}, id="policy-dict-key-order"),
    pytest.param({"results": (), "total": 0.0}, id="policy-dict-tuple-float"),
    pytest.param(["-"], id="policy-list"),
    pytest.param(("-",), id="policy-list-as-tuple"),
]
NON_EMPTY_RESULTS = [
    pytest.param(0, id="zero"),
    pytest.param(False, id="False"),
    pytest.param("0", id="str-0"),
    pytest.param([None], id="list-of-None"),
    pytest.param({"results": []}, id="envelope"),
    pytest.param({"results": [], "total": 1}, id="policy-dict-other-value"),
    pytest.param({"results": [], "total": 0, "page": 1}, id="policy-dict-extra-key"),
    pytest.param([{"results": [], "total": 0}], id="policy-dict-in-a-list"),
    pytest.param("-", id="policy-list-item"),
    pytest.param(["-", "-"], id="policy-list-longer"),
    pytest.param("No results found", id="other-text"),
    pytest.param("no results", id="policy-text-lowercase"),
    pytest.param(b" x ", id="bytes"),
]


@pytest.mark.parametrize("result", EMPTY_RESULTS)
def test_empty_results(tw: ModuleType, result: Any) -> None:
    guard = tw.Guard(tools={"search_docs": {"policy": "read", "empty": MARKERS}})
    verdicts = _searches(guard, [result] * 4)
    assert verdicts[3].action == "nudge"
    assert verdicts[3].message == EMPTY_NUDGE


@pytest.mark.parametrize("result", NON_EMPTY_RESULTS)
def test_non_empty_results(tw: ModuleType, result: Any) -> None:
    guard = tw.Guard(tools={"search_docs": {"policy": "read", "empty": MARKERS}})
    verdicts = _searches(guard, [result] * 6)
    assert [v.action for v in verdicts] == ["allow"] * 6


def test_empty_markers_belong_to_their_tool(tw: ModuleType) -> None:
    tools = {"search_tickets": {"policy": "read", "empty": ["No results", NO_HITS]}}
    guard = tw.Guard(tools=tools)
    # search_docs: results like any other, and they break every run
    verdicts = _searches(guard, ["No results", NO_HITS] * 3)
    assert [v.action for v in verdicts] == ["allow"] * 6
    verdicts = _searches(guard, ["No results", NO_HITS] * 2, tool="search_tickets")
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge"]


def test_empty_markers_are_fixed_when_the_guard_is_made(tw: ModuleType) -> None:
    markers: list[Any] = [{"results": [], "total": 0}]
    guard = tw.Guard(tools={"web_search": {"policy": "read", "empty": markers}})
    markers[0]["total"] = 1
    markers.append("No results")
    assert "'empty': [{'results': [], 'total': 0}]" in repr(guard)
    assert _searches(guard, ["No results"] * 4, tool="web_search")[3].action == "allow"
    assert _searches(guard, [NO_HITS] * 4, tool="web_search")[3].action == "nudge"


# A tool whose empty results are answers: no errors logged is the good news.
ANSWERS = {"get_logs": {"policy": "read", "empty": False}, "search_docs": "read"}


@pytest.mark.parametrize("result", [None, "", " \n", [], {}, ()], ids=repr)
def test_empty_false_never_counts_a_result_as_empty(tw: ModuleType, result: Any) -> None:
    guard = tw.Guard(tools=ANSWERS)
    verdicts = _searches(guard, [result] * 8, tool="get_logs")
    assert [v.action for v in verdicts] == ["allow"] * 8


def test_empty_false_results_break_a_run(tw: ModuleType) -> None:
    guard = tw.Guard(tools=ANSWERS)
    assert [v.action for v in _searches(guard, [[]] * 2)] == ["allow"] * 2
    assert guard.check("get_logs", {"service": "checkout"}).action == "allow"
    guard.observe(guard.check("get_logs", {"service": "payments"}), [])
    # The run starts again after the error check: three empty searches, then a nudge.
    verdicts = _searches(guard, [[]] * 4, start=2)
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge"]


def test_empty_false_still_sees_an_unchanged_repeat(tw: ModuleType) -> None:
    # nudge_at=3: two equal results must be seen before a message says so (issue 16).
    guard = tw.Guard(nudge_at=3, stop_at=4, tools=ANSWERS)
    for _ in range(2):
        guard.observe(guard.check("get_logs", {"service": "checkout"}), [])
    again = guard.check("get_logs", {"service": "checkout"})
    assert (again.action, again.repeats) == ("nudge", 3)
    assert again.message is not None and "the result has not changed" in again.message


@pytest.mark.parametrize("breaker", ["other-tool-finds", "a-find"])
def test_a_run_of_empty_results_is_broken(tw: ModuleType, breaker: str) -> None:
    guard = tw.Guard(tools={"search_docs": "read"})
    _searches(guard, [[], []])
    if breaker == "other-tool-finds":
        verdict = guard.check("list_runbooks", {"team": "payments"})
        guard.observe(verdict, [{"id": "rb-12"}])
    else:
        guard.observe(guard.check("search_docs", {"query": "refunds"}), [{"id": "doc_77"}])
    assert [v.action for v in _searches(guard, [[], []], start=2)] == ["allow", "allow"]


def test_a_run_of_empty_results_spans_tools(tw: ModuleType) -> None:
    # Rewording across two search tools in turn: one run, its tools named in run order.
    guard = tw.Guard(tools={"search_docs": "read", "search_kb": "read"})
    verdicts = []
    for i in range(7):
        tool = "search_kb" if i % 2 == 0 else "search_docs"
        verdicts.append(_searches(guard, [[]], tool=tool, start=i)[0])
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge", "allow", "stop", "stop"]
    nudge, stop = verdicts[3], verdicts[5]
    assert (nudge.tool, stop.tool, stop.reason, stop.step) == (
        "search_docs",
        "search_docs",
        "no_progress",
        6,
    )
    assert nudge.message == (
        "3 calls in a row to search_kb, search_docs returned nothing. Do not reword the same "
        "request again: try a different tool or approach, or report what you have so far."
    )
    assert stop.message == (
        "Stopped (no_progress): 4 calls in a row to search_kb, search_docs returned nothing."
    )


@pytest.mark.parametrize(
    ("result", "joins"), [([], True), ([{"id": "rb-12"}], False)], ids=["empty", "finds"]
)
def test_a_tool_outside_the_run_is_not_judged_by_it(
    tw: ModuleType, result: Any, joins: bool
) -> None:
    # The run is the searches' only: the first call to another tool runs. It asks another
    # question (issue 25: a team, not a wording), so whatever it finds, it ends the run: the
    # next search is not judged by the three before it.
    guard = tw.Guard(tools={"search_docs": "read", "list_runbooks": "read"})
    assert [v.action for v in _searches(guard, [[]] * 3)] == ["allow"] * 3
    other = guard.check("list_runbooks", {"team": "payments"})
    assert (other.action, other.message) == ("allow", None)
    guard.observe(other, result)
    after = _searches(guard, [[]], start=3)[0]
    assert (after.action, after.message) == ("allow", None)
    del joins


def test_the_count_leaves_out_nudged_calls(tw: ModuleType) -> None:
    # stop_at=5: a nudge, then a search that runs (issue 25: the evidence), in turn, until
    # six searches came back empty; the messages count the searches that ran.
    guard = tw.Guard(stop_at=5, tools={"search_docs": "read"})
    verdicts = _searches(guard, [[]] * 10)
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge", "allow"] * 3 + ["stop"]
    assert [v.message for v in verdicts[3:9:2]] == [
        EMPTY_NUDGE,
        EMPTY_NUDGE.replace("3 calls", "4 calls"),
        EMPTY_NUDGE.replace("3 calls", "5 calls"),
    ]
    assert (verdicts[9].reason, verdicts[9].message) == (
        "no_progress",
        EMPTY_STOP.replace("4 calls", "6 calls"),
    )


def test_the_count_leaves_out_a_nudged_repeat(tw: ModuleType) -> None:
    # The second search repeats the first and is nudged: it extends the run, but only the
    # calls that ran and came back empty count. The run is nudged once three did; the nudge
    # for the repeat is not the evidence a stop needs (issue 25), so it nudges, not stops.
    guard = tw.Guard(tools={"search_docs": "read"})
    verdicts = _searches(guard, [[]]) + _searches(guard, [[]] * 4)
    assert [(v.action, v.repeats) for v in verdicts] == [
        ("allow", 1),
        ("nudge", 2),
        ("allow", 1),
        ("allow", 1),
        ("nudge", 1),
    ]
    assert verdicts[4].message == EMPTY_NUDGE


def test_a_run_of_empty_results_needs_an_observed_empty(tw: ModuleType) -> None:
    # Nudged calls extend a run of empties but never make one: nothing was observed here.
    guard = tw.Guard(nudge_at=2, stop_at=12, tools={"search_docs": "read"})
    verdicts = [guard.check("search_docs", {"query": "refund policy"}) for _ in range(6)]
    assert [v.action for v in verdicts] == ["allow"] + ["nudge"] * 5
    assert all(v.message is not None and "returned nothing" not in v.message for v in verdicts[1:])


# -- what observe takes ---------------------------------------------------------------------


NOT_VERDICTS = [
    pytest.param({"action": "allow"}, "dict", id="dict"),
    pytest.param(None, "NoneType", id="None"),
    pytest.param("allow", "str", id="str"),
]


@pytest.mark.parametrize(("verdict", "kind"), NOT_VERDICTS)
def test_observe_takes_a_verdict(tw: ModuleType, verdict: Any, kind: str) -> None:
    guard = tw.Guard()
    guard.check("get_logs", {})
    before = state(guard)
    with pytest.raises(TypeError) as caught:
        guard.observe(verdict, [])
    assert str(caught.value) == f"observe() takes a Verdict, not {kind}"
    assert state(guard) == before


@requires_native
@pytest.mark.parametrize(("verdict", "kind"), NOT_VERDICTS)
def test_observe_errors_agree(verdict: Any, kind: str) -> None:
    assert NATIVE is not None
    native = outcome(NATIVE.Guard().observe, verdict, [])
    reference = outcome(REFERENCE.Guard().observe, verdict, [])
    assert native == reference == ("TypeError", f"observe() takes a Verdict, not {kind}")


def test_observe_takes_its_arguments_positionally(tw: ModuleType) -> None:
    guard = tw.Guard()
    verdict = guard.check("get_logs", {})
    with pytest.raises(TypeError):
        guard.observe(verdict=verdict, result=[])


def test_observe_of_a_nudge_or_a_stop_is_ignored(tw: ModuleType) -> None:
    def run(observe_all: bool) -> list[Any]:
        guard = tw.Guard(tools={"get_logs": "read"})
        verdicts = []
        for step in range(4, 9):
            verdict = guard.check("get_logs", get_logs_args(step))
            verdicts.append(verdict)
            if verdict.action == "allow":
                guard.observe(verdict, [])
            elif observe_all:  # a harness that reports what it did not run: ignored
                guard.observe(verdict, [{"msg": "a record, at last"}])
        return [*map(fields, verdicts), state(guard)]

    observed = run(observe_all=True)
    assert [verdict["action"] for verdict in observed[:-1]] == [
        "allow",
        "nudge",
        "allow",
        "stop",
        "stop",
    ]
    assert observed == run(observe_all=False)


def test_observe_after_the_call_left_the_window_is_ignored(tw: ModuleType) -> None:
    guard = tw.Guard(window=2, tools={"search_docs": "read"})
    old = guard.check("search_docs", {"query": "refund policy"})
    guard.check("list_runbooks", {})
    guard.check("get_runbook", {"id": "rb-1"})
    guard.observe(old, [])  # gone from the window: nothing to attach it to
    assert state(guard)["len"] == 2
    assert guard.check("search_docs", {"query": "refund policy"}).action == "allow"


def test_the_last_observation_counts(tw: ModuleType) -> None:
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"job_status": "volatile"})
    first = guard.check("job_status", {"job": "j"})
    guard.observe(first, "queued")
    second = guard.check("job_status", {"job": "j"})
    guard.observe(second, "running")
    guard.observe(second, "queued")  # corrected: unchanged after all
    assert guard.check("job_status", {"job": "j"}).action == "nudge"


def test_observe_a_duplicate_within_a_turn(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"edit_file": "write"})
    for i in range(4):
        args = _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20")
        first, copy = guard.check_turn([("edit_file", args), ("edit_file", args)])
        assert (first.action, copy.duplicate_of, copy.step) == ("allow", 0, first.step)
        guard.observe(copy, "ok")  # the copy's result is the call's result
    assert guard.check("edit_file", _edit("0.20", "0.2")).reason == "no_progress"


def test_observe_a_check_json_verdict(tw: ModuleType) -> None:
    # nudge_at=3: two equal results must be seen before a message says so (issue 16).
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"get_logs": "read"})
    first = guard.check_json("get_logs", '{"service": "checkout", "since": "15m"}')
    guard.observe(first, [])
    second = guard.check_json("get_logs", '{"since":"15m","service":"checkout"}')
    guard.observe(second, "[]")
    nudge = guard.check("get_logs", {"since": "15m", "service": "checkout"})
    assert (first.action, second.action, nudge.action) == ("allow", "allow", "nudge")
    assert nudge.message is not None and "the result has not changed" in nudge.message


def test_observe_judges_by_the_policy_of_the_guard_it_is_given(tw: ModuleType) -> None:
    # A verdict made by one guard and observed by another (a fleet's worker checks, another
    # observes) is judged by the observing guard's policy for its tool, not the maker's:
    # the native guard keeps the maker's policy in the verdict only for its own use.
    plain = {"nudge_at": 3, "stop_at": 4}
    stamped = {**plain, "tools": {"get_logs": {"policy": "read", "volatile_result_keys": ["ts"]}}}
    for maker_options, judge_options, expected in (
        (plain, stamped, "nudge"),  # the judge leaves the stamps out: unchanged twice
        (stamped, plain, "allow"),  # the judge reads the stamps: the result changed
    ):
        maker, judge = tw.Guard(**maker_options), tw.Guard(**judge_options)
        for ts in ("02:00", "02:01"):
            made = maker.check("get_logs", {"service": "checkout"})
            assert judge.check("get_logs", {"service": "checkout"}).action == "allow"
            judge.observe(made, [{"ts": ts, "msg": "upstream timeout"}])
        assert judge.check("get_logs", {"service": "checkout"}).action == expected


# -- results: what is compared --------------------------------------------------------------


class ToolResult:
    """Shaped like an SDK's pydantic result (OpenAI, Anthropic, MCP): ``model_dump``."""

    def __init__(self, text: str, is_error: bool = False) -> None:
        self.text = text
        self.is_error = is_error

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        assert mode == "json"
        return {"content": [{"type": "text", "text": self.text}], "isError": self.is_error}


class BrokenDump:
    """``model_dump`` fails: compared by ``str``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def model_dump(self, *, mode: str = "python") -> Any:
        raise TypeError("not a model")

    def __str__(self) -> str:
        return self.text


def _same_result(tw: ModuleType, first: Any, second: Any) -> bool:
    """Whether the guard takes two results as the same (a third identical call is nudged
    when nudge_at=3 only if the second result equals the first). The tool is declared a read:
    a tool of unknown kind would move the thresholds up by one (issue 16)."""
    guard = tw.Guard(nudge_at=3, stop_at=4, tools={"call_tool": "read"})
    for result in (first, second):
        verdict = guard.check("call_tool", {"name": "lookup"})
        assert verdict.action == "allow"
        guard.observe(verdict, result)
    return bool(guard.check("call_tool", {"name": "lookup"}).action == "nudge")


SAME_RESULTS = [
    pytest.param(ToolResult("3 rows"), ToolResult("3 rows"), True, id="sdk-equal"),
    pytest.param(ToolResult("3 rows"), ToolResult("4 rows"), False, id="sdk-different"),
    pytest.param(ToolResult("x"), ToolResult("x", is_error=True), False, id="sdk-error-flag"),
    pytest.param(
        ToolResult("3 rows"),
        {"content": [{"type": "text", "text": "3 rows"}], "isError": False},
        True,
        id="sdk-vs-its-json",
    ),
    pytest.param(BrokenDump("same"), BrokenDump("same"), True, id="broken-dump-by-str"),
    pytest.param(BrokenDump("same"), "same", True, id="broken-dump-vs-str"),
    pytest.param(b"ok", "ok", True, id="bytes-vs-str"),
    pytest.param(bytearray(b"ok"), b"ok", True, id="bytearray-vs-bytes"),
    pytest.param(b"\xff\xfe", "\ufffd\ufffd", True, id="bytes-invalid-utf8"),
    pytest.param(b"ok", b"ko", False, id="bytes-different"),
    pytest.param({"a": 1, "b": [1, 2]}, {"b": [1.0, 2], "a": 1}, True, id="key-order-float"),
    pytest.param({"rows": 3}, {"rows": 4}, False, id="dict-different"),
    pytest.param({1, 2}, {2, 1}, True, id="set-by-str"),
    pytest.param(deep_args(), deep_args(), True, id="too-deep"),
    pytest.param(None, None, True, id="None"),
    pytest.param("a  b", "a b", True, id="whitespace-collapsed"),
    # Results are compared as describe_result reads them (issue 16): JSON text as its value,
    # harness envelopes unwrapped (their ids never count), an error flag kept.
    pytest.param('{"rows": 3}', {"rows": 3}, True, id="json-text-vs-its-value"),
    pytest.param('{"a":1,"b":2}', ' { "b": 2, "a": 1 }\n', True, id="json-text-respaced"),
    pytest.param("[]", [], True, id="json-empty-list"),
    pytest.param('"3 rows"', "3 rows", True, id="json-string-vs-text"),
    pytest.param(
        {"role": "tool", "tool_call_id": "c1", "content": "3 rows"},
        {"role": "tool", "tool_call_id": "c2", "content": "3 rows"},
        True,
        id="tool-messages-other-ids",
    ),
    pytest.param(
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]},
        "ok",
        True,
        id="tool-result-block-vs-text",
    ),
    pytest.param(
        {"type": "tool_result", "tool_use_id": "t1", "content": "x"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "x", "is_error": True},
        False,
        id="tool-result-block-error-flag",
    ),
]


@pytest.mark.parametrize(("first", "second", "same"), SAME_RESULTS)
def test_which_results_are_the_same(tw: ModuleType, first: Any, second: Any, same: bool) -> None:
    assert _same_result(tw, first, second) is same


def test_an_sdk_result_object_in_a_cycle(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"edit_file": "write"})
    for i in range(4):
        args = _edit("0.20", "0.2") if i % 2 == 0 else _edit("0.2", "0.20")
        verdict = guard.check("edit_file", args)
        guard.observe(verdict, ToolResult("Applied 1 edit."))
    assert guard.check("edit_file", _edit("0.20", "0.2")).reason == "no_progress"


def test_an_sdk_result_object_can_be_empty(tw: ModuleType) -> None:
    class Empty:
        def model_dump(self, *, mode: str = "python") -> list[Any]:
            return []

    guard = tw.Guard()
    verdicts = _searches(guard, [Empty()] * 4)
    assert verdicts[3].message == EMPTY_NUDGE


SDK_MARKERS = [
    pytest.param(ToolResult("No results"), id="sdk-object"),
    pytest.param(ToolResult("No results").model_dump(mode="json"), id="its-json"),
]


@pytest.mark.parametrize("marker", SDK_MARKERS)
def test_an_sdk_result_object_against_an_empty_marker(tw: ModuleType, marker: Any) -> None:
    # Markers are taken as results are: an SDK object by its JSON form, texts respaced.
    guard = tw.Guard(tools={"search_docs": {"policy": "read", "empty": [marker]}})
    assert _searches(guard, [ToolResult(" No  results")] * 4)[3].message == EMPTY_NUDGE
    guard = tw.Guard(tools={"search_docs": {"policy": "read", "empty": [marker]}})
    assert [v.action for v in _searches(guard, [ToolResult("3 rows")] * 6)] == ["allow"] * 6
    # The marker's text flagged as an error is an error, not an empty result. One tool failing
    # the same way across reworded calls is a run of its own (issue 16), named as errors.
    guard = tw.Guard(tools={"search_docs": {"policy": "read", "empty": [marker]}})
    verdicts = _searches(guard, [ToolResult("No results", is_error=True)] * 7)
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge", "allow", "stop", "stop"]
    assert verdicts[3].message is not None
    assert verdicts[3].message.startswith(
        '3 calls to search_docs in a row failed with the same error, "No results".'
    )
    # The count is of the calls that ran and failed, as for empty results: the nudged one
    # never ran, so it did not fail.
    assert (verdicts[5].reason, verdicts[5].message) == (
        "no_progress",
        "Stopped (no_progress): 4 calls to search_docs in a row failed with the same error, "
        '"No results".',
    )


# -- policy specs ---------------------------------------------------------------------------


class Limit(IntEnum):
    FIVE = 5


VALID_SPECS = [
    pytest.param("poll", id="poll"),
    pytest.param({"policy": "poll"}, id="poll-mapping"),
    pytest.param({"policy": "poll", "max_polls": 5}, id="max_polls"),
    pytest.param({"policy": "poll", "max_polls": 1}, id="max_polls=1"),
    pytest.param({"policy": "poll", "max_polls": Limit.FIVE}, id="max_polls-IntEnum"),
    pytest.param({"policy": "poll", "max_polls": 2**64}, id="max_polls-huge"),
    pytest.param({"policy": "read", "empty": ["No results"]}, id="empty"),
    pytest.param({"policy": "read", "empty": ("No results", " none ")}, id="empty-tuple"),
    pytest.param({"policy": "read", "empty": []}, id="empty-none"),
    pytest.param({"policy": "read", "empty": False}, id="empty-False"),
    pytest.param({"policy": "read", "empty": [{"results": [], "total": 0}]}, id="empty-dict"),
    pytest.param({"policy": "read", "empty": [["-"], [], None]}, id="empty-lists-None"),
    pytest.param({"policy": "read", "empty": ["No results", 0]}, id="empty-mixed"),
    pytest.param({"policy": "read", "empty": [b"none", {1, 2}, 2**70]}, id="empty-unusual"),
    pytest.param({"policy": "read", "empty": ["pending"]}, id="empty-the-result"),
    pytest.param({"policy": "poll", "max_polls": 3, "empty": False}, id="poll-empty-False"),
    pytest.param({"policy": "poll", "max_polls": 3, "empty": ["pending"]}, id="poll-empty"),
    pytest.param({"policy": "write"}, id="write-mapping"),
    pytest.param({"policy": "volatile", "empty": ["-"]}, id="volatile-empty"),
    pytest.param({"policy": "write", "whitespace": "keep"}, id="whitespace-keep"),
    pytest.param({"policy": "read", "whitespace": "collapse"}, id="whitespace-collapse"),
]


@pytest.mark.parametrize("spec", VALID_SPECS)
def test_valid_policy_specs(tw: ModuleType, spec: Any) -> None:
    guard = tw.Guard(tools={"build_status": spec})
    verdict = guard.check("build_status", {"build_id": "b-1"})
    assert verdict.action == "allow"
    guard.observe(verdict, "pending")


# How each spec is shown in a guard's repr, written out: as given (a tuple of empties as a list).
SPEC_REPRS = {
    "poll": "'poll'",
    "poll-mapping": "{'policy': 'poll'}",
    "max_polls": "{'policy': 'poll', 'max_polls': 5}",
    "max_polls=1": "{'policy': 'poll', 'max_polls': 1}",
    "max_polls-IntEnum": "{'policy': 'poll', 'max_polls': <Limit.FIVE: 5>}",
    "max_polls-huge": "{'policy': 'poll', 'max_polls': 18446744073709551616}",
    "empty": "{'policy': 'read', 'empty': ['No results']}",
    "empty-tuple": "{'policy': 'read', 'empty': ['No results', ' none ']}",
    "empty-none": "{'policy': 'read', 'empty': []}",
    "empty-False": "{'policy': 'read', 'empty': False}",
    "empty-dict": "{'policy': 'read', 'empty': [{'results': [], 'total': 0}]}",
    "empty-lists-None": "{'policy': 'read', 'empty': [['-'], [], None]}",
    "empty-mixed": "{'policy': 'read', 'empty': ['No results', 0]}",
    "empty-unusual": "{'policy': 'read', 'empty': [b'none', {1, 2}, 1180591620717411303424]}",
    "empty-the-result": "{'policy': 'read', 'empty': ['pending']}",
    "poll-empty-False": "{'policy': 'poll', 'max_polls': 3, 'empty': False}",
    "poll-empty": "{'policy': 'poll', 'max_polls': 3, 'empty': ['pending']}",
    "write-mapping": "{'policy': 'write'}",
    "volatile-empty": "{'policy': 'volatile', 'empty': ['-']}",
    "whitespace-keep": "{'policy': 'write', 'whitespace': 'keep'}",
    "whitespace-collapse": "{'policy': 'read', 'whitespace': 'collapse'}",
}


@pytest.mark.parametrize(
    ("spec", "shown"),
    [pytest.param(*param.values, SPEC_REPRS[str(param.id)], id=param.id) for param in VALID_SPECS],
)
def test_valid_policy_spec_reprs(tw: ModuleType, spec: Any, shown: str) -> None:
    """Each backend's repr of a guard with the spec, against the literal above (the native
    guard writes the numbers itself and takes the tools' part from ``check_tools``)."""
    tools = {"build_status": spec, "deploy": "write"}
    assert repr(tw.Guard(tools=tools)) == (
        "Guard(window=12, nudge_at=2, stop_at=3, max_steps=None, tools={'build_status': "
        f"{shown}, 'deploy': 'write'}}, infer=True, steps=0)"
    )


def test_policy_spec_repr(tw: ModuleType) -> None:
    # The values that count as empty are shown as given (a list), not sorted or respaced.
    tools = {
        "build_status": {"policy": "poll", "max_polls": 5},
        "search": {"policy": "read", "empty": ["None found", " No  results "]},
        "web_search": {"policy": "read", "empty": ({"total": 0, "results": []}, [], None)},
        "get_logs": {"policy": "read", "empty": False},
        "deploy": "write",
    }
    assert repr(tw.Guard(tools=tools)) == (
        "Guard(window=12, nudge_at=2, stop_at=3, max_steps=None, tools={'build_status': "
        "{'policy': 'poll', 'max_polls': 5}, 'search': {'policy': 'read', 'empty': "
        "['None found', ' No  results ']}, 'web_search': {'policy': 'read', 'empty': "
        "[{'total': 0, 'results': []}, [], None]}, 'get_logs': {'policy': 'read', "
        "'empty': False}, 'deploy': 'write'}, infer=True, steps=0)"
    )


EMPTY_TYPE = (
    "empty for tool 'build_status' must be a list of results that count as empty, or False, not {}"
)
POLICY_ERRORS = [
    pytest.param(
        {"policy": "poll", "max_poll": 5},
        ValueError,
        "unknown setting 'max_poll' in the policy for tool 'build_status': "
        "expected 'policy', 'max_polls', 'empty', 'whitespace' or 'volatile_result_keys'",
        id="unknown-setting",
    ),
    pytest.param(
        {"policy": "poll", "timeout": 3, "retries": 2},
        ValueError,
        "unknown setting 'retries', 'timeout' in the policy for tool 'build_status': "
        "expected 'policy', 'max_polls', 'empty', 'whitespace' or 'volatile_result_keys'",
        id="unknown-settings-sorted",
    ),
    pytest.param(
        {"policy": "nope", "extra": 1},
        ValueError,
        "unknown setting 'extra' in the policy for tool 'build_status': "
        "expected 'policy', 'max_polls', 'empty', 'whitespace' or 'volatile_result_keys'",
        id="unknown-setting-first",
    ),
    pytest.param(
        {"policy": "read", 1: "x"},
        ValueError,
        "unknown setting 1 in the policy for tool 'build_status': "
        "expected 'policy', 'max_polls', 'empty', 'whitespace' or 'volatile_result_keys'",
        id="unknown-setting-int",
    ),
    pytest.param(
        {"policy": "read", "max_polls": 5},
        ValueError,
        "max_polls is for 'poll' tools, not 'read' ('build_status')",
        id="max_polls-on-read",
    ),
    pytest.param(
        {"policy": "write", "max_polls": "x"},
        ValueError,
        "max_polls is for 'poll' tools, not 'write' ('build_status')",
        id="max_polls-on-write-before-type",
    ),
    pytest.param(
        {"policy": "poll", "max_polls": "5"},
        TypeError,
        "max_polls must be an int, not str",
        id="max_polls-str",
    ),
    pytest.param(
        {"policy": "poll", "max_polls": True},
        TypeError,
        "max_polls must be an int, not bool",
        id="max_polls-bool",
    ),
    pytest.param(
        {"policy": "poll", "max_polls": 5.0},
        TypeError,
        "max_polls must be an int, not float",
        id="max_polls-float",
    ),
    pytest.param(
        {"policy": "poll", "max_polls": None},
        TypeError,
        "max_polls must be an int, not NoneType",
        id="max_polls-None",
    ),
    pytest.param(
        {"policy": "poll", "max_polls": 0},
        ValueError,
        "max_polls must be at least 1, got 0",
        id="max_polls-0",
    ),
    pytest.param(
        {"policy": "poll", "max_polls": -(2**70)},
        ValueError,
        f"max_polls must be at least 1, got {-(2**70)}",
        id="max_polls-huge-negative",
    ),
    pytest.param(
        {"policy": "read", "empty": "No results"},
        TypeError,
        EMPTY_TYPE.format("str"),
        id="empty-str",
    ),
    pytest.param(
        {"policy": "read", "empty": b"No results"},
        TypeError,
        EMPTY_TYPE.format("bytes"),
        id="empty-bytes",
    ),
    pytest.param(
        {"policy": "read", "empty": 5},
        TypeError,
        EMPTY_TYPE.format("int"),
        id="empty-int",
    ),
    pytest.param(
        {"policy": "read", "empty": 0},
        TypeError,
        EMPTY_TYPE.format("int"),
        id="empty-0",
    ),
    pytest.param(
        {"policy": "read", "empty": None},
        TypeError,
        EMPTY_TYPE.format("NoneType"),
        id="empty-None",
    ),
    pytest.param(
        {"policy": "read", "empty": True},
        TypeError,
        EMPTY_TYPE.format("bool"),
        id="empty-True",
    ),
    pytest.param(
        {"policy": "read", "empty": {"results": [], "total": 0}},
        TypeError,
        EMPTY_TYPE.format("dict"),
        id="empty-bare-dict",
    ),
    pytest.param(
        {"policy": "read", "empty": {"No results"}},
        TypeError,
        EMPTY_TYPE.format("set"),
        id="empty-set",
    ),
    pytest.param(
        {"policy": "read", "empty": frozenset({"No results"})},
        TypeError,
        EMPTY_TYPE.format("frozenset"),
        id="empty-frozenset",
    ),
    pytest.param(
        {"policy": "read", "empty": iter(["No results"])},
        TypeError,
        EMPTY_TYPE.format("list_iterator"),
        id="empty-iterator",
    ),
    pytest.param(
        {"policy": "read", "empty": range(0)},
        TypeError,
        EMPTY_TYPE.format("range"),
        id="empty-range",
    ),
    pytest.param(
        {"policy": "read", "volatile_result_keys": "fetched_at"},
        TypeError,
        "volatile_result_keys for tool 'build_status' must be a list of result field names "
        "to ignore, not str",
        id="volatile_result_keys-str",
    ),
    pytest.param(
        {"policy": "read", "volatile_result_keys": ["fetched_at", 1]},
        TypeError,
        "volatile_result_keys for tool 'build_status' must hold str field names, not int",
        id="volatile_result_keys-int",
    ),
    pytest.param(
        {"policy": "write", "whitespace": "strip"},
        ValueError,
        "whitespace for tool 'build_status' must be 'keep' or 'collapse', not 'strip'",
        id="whitespace-unknown",
    ),
    pytest.param(
        {"max_polls": 5},
        ValueError,
        "unknown policy None for tool 'build_status': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="no-policy",
    ),
    pytest.param(
        {},
        ValueError,
        "unknown policy None for tool 'build_status': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="empty-mapping",
    ),
    pytest.param(
        {"policy": "polling"},
        ValueError,
        "unknown policy 'polling' for tool 'build_status': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="unknown-policy",
    ),
    pytest.param(
        "POLL",
        ValueError,
        "unknown policy 'POLL' for tool 'build_status': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="policy-case",
    ),
    pytest.param(
        ["poll"],
        ValueError,
        "unknown policy ['poll'] for tool 'build_status': "
        "expected one of 'read', 'write', 'volatile', 'poll', 'shell'",
        id="policy-list",
    ),
]


@pytest.mark.parametrize(("spec", "error", "message"), POLICY_ERRORS)
def test_policy_spec_errors(tw: ModuleType, spec: Any, error: type, message: str) -> None:
    """The error type and message written here, on each backend (both check ``tools=``
    with the reference's ``check_tools``: a backend comparison would compare it to
    itself)."""
    with pytest.raises(error) as caught:
        tw.Guard(tools={"deploy": "write", "build_status": spec})
    assert type(caught.value) is error
    assert str(caught.value) == message


def test_mcp_results_of_the_python_sdk_are_read(tw: ModuleType) -> None:
    """mcp 2's ``CallToolResult`` dumps snake_case names unless asked for the wire's: both
    are read (an envelope not read is compared whole, and its empty results never look
    empty), whether the guard is given the object or its ``model_dump()``."""
    types = pytest.importorskip("mcp.types")

    def result(text: str, is_error: bool = False) -> Any:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=is_error
        )

    assert unwrap(result("[]")) == unwrap(result("[]").model_dump()) == ([], False)
    assert unwrap(result("no such service", True)) == ("no such service", True)
    structured = types.CallToolResult(content=[], structured_content={"rows": 3})
    assert unwrap(structured.model_dump()) == ({"rows": 3}, False)
    wrapped = types.CallToolResult(content=[], structured_content={"result": []})
    assert unwrap(wrapped) == ([], False)
    assert _same_result(tw, result("3 rows"), result("3 rows").model_dump())
    assert not _same_result(tw, result("3 rows"), result("3 rows", True))
