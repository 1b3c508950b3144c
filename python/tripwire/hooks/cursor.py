"""Cursor's agent hooks (from cursor.com/docs/agent/hooks; Cursor is not installable here: the
protocol tests name the source of each field).

``.cursor/hooks.json`` (project) or ``~/.cursor/hooks.json`` (user): ``{"version": 1,
"hooks": {event: [{"command": ...}]}}``. Events (JSON on stdin; every one has
``conversation_id``, ``generation_id``, ``hook_event_name``, ``workspace_roots``):

- ``preToolUse`` (``tool_name``, ``tool_input``) -> ``check``; a nudge or a stop is
  ``{"permission": "deny", "agent_message": <the guard's message>, "user_message": ...}``.
- ``postToolUse`` (``tool_output``) -> ``observe``; ``beforeSubmitPrompt`` -> ``user_message``.

**Cursor cannot end a run from a hook**: after a stop, every further call of the conversation
is refused with the stop's message. **No call id**: calls are keyed by their content.
"""

from __future__ import annotations

import os
from typing import Any, Final

from tripwire.hooks import _groups
from tripwire.hooks._common import cwd_of, human, refusal
from tripwire.hooks._protocol import Request, text_field
from tripwire.hooks._session import Outcome

NAME: Final = "cursor"
EVENTS: Final = ("preToolUse", "postToolUse", "beforeSubmitPrompt")


def parse(event: dict[str, Any]) -> Request:
    name = event.get("hook_event_name")
    if name not in EVENTS:
        return Request("ignore")
    session = text_field(event, "conversation_id")
    assert session is not None
    cwd = cwd_of(event)
    if name == "beforeSubmitPrompt":
        return Request("user", session, cwd=cwd)
    tool = text_field(event, "tool_name")
    assert tool is not None
    args = event.get("tool_input")
    if name == "preToolUse":
        return Request("check", session, tool, args, cwd=cwd)
    return Request("observe", session, tool, args, None, event.get("tool_output"))


def answer(request: Request, outcome: Outcome | None) -> dict[str, Any] | None:
    if request.kind != "check" or outcome is None or outcome.action == "allow":
        return None
    said = human(outcome) if outcome.action == "stop" else "tripwire refused a repeated call"
    return {"permission": "deny", "agent_message": refusal(outcome), "user_message": said}


def settings_file(scope: str, project: str) -> str:
    if scope == "user":
        return os.path.join(os.path.expanduser("~"), ".cursor", "hooks.json")
    if scope == "project":
        return os.path.join(project, ".cursor", "hooks.json")
    raise ValueError(f"Cursor has no {scope!r} hooks file (user or project)")


def is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and _groups.command_is(hook.get("command"), NAME)


def add_hooks(settings: dict[str, Any], command: str | None, url: str | None) -> dict[str, Any]:
    if command is None:
        raise ValueError("Cursor runs command hooks only (no --serve)")
    result = _groups.flat_add(settings, EVENTS, {"command": command}, is_ours)
    return {"version": result.pop("version", 1), **result}


def remove_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return _groups.flat_remove(settings, is_ours)
