"""tripwire.adapters.claude_agent through the real Claude Agent SDK (and the Claude Code it
bundles), against the fake Messages API on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import tripwire
from _claude import ALLOWED_TOOLS, NO_CLAUDE, Sandbox, claude_binary
from _fake_messages import FakeMessagesAPI, text, tool_use
from test_hooks_claude_e2e import (
    NUDGE,
    assert_healthy,
    healthy_session,
    seed_loop,
)

pytestmark = pytest.mark.skipif(claude_binary() is None, reason=NO_CLAUDE)


def run_sdk(box: Sandbox, api: FakeMessagesAPI, guard: Any, prompt: str = "go") -> Any:
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
        async for message in query(prompt=prompt, options=options):
            if isinstance(message, ResultMessage):
                result = message
        return result

    return asyncio.run(main())


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    box = Sandbox(tmp_path)
    # The SDK's own process reads HOME too (the CLI it starts gets env= on top).
    monkeypatch.setenv("HOME", str(box.home))
    return box


def result_dict(result: Any) -> dict[str, Any]:
    return {"terminal_reason": result.terminal_reason, "result": result.result}


def test_seed_loop_through_the_sdk(box: Sandbox) -> None:
    guard = tripwire.Guard()
    with FakeMessagesAPI(seed_loop(box)) as api:
        result = run_sdk(box, api, guard)
    assert result is not None and result.terminal_reason == "hook_stopped", result
    first, second, third, fourth = (ids[0] for ids in api.sent_ids())
    results = api.tool_results()
    assert not results[first].get("is_error")
    assert results[second]["is_error"] and NUDGE in results[second]["content"]
    # Issue 25: the call after the nudge ran; the fourth was stopped.
    assert not results[third].get("is_error")
    assert fourth not in results and api.errors == []
    # The guard held in memory saw the run: four checks, stopped on the fourth.
    assert guard.stopped and guard.steps == 4
    # Nothing was written where the command hook keeps its state.
    assert not box.state.exists()


def test_healthy_session_through_the_sdk(box: Sandbox) -> None:
    guard = tripwire.Guard()
    script = healthy_session(box)
    with FakeMessagesAPI(script) as api:
        result = run_sdk(box, api, guard, "fix calc.py so the tests pass, then commit")
    assert_healthy(box, api, result_dict(result))
    assert guard.steps == 10 and not guard.stopped


def test_parallel_calls_through_the_sdk(box: Sandbox) -> None:
    """Parallel reads of different files run; the same read in the next response is a
    repeat. (Identical calls within one response cannot be told apart from repeats here:
    the SDK's Claude Code writes the transcript after its hooks have run; see the
    adapter's docstring.)"""
    guard = tripwire.Guard()
    notes, other = box.project / "notes.txt", box.project / "other.txt"
    notes.write_text("alpha\n")
    other.write_text("beta\n")
    script = [
        [tool_use("Read", {"file_path": str(notes)}), tool_use("Read", {"file_path": str(other)})],
        [tool_use("Read", {"file_path": str(notes)})],
        [text("Read them.")],
    ]
    with FakeMessagesAPI(script) as api:
        result = run_sdk(box, api, guard, "read the notes")
    assert result.terminal_reason == "completed", result
    results = api.tool_results()
    (a, b), (c,), _ = api.sent_ids()
    assert not results[a].get("is_error") and not results[b].get("is_error")
    assert results[c]["is_error"] and NUDGE in results[c]["content"]


def test_subagents_are_runs_of_their_own() -> None:
    """The adapter's callback as the SDK calls it: a subagent's calls (with agent_id) get a
    guard of their own, configured as the run's; SubagentStop lets it go."""
    from tripwire.adapters import claude_agent

    guard = tripwire.Guard(nudge_at=2, stop_at=3)
    [matcher] = claude_agent.hooks(guard)["PreToolUse"]
    callback = matcher.hooks[0]
    read = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Read"}
    read["tool_input"] = {"file_path": "/a"}
    sub = {"agent_id": "ag1", "agent_type": "general-purpose"}

    def decide(event: dict[str, Any], call_id: str) -> str:
        reply = asyncio.run(callback(event, call_id, {"signal": None}))  # type: ignore[arg-type]
        return str(reply.get("hookSpecificOutput", {}).get("permissionDecision", "allow"))

    assert decide(read, "t1") == "allow"
    assert decide({**read, **sub}, "t2") == "allow"
    assert decide({**read, **sub}, "t3") == "deny"
    assert guard.steps == 1
    end = {"hook_event_name": "SubagentStop", "session_id": "s", **sub}
    assert asyncio.run(callback(end, None, {"signal": None})) == {}  # type: ignore[arg-type]
    assert decide({**read, **sub}, "t4") == "allow"  # a new subagent run of that id
