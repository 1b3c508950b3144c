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

Nor does it know runs, and a connection outlives many: a guard is one run's (after a stop,
every call of the run raises). ``GuardedSession.new_run()`` gives the next run (or a run at
the same time) a session of its own over the same connection, with a new guard made like
this one (the server's policies kept, no state), without listing the tools again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tripwire
from tripwire.adapters._turn import LoopStopped
from tripwire.telemetry import emit, emit_turn

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

    def __init__(self, session: Any, guard: Any, /) -> None:
        self.session = session
        self.guard = guard
        # Whether each tool is declared "read", the only kind whose results the guard keeps
        # (Guard.keep): asked once a tool, not on every call.
        self._keeps: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        # Everything but call_tool is the session's: list_tools, read_resource, ...
        return getattr(self.session, name)

    def new_run(self) -> GuardedSession:
        """The same connection for another run: a guarded session with a new guard made
        like this one's (its configuration and the server's policies, none of its state)."""
        fresh = type(self.guard).from_snapshot(self.guard.snapshot())
        fresh.reset()
        return GuardedSession(self.session, fresh)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """``ClientSession.call_tool``, guarded: a nudge is answered without sending the
        call, a stop raises ``LoopStopped``."""
        verdict = self.guard.check(name, {} if arguments is None else arguments)
        if verdict.action != "allow" or verdict.cached is not None:
            emit(verdict)
            return self._answer(verdict)
        # Sent here rather than through a shared coroutine: one frame less on every call.
        try:
            result = await self.session.call_tool(name, arguments, *args, **kwargs)
        except Exception as exc:
            self.guard.observe(verdict, None, error=exc)
            raise
        self._observe(verdict, name, result)
        return result

    def _answer(self, verdict: Any) -> Any:
        """A call that is not to be sent: a stop raised, a nudge's error result, or a
        declared read's result kept by ``Guard.keep``."""
        if verdict.action == "stop":
            raise LoopStopped(verdict)
        if verdict.action == "nudge":
            return _error_result(verdict.message)
        return verdict.cached

    def _observe(self, verdict: Any, name: str, result: Any) -> None:
        self.guard.observe(verdict, result)
        keeps = self._keeps.get(name)
        if keeps is None:
            keeps = self._keeps[name] = self.guard.policy_of(name) == ("read", "declared")
        # A failure is not kept: the next allowed repeat asks the server again (as the
        # Turn adapters do with a result observed with ``error=``).
        if keeps and not getattr(result, "is_error", False):
            self.guard.keep(verdict, result)

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
        emit_turn(verdicts)
        for verdict in verdicts:
            if verdict.action == "stop":
                raise LoopStopped(verdict)
        results: list[Any] = []
        for (name, arguments), verdict in zip(calls, verdicts, strict=True):
            if verdict.duplicate_of is not None:
                results.append(results[verdict.duplicate_of])
            elif verdict.action != "allow" or verdict.cached is not None:
                results.append(self._answer(verdict))
            else:
                try:
                    result = await self.session.call_tool(name, arguments, **kwargs)
                except Exception as exc:
                    self.guard.observe(verdict, None, error=exc)
                    raise
                self._observe(verdict, name, result)
                results.append(result)
        return results
