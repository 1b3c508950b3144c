"""Telemetry: each nudge and stop is a ``gen_ai.guardrail.result`` event on the
current span and a count labelled only by action, reason and tool, read back with the
OpenTelemetry SDK's in-memory exporters, through each adapter."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
import tripwire
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from tripwire import telemetry
from tripwire.adapters.openai import chat_turn

READER = InMemoryMetricReader()
# The counter is made from the global meter provider (as an application configures it); set
# once per process, which no other test does.
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))

# Four spellings of the seed's call: with results observed, the 4th is stopped (issue 25:
# allow, nudge, allow, stop).
SEED_ARGS = (
    {"service": "checkout", "since": "15m", "level": "error"},
    {"level": "error", "service": "checkout", "since": "15m"},
    {"since": "15m", "service": "checkout ", "level": "error"},
    {"service": " checkout", "level": "error", "since": "15m"},
)


@pytest.fixture
def spans() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    """A tracer of a provider of its own (the current span is all the adapters use) and the
    exporter its finished spans go to."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def counts() -> Counter[tuple[tuple[str, Any], ...]]:
    """The counter's totals so far, by their labels."""
    found: Counter[tuple[tuple[str, Any], ...]] = Counter()
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == telemetry.COUNTER:
                    for point in metric.data.data_points:
                        found[tuple(sorted(point.attributes.items()))] += point.value
    return found


def label(action: str, reason: str, tool: str) -> tuple[tuple[str, Any], ...]:
    labels = {"tripwire.action": action, "tripwire.reason": reason, "gen_ai.tool.name": tool}
    return tuple(sorted(labels.items()))


def events(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [
        dict(event.attributes or {})
        for span in exporter.get_finished_spans()
        for event in span.events
        if event.name == telemetry.EVENT
    ]


def test_enabled_where_the_api_is_installed() -> None:
    assert telemetry.ENABLED


def test_seed_loop_events_and_counts(spans: Any) -> None:
    tracer, exporter = spans
    before = counts()
    guard = tripwire.Guard()
    with tracer.start_as_current_span("agent run"):
        for i, args in enumerate(SEED_ARGS):
            verdict = guard.check("get_logs", args, call_id=f"c{i}")
            telemetry.emit(verdict)
            if verdict.action == "allow":
                guard.observe(verdict, [])
    seen = events(exporter)
    # Issue 25: the call after the nudge (c2) runs, and records nothing; c3 is stopped.
    assert [(e["gen_ai.guardrail.action"], e["gen_ai.tool.call.id"]) for e in seen] == [
        ("nudge", "c1"),
        ("stop", "c3"),
    ]
    stop = seen[1]
    assert stop == {
        "gen_ai.guardrail.name": "tripwire",
        "gen_ai.guardrail.action": "stop",
        "gen_ai.guardrail.reason": "loop_detected",
        "gen_ai.tool.name": "get_logs",
        "gen_ai.tool.call.id": "c3",
        "tripwire.key": "20d17ea0860485d4",  # the seed's get_logs call (docs/key.md)
        "tripwire.repeats": 4,
        "tripwire.step": 4,
    }
    after = counts()
    assert after - before == Counter(
        {
            label("nudge", "none", "get_logs"): 1,
            label("stop", "loop_detected", "get_logs"): 1,
        }
    )
    # Labels are action, reason and tool only: no run id, call id or key.
    assert all(
        {name for name, _ in labels} == {"tripwire.action", "tripwire.reason", "gen_ai.tool.name"}
        for labels in after
    )


def test_allowed_calls_record_nothing(spans: Any) -> None:
    tracer, exporter = spans
    before = counts()
    with tracer.start_as_current_span("run"):
        guard = tripwire.Guard()
        telemetry.emit_turn(guard.check_turn([("get_logs", {"a": 1}), ("get_logs", {"a": 2})]))
    assert events(exporter) == [] and counts() == before


def test_record_and_record_turn_are_emit_under_their_old_names(spans: Any) -> None:
    tracer, exporter = spans
    guard = tripwire.Guard()
    first, nudge = (guard.check("get_logs", {"a": 1}, call_id=f"c{i}") for i in range(2))
    with tracer.start_as_current_span("run"):
        with pytest.warns(DeprecationWarning, match=r"telemetry\.record\(\) is deprecated"):
            telemetry.record(nudge)
        with pytest.warns(DeprecationWarning, match=r"record_turn\(\) is deprecated"):
            telemetry.record_turn([first, nudge])
    assert [e["gen_ai.tool.call.id"] for e in events(exporter)] == ["c1", "c1"]


def _chat(calls: list[tuple[str, str, Any]]) -> dict[str, Any]:
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in calls
    ]
    return {"choices": [{"message": {"role": "assistant", "tool_calls": tool_calls}}]}


def test_sdk_adapter_records_each_decision_once(spans: Any) -> None:
    """A turn's copies are their original's decision, and a stop is recorded once, not for
    each call id it answers."""
    tracer, exporter = spans
    guard = tripwire.Guard()
    with tracer.start_as_current_span("run"):
        # Allow, nudge, allow (issue 25: the call after the nudge runs).
        for turn in range(3):
            answered = chat_turn(guard, _chat([(f"a{turn}", "get_logs", SEED_ARGS[0])]))
            for call in answered.to_run:
                answered.observe(call, [])
        # Stopped, with a copy of the stopped call and another call pending: one stop.
        chat_turn(
            guard,
            _chat(
                [
                    ("s1", "get_logs", SEED_ARGS[1]),
                    ("s2", "get_logs", SEED_ARGS[2]),
                    ("s3", "get_metrics", {"service": "checkout"}),
                ]
            ),
        )
    assert [(e["gen_ai.guardrail.action"], e["gen_ai.tool.call.id"]) for e in events(exporter)] == [
        ("nudge", "a1"),
        ("stop", "s1"),
    ]


def test_mcp_adapter_events(spans: Any) -> None:
    mcp = pytest.importorskip("mcp")
    from mcp.server.mcpserver import MCPServer
    from tripwire.adapters.mcp import LoopStopped, guarded

    server = MCPServer("ops")

    @server.tool()
    def get_logs(service: str, since: str, level: str) -> list[str]:
        return []

    tracer, exporter = spans

    async def main() -> None:
        async with mcp.Client(server) as client:
            session = await guarded(client.session)
            with tracer.start_as_current_span("run"), pytest.raises(LoopStopped):
                for args in SEED_ARGS:
                    await session.call_tool("get_logs", args)

    asyncio.run(main())
    assert [e["gen_ai.guardrail.action"] for e in events(exporter)] == ["nudge", "stop"]


def test_langchain_adapter_events(spans: Any) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from tripwire.adapters.langchain import LoopGuardMiddleware

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def get_logs(service: str, since: str, level: str) -> list[str]:
        """Logs."""
        return []

    script = [
        AIMessage("", tool_calls=[{"id": f"c{i}", "name": "get_logs", "args": args}])
        for i, args in enumerate(SEED_ARGS)
    ]
    agent = create_agent(
        Model(messages=iter(script)), [get_logs], middleware=[LoopGuardMiddleware()]
    )
    tracer, exporter = spans
    with tracer.start_as_current_span("run"):
        agent.invoke({"messages": [{"role": "user", "content": "why?"}]})
    assert [e["gen_ai.guardrail.action"] for e in events(exporter)] == ["nudge", "stop"]


def test_agents_adapter_events(spans: Any) -> None:
    agents = pytest.importorskip("agents")
    from agents.testing import ScriptedModel, function_call
    from tripwire.adapters.agents import guard_agent

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def get_logs(service: str, since: str, level: str) -> list[str]:
        """Logs."""
        return []

    steps = [[function_call("get_logs", args, call_id=f"c{i}")] for i, args in enumerate(SEED_ARGS)]
    agent = agents.Agent(name="triage", tools=[get_logs], model=ScriptedModel(steps))
    guard_agent(agent)
    tracer, exporter = spans
    raises = pytest.raises(agents.ToolInputGuardrailTripwireTriggered)
    with tracer.start_as_current_span("run"), raises:
        asyncio.run(agents.Runner.run(agent, "why?"))
    assert [e["gen_ai.guardrail.action"] for e in events(exporter)] == ["nudge", "stop"]


def test_without_opentelemetry_nothing_is_recorded() -> None:
    """Where opentelemetry-api is not installed (its import blocked here, in a process of
    its own), the adapters' calls do nothing and raise nothing."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import tripwire, tripwire.telemetry as t\n"
        "g = tripwire.Guard()\n"
        "vs = [g.check('get_logs', {}) for _ in range(3)]\n"
        "t.emit_turn(vs); t.emit(vs[-1])\n"
        "print(t.ENABLED)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
