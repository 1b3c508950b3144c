"""The OpenAI Agents SDK adapter with the SDK's own runner, tools and types.

No network: the SDK's own test double, ``agents.testing.ScriptedModel``, plays the model (one
scripted response per model call), and ``Runner.run`` does everything else as in production:
tool guardrails, parallel tool calls, hooks. Every test runs on both backends.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import GET_LOGS_SPELLINGS

agents = pytest.importorskip("agents")
from agents import (  # noqa: E402
    Agent,
    AgentHooks,
    Runner,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    tool_input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from tripwire.adapters.agents import guard_agent, stop_of  # noqa: E402

# The SDK's own tracing exports to OpenAI's servers: off, no network.
agents.set_tracing_disabled(True)

# The seed's triage call, respelled as the model respelled it (JSON text).
SEED_ARGS = GET_LOGS_SPELLINGS


def triage_tools(ran: list[tuple[str, Any]]) -> list[Any]:
    @function_tool
    async def get_logs(service: str, since: str, level: str = "error") -> list[str]:
        """Log lines of a service."""
        ran.append(("get_logs", (service, since, level)))
        await asyncio.sleep(0.01)  # long enough for a copy of this call to be waiting
        return []

    @function_tool
    def get_metrics(service: str, metric: str) -> dict[str, Any]:
        """A metric of a service."""
        ran.append(("get_metrics", (service, metric)))
        return {"service": service, metric: 812}

    @function_tool
    def restart(service: str) -> str:
        """Restarts a service."""
        ran.append(("restart", service))
        raise PermissionError(f"{service}: permission denied")

    return [get_logs, get_metrics, restart]


def outputs(model: ScriptedModel, index: int) -> dict[str, str]:
    """The tool outputs the model was sent in its ``index``-th call, by call id."""
    items = model.calls[index].input
    assert not isinstance(items, str)
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def run(agent: Any) -> Any:
    return asyncio.run(Runner.run(agent, "Why did checkout latency double at 02:00?"))


def test_seed_loop_is_nudged_then_stopped(tw: ModuleType) -> None:
    ran: list[Any] = []
    steps = [[function_call("get_logs", SEED_ARGS[i], call_id=f"call_{i}")] for i in range(4)]
    model = ScriptedModel(steps)
    agent = Agent(name="triage", tools=triage_tools(ran), model=model)
    guard_agent(agent, tw.Guard())
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        run(agent)
    stop = stop_of(raised.value)
    assert stop is not None
    # Issue 25: a stop rests on a result seen after the nudge, so the call after the
    # nudge runs (and comes back the same) and the 4th occurrence is stopped.
    assert (stop.action, stop.reason, stop.tool, stop.step, stop.repeats) == (
        "stop",
        "loop_detected",
        "get_logs",
        4,
        4,
    )
    assert stop.call_id == "call_3"
    # The first call and the one after the nudge ran; the nudged one did not.
    assert ran == [("get_logs", ("checkout", "15m", "error"))] * 2
    assert outputs(model, 1) == {"call_0": "[]"}
    nudge = outputs(model, 2)["call_1"]
    assert nudge.startswith("This is the second identical call to get_logs")
    assert outputs(model, 3)["call_2"] == "[]"
    assert len(model.calls) == 4  # no model call after the stop


def test_a_kept_read_is_served_without_running_it(tw: ModuleType) -> None:
    """get_metrics declared ``read``: its result is kept, and the same call again (allowed:
    nudge_at=3) is answered from the guard without running the tool."""
    ran: list[Any] = []
    args = '{"service": "checkout", "metric": "p99"}'
    model = ScriptedModel(
        [
            [function_call("get_metrics", args, call_id="a")],
            [function_call("get_metrics", args, call_id="b")],
            [assistant_message("p99 is 812 ms.")],
        ]
    )
    agent = Agent(name="triage", tools=triage_tools(ran), model=model)
    guard_agent(agent, tw.Guard(tools={"get_metrics": "read"}, nudge_at=3, stop_at=4))
    assert run(agent).final_output == "p99 is 812 ms."
    assert ran == [("get_metrics", ("checkout", "p99"))]
    assert outputs(model, 2)["b"] == '{"service": "checkout", "p99": 812}'


def test_healthy_turn_is_untouched(tw: ModuleType) -> None:
    ran: list[Any] = []
    calls = [
        function_call("get_logs", '{"service": "checkout", "since": "15m"}', call_id="a"),
        function_call("get_metrics", '{"service": "checkout", "metric": "p99"}', call_id="b"),
    ]
    model = ScriptedModel([calls, [assistant_message("Upstream timeouts.")]])
    agent = Agent(name="triage", tools=triage_tools(ran), model=model)
    loop_guard = guard_agent(agent, tw.Guard())
    result = run(agent)
    assert result.final_output == "Upstream timeouts."
    assert sorted(name for name, _ in ran) == ["get_logs", "get_metrics"]
    assert outputs(model, 1) == {"a": "[]", "b": "{'service': 'checkout', 'p99': 812}"}
    assert loop_guard.guard.steps == 2


@pytest.mark.parametrize("concurrency", [None, 1], ids=["parallel", "one-at-a-time"])
def test_parallel_duplicates_run_once(tw: ModuleType, concurrency: int | None) -> None:
    """Identical calls in one response: the tool runs once, every copy gets its result,
    and the guard counts one action (a copy is not a second identical call)."""
    ran: list[Any] = []
    calls = [
        function_call("get_logs", SEED_ARGS[0], call_id="a"),
        function_call("get_metrics", '{"service": "checkout", "metric": "p99"}', call_id="b"),
        function_call("get_logs", SEED_ARGS[3], call_id="c"),
    ]
    model = ScriptedModel([calls, [assistant_message("Done.")]])
    agent = Agent(name="triage", tools=triage_tools(ran), model=model)
    loop_guard = guard_agent(agent, tw.Guard())
    config = None
    if concurrency is not None:
        from agents import RunConfig
        from agents.run_config import ToolExecutionConfig

        config = RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1))
    result = asyncio.run(Runner.run(agent, "go", run_config=config))
    assert result.final_output == "Done."
    assert sorted(name for name, _ in ran) == ["get_logs", "get_metrics"]
    sent = outputs(model, 1)
    assert sent["a"] == sent["c"] == "[]"
    assert loop_guard.guard.steps == 2


def test_failures_are_observed(tw: ModuleType) -> None:
    """A tool that raises is answered by the SDK's own error text; the guard takes it for
    the failure it is (the nudge quotes it). ``restart`` has no policy (its kind is
    unknown), so its repeats get one more run: allow, allow, nudge, stop."""
    ran: list[Any] = []
    steps = [
        [function_call("restart", '{"service": "checkout"}', call_id=f"r{i}")] for i in range(4)
    ]
    model = ScriptedModel(steps)
    agent = Agent(name="ops", tools=triage_tools(ran), model=model)
    guard_agent(agent, tw.Guard())
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        run(agent)
    assert len(ran) == 2
    nudge = outputs(model, 3)["r2"]
    assert 'failed 2 times with "An error occurred while running the tool' in nudge
    assert stop_of(raised.value).step == 4  # type: ignore[union-attr]


def test_the_agents_own_hooks_and_guardrails_still_run(tw: ModuleType) -> None:
    events: list[str] = []

    class Hooks(AgentHooks[Any]):
        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            events.append("llm_end")

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            events.append(f"tool_end:{tool.name}")

    @tool_input_guardrail
    def no_restarts(data: Any) -> ToolGuardrailFunctionOutput:
        if data.context.tool_name == "restart":
            return ToolGuardrailFunctionOutput.raise_exception(output_info="no restarts")
        return ToolGuardrailFunctionOutput.allow()

    ran: list[Any] = []
    tools = triage_tools(ran)
    for tool in tools:
        tool.tool_input_guardrails = [no_restarts]
    steps = [
        [function_call("get_metrics", '{"service": "checkout", "metric": "p99"}', call_id="m")],
        [function_call("restart", '{"service": "checkout"}', call_id="r")],
    ]
    agent = Agent(name="ops", tools=tools, model=ScriptedModel(steps), hooks=Hooks())
    guard_agent(agent, tw.Guard())
    guard_agent(agent, tw.Guard())  # attaching twice keeps one of each
    assert [g.get_name() for g in tools[0].tool_input_guardrails] == ["tripwire", "no_restarts"]
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        run(agent)
    assert stop_of(raised.value) is None  # the SDK's tripwire, not this package's stop
    assert raised.value.guardrail.get_name() == "no_restarts"
    assert events == ["llm_end", "tool_end:get_metrics", "llm_end"]


def test_guard_agent_takes_a_guard_or_its_options() -> None:
    agent = Agent(name="a", tools=triage_tools([]), model=ScriptedModel([]))
    assert "window=6" in repr(guard_agent(agent, window=6).guard)
    with pytest.raises(TypeError, match="not both"):
        guard_agent(agent, guard_agent(agent).guard, window=6)


# The example of the adapter's page, run with this module's scripted model.
PAGE = Path(__file__).resolve().parent.parent / "docs" / "adapters" / "agents.md"


def test_docs_agents_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    block = next(block for block in blocks if "tripwire.adapters.agents" in block)
    ran: list[Any] = []
    steps = [[function_call("get_logs", SEED_ARGS[i], call_id=f"call_{i}")] for i in range(4)]
    namespace: dict[str, Any] = {"MODEL": ScriptedModel(steps), "TOOLS": triage_tools(ran)}
    exec(compile(block, str(PAGE), "exec"), namespace)
    stop = namespace["stop"]
    # Issue 25: the call after the nudge runs; the 4th occurrence is stopped.
    assert (stop.reason, stop.step, len(ran)) == ("loop_detected", 4, 2)


def test_streamed_run_is_guarded_the_same(tw: ModuleType) -> None:
    """``Runner.run_streamed``: the hooks see each streamed response once it is complete."""
    ran: list[Any] = []
    steps = [[function_call("get_logs", SEED_ARGS[i], call_id=f"call_{i}")] for i in range(4)]
    model = ScriptedModel(steps)
    agent = Agent(name="triage", tools=triage_tools(ran), model=model)
    guard_agent(agent, tw.Guard())

    async def main() -> None:
        result = Runner.run_streamed(agent, "Why did checkout latency double at 02:00?")
        async for _ in result.stream_events():
            pass

    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        asyncio.run(main())
    # Issue 25: the call after the nudge runs; the 4th occurrence is stopped.
    assert stop_of(raised.value).step == 4  # type: ignore[union-attr]
    assert len(ran) == 2 and len(model.calls) == 4


def test_each_run_of_an_agent_gets_a_guard_of_its_own(tw: ModuleType) -> None:
    """Issue 25 (item 6): people reuse agents, and a guard is one run's. A second
    ``Runner.run`` of a guarded agent that stopped is not stopped at its first call for the
    first run's loop: it gets a new guard, configured as the given one, and its own loop is
    stopped where a first run's would be."""
    ran: list[Any] = []
    loop = [[function_call("get_logs", SEED_ARGS[i], call_id=f"a{i}")] for i in range(4)]
    healthy = [
        [function_call("get_logs", SEED_ARGS[0], call_id="b0")],
        [assistant_message("Nothing in the logs.")],
    ]
    again = [[function_call("get_logs", SEED_ARGS[i], call_id=f"c{i}")] for i in range(4)]
    model = ScriptedModel([*loop, *healthy, *again])
    agent = Agent(name="triage", tools=triage_tools(ran), model=model)
    given = tw.Guard(window=8)
    loop_guard = guard_agent(agent, given)
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        run(agent)
    first = stop_of(raised.value)
    assert first is not None and (first.step, first.call_id) == (4, "a3")
    assert loop_guard.guard is given and given.stopped  # the given guard served the first run
    # The second run: its call runs, and the run ends as the model says.
    result = run(agent)
    assert result.final_output == "Nothing in the logs."
    assert len(ran) == 3 and outputs(model, 5) == {"b0": "[]"}
    second = loop_guard.guard
    assert second is not given and type(second) is type(given)
    assert (second.steps, second.stopped) == (1, False)
    assert "window=8" in repr(second)  # made like the given guard
    assert given.steps == 4  # the first run's guard is untouched by the second run
    # A third run that loops is stopped at its own 4th call, not earlier.
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
        run(agent)
    third = stop_of(raised.value)
    assert third is not None and (third.step, third.repeats, third.call_id) == (4, 4, "c3")
    assert loop_guard.guard not in (given, second)


def test_runs_of_one_agent_at_the_same_time_are_guarded_apart(tw: ModuleType) -> None:
    """Two runs of one agent at once (asyncio.gather): each run's calls go to its own guard,
    so each loop is stopped at its own 4th call (one guard for both would have stopped the
    pair after four calls in all)."""
    ran: list[Any] = []
    steps = [[function_call("get_logs", SEED_ARGS[0], call_id=f"c{i}")] for i in range(8)]
    agent = Agent(name="triage", tools=triage_tools(ran), model=ScriptedModel(steps))
    guard_agent(agent, tw.Guard())

    async def both() -> list[Any]:
        question = "Why did checkout latency double at 02:00?"
        return await asyncio.gather(
            Runner.run(agent, question), Runner.run(agent, question), return_exceptions=True
        )

    stops = [stop_of(outcome) for outcome in asyncio.run(both())]
    assert all(stop is not None for stop in stops), stops
    assert [(stop.step, stop.repeats) for stop in stops] == [(4, 4), (4, 4)]  # type: ignore[union-attr]
    assert len(ran) == 4  # two calls of each run ran: its 1st and its 3rd


def test_agents_guarded_with_one_guard_share_each_runs_guard(tw: ModuleType) -> None:
    """Agents a run hands off to are guarded with the same guard (or with what guard_agent
    returned): what is attached is one, so a run's guard is one across its agents."""
    guard = tw.Guard()
    first = Agent(name="a", tools=triage_tools([]), model=ScriptedModel([]))
    second = Agent(name="b", tools=triage_tools([]), model=ScriptedModel([]))
    attached = guard_agent(first, guard)
    assert guard_agent(second, guard) is attached
    third = Agent(name="c", tools=triage_tools([]), model=ScriptedModel([]))
    assert guard_agent(third, attached) is attached
    other = Agent(name="d", tools=[], model=ScriptedModel([]))
    assert guard_agent(other, tw.Guard()) is not attached


def test_a_guard_that_cannot_be_copied_needs_make_guard(tw: ModuleType) -> None:
    class StoreGuard:
        """A guard with no from_snapshot (as a store's guard, keyed by its own run id)."""

        def check_turn(self, calls: Any) -> Any:
            raise AssertionError("not called")

    agent = Agent(name="a", tools=triage_tools([]), model=ScriptedModel([]))
    with pytest.raises(TypeError, match="make_guard"):
        guard_agent(agent, StoreGuard())
    made: list[Any] = []

    def make_guard() -> Any:
        made.append(tw.Guard(window=5))
        return made[-1]

    attached = guard_agent(agent, make_guard=make_guard)
    assert attached.guard is made[0]
    with pytest.raises(TypeError, match="not both"):
        guard_agent(agent, tw.Guard(), make_guard=make_guard)
