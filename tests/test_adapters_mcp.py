"""The MCP adapter with the SDK's own server, client session and types.

No network: an ``MCPServer`` with annotated tools runs in-process, reached through the
SDK's memory streams (``mcp.Client(server)``, whose ``session`` is a real
``ClientSession``). Every test runs on both backends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import get_logs_args

mcp = pytest.importorskip("mcp")
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.types import CallToolResult, ToolAnnotations  # noqa: E402
from tripwire.adapters import mcp as tw_mcp  # noqa: E402

# The seed's triage call, respelled as the model respelled it.
SEED_ARGS = tuple(get_logs_args(step) for step in range(4, 9))


def ops_server(ran: list[tuple[str, dict[str, Any]]]) -> MCPServer:
    """The seed's triage tools: logs that are empty, metrics that answer, a restart."""
    server = MCPServer("ops")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_logs(service: str, since: str, level: str = "error") -> list[str]:
        ran.append(("get_logs", {"service": service, "since": since, "level": level}))
        return []

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    def get_metrics(service: str, metric: str) -> dict[str, Any]:
        ran.append(("get_metrics", {"service": service, "metric": metric}))
        return {"service": service, metric: 812}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def restart(service: str) -> str:
        ran.append(("restart", {"service": service}))
        raise ValueError(f"{service}: permission denied")

    return server


def run(body: Callable[[Any], Awaitable[Any]], ran: list[Any] | None = None) -> Any:
    """``body(session)`` with a ClientSession connected to the ops server in-process."""

    async def main() -> Any:
        async with mcp.Client(ops_server([] if ran is None else ran)) as client:
            return await body(client.session)

    return asyncio.run(main())


async def guarded(tw: ModuleType, session: Any) -> tw_mcp.GuardedSession:
    """``tw_mcp.guarded`` for a given backend: the server's tools feed the guard."""
    return tw_mcp.GuardedSession(
        session, tw.Guard(definitions=await tw_mcp.list_all_tools(session))
    )


def test_seed_loop_is_nudged_then_stopped(tw: ModuleType) -> None:
    ran: list[Any] = []

    async def body(session: Any) -> tuple[list[Any], Any]:
        guarded_session = await guarded(tw, session)
        answers = []
        with pytest.raises(tw_mcp.LoopStopped) as stopped:
            for args in SEED_ARGS:
                answers.append(await guarded_session.call_tool("get_logs", args))
        return answers, stopped.value

    answers, stopped = run(body, ran)
    # Issue 25: the call after the nudge reaches the server (its result is the evidence a
    # stop needs); the 4th occurrence is stopped. The nudged one was not sent.
    assert len(ran) == 2
    first, nudge, third = answers
    assert isinstance(first, CallToolResult) and not first.is_error
    assert isinstance(nudge, CallToolResult) and nudge.is_error
    assert nudge.content[0].text.startswith("This is the second identical call to get_logs")
    assert isinstance(third, CallToolResult) and not third.is_error
    stop = stopped.verdict
    assert (stop.action, stop.reason, stop.tool, stop.step, stop.repeats) == (
        "stop",
        "loop_detected",
        "get_logs",
        4,
        4,
    )
    assert str(stopped) == stop.message


def test_healthy_calls_are_untouched(tw: ModuleType) -> None:
    async def body(session: Any) -> tuple[Any, Any]:
        guarded_session = await guarded(tw, session)
        args = {"service": "checkout", "metric": "p99"}
        return await guarded_session.call_tool("get_metrics", args), await session.call_tool(
            "get_metrics", args
        )

    through_guard, direct = run(body)
    assert through_guard.model_dump(exclude={"meta"}) == direct.model_dump(exclude={"meta"})
    assert through_guard.structured_content == {"service": "checkout", "p99": 812}


def test_tool_annotations_feed_the_policies(tw: ModuleType) -> None:
    async def body(session: Any) -> Any:
        return (await guarded(tw, session)).guard

    guard = run(body)
    assert guard.policy_of("get_logs") == ("read", "definition")
    assert guard.policy_of("get_metrics") == ("volatile", "definition")
    assert guard.policy_of("restart") == ("write", "definition")


def test_guarded_lists_every_page_and_passes_the_rest_through() -> None:
    """``guarded`` (the default backend) and a session's other methods."""

    async def body(session: Any) -> tuple[Any, list[str]]:
        guarded_session = await tw_mcp.guarded(session, window=8)
        listed = await guarded_session.list_tools()  # the session's own
        return guarded_session.guard, [tool.name for tool in listed.tools]

    guard, names = run(body)
    assert names == ["get_logs", "get_metrics", "restart"]
    assert guard.policy_of("restart") == ("write", "definition") and "window=8" in repr(guard)


def test_parallel_duplicates_are_sent_once(tw: ModuleType) -> None:
    ran: list[Any] = []

    async def body(session: Any) -> list[Any]:
        guarded_session = await guarded(tw, session)
        return await guarded_session.call_turn(
            [
                ("get_logs", SEED_ARGS[0]),
                ("get_metrics", {"service": "checkout", "metric": "p99"}),
                ("get_logs", SEED_ARGS[3]),
            ]
        )

    results = run(body, ran)
    assert [name for name, _ in ran] == ["get_logs", "get_metrics"]
    assert results[2] is results[0] and not results[0].is_error


async def read_guarded(tw: ModuleType, session: Any) -> tw_mcp.GuardedSession:
    """A guarded session whose harness declares get_metrics a ``read``: its results are
    kept (``Guard.keep``) and served again from the guard."""
    definitions = await tw_mcp.list_all_tools(session)
    guard = tw.Guard(tools={"get_metrics": "read"}, definitions=definitions)
    return tw_mcp.GuardedSession(session, guard)


def test_a_kept_read_is_served_without_reaching_the_server(tw: ModuleType) -> None:
    ran: list[Any] = []
    args = {"service": "checkout", "metric": "p99"}

    async def body(session: Any) -> list[Any]:
        guarded_session = await read_guarded(tw, session)
        first = await guarded_session.call_tool("get_metrics", args)
        guarded_session.guard.user_message()  # asked again: allowed, not a loop
        again = await guarded_session.call_tool("get_metrics", args)
        guarded_session.guard.user_message()
        (in_a_turn,) = await guarded_session.call_turn([("get_metrics", args)])
        return [first, again, in_a_turn]

    first, again, in_a_turn = run(body, ran)
    assert ran == [("get_metrics", args)]
    assert again is first and in_a_turn is first
    assert first.structured_content == {"service": "checkout", "p99": 812}


def test_a_failed_read_is_not_kept(tw: ModuleType) -> None:
    """A read that came back with ``isError`` is asked again, not served again."""
    server = MCPServer("flaky")
    answers = iter([None, "3 incidents"])

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def incidents(service: str) -> str:
        answer = next(answers)
        if answer is None:
            raise ValueError("503 Service Unavailable")
        return answer

    async def main() -> list[Any]:
        async with mcp.Client(server) as client:
            session = client.session
            definitions = await tw_mcp.list_all_tools(session)
            # nudge_at=3: the repeat of the failure is allowed, to be served or asked again.
            guard = tw.Guard(tools={"incidents": "read"}, definitions=definitions, nudge_at=3)
            guarded_session = tw_mcp.GuardedSession(session, guard)
            first = await guarded_session.call_tool("incidents", {"service": "checkout"})
            again = await guarded_session.call_tool("incidents", {"service": "checkout"})
            return [first, again]

    first, again = asyncio.run(main())
    assert first.is_error and not again.is_error
    assert again.content[0].text == "3 incidents"


def test_a_stop_in_a_turn_sends_nothing(tw: ModuleType) -> None:
    ran: list[Any] = []

    async def body(session: Any) -> Any:
        guarded_session = await guarded(tw, session)
        await guarded_session.call_tool("get_logs", SEED_ARGS[0])
        await guarded_session.call_tool("get_logs", SEED_ARGS[1])  # nudged
        await guarded_session.call_tool("get_logs", SEED_ARGS[2])  # run (issue 25)
        with pytest.raises(tw_mcp.LoopStopped) as stopped:
            await guarded_session.call_turn(
                [
                    ("get_metrics", {"service": "checkout", "metric": "p50"}),
                    ("get_logs", SEED_ARGS[3]),
                ]
            )
        return stopped.value.verdict

    stop = run(body, ran)
    assert (stop.tool, stop.reason, stop.repeats) == ("get_logs", "loop_detected", 4)
    # The turn's get_metrics was not sent either.
    assert [name for name, _ in ran] == ["get_logs", "get_logs"]


def test_failures_are_observed_from_the_result(tw: ModuleType) -> None:
    """The server answers a raising tool with isError: the guard sees the failure (a
    write that failed the same way is not retried a third time)."""
    ran: list[Any] = []

    async def body(session: Any) -> list[Any]:
        guarded_session = await guarded(tw, session)
        answers = []
        with pytest.raises(tw_mcp.LoopStopped) as stopped:
            for _ in range(4):
                answers.append(await guarded_session.call_tool("restart", {"service": "checkout"}))
        return [*answers, stopped.value.verdict]

    first, nudge, stop = run(body, ran)
    assert first.is_error and nudge.is_error and len(ran) == 1
    assert "failed" in nudge.content[0].text
    assert stop.step == 3


def test_a_call_that_raises_is_observed_as_failed(tw: ModuleType) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def call_tool(self, name: str, arguments: Any = None) -> Any:
            self.calls += 1
            raise TimeoutError("read timed out")

    session = tw_mcp.GuardedSession(Flaky(), tw.Guard())

    async def body() -> list[str]:
        outcomes = []
        for _ in range(3):
            try:
                await session.call_tool("get_logs", {"service": "checkout"})
                outcomes.append("ok")
            except TimeoutError:
                outcomes.append("timeout")
        return outcomes

    # A transient failure is retried unchanged without counting (up to 3 a call).
    assert asyncio.run(body()) == ["timeout", "timeout", "timeout"]


# The example of the adapter's page, run with this module's scripted model.
PAGE = Path(__file__).resolve().parent.parent / "docs" / "adapters" / "mcp.md"


def test_docs_mcp_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    block = next(block for block in blocks if "tripwire.adapters.mcp" in block)
    ran: list[Any] = []
    namespace: dict[str, Any] = {"server": ops_server(ran)}
    exec(compile(block, str(PAGE), "exec"), namespace)
    stop = namespace["stop"]
    # Issue 25: the call after the nudge runs; the 4th occurrence is stopped.
    assert (stop.reason, stop.step, len(ran)) == ("loop_detected", 4, 2)


def test_each_run_gets_a_session_with_a_guard_of_its_own(tw: ModuleType) -> None:
    """Issue 25 (item 6, the same trap in this adapter): a connection outlives a run, and a
    guard is one run's. ``new_run()`` gives the next run the same connection with a new
    guard made like the first (the server's policies kept), so it is not stopped for the
    first run's loop; the first run stays stopped."""
    ran: list[Any] = []

    async def body(session: Any) -> tuple[Any, Any, Any, Any]:
        first = await guarded(tw, session)
        with pytest.raises(tw_mcp.LoopStopped):
            for args in SEED_ARGS:
                await first.call_tool("get_logs", args)
        second = first.new_run()
        answer = await second.call_tool("get_logs", SEED_ARGS[0])
        with pytest.raises(tw_mcp.LoopStopped):
            await first.call_tool("get_metrics", {"service": "checkout", "metric": "p99"})
        with pytest.raises(tw_mcp.LoopStopped) as stopped:
            for args in SEED_ARGS[1:]:
                await second.call_tool("get_logs", args)
        return first, second, answer, stopped.value.verdict

    first, second, answer, stop = run(body, ran)
    assert isinstance(answer, CallToolResult) and not answer.is_error
    assert second.session is first.session and second.guard is not first.guard
    assert type(second.guard) is type(first.guard)
    assert second.guard.policy_of("restart") == ("write", "definition")
    # The second run's own loop: its 1st call ran, its 2nd was nudged, its 3rd ran, its 4th
    # stopped (2 of the first run's calls and 2 of the second's reached the server).
    assert (stop.step, stop.repeats) == (4, 4)
    assert [name for name, _ in ran] == ["get_logs"] * 4
    assert (first.guard.steps, first.guard.stopped) == (4, True)
