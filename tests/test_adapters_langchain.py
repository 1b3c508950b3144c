"""The LangChain adapter with LangChain v1's ``create_agent`` and LangGraph.

No network: the model is LangChain's own fake chat model (``GenericFakeChatModel``) playing a
script of ``AIMessage``s, with the one method an agent needs that it lacks, ``bind_tools``;
everything else (the tool node, routing, ``jump_to``, checkpoints) is the framework's.
Every test runs on both backends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import get_logs_args

pytest.importorskip("langchain.agents")
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from tripwire.adapters.langchain import LoopGuardMiddleware

# The seed's triage call, respelled as the model respelled it.
SEED_ARGS = tuple(get_logs_args(step) for step in range(4, 9))


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, which plays its messages in order, as a tool-calling
    model: ``create_agent`` binds the tools, which a script has no use for."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def script(*turns: Any) -> ScriptedChatModel:
    """One AIMessage per model call: a list of (id, name, args) calls, text, or an
    exception (the provider failing at that call)."""

    def messages() -> Iterator[AIMessage]:
        for turn in turns:
            if isinstance(turn, Exception):
                raise turn
            if isinstance(turn, str):
                yield AIMessage(turn)
            else:
                calls = [{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in turn]
                yield AIMessage("", tool_calls=calls)

    return ScriptedChatModel(messages=messages())


def seed_turns(start: int = 0, stop: int = 5) -> list[Any]:
    return [[(f"call_{i}", "get_logs", SEED_ARGS[i])] for i in range(start, stop)]


def triage_tools(ran: list[Any]) -> list[Any]:
    @tool
    def get_logs(service: str, since: str, level: str = "error") -> list[str]:
        """Log lines of a service."""
        ran.append(("get_logs", service))
        return []

    @tool
    def get_metrics(service: str, metric: str) -> str:
        """A metric of a service."""
        ran.append(("get_metrics", service))
        return f"{metric}=812ms"

    return [get_logs, get_metrics]


def agent_for(tw: ModuleType, model: Any, ran: list[Any], **kwargs: Any) -> Any:
    middleware = LoopGuardMiddleware(make_guard=tw.Guard)
    return create_agent(model, triage_tools(ran), middleware=[middleware], **kwargs)


def ask() -> dict[str, Any]:
    return {"messages": [HumanMessage("Why did checkout latency double at 02:00?")]}


def answers(messages: list[Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


def test_seed_loop_is_nudged_then_stopped(tw: ModuleType) -> None:
    ran: list[Any] = []
    agent = agent_for(tw, script(*seed_turns()), ran)
    messages = agent.invoke(ask())["messages"]
    # Issue 25: the call after the nudge runs (its result is the evidence a stop needs);
    # the 4th occurrence is stopped.
    assert ran == [("get_logs", "checkout")] * 2
    sent = answers(messages)
    assert sent["call_0"].status == "success"
    assert sent["call_1"].status == "error"
    assert sent["call_1"].content.startswith("This is the second identical call to get_logs")
    assert sent["call_2"].status == "success" and sent["call_2"].content == []
    stop = sent["call_3"]
    assert stop.status == "error" and stop.content.startswith("Stopped (loop_detected): get_logs")
    assert "4 times with the same arguments and the same result" in stop.content
    assert "call_4" not in sent  # the model was not asked again
    final = messages[-1]
    assert isinstance(final, AIMessage) and final.content == stop.content
    assert not final.tool_calls


def test_a_kept_read_is_served_without_running_it(tw: ModuleType) -> None:
    """get_metrics declared ``read``: its result is kept, and the same call again (allowed:
    nudge_at=3), a copy of it in the same turn too, is answered from the guard without
    running the tool."""
    ran: list[Any] = []
    metrics = {"service": "checkout", "metric": "p99"}
    model = script(
        [("a", "get_metrics", metrics)],
        [("b", "get_metrics", metrics), ("c", "get_metrics", metrics)],
        "p99 is 812 ms.",
    )
    middleware = LoopGuardMiddleware(
        make_guard=lambda: tw.Guard(tools={"get_metrics": "read"}, nudge_at=3, stop_at=4)
    )
    agent = create_agent(model, triage_tools(ran), middleware=[middleware])
    messages = agent.invoke(ask())["messages"]
    assert ran == [("get_metrics", "checkout")]
    sent = answers(messages)
    assert [sent[i].content for i in "abc"] == ["p99=812ms"] * 3
    assert sent["b"].status == sent["c"].status == "success"
    assert messages[-1].content == "p99 is 812 ms."


def checkpointed(tw: ModuleType, model: Any, ran: list[Any], **kwargs: Any) -> Any:
    """An agent, and the config of a thread of its own checkpointer (the guard is in the
    thread's state, which ``invoke`` does not return: it is the middleware's private)."""
    agent = agent_for(tw, model, ran, checkpointer=InMemorySaver(), **kwargs)
    return agent, {"configurable": {"thread_id": "triage"}}


def test_the_guard_is_in_the_threads_state(tw: ModuleType) -> None:
    agent, config = checkpointed(tw, script(*seed_turns()), [])
    assert "tripwire_guard" not in agent.invoke(ask(), config)
    guard = LoopGuardMiddleware(make_guard=tw.Guard).guard_of(agent.get_state(config).values)
    assert guard.stopped and guard.steps == 4  # issue 25: the 4th occurrence stops


def test_healthy_turn_is_untouched(tw: ModuleType) -> None:
    ran: list[Any] = []
    turn = [
        ("a", "get_logs", {"service": "checkout", "since": "15m"}),
        ("b", "get_metrics", {"service": "checkout", "metric": "p99"}),
    ]
    plain = create_agent(script(turn, "Upstream timeouts."), triage_tools([]))
    guarded = agent_for(tw, script(turn, "Upstream timeouts."), ran)
    expected = plain.invoke(ask())["messages"]
    got = guarded.invoke(ask())["messages"]
    assert sorted(ran) == [("get_logs", "checkout"), ("get_metrics", "checkout")]
    strip = [(type(m).__name__, m.content, getattr(m, "status", None)) for m in expected]
    assert [(type(m).__name__, m.content, getattr(m, "status", None)) for m in got] == strip


def test_parallel_duplicates_run_once(tw: ModuleType) -> None:
    ran: list[Any] = []
    turn = [
        ("a", "get_logs", SEED_ARGS[0]),
        ("b", "get_metrics", {"service": "checkout", "metric": "p99"}),
        ("c", "get_logs", SEED_ARGS[3]),
    ]
    agent, config = checkpointed(tw, script(turn, "Done."), ran)
    state = agent.invoke(ask(), config)
    assert sorted(ran) == [("get_logs", "checkout"), ("get_metrics", "checkout")]
    sent = answers(state["messages"])
    assert sent["c"].content == sent["a"].content == []
    assert sent["c"].status == sent["a"].status == "success"
    # One answer per id: the copy's stand-in was replaced, not added to.
    assert sorted(m.tool_call_id for m in state["messages"] if isinstance(m, ToolMessage)) == [
        "a",
        "b",
        "c",
    ]
    values = agent.get_state(config).values
    assert LoopGuardMiddleware(make_guard=tw.Guard).guard_of(values).steps == 2


def test_failures_are_observed_from_tool_messages(tw: ModuleType) -> None:
    """A tool whose errors are sent to the model (``handle_tool_error``) is answered with
    ``status="error"``; the guard takes it as the failure it is, and the nudge quotes it."""

    @tool
    def get_orders(customer: str) -> str:
        """Orders of a customer."""
        raise ToolException("upstream says: customer id malformed")

    get_orders.handle_tool_error = True

    turns = [[(f"o{i}", "get_orders", {"customer": "c-1"})] for i in range(4)]
    middleware = LoopGuardMiddleware(make_guard=tw.Guard)
    agent = create_agent(script(*turns), [get_orders], middleware=[middleware])
    messages = agent.invoke(ask())["messages"]
    sent = answers(messages)
    assert sent["o0"].status == "error"
    assert "customer id malformed" in sent["o0"].content
    assert 'the last one failed with "upstream says:' in sent["o1"].content
    # Issue 25: the call after the nudge runs and fails the same way; the next is stopped.
    assert "customer id malformed" in sent["o2"].content
    assert 'it failed 2 times with "upstream says:' in sent["o3"].content


def test_checkpointed_run_resumed_mid_loop_stops_at_the_right_step(tw: ModuleType) -> None:
    """The provider fails at the third model call; the run is resumed from its checkpoint
    by a new agent (new middleware, new model: nothing kept in memory) and still stops at
    step 4 (issue 25: the call after the nudge runs), as the run would have without the
    failure."""
    checkpointer = InMemorySaver()
    config = {"configurable": {"thread_id": "triage-1"}}
    ran: list[Any] = []
    first = agent_for(
        tw, script(*seed_turns(0, 2), RuntimeError("provider down")), ran, checkpointer=checkpointer
    )
    with pytest.raises(RuntimeError, match="provider down"):
        first.invoke(ask(), config)
    resumed = agent_for(tw, script(*seed_turns(2)), ran, checkpointer=checkpointer)
    messages = resumed.invoke(None, config)["messages"]
    assert ran == [("get_logs", "checkout")] * 2
    assert answers(messages)["call_2"].status == "success"
    stop = answers(messages)["call_3"]
    assert stop.status == "error" and stop.content == messages[-1].content
    state = resumed.get_state(config).values
    assert LoopGuardMiddleware(make_guard=tw.Guard).guard_of(state).steps == 4


def test_interrupted_before_tools_and_resumed(tw: ModuleType) -> None:
    """Paused before every tool step (human review) and resumed each time: the same
    verdicts as a run straight through."""
    checkpointer = InMemorySaver()
    config = {"configurable": {"thread_id": "triage-2"}}
    ran: list[Any] = []
    agent = agent_for(
        tw, script(*seed_turns()), ran, checkpointer=checkpointer, interrupt_before=["tools"]
    )
    state = agent.invoke(ask(), config)
    for _ in range(5):
        if not agent.get_state(config).next:
            break
        state = agent.invoke(None, config)
    sent = answers(state["messages"])
    # Issue 25: the call after the nudge runs; the 4th occurrence is stopped.
    assert ran == [("get_logs", "checkout")] * 2 and sent["call_1"].status == "error"
    assert sent["call_2"].status == "success"
    assert sent["call_3"].content == state["messages"][-1].content
    assert sent["call_3"].content.startswith("Stopped (loop_detected)")


def test_a_new_user_message_after_a_stop_starts_afresh(tw: ModuleType) -> None:
    checkpointer = InMemorySaver()
    config = {"configurable": {"thread_id": "triage-3"}}
    ran: list[Any] = []
    model = script(*seed_turns(), "Checked again: nothing.")
    agent = agent_for(tw, model, ran, checkpointer=checkpointer)
    agent.invoke(ask(), config)
    # The model's script resumes at call_4 (issue 25: the stop was call_3, the 4th): the
    # same call, now after a person asked again.
    state = agent.invoke({"messages": [HumanMessage("Try the logs once more.")]}, config)
    assert answers(state["messages"])["call_4"].status == "success"
    assert state["messages"][-1].content == "Checked again: nothing."


def test_async_agent_works_the_same(tw: ModuleType) -> None:
    ran: list[Any] = []
    agent = agent_for(tw, script(*seed_turns()), ran)
    messages = asyncio.run(agent.ainvoke(ask()))["messages"]
    assert ran == [("get_logs", "checkout")] * 2  # issue 25: the call after the nudge ran
    assert answers(messages)["call_3"].content == messages[-1].content


def test_make_guard_or_options() -> None:
    assert "window=6" in repr(LoopGuardMiddleware(window=6).guard_of({}))
    with pytest.raises(ValueError, match="window"):
        LoopGuardMiddleware(window=0)
    with pytest.raises(TypeError, match="make_guard or them"):
        LoopGuardMiddleware(make_guard=lambda: None, window=6)


# The example of the adapter's page, run with this module's scripted model.
PAGE = Path(__file__).resolve().parent.parent / "docs" / "adapters" / "langchain.md"


def test_docs_langchain_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    block = next(block for block in blocks if "tripwire.adapters.langchain" in block)
    ran: list[Any] = []
    namespace: dict[str, Any] = {"MODEL": script(*seed_turns()), "TOOLS": triage_tools(ran)}
    exec(compile(block, str(PAGE), "exec"), namespace)
    assert ran == [("get_logs", "checkout")] * 2  # issue 25: the call after the nudge ran
    assert "get_logs" in namespace["result"]["messages"][-1].content


def test_each_run_of_one_agent_starts_with_a_guard_of_its_own(tw: ModuleType) -> None:
    """Issue 25 (item 6, checked here): the guard is in the run's state, not in the
    middleware, so one agent invoked again, without a checkpointer or on another thread, is
    not stopped for an earlier run's loop: each run's loop is stopped at its own 4th call."""
    ran: list[Any] = []
    loops = [*seed_turns(0, 4), *seed_turns(0, 4)]
    plain = agent_for(tw, script(*loops), ran)
    threads = agent_for(tw, script(*loops), ran, checkpointer=InMemorySaver())
    runs = [
        (plain, None),
        (plain, None),
        (threads, {"configurable": {"thread_id": "a"}}),
        (threads, {"configurable": {"thread_id": "b"}}),
    ]
    for agent, config in runs:
        sent = answers(agent.invoke(ask(), config)["messages"])
        assert sent["call_0"].status == "success"  # not stopped for the run before
        assert sent["call_3"].content.startswith(
            "Stopped (loop_detected): get_logs was called 4 times"
        )
    assert len(ran) == 8  # each run's 1st and 3rd calls
