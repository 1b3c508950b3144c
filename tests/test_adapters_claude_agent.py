"""tripwire.adapters.claude_agent through the real Claude Agent SDK (and the Claude Code it
bundles), against the fake Messages API on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import tripwire
from _claude import ALLOWED_TOOLS, NO_CLAUDE, Sandbox, claude_binary
from _fake_messages import FakeMessagesAPI
from test_hooks_claude_e2e import NUDGE, seed_loop

pytestmark = pytest.mark.skipif(claude_binary() is None, reason=NO_CLAUDE)


def run_sdk(box: Sandbox, api: FakeMessagesAPI, guard: Any) -> Any:
    from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query
    from tripwire.adapters import claude_agent

    env = box.env(ANTHROPIC_BASE_URL=api.url)
    options = ClaudeAgentOptions(
        hooks=claude_agent.hooks(guard),  # the glue: one line
        cwd=str(box.project),
        env=env,
        allowed_tools=ALLOWED_TOOLS,
    )

    async def main() -> Any:
        result = None
        async for message in query(prompt="find the errors in logs/app.log", options=options):
            if isinstance(message, ResultMessage):
                result = message
        return result

    return asyncio.run(main())


def test_seed_loop_through_the_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Sandbox(tmp_path)
    # The SDK's own process reads HOME too (the CLI it starts gets env= on top).
    monkeypatch.setenv("HOME", str(box.home))
    guard = tripwire.Guard()
    with FakeMessagesAPI(seed_loop(box)) as api:
        result = run_sdk(box, api, guard)
    assert result is not None and result.terminal_reason == "hook_stopped", result
    first, second, third = (ids[0] for ids in api.sent_ids())
    results = api.tool_results()
    assert not results[first].get("is_error")
    assert results[second]["is_error"] and NUDGE in results[second]["content"]
    assert third not in results and api.errors == []
    # The guard held in memory saw the run: three checks, stopped on the third.
    assert guard.stopped and guard.steps == 3
    # Nothing was written where the command hook keeps its state.
    assert not box.state.exists()
