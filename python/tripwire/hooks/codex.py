"""Codex CLI's hooks (checked against ``@openai/codex`` 0.171.0 and its hook schemas,
``codex-rs/hooks/schema/generated/*.command.{input,output}.schema.json``).

Events (JSON on stdin): ``PreToolUse`` (``session_id``, ``turn_id``, ``transcript_path``,
``cwd``, ``tool_name``, ``tool_input``, ``tool_use_id``, ``model``) -> ``check``;
``PostToolUse`` (``tool_response``) -> ``observe``; ``UserPromptSubmit`` -> ``user_message``.

A nudge or a stop is ``hookSpecificOutput.permissionDecision: "deny"`` with the guard's
message (the model reads it as the call's result). **Codex cannot end a run from
PreToolUse** (its ``continue: false`` is rejected there): after a stop, every further call of
the session is refused with the stop's message, so the model can do nothing more and the turn
ends when it answers in words (a person's next prompt starts the session afresh).

Codex runs a hook only once a person has reviewed and trusted it (``/hooks`` in the TUI;
``codex exec --dangerously-bypass-hook-trust`` for automation that vets its hooks itself).
"""

from __future__ import annotations

import os
from typing import Any, Final

from tripwire.hooks import _groups
from tripwire.hooks._common import cwd_of, refusal
from tripwire.hooks._protocol import Request, text_field
from tripwire.hooks._session import Outcome

NAME: Final = "codex"
EVENTS: Final = ("PreToolUse", "PostToolUse", "UserPromptSubmit")
_TOOL_EVENTS: Final = {"PreToolUse": "*", "PostToolUse": "*"}
TIMEOUT: Final = 10
SETTINGS_FORMAT: Final = "toml"


def parse(event: dict[str, Any]) -> Request:
    name = event.get("hook_event_name")
    if name not in EVENTS:
        return Request("ignore")
    session = text_field(event, "session_id")
    assert session is not None
    cwd = cwd_of(event)
    if name == "UserPromptSubmit":
        return Request("user", session, cwd=cwd)
    tool = text_field(event, "tool_name")
    assert tool is not None
    call_id = text_field(event, "tool_use_id", required=False)
    args = event.get("tool_input")
    if name == "PreToolUse":
        return Request("check", session, tool, args, call_id, cwd=cwd)
    return Request("observe", session, tool, args, call_id, event.get("tool_response"))


def answer(request: Request, outcome: Outcome | None) -> dict[str, Any] | None:
    if request.kind != "check" or outcome is None or outcome.action == "allow":
        return None
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": refusal(outcome),
        }
    }


# -- settings: config.toml ---------------------------------------------------------------------


def settings_file(scope: str, project: str) -> str:
    """``$CODEX_HOME/config.toml`` (by default ``~/.codex``) or ``<project>/.codex/config.toml``
    (read only in a project Codex trusts)."""
    if scope == "user":
        home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
        return os.path.join(home, "config.toml")
    if scope == "project":
        return os.path.join(project, ".codex", "config.toml")
    raise ValueError(f"Codex CLI has no {scope!r} settings (user or project)")


def toml_block(command: str | None, url: str | None) -> str:
    """tripwire's hooks as config.toml text (arrays of tables: appended after what is
    there, they change nothing else)."""
    if command is None:
        raise ValueError("Codex CLI runs command hooks only (no --serve)")
    quoted = _toml_string(command)
    lines = []
    for event in EVENTS:
        lines.append(f"[[hooks.{event}]]")
        if event in _TOOL_EVENTS:
            lines.append(f'matcher = "{_TOOL_EVENTS[event]}"')
        lines += [
            f"[[hooks.{event}.hooks]]",
            'type = "command"',
            f"command = {quoted}",
            f"timeout = {TIMEOUT}",
            "",
        ]
    return "\n".join(lines)


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c >= " " or c == "\t" else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'


def is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and _groups.command_is(hook.get("command"), NAME)


def remove_hooks(settings: dict[str, Any]) -> dict[str, Any]:
    return _groups.remove(settings, is_ours)
