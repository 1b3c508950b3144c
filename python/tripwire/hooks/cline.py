"""Cline's hooks (from docs.cline.bot/features/hooks; Cline is not installable here: the
protocol tests name the source of each field).

A hook is an executable named after its event in ``.clinerules/hooks/`` (project) or
``~/Documents/Cline/Rules/Hooks/`` (user). It reads ``{"clineVersion", "hookName",
"timestamp", "taskId", "workspaceRoots", "userId", <event>: {...}}`` on stdin and answers
``{"cancel": bool, "contextModification": str, "errorMessage": str}``.

- ``PreToolUse`` (``preToolUse: {toolName, parameters}``) -> ``check``; a nudge or a stop is
  ``{"cancel": true, "errorMessage": <the guard's message>}``.
- ``PostToolUse`` (``postToolUse: {toolName, parameters, result, success}``) -> ``observe``.
- ``UserPromptSubmit`` -> ``user_message``; ``TaskComplete``, ``TaskCancel`` -> ``end``.

**Ending a run**: a refusal is all a PreToolUse hook can say; after a stop, every further call
of the task is refused with the stop's message. **No call id**: calls are keyed by content.

``tripwire install cline`` writes one small script per event (marked as tripwire's); a file of
that name that is not tripwire's is refused, never overwritten.
"""

from __future__ import annotations

import os
from typing import Any, Final

from tripwire.hooks._common import cwd_of, human, refusal
from tripwire.hooks._protocol import EventError, Request, text_field
from tripwire.hooks._session import Outcome

NAME: Final = "cline"
EVENTS: Final = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "TaskComplete", "TaskCancel")
SETTINGS_FORMAT: Final = "scripts"
MARK: Final = "# tripwire hook (tripwire install cline; `tripwire uninstall cline` removes it)"


def parse(event: dict[str, Any]) -> Request:
    name = event.get("hookName")
    if name not in EVENTS:
        return Request("ignore")
    session = text_field(event, "taskId")
    assert session is not None
    cwd = cwd_of(event)
    if name == "UserPromptSubmit":
        return Request("user", session, cwd=cwd)
    if name in ("TaskComplete", "TaskCancel"):
        return Request("end", session, cwd=cwd)
    body = event.get("preToolUse" if name == "PreToolUse" else "postToolUse")
    if not isinstance(body, dict):
        raise EventError(f"the event has no {name[0].lower() + name[1:]!r} object")
    tool = text_field(body, "toolName")
    assert tool is not None
    args = body.get("parameters")
    if name == "PreToolUse":
        return Request("check", session, tool, args, cwd=cwd)
    failed = body.get("success") is False
    return Request("observe", session, tool, args, None, body.get("result"), error=failed)


def answer(request: Request, outcome: Outcome | None) -> dict[str, Any] | None:
    if outcome is None or outcome.action == "allow":
        return {"cancel": False}
    message = human(outcome) if outcome.action == "stop" else refusal(outcome)
    return {"cancel": True, "errorMessage": message, "contextModification": refusal(outcome)}


# -- install: one script per event --------------------------------------------------------------


def hooks_dir(scope: str, project: str) -> str:
    if scope == "user":
        return os.path.join(os.path.expanduser("~"), "Documents", "Cline", "Rules", "Hooks")
    if scope == "project":
        return os.path.join(project, ".clinerules", "hooks")
    raise ValueError(f"Cline has no {scope!r} hooks (user or project)")


def settings_file(scope: str, project: str) -> str:
    return hooks_dir(scope, project)


def script(command: str) -> str:
    return f"#!/bin/sh\n{MARK}\nexec {command}\n"


def scripts(directory: str, command: str | None) -> dict[str, str]:
    if command is None:
        raise ValueError("Cline runs command hooks only (no --serve)")
    return {os.path.join(directory, event): script(command) for event in EVENTS}


def is_ours(text: str) -> bool:
    return MARK in text.splitlines()[:3]
