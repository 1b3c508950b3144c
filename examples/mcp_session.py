"""An MCP client session with the guard (``tripwire.adapters.mcp``).

``guarded(session)`` lists the server's tools and builds the guard from their
``ToolAnnotations`` (``readOnlyHint``: a read; ``destructiveHint``: a write); its
``call_tool`` is the session's, guarded, and ``call_turn`` takes all the calls of one model
response. The server runs in-process (the SDK's own ``MCPServer``, reached through
``mcp.Client(server)``'s memory streams: a real ``ClientSession``, no network); the calls
are the seed's stuck on-call run (``scripted.py``). The first ``get_logs`` is sent, the
second is answered with an ``isError`` result carrying the guard's message without reaching
the server, the third raises ``LoopStopped``. A URL or a stdio command in place of the
server object reaches a real one.

Run: python examples/mcp_session.py
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from scripted import run_tool, triage_script
from tripwire.adapters.mcp import LoopStopped, guarded

server = MCPServer("ops")
sent: list[str] = []  # the calls that reached the server


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_logs(service: str, since: str, level: str = "error") -> list[str]:
    """Log lines of a service."""
    sent.append("get_logs")
    result: list[str] = run_tool("get_logs", {"service": service, "since": since})
    return result


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
def get_metrics(service: str, metric: str) -> dict[str, Any]:
    """A metric of a service (live: an open-world read, so a volatile one)."""
    sent.append("get_metrics")
    result: dict[str, Any] = run_tool("get_metrics", {"service": service, "metric": metric})
    return result


async def main() -> Any:
    async with mcp.Client(server) as client:  # in-process here; a URL or stdio alike
        session = await guarded(client.session)
        print("policies:", {name: session.guard.policy_of(name) for name in ("get_logs",)})
        try:
            for turn in triage_script():  # the calls of each model response
                calls = [(name, json.loads(arguments)) for _, name, arguments in turn]
                for (name, _), result in zip(calls, await session.call_turn(calls), strict=True):
                    print(f"{name}: {'error' if result.is_error else 'ok'}")
        except LoopStopped as stopped:
            return stopped.verdict
    return None


if __name__ == "__main__":
    stop = asyncio.run(main())
    assert stop is not None and stop.reason == "loop_detected", stop
    # The nudged call never reached the server; the one after the nudge did, and came back
    # the same (issue 25: the evidence the stop rests on).
    assert sent == ["get_metrics", "get_logs", "get_logs"], sent
    print(stop.message)
