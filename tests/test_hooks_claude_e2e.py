"""tripwire in the real Claude Code: hooks installed by ``tripwire install`` into a temporary
HOME, Claude Code (the binary the ``claude-agent-sdk`` wheel bundles) run headless against a
scripted Messages API on loopback (``tests/_fake_messages.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _claude import NO_CLAUDE, Sandbox, claude_binary
from _fake_messages import FakeMessagesAPI, text, tool_use

pytestmark = pytest.mark.skipif(claude_binary() is None, reason=NO_CLAUDE)

NUDGE = "This is the second identical call to Read with the same arguments"


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def _install(box: Sandbox, *args: str) -> None:
    done = box.tripwire("install", "claude-code", *args)
    assert done.returncode == 0, done.stderr


def seed_loop(box: Sandbox) -> list[list[dict[str, Any]]]:
    """The seed's loop in Claude Code's words: one read, asked again respelled (key order, a
    float for an int), as a model that does not take in the answer does."""
    log = box.project / "logs" / "app.log"
    log.parent.mkdir()
    log.write_text("INFO start\nERROR timeout talking to db\n")
    return [
        [text("Looking for errors."), tool_use("Read", {"file_path": str(log), "limit": 50})],
        [tool_use("Read", {"limit": 50.0, "file_path": str(log)})],
        [tool_use("Read", {"file_path": str(log), "limit": 5e1})],
        [tool_use("Read", {"limit": 50, "file_path": f" {log}"[1:]})],
        [text("The errors are: a timeout.")],
    ]


def live_timeline(session: dict[str, Any]) -> str:
    """The hook's verdicts on a session, a letter a call (allow, nudge, stop), from what
    ``tripwire sessions`` keeps."""
    letters = ["a"] * session["counts"]["calls"]
    for event in session["events"]:
        letters[event["call"] - 1] = event["action"][0]
    return "".join(letters)


def replayed(box: Sandbox) -> dict[str, Any]:
    """``tripwire replay --json`` of the transcript the real CLI wrote: its one run."""
    [transcript] = (box.home / ".claude" / "projects").glob("*/*.jsonl")
    done = box.tripwire("replay", "--json", str(transcript))
    assert done.returncode in (0, 1), done.stderr
    [run] = json.loads(done.stdout)["runs"]
    assert isinstance(run, dict)
    return run


def assert_seed_loop_stopped(api: FakeMessagesAPI, result: dict[str, Any]) -> None:
    assert result["terminal_reason"] == "hook_stopped", result
    first, second, third, fourth = (ids[0] for ids in api.sent_ids())
    results = api.tool_results()
    assert not results[first].get("is_error")
    # The second call was refused; the model read the guard's message as the tool's error.
    assert results[second]["is_error"] is True
    assert NUDGE in results[second]["content"]
    # Issue 25: the call after the nudge ran (its answer, the same again, is the evidence
    # the stop rests on), and the fourth ended the run: no result sent, no request made.
    assert not results[third].get("is_error")
    assert fourth not in results
    assert len(api.agent_requests()) == 4
    assert api.errors == []


def test_seed_loop_is_nudged_then_stopped(box: Sandbox) -> None:
    _install(box)
    with FakeMessagesAPI(seed_loop(box)) as api:
        result = box.claude(api, "find the errors in logs/app.log")
    assert_seed_loop_stopped(api, result)
    # What a person sees afterwards.
    [session] = box.sessions()
    assert session["session"] == result["session_id"]
    assert session["counts"] == {"calls": 4, "nudges": 1, "stops": 1}
    assert [e["action"] for e in session["events"]] == ["nudge", "stop"]
    assert session["events"][-1]["reason"] == "loop_detected"
    assert session["ended"] is not None
    listing = box.tripwire("sessions")
    assert "stops 1" in listing.stdout and "Read" in listing.stdout
    # Live and replay agree: the transcript Claude Code wrote, replayed, gives the same
    # verdicts, the stop with the same words.
    run = replayed(box)
    assert run["timeline"] == live_timeline(session) == "anas"
    assert run["stop_message"] == session["events"][-1]["message"]


def healthy_session(box: Sandbox) -> list[list[dict[str, Any]]]:
    """Edit, tests fail, edit, tests pass; a grep that finds nothing; a commit whose hook
    fails, fixed, committed again: every repeat here is progress."""
    paths = _healthy_project(box)
    tests = {"command": "python3 test_calc.py", "description": "Run the tests"}
    commit = {
        "command": "git add -A && git commit -q -m 'Fix add and mul'",
        "description": "Commit",
    }

    def edit(old: str, new: str) -> list[dict[str, Any]]:
        return [
            tool_use("Edit", {"file_path": paths["calc"], "old_string": old, "new_string": new})
        ]

    grep = {"command": "grep -rn TODO --include=*.py .", "description": "Look for TODOs"}
    return [
        [tool_use("Read", {"file_path": paths["calc"]})],
        [tool_use("Bash", tests)],
        edit("return a - b", "return a + b"),
        [tool_use("Bash", tests)],
        edit("return a + b\n", "return a * b\n"),
        [tool_use("Bash", {**tests, "description": "Run the tests again"})],
        [tool_use("Bash", grep)],
        [tool_use("Bash", commit)],
        edit("  # FIXME", ""),
        [tool_use("Bash", commit)],
        [text("Fixed and committed.")],
    ]


def assert_healthy(box: Sandbox, api: FakeMessagesAPI, result: dict[str, Any]) -> None:
    assert result["terminal_reason"] == "completed", result
    results = api.tool_results()
    ids = [i[0] for i in api.sent_ids() if i]
    assert len(results) == len(ids) == 10
    said = [json.dumps(r) for r in results.values()]
    assert not any("tripwire" in r or "identical call" in r for r in said)
    # The story the results tell: the tests failed, then passed; the first commit failed.
    assert results[ids[1]]["is_error"] and not results[ids[5]].get("is_error")
    assert results[ids[7]]["is_error"] and not results[ids[9]].get("is_error")
    log = subprocess.run(
        ["git", "log", "--oneline"], cwd=box.project, capture_output=True, text=True
    )
    assert "Fix add and mul" in log.stdout


def parallel_session(box: Sandbox) -> list[list[dict[str, Any]]]:
    """One response reads a file twice at once (and another beside); the next reads it
    again."""
    notes = box.project / "notes.txt"
    notes.write_text("alpha\n")
    other = box.project / "other.txt"
    other.write_text("beta\n")
    read = {"file_path": str(notes)}
    return [
        [
            tool_use("Read", read),
            tool_use("Read", {"file_path": str(other)}),
            tool_use("Read", dict(read)),
        ],
        [tool_use("Read", dict(read))],
        [text("Read them.")],
    ]


def assert_parallel(api: FakeMessagesAPI, result: dict[str, Any]) -> None:
    """Identical calls of one response are one action (as Guard.check_turn has it): neither
    copy is refused. The same read asked again in the next response is a repeat."""
    assert result["terminal_reason"] == "completed", result
    results = api.tool_results()
    (a, b, c), (d,), _ = api.sent_ids()
    assert [results[i].get("is_error", False) for i in (a, b, c)] == [False, False, False]
    assert results[d]["is_error"] and NUDGE in results[d]["content"]


def _healthy_project(box: Sandbox) -> dict[str, str]:
    project = box.project
    (project / "calc.py").write_text(
        "def add(a, b):\n    return a - b  # FIXME\n\n\ndef mul(a, b):\n    return a + b\n"
    )
    (project / "test_calc.py").write_text(
        "from calc import add, mul\n\n"
        "assert add(2, 3) == 5, 'add'\nassert mul(2, 3) == 6, 'mul'\nprint('ok')\n"
    )
    hook = project / ".git" / "hooks" / "pre-commit"
    for command in (
        ["git", "init", "-q"],
        ["git", "config", "user.email", "dev@example.com"],
        ["git", "config", "user.name", "Dev"],
    ):
        subprocess.run(command, cwd=project, check=True)
    hook.write_text(
        "#!/bin/sh\nif grep -q FIXME calc.py; then echo 'FIXME left in calc.py'; exit 1; fi\n"
    )
    hook.chmod(0o755)
    return {"calc": str(project / "calc.py")}


def test_healthy_coding_session_is_never_nudged(box: Sandbox) -> None:
    script = healthy_session(box)
    _install(box)
    with FakeMessagesAPI(script) as api:
        result = box.claude(api, "fix calc.py so the tests pass, then commit")
    assert_healthy(box, api, result)
    [session] = box.sessions()
    assert session["counts"] == {"calls": 10, "nudges": 0, "stops": 0}
    run = replayed(box)
    assert run["timeline"] == live_timeline(session) == "a" * 10


def test_parallel_calls_of_one_response(box: Sandbox) -> None:
    script = parallel_session(box)
    _install(box)
    with FakeMessagesAPI(script) as api:
        result = box.claude(api, "read the notes")
    assert_parallel(api, result)
    [session] = box.sessions()
    assert session["counts"]["nudges"] == 1 and session["counts"]["stops"] == 0
    # Replay checks a response's calls as one turn (check_turn), as the hook did.
    run = replayed(box)
    assert (run["nudges"], run["reason"]) == (1, None)


def test_seed_loop_through_serve(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same verdicts from `tripwire serve`, Claude Code's http hooks POSTing to it with
    the secret header `tripwire install --serve` configured."""
    from tripwire.hooks.serve import make_server, serve_in_thread

    monkeypatch.setenv("TRIPWIRE_STATE_DIR", str(box.state))
    monkeypatch.delenv("TRIPWIRE_SECRET", raising=False)
    server = make_server("127.0.0.1", 0)
    serve_in_thread(server)
    try:
        _install(box, "--serve", server.url)
        with FakeMessagesAPI(seed_loop(box)) as api:
            result = box.claude(api, "find the errors in logs/app.log")
        assert_seed_loop_stopped(api, result)
        [session] = server.store.records()
        assert session["counts"] == {"calls": 4, "nudges": 1, "stops": 1}
    finally:
        server.shutdown()
        server.server_close()
    # No guard state on disk: the secret, and the session's summary for `tripwire sessions`.
    assert sorted(os.listdir(box.state)) == ["serve-secret", "sessions"]
    [summary] = box.sessions()
    assert summary["counts"] == {"calls": 4, "nudges": 1, "stops": 1}
    assert summary["calls"] == [] and summary["ended"] is not None


def test_a_failing_command_retried_unchanged(box: Sandbox) -> None:
    """The same shell command failing the same way (PostToolUseFailure observed each time):
    a shell command may change the world, so it gets one more than a read: the third is
    refused, and, the output seen twice the same, the fourth ends the run."""
    (box.project / "app.py").write_text("import sys\nsys.exit('KeyError: config')\n")
    _install(box)
    run = {"command": "python3 app.py", "description": "Run the app"}
    script = [[tool_use("Bash", dict(run))] for _ in range(4)] + [[text("It fails.")]]
    with FakeMessagesAPI(script) as api:
        result = box.claude(api, "run the app")
    assert result["terminal_reason"] == "hook_stopped", result
    ids = [i[0] for i in api.sent_ids() if i]
    results = api.tool_results()
    assert [bool(results[i]["is_error"]) for i in ids[:3]] == [True, True, True]
    assert "KeyError: config" in results[ids[1]]["content"]
    assert "third identical call to Bash" in results[ids[2]]["content"]
    # A shell's exit status is an answer, not a failure (issue 25): the guard saw the same
    # output of the same command.
    assert "the result has not changed" in results[ids[2]]["content"]
    assert ids[3] not in results
    [session] = box.sessions()
    assert session["counts"] == {"calls": 4, "nudges": 1, "stops": 1}
    assert replayed(box)["timeline"] == live_timeline(session) == "aans"
