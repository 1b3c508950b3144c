"""tripwire for MCP clients: a guard in front of ``ClientSession.call_tool``.

::

    async with mcp.Client(server) as client:  # or any connected ClientSession
        session = await tripwire.adapters.mcp.guarded(client.session)
        result = await session.call_tool("get_logs", {"service": "checkout"})

``guarded`` lists the server's tools (every page) and builds the guard from them
(``Guard(definitions=tools)``): a tool annotated ``readOnlyHint`` is a read (volatile when
``openWorldHint``), ``destructiveHint`` a write, so repeats are judged by what the server
says its tools do. ``GuardedSession.call_tool`` takes what ``ClientSession.call_tool`` takes
and gives what it gives: a nudged call is not sent, and is answered with a
``CallToolResult`` whose ``isError`` is set and whose text is the guard's message; a stop
raises ``LoopStopped`` (its ``verdict`` says why). What the server answers is observed
(``CallToolResult`` is read as it is: ``structuredContent``, ``isError``), and a call that
raises is observed as failed. Every other attribute is the session's own.

An MCP session does not know a model's turns: a harness that has all the calls of one model
response hands them to ``call_turn``, which checks them as one turn (identical calls are one
action: sent once, every copy answered with the one result).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tripwire
from tripwire.adapters._turn import LoopStopped
from tripwire.telemetry import record, record_turn

__all__ = ("GuardedSession", "LoopStopped", "guarded", "list_all_tools")


async def list_all_tools(session: Any) -> list[Any]:
    """Every tool a server lists, following its pages (``nextCursor``). ``session``: an
    ``mcp.ClientSession`` (which pages with ``params=``) or an ``mcp.Client`` (``cursor=``)."""
    from mcp import ClientSession
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor: str | None = None
    while True:
        if cursor is None:
            page = await session.list_tools()
        elif isinstance(session, ClientSession):
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        else:
            page = await session.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def guarded(session: Any, /, **guard_options: Any) -> GuardedSession:
    """The session behind a new guard whose policies come from the server's tool list
    (``guard_options``: what ``Guard`` takes besides ``definitions``; declared ``tools=``
    win over annotations)."""
    tools = await list_all_tools(session)
    return GuardedSession(session, tripwire.Guard(definitions=tools, **guard_options))


def _error_result(text: str) -> Any:
    from mcp.types import CallToolResult

    # Validated from the wire's names, which every release of the SDK accepts.
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": True}
    )


class GuardedSession:
    """An MCP client session whose tool calls go through a guard (see the module)."""

    def __init__(self, session: Any, guard: Any) -> None:
        self.session = session
        self.guard = guard

    def __getattr__(self, name: str) -> Any:
        # Everything but call_tool is the session's: list_tools, read_resource, ...
        return getattr(self.session, name)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """``ClientSession.call_tool``, guarded: a nudge is answered without sending the
        call, a stop raises ``LoopStopped``."""
        verdict = self.guard.check(name, {} if arguments is None else arguments)
        record(verdict)
        return await self._dispatch(verdict, name, arguments, args, kwargs)

    async def _dispatch(
        self,
        verdict: Any,
        name: str,
        arguments: dict[str, Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if verdict.action == "stop":
            raise LoopStopped(verdict)
        if verdict.action == "nudge":
            return _error_result(verdict.message)
        if verdict.cached is not None:  # a declared read's result, kept by ``record``
            return verdict.cached
        try:
            result = await self.session.call_tool(name, arguments, *args, **kwargs)
        except Exception as exc:
            self.guard.observe(verdict, None, error=exc)
            raise
        self.guard.observe(verdict, result)
        self.guard.record(verdict, result)
        return result

    async def call_turn(
        self, calls: Sequence[tuple[str, dict[str, Any] | None]], /, **kwargs: Any
    ) -> list[Any]:
        """The calls of one model response, ``(name, arguments)`` each, checked as one turn
        and sent one after another; a result per call, in order. Identical calls are sent
        once, and each copy gets that call's result. A stop anywhere in the turn raises
        ``LoopStopped`` before anything is sent. ``kwargs`` go to each ``call_tool``."""
        verdicts = self.guard.check_turn(
            [(name, {} if arguments is None else arguments) for name, arguments in calls]
        )
        record_turn(verdicts)
        for verdict in verdicts:
            if verdict.action == "stop":
                raise LoopStopped(verdict)
        results: list[Any] = []
        for (name, arguments), verdict in zip(calls, verdicts, strict=True):
            if verdict.duplicate_of is not None:
                results.append(results[verdict.duplicate_of])
            else:
                results.append(await self._dispatch(verdict, name, arguments, (), kwargs))
        return results
