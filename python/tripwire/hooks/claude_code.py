"""Claude Code's hooks (checked against Claude Code 2.1.332, the ``claude-agent-sdk`` wheel's).

Events (JSON on stdin for ``command`` hooks, the POST body for ``http`` hooks):

- ``PreToolUse`` (``session_id``, ``transcript_path``, ``tool_name``, ``tool_input``,
  ``tool_use_id``) -> ``check``; a nudge is refused with the guard's message
  (``permissionDecision: "deny"``: the model gets it as the tool's error), a stop is refused
  and ends the run (``continue: false`` and a ``stopReason`` for the person; a headless run
  ends with ``terminal_reason: "hook_stopped"``). An allowed call gets no answer, so Claude
  Code's own permission rules still apply.
- ``PostToolUse`` (``tool_response``) and ``PostToolUseFailure`` (``error``) -> ``observe``.
- ``UserPromptSubmit`` -> ``user_message``; ``SessionEnd`` -> ``end``.

**Subagents.** A call made inside a subagent (the Agent/Task tool) carries its ``agent_id``:
it is guarded as a run of its own (``<session_id>/<agent_id>``), as ``tripwire replay`` takes a
transcript's subagent lines for a run of their own; a subagent re-reading what its parent read
is not repeating itself. ``SubagentStop`` ends that run.

**Calls of one model response.** Claude Code asks the hook once per call, the hooks of
parallel calls at once. Which calls came in one response is read from the session's
transcript (``transcript_path``): the lines of one API response share ``message.id``. Only
the file's tail is read (at most ``TAIL_MAX`` bytes, searched backwards for this call's id),
so it costs a fraction of a millisecond. A call identical to another call of its response
(the same key) is one action with it, as in ``Guard.check_turn``. Claude Code may not have
written the response yet when the first call's hook runs; it has by the time the later
calls' hooks run, which is all the grouping needs. Where the transcript cannot tell (absent,
unreadable, the call not found), each call is checked alone.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Final, Literal

from tripwire.hooks import _groups
from tripwire.hooks._protocol import Request, text_field
from tripwire.hooks._session import Outcome

NAME: Final = "claude-code"
EVENTS: Final = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "SubagentStop",
    "SessionEnd",
)
# Events whose hooks take a tool matcher.
_TOOL_EVENTS: Final = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
TIMEOUT: Final = 10
TAIL_CHUNK: Final = 256 * 1024
TAIL_MAX: Final = 4 * 1024 * 1024
# Lines searched back from a call for the rest of its response.
_RESPONSE_LINES: Final = 200
_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,200}")

Scope = Literal["user", "project", "local"]
SECRET_VARIABLE: Final = "TRIPWIRE_SECRET"
SECRET_HEADER: Final = "X-Tripwire-Secret"


# -- events -----------------------------------------------------------------------------------


def parse(event: dict[str, Any]) -> Request:
    name = event.get("hook_event_name")
    if name not in EVENTS:
        return Request("ignore")
    session = text_field(event, "session_id")
    assert session is not None
    agent = event.get("agent_id")
    if isinstance(agent, str) and agent:
        session = f"{session}/{agent}"  # a subagent's calls are a run of their own
    cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
    if name == "UserPromptSubmit":
        return Request("user", session, cwd=cwd)
    if name in ("SessionEnd", "SubagentStop"):
        return Request("end", session, cwd=cwd)
    tool = text_field(event, "tool_name")
    assert tool is not None
    call_id = text_field(event, "tool_use_id", required=False)
    args = event.get("tool_input")
    if name == "PreToolUse":
        transcript = event.get("transcript_path")
        response = None
        if isinstance(transcript, str) and call_id is not None:

            def response() -> tuple[str, list[str]] | None:
                return response_of(transcript, call_id)

        return Request("check", session, tool, args, call_id, cwd=cwd, response=response)
    if name == "PostToolUse":
        return Request("observe", session, tool, args, call_id, event.get("tool_response"))
    # PostToolUseFailure: the error's text is the result (two failures alike are alike).
    error = event.get("error")
    return Request("observe", session, tool, args, call_id, error or "failed", error=True)


def _human(outcome: Outcome) -> str:
    message = outcome.message or "the run was stopped"
    said = outcome.reason
    if message.startswith("Stopped (") and "): " in message:
        # The guard's stop message names its reason: "Stopped (loop_detected): ...".
        head, message = message.split(": ", 1)
        said = said or head[len("Stopped (") : -1]
    message = message.rstrip(".")
    reason = f"{said}, " if said else ""
    return (
        f"tripwire stopped the agent: {message} ({reason}{outcome.steps} tool calls checked "
        "in this session; `tripwire sessions` lists it)"
    )


def answer(request: Request, outcome: Outcome | None) -> dict[str, Any] | None:
    if request.kind != "check" or outcome is None or outcome.action == "allow":
        return None
    reply: dict[str, Any] = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": outcome.message or "tripwire refused this call",
        }
    }
    if outcome.action == "stop":
        reply["continue"] = False
        reply["stopReason"] = _human(outcome)
    return reply


# -- the transcript ---------------------------------------------------------------------------


def response_of(path: str, call_id: str) -> tuple[str, list[str]] | None:
    """The id of the model response a call came in, and the ids of all its calls, from the
    transcript's tail; ``None`` where the transcript does not (yet) tell."""
    if _ID.fullmatch(call_id) is None:
        return None
    needle = f'"id":"{call_id}"'.encode()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        size = os.fstat(fd).st_size
        chunk = TAIL_CHUNK
        while True:
            start = max(0, size - chunk)
            data = os.pread(fd, size - start, start)
            at = data.rfind(needle)
            if at >= 0 or start == 0 or chunk >= TAIL_MAX:
                break
            chunk *= 4
    except OSError:
        return None
    finally:
        os.close(fd)
    if at < 0:
        return None
    lines = data.split(b"\n")
    # The line holding the call, and the lines of its response around it.
    offset, index = 0, 0
    for index, line in enumerate(lines):  # noqa: B007 - the index is used after the loop
        if offset + len(line) >= at:
            break
        offset += len(line) + 1
    message_id = _message_id(lines[index], call_id)
    if message_id is None:
        return None
    ids: list[str] = []
    low = max(0, index - _RESPONSE_LINES)
    high = min(len(lines), index + _RESPONSE_LINES)
    marker = f'"id":"{message_id}"'.encode()
    for line in lines[low:high]:
        if marker in line and b'"tool_use"' in line:
            ids.extend(_tool_use_ids(line, message_id))
    return message_id, ids


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _message_id(line: bytes, call_id: str) -> str | None:
    record = _record(line)
    message = record.get("message") if record is not None else None
    if record is None or record.get("type") != "assistant" or not isinstance(message, dict):
        return None
    message_id = message.get("id")
    if not isinstance(message_id, str) or _ID.fullmatch(message_id) is None:
        return None
    if call_id not in _tool_use_ids(line, message_id):
        return None
    return message_id


def _tool_use_ids(line: bytes, message_id: str) -> list[str]:
    record = _record(line)
    message = record.get("message") if record is not None else None
    if record is None or record.get("type") != "assistant" or not isinstance(message, dict):
        return []
    if message.get("id") != message_id or not isinstance(message.get("content"), list):
        return []
    return [
        block["id"]
        for block in message["content"]
        if isinstance(block, dict)
        and block.get("type") == "tool_use"
        and isinstance(block.get("id"), str)
    ]


# -- settings ---------------------------------------------------------------------------------


def settings_file(scope: Scope, project: str) -> str:
    """Claude Code's settings file of a scope: the user's (``$CLAUDE_CONFIG_DIR`` or
    ``~/.claude``), the project's shared one, or the project's local one."""
    if scope == "user":
        base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(
            os.path.expanduser("~"), ".claude"
        )
        return os.path.join(base, "settings.json")
    name = "settings.json" if scope == "project" else "settings.local.json"
    return os.path.join(project, ".claude", name)


def is_ours(hook: Any) -> bool:
    """A hook entry ``tripwire install`` wrote."""
    if not isinstance(hook, dict):
        return False
    command = hook.get("command")
    if hook.get("type") == "command" and isinstance(command, str):
        return re.search(r"tripwire\S*\s+hook\s+claude-code(\s|$)", command) is not None
    headers = hook.get("headers")
    return (
        hook.get("type") == "http"
        and isinstance(headers, dict)
        and SECRET_HEADER in headers
        and str(hook.get("url", "")).rstrip("/").endswith("/hooks/claude-code")
    )


def our_hook(command: str | None, url: str | None) -> dict[str, Any]:
    if url is not None:
        return {
            "type": "http",
            "url": url.rstrip("/") + "/hooks/claude-code",
            "timeout": TIMEOUT,
            "headers": {SECRET_HEADER: f"${SECRET_VARIABLE}"},
            "allowedEnvVars": [SECRET_VARIABLE],
        }
    assert command is not None
    return {"type": "command", "command": command, "timeout": TIMEOUT}


def remove_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without tripwire's hooks; everything else as it was."""
    return _groups.remove(settings, is_ours)


def add_hooks(settings: dict[str, Any], command: str | None, url: str | None) -> dict[str, Any]:
    """``settings`` with tripwire's hooks (a command, or ``url`` for ``tripwire serve``),
    replacing any tripwire hooks already there: installing twice is installing once."""
    matchers = {event: "*" for event in _TOOL_EVENTS}
    return _groups.add(settings, EVENTS, our_hook(command, url), is_ours, matchers)
