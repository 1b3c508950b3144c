"""Gemini CLI's hooks (checked against ``@google/gemini-cli`` 0.61.0, its bundle's
``HookSystem.fireBeforeToolEvent`` and ``executeToolWithHooks``).

Events (JSON on stdin; every one has ``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, ``timestamp``):

- ``BeforeTool`` (``tool_name``, ``tool_input``) -> ``check``. A nudge is
  ``{"decision": "deny", "reason": ...}``: the model reads "Tool execution blocked: <reason>"
  as the tool's result. A stop adds ``{"continue": false, "stopReason": ...}``: Gemini CLI
  ends the agent's turn ("Agent execution stopped by hook").
- ``AfterTool`` (``tool_response``: ``llmContent``, ``returnDisplay``, ``error``) ->
  ``observe``.
- ``BeforeAgent`` (a prompt from the person) -> ``user_message``; ``SessionEnd`` -> ``end``.

**No call id.** Gemini CLI gives a call no id: calls are keyed by their content
(``Session.content_call_id``): an identical call asked again within a short time, its result
not yet in, is taken for a retried delivery; identical calls of one response are one action.
"""

from __future__ import annotations

import os
from typing import Any, Final

from tripwire.hooks import _groups
from tripwire.hooks._common import cwd_of, human, refusal
from tripwire.hooks._protocol import Request, text_field
from tripwire.hooks._session import Outcome

NAME: Final = "gemini"
EVENTS: Final = ("BeforeTool", "AfterTool", "BeforeAgent", "SessionEnd")
_TOOL_EVENTS: Final = {"BeforeTool": ".*", "AfterTool": ".*"}  # matchers are regexes
TIMEOUT_MS: Final = 10_000
SCOPES: Final = ("user", "project")


def parse(event: dict[str, Any]) -> Request:
    name = event.get("hook_event_name")
    if name not in EVENTS:
        return Request("ignore")
    session = text_field(event, "session_id")
    assert session is not None
    cwd = cwd_of(event)
    if name == "BeforeAgent":
        return Request("user", session, cwd=cwd)
    if name == "SessionEnd":
        return Request("end", session, cwd=cwd)
    tool = text_field(event, "tool_name")
    assert tool is not None
    args = event.get("tool_input")
    if name == "BeforeTool":
        return Request("check", session, tool, args, cwd=cwd)
    response = event.get("tool_response")
    error = response.get("error") if isinstance(response, dict) else None
    if isinstance(response, dict) and "llmContent" in response:
        result = response["llmContent"]
    else:
        result = response
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return Request("observe", session, tool, args, None, message or result, error=True)
    return Request("observe", session, tool, args, None, result)


def answer(request: Request, outcome: Outcome | None) -> dict[str, Any] | None:
    if request.kind != "check" or outcome is None or outcome.action == "allow":
        return None
    reply: dict[str, Any] = {"decision": "deny", "reason": refusal(outcome)}
    if outcome.action == "stop":
        reply["continue"] = False
        reply["stopReason"] = human(outcome)
    return reply


# -- settings ---------------------------------------------------------------------------------


def settings_file(scope: str, project: str) -> str:
    """``~/.gemini/settings.json`` (user) or ``<project>/.gemini/settings.json``."""
    if scope == "user":
        return os.path.join(os.path.expanduser("~"), ".gemini", "settings.json")
    if scope == "project":
        return os.path.join(project, ".gemini", "settings.json")
    raise ValueError(f"Gemini CLI has no {scope!r} settings (user or project)")


def is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and _groups.command_is(hook.get("command"), NAME)


def add_hooks(settings: dict[str, Any], command: str | None, url: str | None) -> dict[str, Any]:
    if command is None:
        raise ValueError("Gemini CLI runs command hooks only (no --serve)")
    hook = {"name": "tripwire", "type": "command", "command": command, "timeout": TIMEOUT_MS}
    return _groups.add(settings, EVENTS, hook, is_ours, _TOOL_EVENTS)


def remove_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return _groups.remove(settings, is_ours)
