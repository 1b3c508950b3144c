"""Real work must not be stopped, real loops must be: the real_work.json suite.

The suite holds the failure modes the guard must tell apart (commit hooks, test-fix cycles,
edits retried with corrected whitespace, transient failures, reused call ids, one error across
varied arguments, user turns, parallel calls) and the peers' own loop tests (Gemini CLI's
``loopDetectionService.test.ts``, OpenHands' stuck detectors) ported as scenarios. Each
scenario says where it comes from, what the peer expects, and where we deliberately differ;
the peers' tests that are not about tool calls are listed as ``not_applicable`` entries.

A replay runs the steps as a harness would, with inference on and the scenario's declared
policies: a call is checked (``check``, or ``check_json`` for ``"arguments"`` text; a
``"turn"`` of parallel calls through ``check_turn``); if allowed it runs, and the guard is
told its result (``observe``, with ``error`` and ``transient`` as the step says); if nudged
the model is told and, as a model that ignores the nudge would, goes on with its next
scripted step; if stopped, the run ends. A ``"user"`` step is a human message
(``user_message``).

- *healthy*: never stopped, and nudged at most ``max_nudges`` times (nudges cost a model
  call each, so they are counted even where they are allowed).
- *stuck*: stopped with the reason the scenario expects, by the ``by_occurrence``-th
  occurrence of the stopped call at the latest (4: the issue's bound), or by the guard's
  step ``stop_by_step`` (for runs whose calls all differ: one error across varied
  arguments, or a count that a user message legitimately restarted).

Scenarios with a ``known_gap`` are runs where the spec itself gives the wrong answer; they
are expected to fail (strictly, so a change of the spec shows up as XPASS).

Every test taking ``tw`` runs on ``tripwire._core`` (``native``) and ``tripwire.reference``
(``reference``).
"""

from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass, field
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
    fields,
    requires_native,
    verbatim_key_written_out,
)
from tripwire._policy import KNOWN_TOOLS

SUITE = Path(__file__).parent / "scenarios" / "real_work.json"
ENTRIES: list[dict[str, Any]] = json.loads(SUITE.read_text(encoding="utf-8"))
SCENARIOS = [entry for entry in ENTRIES if "steps" in entry]
NOT_APPLICABLE = [entry for entry in ENTRIES if "not_applicable" in entry]

REASONS = ("loop_detected", "no_progress")
# The bound: every stuck run is stopped by the 4th occurrence at the latest.
BOUND = 4
# The failure modes issue 16 lists; each must have healthy and stuck scenarios.
FAILURE_MODES = (
    "commit_hook",
    "test_fix",
    "edit_whitespace",
    "transient",
    "reused_call_id",
    "error_across_args",
    "user_turns",
    "parallel_turn",
)
PEERS = ("google-gemini/gemini-cli", "All-Hands-AI/OpenHands", "OpenHands/software-agent-sdk")
CALL_FIELDS = {"tool", "args", "arguments", "call_id", "result", "error", "transient"}


def _params(scenarios: list[dict[str, Any]], *, gaps: bool = False) -> list[Any]:
    """One param per scenario; with ``gaps``, those with a known gap are expected to fail
    (only the label tests: the gap is in what the guard decides, not in how it behaves)."""
    params = []
    for scenario in scenarios:
        gap = scenario.get("known_gap") if gaps else None
        marks = [pytest.mark.xfail(reason=f"known gap: {gap}", strict=True)] if gap else []
        params.append(pytest.param(scenario, id=scenario["name"], marks=marks))
    return params


ALL = _params(SCENARIOS)
HEALTHY = _params([s for s in SCENARIOS if s["label"] == "healthy"], gaps=True)
STUCK = _params([s for s in SCENARIOS if s["label"] == "stuck"], gaps=True)


# -- replaying ------------------------------------------------------------------------------


@dataclass
class Replay:
    """What a replay saw: every (scripted call, verdict) in order, the stop if any, the
    checks made after the stop (``stays_stopped``), and the results told to the guard."""

    calls: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    stop: Any = None
    after_stop: list[Any] = field(default_factory=list)
    # Per key: the results observed, as ("ok" | "failed", comparable form), in order.
    observed: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def verdicts(self) -> list[Any]:
        return [verdict for _, verdict in self.calls]

    @property
    def nudges(self) -> list[Any]:
        return [v for v in self.verdicts if v.action == "nudge"]


def _args(call: dict[str, Any]) -> Any:
    return json.loads(call["arguments"]) if "arguments" in call else call["args"]


def _check(guard: Any, call: dict[str, Any]) -> Any:
    if "arguments" in call:
        return guard.check_json(call["tool"], call["arguments"], call_id=call.get("call_id"))
    return guard.check(call["tool"], call["args"], call_id=call.get("call_id"))


def _seen(call: dict[str, Any]) -> tuple[str, str]:
    """A result as the guard compares results, near enough for the message tests: its value
    without the envelope (ids never count), whitespace collapsed, and whether it failed."""
    result = call["result"]
    failed = call.get("error") not in (None, False)
    if isinstance(result, dict):
        failed = failed or result.get("is_error") is True or result.get("isError") is True
        if result.get("structuredContent") is not None:
            result = result["structuredContent"]
        elif "content" in result:
            result = result["content"]
    if isinstance(result, str):
        failed = failed or result.lstrip().lower().startswith(("error", "<tool_use_error>"))
        result = " ".join(result.split())
    text = json.dumps(result, sort_keys=True)
    return ("failed" if failed else "ok", text)


def _observe(guard: Any, replay: Replay, call: dict[str, Any], verdict: Any) -> None:
    if "result" not in call:
        return  # its result never came back (a lost delivery)
    error = call.get("error")
    guard.observe(verdict, call["result"], error=error, transient=call.get("transient"))
    replay.observed.setdefault(verdict.key, []).append(_seen(call))


def replay(module: ModuleType, scenario: dict[str, Any], *, progress: bool = True) -> Replay:
    """Runs a scenario through a fresh guard: as a harness would (``progress``), or hash-only
    (``infer=False``, the baseline policies, no ``observe`` and no ``user_message``)."""
    if progress:
        guard = module.Guard(tools=scenario["tools"])
    else:
        guard = module.Guard(tools=baseline_tools(scenario["tools"]), infer=False)
    seen = Replay()
    for step in scenario["steps"]:
        if "user" in step:
            if seen.stop is None and progress:
                guard.user_message()
            continue
        calls = step.get("turn", [step])
        if seen.stop is not None:
            # The run is over; a harness that went on would get the stop again.
            seen.after_stop.extend(_check(guard, call) for call in calls)
            continue
        if "turn" in step:
            verdicts = guard.check_turn(
                [(call["tool"], _args(call), call.get("call_id")) for call in calls]
            )
        else:
            verdicts = [_check(guard, step)]
        stops = [i for i, v in enumerate(verdicts) if v.action == "stop"]
        if stops:
            # The run ends at the first stop; the turn's later calls get the stop again.
            first = stops[0]
            seen.calls.extend(zip(calls[: first + 1], verdicts[: first + 1], strict=True))
            seen.after_stop.extend(verdicts[first + 1 :])
            seen.stop = verdicts[first]
            continue
        seen.calls.extend(zip(calls, verdicts, strict=True))
        for call, verdict in zip(calls, verdicts, strict=True):
            # A copy within the turn gets the first copy's result: told once.
            if progress and verdict.action == "allow" and verdict.duplicate_of is None:
                _observe(guard, seen, call, verdict)
    return seen


def _occurrences(seen: Replay, key: str) -> int:
    """How often the call with this key was checked, up to and including the stop (copies
    within a turn are one)."""
    return sum(1 for v in seen.verdicts if v.key == key and v.duplicate_of is None)


# -- the suite itself -----------------------------------------------------------------------


def test_suite_shape() -> None:
    names = [entry["name"] for entry in ENTRIES]
    assert len(set(names)) == len(names)
    for entry in NOT_APPLICABLE:
        assert set(entry) == {"name", "origin", "tests", "not_applicable"}, entry["name"]
        assert entry["origin"].startswith(PEERS), entry["name"]
    for scenario in SCENARIOS:
        name = scenario["name"]
        assert scenario["label"] in ("healthy", "stuck"), name
        for text in ("kind", "origin", "note"):
            assert isinstance(scenario[text], str) and scenario[text], name
        assert isinstance(scenario["tools"], dict), name
        if scenario["origin"].startswith(PEERS):
            assert scenario["peer_expects"], name
        if scenario["label"] == "stuck":
            expect = scenario["expect"]
            assert expect["reason"] in REASONS, name
            assert ("by_occurrence" in expect) != ("stop_by_step" in expect), name
            assert expect.get("by_occurrence", BOUND) <= BOUND, name
            assert "max_nudges" not in scenario, name
        else:
            assert "expect" not in scenario, name
            assert isinstance(scenario["max_nudges"], int), name
        steps = scenario["steps"]
        assert any("user" not in step for step in steps), name
        for step in steps:
            if "user" in step:
                assert set(step) == {"user"} and isinstance(step["user"], str), name
                continue
            for call in step.get("turn", [step]):
                assert set(call) <= CALL_FIELDS, name
                # A call without "result" is one whose result never came back.
                assert "tool" in set(call), name
                assert ("args" in call) != ("arguments" in call), name
                assert call.get("error") in (None, True, False) or isinstance(call["error"], str)
                assert call.get("transient") in (None, True, False), name
                _args(call)  # "arguments" text is valid JSON
        REFERENCE.Guard(tools=scenario["tools"])


def test_suite_covers_every_failure_mode_and_the_peers() -> None:
    by_kind: dict[str, Counter[str]] = {}
    for scenario in SCENARIOS:
        by_kind.setdefault(scenario["kind"], Counter())[scenario["label"]] += 1
    for kind in FAILURE_MODES:
        assert by_kind[kind]["healthy"] >= 1, kind
        assert by_kind[kind]["stuck"] >= 1, kind
    # Claude Code's own tool names in the coding runs, as real sessions have them.
    tools = {
        call["tool"]
        for scenario in SCENARIOS
        if scenario["kind"] in ("commit_hook", "test_fix", "edit_whitespace")
        for step in scenario["steps"]
        for call in step.get("turn", [step])
        if "tool" in call
    }
    assert {"Bash", "Read", "Edit"} <= tools
    for peer in PEERS:
        assert any(s["origin"].startswith(peer) for s in SCENARIOS), peer
    assert any(e["origin"].startswith(PEERS[0]) for e in NOT_APPLICABLE)


# -- verdicts with results observed -----------------------------------------------------------


@pytest.mark.parametrize("scenario", HEALTHY)
def test_healthy_runs_are_never_stopped(tw: ModuleType, scenario: dict[str, Any]) -> None:
    seen = replay(tw, scenario)
    assert seen.stop is None, seen.stop.message
    assert len(seen.nudges) <= scenario["max_nudges"], [v.message for v in seen.nudges]


@pytest.mark.parametrize("scenario", STUCK)
def test_stuck_runs_are_stopped_in_time(tw: ModuleType, scenario: dict[str, Any]) -> None:
    expect = scenario["expect"]
    seen = replay(tw, scenario)
    stop = seen.stop
    assert stop is not None, "never stopped: " + repr([v.action for v in seen.verdicts])
    assert stop.reason == expect["reason"], stop.message
    if "by_occurrence" in expect:
        assert _occurrences(seen, stop.key) <= expect["by_occurrence"], stop.message
    else:
        assert stop.step <= expect["stop_by_step"], stop.message
    if expect.get("nudged_first"):
        assert seen.nudges, "stopped without a nudge first"
    if "nudge_mentions" in expect:
        assert seen.nudges and expect["nudge_mentions"] in seen.nudges[0].message
    if expect.get("stays_stopped"):
        assert seen.after_stop
        assert all((v.action, v.reason) == ("stop", stop.reason) for v in seen.after_stop)


@pytest.mark.parametrize("scenario", ALL)
def test_every_call_gets_its_own_verdict(tw: ModuleType, scenario: dict[str, Any]) -> None:
    # A reused call id on a different call must not hand back the earlier call's verdict:
    # each verdict is about the call it answers (its key as a fresh guard with the same
    # policies computes it), and the guard's steps only go forward.
    seen = replay(tw, scenario)
    steps = []
    for call, verdict in seen.calls:
        fresh = tw.Guard(tools=scenario["tools"])
        assert (verdict.tool, verdict.key) == (call["tool"], _check(fresh, call).key)
        steps.append(verdict.step)
    assert steps == sorted(steps)


# -- messages ---------------------------------------------------------------------------------

UNCHANGED = ("has not changed", "and the same result")


@pytest.mark.parametrize("scenario", ALL)
def test_messages_claim_no_unchanged_result_unseen(
    tw: ModuleType, scenario: dict[str, Any]
) -> None:
    # "The result has not changed" is said only of a call two of whose results were
    # observed equal (the stop and nudge texts of the seed claimed it after one).
    seen = replay(tw, scenario)
    for verdict in seen.verdicts:
        if verdict.message is None or not any(s in verdict.message for s in UNCHANGED):
            continue
        results = Counter(seen.observed.get(verdict.key, []))
        assert results and max(results.values()) >= 2, verdict.message


def _run(guard: Any, tool: str, args: Any, result: Any, **told: Any) -> Any:
    verdict = guard.check(tool, args)
    if verdict.action == "allow":
        guard.observe(verdict, result, **told)
    return verdict


def test_one_result_is_not_an_unchanged_result(tw: ModuleType) -> None:
    # A read repeated at once: nudged at the second call, when one result has been seen, so
    # the message does not say the result is unchanged. One result is not the evidence a
    # stop needs either (issue 25): the call after the nudge runs, and then, two results
    # being seen to be equal, the next stops and says so.
    guard = tw.Guard()
    _run(guard, "get_order_details", {"order_id": "#W1"}, {"status": "pending"})
    nudge = _run(guard, "get_order_details", {"order_id": "#W1"}, {"status": "pending"})
    assert nudge.action == "nudge"
    assert not any(s in nudge.message for s in UNCHANGED)
    again = _run(guard, "get_order_details", {"order_id": "#W1"}, {"status": "pending"})
    assert again.action == "allow"
    stop = _run(guard, "get_order_details", {"order_id": "#W1"}, {"status": "pending"})
    assert stop.action == "stop"
    assert any(s in stop.message for s in UNCHANGED)


def test_two_equal_results_are_an_unchanged_result(tw: ModuleType) -> None:
    # A shell command runs twice (it may have changed the world), both times the same.
    guard = tw.Guard()
    verdicts = [_run(guard, "Bash", {"command": "make lint"}, "ok") for _ in range(4)]
    assert [v.action for v in verdicts] == ["allow", "allow", "nudge", "stop"]
    assert "the result has not changed" in verdicts[2].message
    assert "and the same result" in verdicts[3].message


def test_two_different_results_are_no_unchanged_result(tw: ModuleType) -> None:
    # Results that differ reset the count; when it is nudged again, only what was seen
    # since the change may be called unchanged.
    guard = tw.Guard()
    for result in ("3 warnings", "2 warnings", "2 warnings"):
        assert _run(guard, "Bash", {"command": "make lint"}, result).action == "allow"
    nudge = guard.check("Bash", {"command": "make lint"})
    assert nudge.action == "nudge"
    assert "the result has not changed" in nudge.message


ERROR = "Error: gift card balance is not enough"


@pytest.mark.parametrize("told", ["text", "flag", "string"])
def test_an_error_is_named_in_the_message(tw: ModuleType, told: str) -> None:
    # However the harness says the call failed, the nudge and the stop quote the error.
    told_as: dict[str, dict[str, Any]] = {
        "text": {},
        "flag": {"error": True},
        "string": {"error": ERROR},
    }
    kwargs = told_as[told]
    guard = tw.Guard()
    args = {"order_id": "#W2378156", "payment_method_id": "gift_card_7245904"}
    verdicts = [
        _run(guard, "modify_pending_order_payment", args, ERROR, **kwargs) for _ in range(3)
    ]
    assert [v.action for v in verdicts] == ["allow", "nudge", "stop"]
    for verdict in verdicts[1:]:
        assert "gift card balance is not enough" in verdict.message
        assert not any(s in verdict.message for s in UNCHANGED)


def test_a_long_error_is_shortened_in_the_message(tw: ModuleType) -> None:
    error = "Error: " + "stack frame " * 200
    guard = tw.Guard()
    verdicts = [_run(guard, "get_product_details", {"id": "1"}, error) for _ in range(2)]
    assert verdicts[1].action == "nudge"
    assert "stack frame" in verdicts[1].message
    assert len(verdicts[1].message) < len(error)


def test_one_error_across_arguments_is_named(tw: ModuleType) -> None:
    guard = tw.Guard()
    # One question in other words (free text): the guard reads them as one (issue 25).
    verdicts = [
        _run(guard, "search_direct_flight", {"date": date}, "Error: invalid date format")
        for date in ("May 20", "20 May", "the 20th of May", "May 20th", "Monday May 20", "20 V")
    ]
    # Issue 25: after the nudge, one more spelling runs and fails the same way; then stop.
    assert [v.action for v in verdicts] == ["allow"] * 3 + ["nudge", "allow", "stop"]
    assert verdicts[5].reason == "no_progress"
    for verdict in (verdicts[3], verdicts[5]):
        assert "invalid date format" in verdict.message


# -- backends and the hash-only baseline ------------------------------------------------------


def summary(seen: Replay) -> list[tuple[Any, ...]]:
    return [(v.action, v.reason, v.repeats, v.step, v.message) for v in seen.verdicts]


@requires_native
@pytest.mark.parametrize("scenario", ALL)
def test_backends_agree(scenario: dict[str, Any]) -> None:
    assert NATIVE is not None
    for progress in (True, False):
        native = replay(NATIVE, scenario, progress=progress)
        reference = replay(REFERENCE, scenario, progress=progress)
        assert [fields(v) for v in native.verdicts] == [fields(v) for v in reference.verdicts]
        assert [fields(v) for v in native.after_stop] == [fields(v) for v in reference.after_stop]


def hash_only_model(
    scenario: dict[str, Any], *, verbatim: frozenset[str] = frozenset()
) -> list[tuple[Any, ...]]:
    """The seed's guard, written out: a window of 12 keys (whitespace collapsed, no
    policies), nudge at 2, stop at 3; identical calls within a turn are one; a call id seen
    before with the same call is a redelivery, answered as before and not counted. Tools in
    ``verbatim`` are keyed with their arguments' whitespace kept."""
    recent: deque[str] = deque(maxlen=12)
    answered: dict[str, tuple[str, tuple[Any, ...]]] = {}
    verdicts: list[tuple[Any, ...]] = []
    step = 0
    for scripted in scenario["steps"]:
        if "user" in scripted:
            continue
        turn: dict[str, tuple[Any, ...]] = {}
        for call in scripted.get("turn", [scripted]):
            if call["tool"] in verbatim:
                key = verbatim_key_written_out(call["tool"], _args(call))
            else:
                key = REFERENCE.call_key(call["tool"], _args(call))
            call_id = call.get("call_id")
            if call_id in answered and answered[call_id][0] == key:
                verdicts.append(answered[call_id][1])
                continue
            if key in turn:
                verdicts.append(turn[key])
                continue
            step += 1
            repeats = recent.count(key) + 1
            if repeats >= 3:
                stop = HASH_STOP.format(tool=call["tool"], repeats=repeats)
                verdicts.append(("stop", "loop_detected", repeats, step, stop))
                return verdicts
            action = "nudge" if repeats == 2 else "allow"
            message = HASH_NUDGE.format(tool=call["tool"]) if action == "nudge" else None
            verdict = (action, None, repeats, step, message)
            verdicts.append(verdict)
            turn[key] = verdict
            if call_id is not None:
                answered[call_id] = (key, verdict)
            recent.append(key)
    return verdicts


@pytest.mark.parametrize("scenario", ALL)
def test_without_results_verdicts_are_the_seeds(tw: ModuleType, scenario: dict[str, Any]) -> None:
    # Hash-only: no inference, no observe, no user messages: exactly the seed's window count.
    assert summary(replay(tw, scenario, progress=False)) == hash_only_model(scenario)


# The well-known code-editing tools, whose arguments keep their whitespace in the key.
EDITING_TOOLS = frozenset(name for name, (_, ws) in KNOWN_TOOLS.items() if ws == "keep")


@pytest.mark.parametrize("scenario", ALL)
def test_the_default_guard_without_results_is_the_seeds(
    tw: ModuleType, scenario: dict[str, Any]
) -> None:
    """Issue 16: with policies inferred (the default) but no results told, verdicts are the
    seed's, except that the known code-editing tools keep their arguments' whitespace."""
    guard = tw.Guard(tools=baseline_tools(scenario["tools"]))
    verdicts: list[Any] = []
    for step in scenario["steps"]:
        if "user" in step:
            continue
        calls = step.get("turn", [step])
        verdicts += guard.check_turn([(c["tool"], _args(c), c.get("call_id")) for c in calls])
        if any(v.action == "stop" for v in verdicts):
            break
    model = hash_only_model(scenario, verbatim=EDITING_TOOLS)
    seen = [(v.action, v.reason, v.repeats, v.step, v.message) for v in verdicts]
    assert seen[: len(model)] == model


def test_the_hash_only_guard_misjudges_real_work() -> None:
    # Why the suite exists: the seed's guard stops healthy runs the issue names.
    wrongly_stopped = {
        s["name"]
        for s in SCENARIOS
        if s["label"] == "healthy" and hash_only_model(s)[-1][0] == "stop"
    }
    assert {
        "cc_commit_hook_fails_twice_then_passes",
        "cc_edit_retried_without_trailing_space",
        "tau_transient_503_then_success",
        "same_question_each_user_turn",
    } <= wrongly_stopped
