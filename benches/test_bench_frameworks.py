"""What the framework adapters cost on top of the guard (issue 20), in one process.

- MCP: ``GuardedSession.call_tool`` against the same by hand (``check``, the session's
  ``call_tool``, ``observe``), over a session that answers at once (no transport: what is
  left is the adapter and the guard).
- OpenAI Agents SDK and LangChain: a whole run (``Runner.run``, ``agent.invoke``) of one
  turn of three tool calls and a final answer, from a scripted model, without and with the
  guard; and the guard's own work for that run by hand (``check_turn``, ``observe``; for
  LangChain also the snapshot it keeps in the state, written after each step and read back,
  which a checkpointed guard costs whatever the glue). What the adapter adds is
  guarded - unguarded - guard alone; the target: guarded / (unguarded + guard alone) about
  1.0x.

Printed as ratios; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import _timing
import pytest
import tripwire

CALLS = [
    ("get_logs", {"service": "checkout", "since": "15m", "level": "error"}),
    ("get_metrics", {"service": "checkout", "metric": "p99"}),
    ("get_traces", {"service": "checkout", "limit": 20}),
]
RESULT = ["02:00:13 upstream timeout"]


def _row(ns: dict[str, float], calls: int) -> list[str]:
    plain, glue, guarded, alone = ns["plain"], ns["glue"], ns["guarded"], ns["alone"]
    return [
        _timing.fmt_ns(plain),
        _timing.fmt_ns(glue),
        _timing.fmt_ns(guarded),
        _timing.fmt_ns(alone),
        # Below the noise on a busy machine, the difference can come out negative.
        _timing.fmt_ns((guarded - plain) / calls) if guarded > plain else "none measured",
        f"{guarded / glue:.2f}x",
    ]


HEADER = [
    "unguarded",
    "glue",
    "adapter",
    "guard alone",
    "adapter cost/call",
    "adapter/glue",
]


def test_ratios_mcp() -> None:
    types = pytest.importorskip("mcp.types")
    from tripwire.adapters.mcp import GuardedSession

    answer = types.CallToolResult(content=[types.TextContent(type="text", text=RESULT[0])])

    class Session:
        async def call_tool(self, name: str, arguments: Any = None) -> Any:
            return answer

    # 13 distinct turns in rotation: a guard in a steady state, every verdict "allow".
    rotation = [(name, {**args, "turn": turn}) for turn in range(13) for name, args in CALLS]

    async def by_hand(guard: Any, session: Any) -> None:
        for name, args in rotation:
            verdict = guard.check(name, args)
            if verdict.action == "allow":
                guard.observe(verdict, await session.call_tool(name, args))

    async def adapter(guarded: Any) -> None:
        for name, args in rotation:
            await guarded.call_tool(name, args)

    loop = asyncio.new_event_loop()
    namespace = {
        "loop": loop,
        "by_hand": by_hand,
        "adapter": adapter,
        "g_hand": tripwire.Guard(),
        "session": Session(),
        "guarded": GuardedSession(Session(), tripwire.Guard()),
    }
    try:
        ns = _timing.best_ns(
            {
                "by hand": "loop.run_until_complete(by_hand(g_hand, session))",
                "adapter": "loop.run_until_complete(adapter(guarded))",
            },
            namespace,
            calls_per_stmt=len(rotation),
        )
    finally:
        loop.close()
    over_transport = _through_the_sdk(rotation)
    _timing.report(
        _timing.table(
            f"MCP adapter, call_tool per call ({tripwire.IMPLEMENTATION} guard)",
            ["session", "unguarded", "check + call_tool + observe", "adapter", "ratio"],
            [
                [
                    "answers at once",
                    "",
                    _timing.fmt_ns(ns["by hand"]),
                    _timing.fmt_ns(ns["adapter"]),
                    f"{ns['adapter'] / ns['by hand']:.2f}x adapter/by hand",
                ],
                [
                    "SDK, in-memory",
                    _timing.fmt_ns(over_transport["plain"]),
                    _timing.fmt_ns(over_transport["by hand"]),
                    _timing.fmt_ns(over_transport["guarded"]),
                    f"{over_transport['guarded'] / over_transport['by hand']:.2f}x adapter/by hand",
                ],
            ],
            [
                "A session that answers at once leaves only the adapter and the guard (observe",
                "reads each CallToolResult: most of the time); through the SDK's own client and",
                "an in-process server (memory streams, no network) a call costs far more than",
                "either. Target: about 1.0x.",
            ],
        )
    )


def _through_the_sdk(rotation: list[tuple[str, dict[str, Any]]]) -> dict[str, float]:
    """Best ns per call of the SDK's ClientSession.call_tool, unguarded and guarded, over
    an in-process server, interleaved (timed inside one task: the client's streams belong
    to the task that opened them)."""
    import time

    import mcp
    from mcp.server.mcpserver import MCPServer
    from tripwire.adapters.mcp import GuardedSession

    def answer(
        service: str,
        since: str = "",
        level: str = "",
        metric: str = "",
        limit: int = 0,
        turn: int = 0,
    ) -> list[str]:
        return RESULT

    server = MCPServer("ops")
    for tool_name, _ in CALLS:
        server.add_tool(answer, name=tool_name)

    async def main() -> dict[str, float]:
        async with mcp.Client(server) as client:
            session, guard = client.session, tripwire.Guard()
            guarded = GuardedSession(client.session, tripwire.Guard())

            async def by_hand(name: str, args: Any) -> Any:
                verdict = guard.check(name, args)
                result = await session.call_tool(name, args)
                guard.observe(verdict, result)
                return result

            candidates = {
                "plain": session.call_tool,
                "by hand": by_hand,
                "guarded": guarded.call_tool,
            }
            best = dict.fromkeys(candidates, float("inf"))
            for _ in range(7):
                for label, call in candidates.items():
                    started = time.perf_counter_ns()
                    for name, args in rotation:
                        await call(name, args)
                    best[label] = min(
                        best[label], (time.perf_counter_ns() - started) / len(rotation)
                    )
            return best

    return asyncio.run(main())


def _guard_alone_agents() -> None:
    """The guard's work in one Agents SDK run: the response's calls as one turn, each
    result observed."""
    guard = tripwire.Guard()
    turn = [(name, json.dumps(args), f"c{i}") for i, (name, args) in enumerate(CALLS)]
    for verdict in guard.check_turn(turn):
        guard.observe(verdict, RESULT)


def test_ratios_agents() -> None:
    agents = pytest.importorskip("agents")
    from agents.testing import ScriptedModel, assistant_message, function_call
    from tripwire.adapters.agents import guard_agent

    agents.set_tracing_disabled(True)

    async def tool_body(ctx: Any, args: str) -> list[str]:
        return RESULT

    def make_tools() -> list[Any]:
        return [
            agents.FunctionTool(
                name=name,
                description=name,
                params_json_schema={"type": "object", "properties": {}},
                on_invoke_tool=tool_body,
                strict_json_schema=False,
            )
            for name, _ in CALLS
        ]

    steps = [
        [function_call(name, args, call_id=f"c{i}") for i, (name, args) in enumerate(CALLS)],
        [assistant_message("Upstream timeouts.")],
    ]
    tools = {"plain": make_tools(), "glue": make_tools(), "guarded": make_tools()}

    def glue(agent: Any) -> None:
        """What a user writes without the adapter: a guardrail per call, checked alone
        (not turn-aware), its result observed by an output guardrail."""
        guard = tripwire.Guard()
        verdicts: dict[str, Any] = {}

        def check(data: Any) -> Any:
            context = data.context
            verdict = guard.check_json(
                context.tool_name, context.tool_arguments, call_id=context.tool_call_id
            )
            verdicts[context.tool_call_id] = verdict
            if verdict.action == "stop":
                return agents.ToolGuardrailFunctionOutput.raise_exception(output_info=verdict)
            if verdict.action == "nudge":
                return agents.ToolGuardrailFunctionOutput.reject_content(verdict.message)
            return agents.ToolGuardrailFunctionOutput.allow()

        def observe(data: Any) -> Any:
            guard.observe(verdicts.pop(data.context.tool_call_id), data.output)
            return agents.ToolGuardrailFunctionOutput.allow()

        for tool in agent.tools:
            tool.tool_input_guardrails = [agents.ToolInputGuardrail(check)]
            tool.tool_output_guardrails = [agents.ToolOutputGuardrail(observe)]

    def run(side: str) -> None:
        # A new agent and guard per run, as a service makes one per request (guard_agent
        # on tools guarded before replaces the old guard's guardrails).
        agent = agents.Agent(name="triage", tools=tools[side], model=ScriptedModel(steps))
        if side == "guarded":
            guard_agent(agent)
        elif side == "glue":
            glue(agent)
        result = asyncio.run(agents.Runner.run(agent, "Why?"))
        assert result.final_output == "Upstream timeouts."

    ns = _timing.best_ns(
        {
            "plain": "run('plain')",
            "glue": "run('glue')",
            "guarded": "run('guarded')",
            "alone": "alone()",
        },
        {"run": run, "alone": _guard_alone_agents},
        repeats=5,
        seconds=0.2,
    )
    _timing.report(
        _timing.table(
            f"OpenAI Agents SDK adapter, Runner.run ({tripwire.IMPLEMENTATION} guard)",
            HEADER,
            [_row(ns, len(CALLS))],
            [
                "A run: 2 scripted model responses, 3 tool calls in parallel; the unguarded",
                "run's tools carry no guardrails; glue: an input and an output guardrail by",
                "hand, each call checked alone (not turn-aware). Target: adapter/glue 1.0x.",
            ],
        )
    )


def test_ratios_langchain() -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import StructuredTool
    from tripwire.adapters.langchain import LoopGuardMiddleware

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    def get(**_: Any) -> list[str]:
        return RESULT

    tools = [StructuredTool.from_function(get, name=name, description=name) for name, _ in CALLS]
    calls = [{"id": f"c{i}", "name": n, "args": a} for i, (n, a) in enumerate(CALLS)]

    def model() -> Any:
        # The script again and again: each run takes its two messages (the agent is built
        # once; building one is a cost neither side has per run).
        return Model(
            messages=itertools.cycle([AIMessage("", tool_calls=calls), AIMessage("Done.")])
        )

    class Glue(AgentMiddleware):  # type: ignore[type-arg]
        """The same two hooks by hand, the guard kept in memory (not checkpointed): a
        turn checked after the model, results observed before the next call."""

        def __init__(self) -> None:
            super().__init__()
            self.guard = tripwire.Guard()
            self.verdicts: dict[str, Any] = {}

        def after_model(self, state: Any, runtime: Any) -> None:
            last = state["messages"][-1]
            if last.tool_calls:
                turn = [(c["name"], c["args"], c["id"]) for c in last.tool_calls]
                for verdict in self.guard.check_turn(turn):
                    self.verdicts[verdict.call_id] = verdict

        def before_model(self, state: Any, runtime: Any) -> None:
            for message in state["messages"]:
                verdict = self.verdicts.pop(getattr(message, "tool_call_id", None), None)
                if verdict is not None:
                    self.guard.observe(verdict, message)

    plain = create_agent(model(), tools)
    glue = create_agent(model(), tools, middleware=[Glue()])
    guarded = create_agent(model(), tools, middleware=[LoopGuardMiddleware()])
    question = {"messages": [{"role": "user", "content": "Why?"}]}
    answers = [ToolMessage(json.dumps(RESULT), tool_call_id=c["id"]) for c in calls]
    turn = [(c["name"], c["args"], c["id"]) for c in calls]

    def alone() -> None:
        """The guard's work in one run, as the middleware must do it: the turn checked and
        written to the state, read back to observe the results, written again."""
        guard = tripwire.Guard()
        guard.check_turn(turn)
        guard = tripwire.Guard.from_snapshot(guard.snapshot())
        for verdict, answer in zip(guard.check_turn(turn), answers, strict=True):
            guard.observe(verdict, answer)
        guard.snapshot()

    assert guarded.invoke(question)["messages"][-1].content == "Done."
    ns = _timing.best_ns(
        {
            "plain": "plain.invoke(question)",
            "glue": "glue.invoke(question)",
            "guarded": "guarded.invoke(question)",
            "alone": "alone()",
        },
        {"plain": plain, "glue": glue, "guarded": guarded, "question": question, "alone": alone},
        repeats=5,
        seconds=0.2,
    )
    _timing.report(
        _timing.table(
            f"LangChain middleware, create_agent().invoke ({tripwire.IMPLEMENTATION} guard)",
            HEADER,
            [_row(ns, len(CALLS))],
            [
                "A run: 2 scripted model responses, 3 tool calls; a middleware's hooks are nodes",
                "of the graph, run at each step; glue: the same two hooks by hand, the guard in",
                "memory (no snapshot: not checkpointed). Target: adapter/glue about 1.0x.",
            ],
        )
    )
