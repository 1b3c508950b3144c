"""``tripwire hook gemini|codex|copilot|cursor|cline``: each harness's events, as its docs and
sources give them, through the real hook process (both backends).

The fixtures name where each field comes from. Gemini CLI 0.61.0 and Codex CLI 0.171.0 were
also run for real (tests/test_hooks_clis_e2e.py); Copilot CLI, Cursor and Cline were not:

- Gemini CLI: ``HookSystem.createBaseInput`` / ``fireBeforeToolEvent`` /
  ``fireAfterToolEvent`` in the 0.61.0 bundle; answers read by ``HookOutput.isBlockingDecision``
  (``decision`` ``deny``) and ``shouldStopExecution`` (``continue: false``).
- Codex CLI: ``codex-rs/hooks/schema/generated/pre-tool-use.command.input.schema.json`` and
  its output schema (``hookSpecificOutput.permissionDecision``).
- Copilot CLI: docs.github.com/en/copilot/reference/copilot-cli-reference/cli-hooks-reference
  (``preToolUse``: ``timestamp``, ``cwd``, ``toolName``, ``toolArgs`` as a JSON string;
  ``postToolUse``: ``toolResult.resultType``, ``toolResult.textResultForLlm``;
  ``permissionRequest`` -> ``behavior``, ``interrupt``).
- Cursor: cursor.com/docs/agent/hooks (``conversation_id``, ``generation_id``,
  ``hook_event_name``, ``workspace_roots``; ``preToolUse``: ``tool_name``, ``tool_input``;
  ``postToolUse``: ``tool_output``; answer ``permission``, ``agent_message``,
  ``user_message``).
- Cline: docs.cline.bot/features/hooks (``clineVersion``, ``hookName``, ``timestamp``,
  ``taskId``, ``workspaceRoots``, ``userId``; ``preToolUse: {toolName, parameters}``;
  ``postToolUse: {toolName, parameters, result, success, executionTimeMs}``; answer
  ``cancel``, ``contextModification``, ``errorMessage``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _guards import BACKEND_NAMES

HARNESSES = ("gemini", "codex", "copilot", "cursor", "cline")
# Harnesses that give a call no id: calls keyed by content.
NO_CALL_ID = ("gemini", "copilot", "cursor", "cline")
# A read-only tool of each, by the name its hooks give it.
READ = {
    "gemini": "read_file",
    "codex": "Read",
    "copilot": "view",
    "cursor": "read_file",
    "cline": "read_file",
}
SHELL = {
    "gemini": "run_shell_command",
    "codex": "Bash",
    "copilot": "bash",
    "cursor": "Shell",
    "cline": "execute_command",
}


@pytest.fixture(params=BACKEND_NAMES)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIPWIRE_", "XDG_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        TRIPWIRE_STATE_DIR=str(tmp_path / "state"),
        TRIPWIRE_CONFIG=str(tmp_path / "config.toml"),
        TRIPWIRE_IMPLEMENTATION=request.param,
    )
    return env


def hook(env: dict[str, str], harness: str, event: Any) -> tuple[int, Any, str]:
    data = event if isinstance(event, bytes) else json.dumps(event).encode()
    done = subprocess.run(
        [sys.executable, "-m", "tripwire", "hook", harness],
        input=data,
        env=env,
        capture_output=True,
        timeout=60,
    )
    out = done.stdout.decode()
    return done.returncode, json.loads(out) if out else None, done.stderr.decode()


# -- each harness's events --------------------------------------------------------------------


class Events:
    """Events of one harness, one session."""

    def __init__(self, harness: str, session: str = "s1") -> None:
        self.harness = harness
        self.session = session
        self.n = 0

    def pre(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        h, s = self.harness, self.session
        if h == "gemini":
            return {
                "session_id": s,
                "transcript_path": "/home/dev/.gemini/tmp/app/chats/session-1.jsonl",
                "cwd": "/work/app",
                "hook_event_name": "BeforeTool",
                "timestamp": "2026-12-05T04:33:52.602Z",
                "tool_name": tool,
                "tool_input": args,
            }
        if h == "codex":
            return {
                "session_id": s,
                "turn_id": "turn-1",
                "transcript_path": None,
                "cwd": "/work/app",
                "hook_event_name": "PreToolUse",
                "model": "gpt-5",
                "permission_mode": "bypassPermissions",
                "tool_name": tool,
                "tool_input": args,
                "tool_use_id": f"call_{self.n}",
            }
        if h == "copilot":
            return {
                "sessionId": s,
                "timestamp": 1796445106000 + self.n,
                "cwd": "/work/app",
                "toolName": tool,
                "toolArgs": json.dumps(args),
            }
        if h == "cursor":
            return {
                "conversation_id": s,
                "generation_id": f"gen-{self.n}",
                "hook_event_name": "preToolUse",
                "workspace_roots": ["/work/app"],
                "tool_name": tool,
                "tool_input": args,
            }
        return {
            "clineVersion": "3.40.0",
            "hookName": "PreToolUse",
            "timestamp": str(1796445106000 + self.n),
            "taskId": s,
            "workspaceRoots": ["/work/app"],
            "userId": "dev",
            "preToolUse": {"toolName": tool, "parameters": args},
        }

    def post(self, tool: str, args: dict[str, Any], result: str) -> dict[str, Any]:
        h, s = self.harness, self.session
        if h == "gemini":
            event = self.pre(tool, args)
            event.update(
                hook_event_name="AfterTool",
                tool_response={"llmContent": result, "returnDisplay": result},
            )
            self.n -= 1
            return event
        if h == "codex":
            return {
                "session_id": s,
                "turn_id": "turn-1",
                "cwd": "/work/app",
                "hook_event_name": "PostToolUse",
                "model": "gpt-5",
                "tool_name": tool,
                "tool_input": args,
                "tool_use_id": f"call_{self.n}",
                "tool_response": result,
            }
        if h == "copilot":
            return {
                "sessionId": s,
                "timestamp": 1796445106000 + self.n,
                "cwd": "/work/app",
                "toolName": tool,
                "toolArgs": json.dumps(args),
                "toolResult": {"resultType": "success", "textResultForLlm": result},
            }
        if h == "cursor":
            return {
                "conversation_id": s,
                "generation_id": f"gen-{self.n}",
                "hook_event_name": "postToolUse",
                "workspace_roots": ["/work/app"],
                "tool_name": tool,
                "tool_input": args,
                "tool_output": result,
            }
        return {
            "clineVersion": "3.40.0",
            "hookName": "PostToolUse",
            "timestamp": "1796445106999",
            "taskId": s,
            "workspaceRoots": ["/work/app"],
            "userId": "dev",
            "postToolUse": {
                "toolName": tool,
                "parameters": args,
                "result": result,
                "success": True,
                "executionTimeMs": 12,
            },
        }

    def prompt(self) -> dict[str, Any]:
        h, s = self.harness, self.session
        return {
            "gemini": {"session_id": s, "hook_event_name": "BeforeAgent", "prompt": "go on"},
            "codex": {"session_id": s, "hook_event_name": "UserPromptSubmit", "prompt": "go"},
            "copilot": {"sessionId": s, "hookEventName": "userPromptSubmitted", "prompt": "go"},
            "cursor": {"conversation_id": s, "hook_event_name": "beforeSubmitPrompt"},
            "cline": {"hookName": "UserPromptSubmit", "taskId": s, "userPromptSubmit": {}},
        }[h]


def verdict(harness: str, reply: Any) -> tuple[str, str]:
    """(allow | nudge | stop, what the model reads) from a harness's answer."""
    if harness == "gemini":
        if reply is None:
            return "allow", ""
        assert reply["decision"] == "deny"
        return ("stop" if reply.get("continue") is False else "nudge"), reply["reason"]
    if harness == "codex":
        if reply is None:
            return "allow", ""
        # Never continue: false at PreToolUse: Codex 0.171 then runs the call (it was tried).
        assert "continue" not in reply
        said = reply["hookSpecificOutput"]
        assert said["permissionDecision"] == "deny"
        text = said["permissionDecisionReason"]
        return ("stop" if text.startswith("Stopped (") else "nudge"), text
    if harness == "copilot":
        if reply is None:
            return "allow", ""
        assert reply["permissionDecision"] == "deny"
        text = reply["permissionDecisionReason"]
        return ("stop" if text.startswith("Stopped (") else "nudge"), text
    if harness == "cursor":
        if reply is None:
            return "allow", ""
        assert reply["permission"] == "deny"
        text = reply["agent_message"]
        return ("stop" if text.startswith("Stopped (") else "nudge"), text
    assert reply is not None and isinstance(reply["cancel"], bool)
    if not reply["cancel"]:
        return "allow", ""
    return ("stop" if "tripwire stopped" in reply["errorMessage"] else "nudge"), reply[
        "contextModification"
    ]


def records(env: dict[str, str]) -> list[dict[str, Any]]:
    directory = Path(env["TRIPWIRE_STATE_DIR"]) / "sessions"
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def run_calls(
    env: dict[str, str], harness: str, calls: list[tuple[str, dict[str, Any], str]]
) -> str:
    """Each call checked and (when allowed) its result reported; the verdicts, a letter each."""
    events = Events(harness)
    letters = ""
    for tool, args, result in calls:
        code, reply, err = hook(env, harness, events.pre(tool, args))
        assert code == 0 and "Traceback" not in err, err
        action, _ = verdict(harness, reply)
        letters += action[0]
        if action == "allow":
            code, reply, err = hook(env, harness, events.post(tool, args, result))
            assert code == 0 and err == "", err
    return letters


# -- the protocol ------------------------------------------------------------------------------


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_read_loop_is_nudged_then_stopped(env: dict[str, str], harness: str) -> None:
    """Issue 25's order: allow, nudge, allow (the call after the nudge runs), stop."""
    args = {"file_path": "/work/app/app.log"}
    calls = [(READ[harness], dict(args), "INFO start\nWARN disk 91%")] * 4
    assert run_calls(env, harness, calls) == "anas"
    [record] = records(env)
    assert record["harness"] == harness and record["session"] == "s1"
    assert record["counts"] == {"calls": 4, "nudges": 1, "stops": 1}
    assert record["cwd"] == "/work/app"


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_shell_loop_gets_one_more(env: dict[str, str], harness: str) -> None:
    """A shell command may change the world: allow, allow, nudge, stop."""
    calls = [(SHELL[harness], {"command": "pytest -x"}, "1 failed")] * 4
    assert run_calls(env, harness, calls) == "aans"


@pytest.mark.parametrize("harness", HARNESSES)
def test_progress_is_never_refused(env: dict[str, str], harness: str) -> None:
    """The same command, its output changing each time (the tests getting further)."""
    calls = [(SHELL[harness], {"command": "pytest -x"}, f"{n} failed") for n in (5, 3, 1, 0)]
    assert run_calls(env, harness, calls) == "aaaa"


@pytest.mark.parametrize("harness", HARNESSES)
def test_after_a_stop_every_call_is_refused_with_its_message(
    env: dict[str, str], harness: str
) -> None:
    """Where a harness cannot end the run (Codex, Cursor, Cline), every further call is
    refused with the stop's message; a person's next prompt starts afresh."""
    args = {"file_path": "/work/app/app.log"}
    events = Events(harness)
    for _ in range(4):
        _, reply, _ = hook(env, harness, events.pre(READ[harness], dict(args)))
        if reply is None or reply == {"cancel": False}:
            hook(env, harness, events.post(READ[harness], args, "same"))
    _, reply, _ = hook(env, harness, events.pre(SHELL[harness], {"command": "ls"}))
    action, said = verdict(harness, reply)
    assert action == "stop" and "loop_detected" in said
    hook(env, harness, events.prompt())
    _, reply, _ = hook(env, harness, events.pre(SHELL[harness], {"command": "ls"}))
    assert verdict(harness, reply)[0] == "allow"


@pytest.mark.parametrize("harness", NO_CALL_ID)
def test_a_retried_delivery_is_one_call(env: dict[str, str], harness: str) -> None:
    """No call id: the same call asked again at once, its result not in, is a retry (one
    call, the same answer); once its result is in, the same call again is a repeat."""
    args = {"file_path": "/work/app/notes.txt"}
    events = Events(harness)
    first = hook(env, harness, events.pre(READ[harness], dict(args)))[1]
    again = hook(env, harness, events.pre(READ[harness], dict(args)))[1]
    assert verdict(harness, first)[0] == verdict(harness, again)[0] == "allow"
    assert records(env)[0]["counts"]["calls"] == 1
    hook(env, harness, events.post(READ[harness], args, "alpha"))
    repeat = hook(env, harness, events.pre(READ[harness], dict(args)))[1]
    assert verdict(harness, repeat)[0] == "nudge"
    assert records(env)[0]["counts"]["calls"] == 2


def test_codex_keys_calls_by_their_id(env: dict[str, str]) -> None:
    """Codex gives call ids: the same call with the same id is one delivery, whatever the
    time; with another id, a repeat."""
    events = Events("codex")
    event = events.pre("Read", {"file_path": "/a"})
    assert hook(env, "codex", event)[1] is None
    assert hook(env, "codex", event)[1] is None  # the same id again: a retry
    assert records(env)[0]["counts"]["calls"] == 1
    hook(env, "codex", events.post("Read", {"file_path": "/a"}, "x"))
    reply = hook(env, "codex", events.pre("Read", {"file_path": "/a"}))[1]
    assert verdict("codex", reply)[0] == "nudge"


def test_copilot_permission_request_interrupts_after_a_stop(env: dict[str, str]) -> None:
    """Copilot's permissionRequest ends the run (``interrupt: true``) once stopped; before,
    it says nothing, so Copilot's own permission rules apply."""
    events = Events("copilot")
    request = {"sessionId": "s1", "hookEventName": "permissionRequest", "toolName": "bash"}
    assert hook(env, "copilot", request)[1] is None
    run_calls(env, "copilot", [("view", {"path": "/a"}, "same")] * 4)
    reply = hook(env, "copilot", request)[1]
    assert reply["behavior"] == "deny" and reply["interrupt"] is True
    assert "tripwire stopped the agent" in reply["message"]
    del events


def test_copilot_pascal_case_events(env: dict[str, str]) -> None:
    """The PascalCase form (``PreToolUse`` with ``session_id``, ``tool_name``,
    ``tool_input``) is read as the camelCase one."""
    event = {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "tool_name": "view",
        "tool_input": {"path": "/a"},
    }
    assert hook(env, "copilot", event)[1] is None
    assert records(env)[0]["counts"]["calls"] == 1


def test_gemini_failed_tool_is_observed_as_a_failure(env: dict[str, str]) -> None:
    events = Events("gemini")
    args = {"command": "make"}
    for expected in ("allow", "allow", "nudge"):
        reply = hook(env, "gemini", events.pre("run_shell_command", dict(args)))[1]
        assert verdict("gemini", reply)[0] == expected
        if expected == "allow":
            post = events.post("run_shell_command", args, "")
            post["tool_response"] = {"llmContent": "", "error": {"message": "exit 2"}}
            hook(env, "gemini", post)


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize(
    "event",
    [b"not json", b"[1, 2]", b"{}", json.dumps({"hook_event_name": "BeforeTool"}).encode()],
)
def test_bad_events_fail_open(env: dict[str, str], harness: str, event: bytes) -> None:
    """Nothing a harness sends crashes it: the call is allowed (exit 0, nothing refused)."""
    code, reply, err = hook(env, harness, event)
    assert code == 0 and "Traceback" not in err
    assert reply is None or verdict(harness, reply)[0] == "allow"


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_missing_session_id_fails_open(env: dict[str, str], harness: str) -> None:
    event = Events(harness).pre(READ[harness], {"file_path": "/a"})
    for name in ("session_id", "sessionId", "conversation_id", "taskId"):
        event.pop(name, None)
    code, reply, err = hook(env, harness, event)
    assert code == 0 and reply is None
    assert err.startswith("tripwire: ") and "the call is allowed" in err
