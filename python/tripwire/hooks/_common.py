"""What the harness modules share: the person's words for a stop, and the text of a result."""

from __future__ import annotations

from typing import Any

from tripwire.hooks._session import Outcome


def human(outcome: Outcome) -> str:
    """A stop, for the person (the guard's message names its reason: "Stopped (loop_detected):
    ...")."""
    message = outcome.message or "the run was stopped"
    said = outcome.reason
    if message.startswith("Stopped (") and "): " in message:
        head, message = message.split(": ", 1)
        said = said or head[len("Stopped (") : -1]
    message = message.rstrip(".")
    reason = f"{said}, " if said else ""
    return (
        f"tripwire stopped the agent: {message} ({reason}{outcome.steps} tool calls checked "
        "in this session; `tripwire sessions` lists it)"
    )


def refusal(outcome: Outcome) -> str:
    return outcome.message or "tripwire refused this call"


def cwd_of(event: dict[str, Any]) -> str | None:
    cwd = event.get("cwd")
    if isinstance(cwd, str):
        return cwd
    roots = event.get("workspace_roots", event.get("workspaceRoots"))
    if isinstance(roots, list) and roots and isinstance(roots[0], str):
        return roots[0]
    return None
