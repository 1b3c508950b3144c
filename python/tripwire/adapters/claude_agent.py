"""tripwire for the Claude Agent SDK (``claude_agent_sdk``): its hooks, the guard in memory.

::

    options = ClaudeAgentOptions(hooks=tripwire.adapters.claude_agent.hooks(tripwire.Guard()))
    async for message in query(prompt="...", options=options):
        ...

The SDK runs Claude Code and calls these hooks in this process: the same protocol as the
``tripwire hook claude-code`` command (``tripwire.hooks.claude_code``), without a process or
a state file per event. A nudged call is refused with the guard's message (the model reads
it as the tool's error); a stop refuses the call and ends the run (the result message's
``terminal_reason`` is ``"hook_stopped"``). Anything that goes wrong inside tripwire allows
the call, with a warning on the ``tripwire.claude_agent`` logger.

A limit: the command hook finds which calls came in one model response in the session's
transcript, but the Claude Code the SDK drives writes it only after the hooks have run (2.1.332),
and the hooks' input names no response. So identical calls *within one response* are checked
one by one here (the second copy is refused, as a repeat would be); calls across responses are
judged as by the command hook.

One ``hooks(...)`` per run: its guard is that run's.
"""

from __future__ import annotations

import logging
from typing import Any, Final, cast

try:
    from claude_agent_sdk import HookCallback, HookMatcher
except ImportError as exc:  # pragma: no cover - only without the extra
    raise ImportError(
        "tripwire.adapters.claude_agent needs the Claude Agent SDK: pip install 'tripwire[claude]'"
    ) from exc

import tripwire
from tripwire.hooks import apply, claude_code
from tripwire.hooks._session import Session

__all__ = ("hooks",)

log = logging.getLogger("tripwire.claude_agent")

# The SDK's events tripwire answers (it has no SessionEnd: the guard ends with the run).
EVENTS: Final = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "SubagentStop",
)


def hooks(guard: Any = None) -> dict[str, list[HookMatcher]]:
    """``ClaudeAgentOptions(hooks=...)`` for one run guarded by ``guard`` (a new
    ``tripwire.Guard()`` when none is given)."""
    guard = tripwire.Guard() if guard is None else guard
    session = Session.new(lambda: guard, claude_code.NAME, "claude-agent-sdk")
    # Each subagent's calls are a run of their own (as for the command hook), with a guard
    # configured as this one.
    subagents: dict[str, Session] = {}

    def session_of(request: Any) -> Session:
        _, _, agent = request.session.partition("/")
        if not agent:
            return session
        if agent not in subagents:

            def like_guard() -> Any:
                twin = type(guard).from_snapshot(guard.snapshot())
                twin.reset()
                return twin

            subagents[agent] = Session.new(like_guard, claude_code.NAME, request.session)
        if request.kind == "end":
            return subagents.pop(agent)
        return subagents[agent]

    async def callback(event: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        try:
            event = dict(event)
            if tool_use_id is not None:
                event.setdefault("tool_use_id", tool_use_id)
            request = claude_code.parse(event)
            if request.kind == "ignore":
                return {}
            reply = claude_code.answer(request, apply(session_of(request), request))
        except Exception as exc:
            log.warning("tripwire: %s: %s; the call is allowed", type(exc).__name__, exc)
            return {}
        return reply or {}

    # The SDK types the callback by event; this one callback answers them all.
    hook = cast(HookCallback, callback)
    return {event: [HookMatcher(matcher=None, hooks=[hook])] for event in EVENTS}
