"""No stop without evidence: the six ways the guard read more into a trace than it
shows, each as a healthy run that must not be stopped and its stuck twin that must be.

Each run is replayed as a harness runs it: a call is checked; if allowed it runs, and the
guard is told its result (with the trace's own error flag); if nudged the model is told and
goes on with its next step; a stop ends the run. Stuck twins of one repeated call are stopped
by its 4th occurrence; twins whose calls all differ, by the step the test names. The Agents
SDK adapter's guard per run (the sixth) is tested through the real SDK in
``test_adapters_agents.py``. Every test runs on both backends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from _traces import run_calls

# The bound: a stuck twin of one repeated call is stopped by its 4th occurrence.
BOUND = 4


@dataclass(frozen=True)
class Step:
    tool: str
    args: Any
    result: Any
    error: bool | None = None
    call_id: str | None = None


def replay(tw: ModuleType, steps: Iterable[Step], **options: Any) -> list[Any]:
    """The verdicts of a run, up to and including a stop."""
    return run_calls(tw.Guard(**options), (dataclasses.asdict(step) for step in steps))


def actions(verdicts: list[Any]) -> list[str]:
    return [verdict.action for verdict in verdicts]


def stopped_by(verdicts: list[Any], occurrence: int) -> None:
    """The run was stopped, by the ``occurrence``-th call of the stopped call at the latest."""
    stop = verdicts[-1]
    assert stop.action == "stop", actions(verdicts)
    same = [v for v in verdicts if v.key == stop.key]
    assert len(same) <= occurrence, actions(verdicts)


# -- 1. a shell's exit status is not an error -------------------------------------------------


def bash(command: str, output: str, exit_code: int = 0) -> Step:
    # As Claude Code reports a command: its output, flagged as an error on a non-zero exit.
    return Step("Bash", {"command": command}, output, error=exit_code != 0)


def test_greps_that_find_nothing_are_answers(tw: ModuleType) -> None:
    # grep exits 1 to say "no match": three different greps, then unrelated commands.
    run = [
        bash("grep -rn RetryPolicy src", "", 1),
        bash("grep -rn retry_policy src", "", 1),
        bash("grep -rn 'class Retry' src", "", 1),
        bash("pwd", "/repo"),
        bash("cat src/retry.py", "def retry(): ..."),
        bash("cat > test_retry.py <<'EOF'\nimport retry\nEOF", ""),
        bash("diff a.txt b.txt", "1c1\n< a\n---\n> b", 1),
        bash("git diff --exit-code", "diff --git a/x b/x", 1),
    ]
    assert actions(replay(tw, run)) == ["allow"] * len(run)


def test_the_same_grep_with_the_same_output_is_a_loop(tw: ModuleType) -> None:
    run = [bash("grep -rn RetryPolicy src", "", 1)] * 6
    verdicts = replay(tw, run)
    stopped_by(verdicts, BOUND)
    assert verdicts[-1].reason == "loop_detected"


def test_a_shell_policy_can_be_declared(tw: ModuleType) -> None:
    guard = tw.Guard(tools={"run": "shell"})
    assert guard.policy_of("run") == ("shell", "declared")
    for tool in ("Bash", "bash", "execute_bash", "shell", "run_shell_command"):
        assert guard.policy_of(tool) == ("shell", "name")


# -- 2. empty answers to different questions are exploration ----------------------------------


def flights(origin: str, destination: str, found: list[Any]) -> Step:
    args = {"origin": origin, "destination": destination, "date": "2024-05-20"}
    return Step("search_direct_flight", args, found)


def test_empty_searches_for_different_flights_are_exploration(tw: ModuleType) -> None:
    run = [
        flights("JFK", "SFO", []),
        flights("JFK", "OAK", []),
        flights("EWR", "SFO", []),
        flights("LGA", "SFO", []),
        flights("EWR", "OAK", [{"flight": "UA 523"}]),
        Step("book_reservation", {"flight": "UA 523"}, {"ok": True}),
    ]
    assert actions(replay(tw, run)) == ["allow"] * len(run)


def search(query: str, found: list[Any]) -> Step:
    return Step("search_docs", {"query": query}, found)


REWORDED = [
    "refund policy",
    "refund policy for annual plans",
    "annual plan refund rules",
    "can annual subscribers get a refund",
    "refunds yearly billing",
    "cancellation refund annual",
    "annual refund terms",
]


def test_one_question_reworded_is_a_loop(tw: ModuleType) -> None:
    verdicts = replay(tw, [search(query, []) for query in REWORDED])
    assert actions(verdicts) == ["allow"] * 3 + ["nudge", "allow", "stop"]
    assert verdicts[-1].reason == "no_progress"


# -- 3. a nudged call brings no evidence ------------------------------------------------------


def test_the_call_after_a_nudge_runs_and_may_find(tw: ModuleType) -> None:
    run = [search(query, []) for query in REWORDED[:4]] + [
        search("annual plan refunds", [{"doc": "billing/refunds.md"}]),
        Step("read_doc", {"doc": "billing/refunds.md"}, "Annual plans: prorated refund."),
    ]
    verdicts = replay(tw, run)
    assert actions(verdicts) == ["allow"] * 3 + ["nudge", "allow", "allow"]


def test_a_repeat_after_its_nudge_runs_once_then_stops(tw: ModuleType) -> None:
    # The seed's loop: the result seen once, the repeat nudged; the call after the nudge
    # runs, and only when it comes back the same is the next one stopped.
    args = {"service": "checkout", "since": "15m", "level": "error"}
    verdicts = replay(tw, [Step("get_logs", args, [])] * 5)
    assert actions(verdicts) == ["allow", "nudge", "allow", "stop"]
    stopped_by(verdicts, BOUND)


def test_a_repeat_after_its_nudge_that_changed_is_progress(tw: ModuleType) -> None:
    args = {"service": "checkout", "since": "15m", "level": "error"}
    run = [
        Step("get_logs", args, []),
        Step("get_logs", args, []),
        Step("get_logs", args, [{"msg": "upstream timeout"}]),
        Step("get_metrics", {"service": "checkout"}, {"p99": 840}),
    ]
    assert actions(replay(tw, run)) == ["allow", "nudge", "allow", "allow"]


def test_a_write_is_not_run_again_to_find_out(tw: ModuleType) -> None:
    refund = Step("issue_refund", {"order": "W1", "amount": 20}, {"ok": True})
    verdicts = replay(tw, [refund] * 4, tools={"issue_refund": "write"})
    assert actions(verdicts) == ["allow", "nudge", "stop"]


# -- 4. a corrected call after a failure is not a repeat ---------------------------------------


UNEXPECTED = "Error: get_order_history() got an unexpected keyword argument 'start_date'"


def test_a_failed_call_corrected_is_not_a_repeat(tw: ModuleType) -> None:
    # The key drops nulls, so both calls have one key; the tool saw the difference.
    run = [
        Step("get_order_history", {"start_date": None, "end_date": None}, UNEXPECTED),
        Step("get_order_history", {}, [{"order": "W1"}]),
        Step("get_order_details", {"order": "W1"}, {"status": "delivered"}),
    ]
    assert actions(replay(tw, run)) == ["allow"] * 3


def test_the_same_failing_call_is_a_loop(tw: ModuleType) -> None:
    failing = Step("get_order_history", {"start_date": None, "end_date": None}, UNEXPECTED)
    verdicts = replay(tw, [failing] * 5)
    stopped_by(verdicts, BOUND)
    assert verdicts[-1].reason == "loop_detected"


def test_a_corrected_json_text_is_not_a_repeat(tw: ModuleType) -> None:
    guard = tw.Guard()
    first = guard.check_json("get_order_history", '{"start_date": null}')
    guard.observe(first, UNEXPECTED)
    fixed = guard.check_json("get_order_history", "{}")
    assert (fixed.action, fixed.repeats) == ("allow", 1)


# -- 5. reused call ids do not hide a loop ------------------------------------------------------


def test_a_nudged_call_asked_again_under_its_id_is_counted(tw: ModuleType) -> None:
    args = {"order_id": "#W2378156"}
    run = [Step("get_order_details", args, {"status": "pending"}, call_id="call_1")] * 6
    verdicts = replay(tw, run)
    stopped_by(verdicts, BOUND)


def test_a_retried_delivery_still_gets_its_first_answer(tw: ModuleType) -> None:
    guard = tw.Guard()
    first = guard.check("get_logs", {"service": "checkout"}, call_id="c1")
    again = guard.check("get_logs", {"service": "checkout"}, call_id="c1")
    assert (again.action, again.step) == (first.action, first.step)
    assert guard.steps == 1
    # The same id on another call is a new call.
    other = guard.check("get_metrics", {"service": "checkout"}, call_id="c1")
    assert other.step == 2


# -- what a snapshot carries ------------------------------------------------------------------


@pytest.mark.parametrize("state_only", [False, True], ids=["full", "state-only"])
def test_a_guard_restored_between_check_and_observe_tells_the_question(
    tw: ModuleType, state_only: bool
) -> None:
    # A fleet checks in one worker and observes in another: the restored guard knows what
    # the call asked, so its empty answer joins the run as it would have.
    guard = tw.Guard()
    for query in REWORDED[:2]:
        guard.observe(guard.check("search_docs", {"query": query}), [])
    third = guard.check("search_docs", {"query": REWORDED[2]})
    data = guard.snapshot(state_only=state_only)
    if state_only:
        restored = tw.Guard()
        restored.load(data)
    else:
        restored = tw.Guard.from_snapshot(data)
    restored.observe(third, [])
    assert restored.check("search_docs", {"query": REWORDED[3]}).action == "nudge"
