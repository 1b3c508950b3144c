"""GitHub Copilot CLI's hooks (from its hooks reference, docs.github.com/en/copilot/reference/
copilot-cli-reference/cli-hooks-reference; not run here: see docs/hooks/copilot.md).

Hooks are read from ``.github/hooks/*.json`` in the working directory (``{"version": 1,
"hooks": {event: [{"type": "command", "bash": ..., "timeoutSec": ...}]}}``); tripwire
installs its own file, ``.github/hooks/tripwire.json``.

Events (JSON on stdin): ``preToolUse`` (``sessionId``, ``timestamp``, ``cwd``, ``toolName``,
``toolArgs``: the arguments as a JSON string) -> ``check``; ``postToolUse`` (``toolResult``:
``resultType``, ``textResultForLlm``) -> ``observe``; ``userPromptSubmitted`` ->
``user_message``; ``sessionEnd`` -> ``end``; ``permissionRequest`` -> after a stop,
``{"behavior": "deny", "interrupt": true}``, which ends the run. The PascalCase forms
(``PreToolUse`` with ``session_id``, ``tool_name``, ``tool_input``) are read too.

A nudge or a stop refuses the call (``permissionDecision: "deny"`` and the guard's message).
Hooks fail open (a hook that fails or times out lets the call run), as tripwire's do.

**No call id**: calls are keyed by their content (``Session.content_call_id``).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Final

from tripwire.hooks import _groups
from tripwire.hooks._common import cwd_of, human, refusal
from tripwire.hooks._protocol import EventError, Request
from tripwire.hooks._session import Outcome

NAME: Final = "copilot"
EVENTS: Final = (
    "preToolUse",
    "postToolUse",
    "userPromptSubmitted",
    "sessionEnd",
    "permissionRequest",
)
_ALIASES: Final = {
    "PreToolUse": "preToolUse",
    "PostToolUse": "postToolUse",
    "UserPromptSubmit": "userPromptSubmitted",
    "SessionEnd": "sessionEnd",
    "PermissionRequest": "permissionRequest",
}
TIMEOUT: Final = 10
DEFAULT_SCOPE: Final = "project"
OWN_FILE: Final = "tripwire.json"


def _first(event: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in event:
            return event[name]
    return None


def parse(event: dict[str, Any]) -> Request:
    name = _first(event, "hookEventName", "hook_event_name", "hookName")
    name = _ALIASES.get(name, name) if isinstance(name, str) else None
    if name is None:
        # Copilot's camelCase events do not name themselves: the event is told by its fields.
        if "toolResult" in event:
            name = "postToolUse"
        elif "toolName" in event or "tool_name" in event:
            name = "preToolUse"
        else:
            return Request("ignore")
    if name not in EVENTS:
        return Request("ignore")
    session = _first(event, "sessionId", "session_id")
    if not isinstance(session, str) or not session:
        raise EventError("the event's 'sessionId' is not a non-empty string")
    cwd = cwd_of(event)
    if name == "userPromptSubmitted":
        return Request("user", session, cwd=cwd)
    if name == "sessionEnd":
        return Request("end", session, cwd=cwd)
    tool = _first(event, "toolName", "tool_name")
    if not isinstance(tool, str) or not tool:
        raise EventError("the event's 'toolName' is not a non-empty string")
    args = _first(event, "toolArgs", "tool_input")
    if isinstance(args, str):
        # A tool whose argument is not JSON: the text is the argument.
        with contextlib.suppress(ValueError, RecursionError):
            args = json.loads(args)
    if name == "permissionRequest":
        return Request("status", session, tool, args, cwd=cwd)
    if name == "preToolUse":
        return Request("check", session, tool, args, cwd=cwd)
    result = _first(event, "toolResult", "tool_response")
    if isinstance(result, dict) and "textResultForLlm" in result:
        failed = result.get("resultType") in ("failure", "denied", "rejected")
        return Request(
            "observe", session, tool, args, None, result["textResultForLlm"], error=failed
        )
    return Request("observe", session, tool, args, None, result)


def answer(request: Request, outcome: Outcome | None) -> dict[str, Any] | None:
    if outcome is None or outcome.action == "allow":
        return None
    if request.kind == "status":
        return {"behavior": "deny", "message": human(outcome), "interrupt": True}
    if request.kind != "check":
        return None
    return {"permissionDecision": "deny", "permissionDecisionReason": refusal(outcome)}


# -- settings ---------------------------------------------------------------------------------


def settings_file(scope: str, project: str) -> str:
    """tripwire's own file among the project's hooks: ``.github/hooks/tripwire.json``."""
    if scope == "project":
        return os.path.join(project, ".github", "hooks", OWN_FILE)
    raise ValueError(
        "Copilot CLI reads hooks from the project's .github/hooks/ only: use --scope project"
    )


def is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and _groups.command_is(hook.get("bash"), NAME)


def add_hooks(settings: dict[str, Any], command: str | None, url: str | None) -> dict[str, Any]:
    if command is None:
        raise ValueError("Copilot CLI runs command hooks only (no --serve)")
    hook = {"type": "command", "bash": command, "timeoutSec": TIMEOUT}
    result = _groups.flat_add(settings, EVENTS, hook, is_ours)
    return {"version": result.pop("version", 1), **result}


def remove_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return _groups.flat_remove(settings, is_ours)
