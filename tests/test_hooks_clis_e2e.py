"""tripwire in the real Gemini CLI and Codex CLI (from the npm registry): hooks installed by
``tripwire install``, each CLI run headless against a scripted model API on loopback
(``tests/_fake_models.py``) by its own base-URL setting (Gemini: ``GOOGLE_GEMINI_BASE_URL``;
Codex: a ``model_provider`` with a ``base_url`` in config.toml; Copilot CLI: its own-model
provider settings, ``COPILOT_PROVIDER_BASE_URL`` and the Responses wire API)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _clis import NPM_INSTALL, Sandbox, binary
from _fake_messages import text, tool_use
from _fake_models import FakeGeminiAPI, FakeResponsesAPI

NO_GEMINI = pytest.mark.skipif(binary("gemini") is None, reason=f"no Gemini CLI: {NPM_INSTALL}")
NO_CODEX = pytest.mark.skipif(binary("codex") is None, reason=f"no Codex CLI: {NPM_INSTALL}")
NO_COPILOT = pytest.mark.skipif(
    binary("copilot") is None, reason=f"no Copilot CLI: {NPM_INSTALL} @github/copilot"
)


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def timeline(session: dict[str, Any]) -> str:
    """The hook's verdicts, a letter a call (allow, nudge, stop), from ``tripwire sessions``."""
    letters = ["a"] * session["counts"]["calls"]
    for event in session["events"]:
        letters[event["call"] - 1] = event["action"][0]
    return "".join(letters)


def replayed(box: Sandbox, pattern: str) -> dict[str, Any]:
    """``tripwire replay --json`` of the session file the real CLI wrote: its one run."""
    [path] = box.home.glob(pattern)
    done = box.tripwire("replay", "--json", str(path))
    assert done.returncode in (0, 1), done.stderr
    [run] = json.loads(done.stdout)["runs"]
    assert isinstance(run, dict)
    return run


GEMINI_CHATS = ".gemini/tmp/*/chats/session-*.jsonl"
CODEX_ROLLOUTS = ".codex/sessions/**/rollout-*.jsonl"
COPILOT_EVENTS = ".copilot/session-state/*/events.jsonl"


def app_log(box: Sandbox) -> Path:
    log = box.project / "logs" / "app.log"
    log.parent.mkdir()
    log.write_text("INFO start\nERROR timeout talking to db\n")
    return log


def healthy_project(box: Sandbox) -> Path:
    """calc.py with two bugs and a FIXME, its tests, and a pre-commit hook refusing FIXMEs."""
    project = box.project
    (project / "calc.py").write_text(
        "def add(a, b):\n    return a - b  # FIXME\n\n\ndef mul(a, b):\n    return a + b\n"
    )
    (project / "test_calc.py").write_text(
        "from calc import add, mul\n\n"
        "assert add(2, 3) == 5, 'add'\nassert mul(2, 3) == 6, 'mul'\nprint('ok')\n"
    )
    for command in (
        ["git", "init", "-q"],
        ["git", "config", "user.email", "dev@example.com"],
        ["git", "config", "user.name", "Dev"],
    ):
        subprocess.run(command, cwd=project, check=True)
    hook = project / ".git" / "hooks" / "pre-commit"
    hook.write_text(
        "#!/bin/sh\nif grep -q FIXME calc.py; then echo 'FIXME left in calc.py'; exit 1; fi\n"
    )
    hook.chmod(0o755)
    return project / "calc.py"


def committed(box: Sandbox) -> str:
    log = subprocess.run(
        ["git", "log", "--oneline"], cwd=box.project, capture_output=True, text=True
    )
    return log.stdout


# -- Gemini CLI ---------------------------------------------------------------------------------


@NO_GEMINI
def test_gemini_seed_loop_is_nudged_then_ended(box: Sandbox) -> None:
    """The seed's loop: one read asked again and again. Gemini CLI has no call ids; the hook
    keys calls by content. The second is refused with the guard's words, the third runs, the
    fourth ends the run (``continue: false``): no fifth request reaches the model."""
    log = app_log(box)
    box.gemini_settings()
    box.install("gemini")
    read = {"file_path": str(log)}
    script = [[tool_use("read_file", dict(read))] for _ in range(4)] + [[text("A timeout.")]]
    with FakeGeminiAPI(script) as api:
        done = box.gemini(api.url, "find the errors in logs/app.log")
    assert api.errors == []
    assert api.served() == 4, done.stderr[-2000:]
    first, second, third = api.function_responses()
    assert "ERROR timeout" in first["response"]["output"]
    assert "second identical call to read_file" in second["response"]["error"]
    assert "ERROR timeout" in third["response"]["output"]
    assert "Agent execution stopped by hook: tripwire stopped the agent" in done.stderr
    [session] = box.sessions()
    assert session["harness"] == "gemini"
    assert session["counts"] == {"calls": 4, "nudges": 1, "stops": 1}
    assert timeline(session) == "anas"
    assert session["events"][-1]["reason"] == "loop_detected"
    # Live and replay agree: the session file Gemini CLI wrote, replayed, gives the same
    # verdicts, the stop in the same words.
    run = replayed(box, GEMINI_CHATS)
    assert run["timeline"] == "anas"
    assert run["stop_message"] == session["events"][-1]["message"]


@NO_GEMINI
def test_gemini_healthy_coding_session_is_untouched(box: Sandbox) -> None:
    """Read, test (fails), edit, test, edit, test (passes), search, commit (its hook fails),
    edit, commit: every repeat here is progress, and nothing is refused."""
    calc = str(healthy_project(box))
    box.gemini_settings()
    box.install("gemini")
    tests = {"command": "python3 test_calc.py", "description": "Run the tests"}
    commit = {"command": "git add -A && git commit -q -m 'Fix add and mul'"}

    def edit(old: str, new: str) -> list[dict[str, Any]]:
        args = {"file_path": calc, "old_string": old, "new_string": new, "instruction": "fix"}
        return [tool_use("replace", args)]

    script = [
        [tool_use("read_file", {"file_path": calc})],
        [tool_use("run_shell_command", tests)],
        edit("return a - b", "return a + b"),
        [tool_use("run_shell_command", tests)],
        edit("return a + b\n", "return a * b\n"),
        [tool_use("run_shell_command", tests)],
        [tool_use("grep_search", {"pattern": "TODO"})],
        [tool_use("run_shell_command", commit)],
        edit("  # FIXME", ""),
        [tool_use("run_shell_command", commit)],
        [text("Fixed and committed.")],
    ]
    with FakeGeminiAPI(script) as api:
        done = box.gemini(api.url, "fix calc.py so the tests pass, then commit")
    assert done.returncode == 0, done.stderr[-3000:]
    assert api.errors == [] and api.served() == 11
    said = [str(r["response"]) for r in api.function_responses()]
    assert len(said) == 10
    assert not any("tripwire" in r or "identical call" in r for r in said)
    assert "Fix add and mul" in committed(box)
    [session] = box.sessions()
    assert session["counts"] == {"calls": 10, "nudges": 0, "stops": 0}
    assert replayed(box, GEMINI_CHATS)["timeline"] == "a" * 10


# -- Codex CLI ----------------------------------------------------------------------------------


@NO_CODEX
def test_codex_seed_loop_is_nudged_then_every_call_refused(box: Sandbox) -> None:
    """The seed's loop as Codex makes it, one shell read (Codex names exec_command ``Bash``
    in its hooks): a shell command gets one more than a read (allow, allow, nudge, stop).
    Codex cannot end a run from PreToolUse, so after the stop every further call is refused
    with the stop's message, and the run ends when the model answers in words."""
    app_log(box)
    script = [[tool_use("exec_command", {"cmd": "cat logs/app.log"})] for _ in range(6)]
    script.append([text("A timeout.")])
    with FakeResponsesAPI(script) as api:
        box.codex_settings(api.url)
        box.install("codex")
        done = box.codex("find the errors in logs/app.log")
    assert done.returncode == 0, done.stderr[-3000:]
    assert api.errors == []
    ids = [i[0] for i in api.sent_ids() if i]
    outputs = api.outputs()
    assert len(ids) == 6 and set(ids) == set(outputs)
    assert "ERROR timeout" in outputs[ids[0]] and "ERROR timeout" in outputs[ids[1]]
    assert "third identical call to Bash" in outputs[ids[2]]
    for refused in ids[3:]:
        assert "Stopped (loop_detected)" in outputs[refused]
        assert "ERROR timeout" not in outputs[refused]
    [session] = box.sessions()
    assert session["harness"] == "codex"
    assert session["counts"] == {"calls": 6, "nudges": 1, "stops": 1}
    assert timeline(session)[:4] == "aans"  # the calls refused after it are not stops
    assert [e["action"] for e in session["events"]] == ["nudge", "stop"]
    run = replayed(box, CODEX_ROLLOUTS)
    assert run["timeline"][:4] == "aans"
    assert run["stop_message"] == session["events"][-1]["message"].replace("Bash", "exec_command")
    # The user's own settings are kept by the install.
    config = (box.home / ".codex" / "config.toml").read_text()
    assert config.startswith("# the person's own settings")


@NO_CODEX
def test_codex_healthy_coding_session_is_untouched(box: Sandbox) -> None:
    healthy_project(box)
    tests = {"cmd": "python3 test_calc.py"}
    commit = {"cmd": "git add -A && git commit -q -m 'Fix add and mul'"}

    def sed(expression: str) -> list[dict[str, Any]]:
        return [tool_use("exec_command", {"cmd": f"sed -i '{expression}' calc.py"})]

    script = [
        [tool_use("exec_command", {"cmd": "cat calc.py"})],
        [tool_use("exec_command", tests)],
        sed("s/return a - b/return a + b/"),
        [tool_use("exec_command", tests)],
        sed("6s/return a + b/return a * b/"),
        [tool_use("exec_command", tests)],
        [tool_use("exec_command", {"cmd": "grep -rn TODO --include=*.py ."})],
        [tool_use("exec_command", commit)],
        sed("s/  # FIXME//"),
        [tool_use("exec_command", commit)],
        [text("Fixed and committed.")],
    ]
    with FakeResponsesAPI(script) as api:
        box.codex_settings(api.url)
        box.install("codex")
        done = box.codex("fix calc.py so the tests pass, then commit")
    assert done.returncode == 0, done.stderr[-3000:]
    assert api.errors == [] and api.served() == 11
    outputs = api.outputs()
    assert len(outputs) == 10
    assert not any(
        "tripwire" in o or "identical call" in o or "blocked" in o for o in outputs.values()
    )
    assert "Fix add and mul" in committed(box)
    [session] = box.sessions()
    assert session["counts"] == {"calls": 10, "nudges": 0, "stops": 0}
    assert replayed(box, CODEX_ROLLOUTS)["timeline"] == "a" * 10


# -- Copilot CLI --------------------------------------------------------------------------------


@NO_COPILOT
def test_copilot_seed_loop_is_nudged_then_every_call_refused(box: Sandbox) -> None:
    """Copilot CLI's ``view``, asked again and again (no call ids: keyed by content): allow,
    nudge, allow, stop; Copilot's preToolUse cannot end the run, so every further call is
    refused with the stop's message and the run ends when the model answers in words."""
    log = app_log(box)
    box.install("copilot")
    script = [[tool_use("view", {"path": str(log)})] for _ in range(6)]
    script.append([text("A timeout.")])
    with FakeResponsesAPI(script) as api:
        done = box.copilot(api.url, "find the errors in logs/app.log")
    assert done.returncode == 0, done.stderr[-3000:]
    assert api.errors == [] and api.served() == 7
    ids = [i[0] for i in api.sent_ids() if i]
    outputs = api.outputs()
    assert "ERROR timeout" in outputs[ids[0]] and "ERROR timeout" in outputs[ids[2]]
    assert "second identical call to view" in outputs[ids[1]]
    for refused in ids[3:]:
        assert "Stopped (loop_detected)" in outputs[refused]
    [session] = box.sessions()
    assert session["harness"] == "copilot"
    assert session["counts"] == {"calls": 6, "nudges": 1, "stops": 1}
    assert timeline(session)[:4] == "anas"
    # Replay of the session events Copilot wrote: the same verdicts, the stop in its words.
    run = replayed(box, COPILOT_EVENTS)
    assert run["timeline"][:4] == "anas"
    assert run["stop_message"] == session["events"][-1]["message"]


@NO_COPILOT
def test_copilot_healthy_coding_session_is_untouched(box: Sandbox) -> None:
    calc = str(healthy_project(box))
    box.install("copilot")
    tests = {"command": "python3 test_calc.py", "description": "Run the tests"}
    commit = {"command": "git add -A && git commit -q -m 'Fix add and mul'"}

    def edit(old: str, new: str) -> list[dict[str, Any]]:
        return [tool_use("edit", {"path": calc, "old_str": old, "new_str": new})]

    script = [
        [tool_use("view", {"path": calc})],
        [tool_use("bash", tests)],
        edit("return a - b", "return a + b"),
        [tool_use("bash", tests)],
        edit("return a + b\n", "return a * b\n"),
        [tool_use("bash", tests)],
        [tool_use("grep", {"pattern": "TODO"})],
        [tool_use("bash", commit)],
        edit("  # FIXME", ""),
        [tool_use("bash", commit)],
        [text("Fixed and committed.")],
    ]
    with FakeResponsesAPI(script) as api:
        done = box.copilot(api.url, "fix calc.py so the tests pass, then commit")
    assert done.returncode == 0, done.stderr[-3000:]
    assert api.errors == [] and api.served() == 11
    outputs = api.outputs()
    assert len(outputs) == 10
    assert not any(
        "tripwire" in o or "identical call" in o or "Denied" in o for o in outputs.values()
    )
    assert "Fix add and mul" in committed(box)
    [session] = box.sessions()
    assert session["counts"] == {"calls": 10, "nudges": 0, "stops": 0}
    assert replayed(box, COPILOT_EVENTS)["timeline"] == "a" * 10
