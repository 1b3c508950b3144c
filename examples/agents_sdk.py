"""The OpenAI Agents SDK with the guard (``tripwire.adapters.agents``): one call.

``guard_agent(agent)`` puts the guard's tool input guardrail first on every function tool
and checks each model response's calls together. The model is the SDK's own test double,
``agents.testing.ScriptedModel``, playing the seed's stuck on-call run (``scripted.py``);
``Runner.run`` does everything else as in production. The first ``get_logs`` runs, the
second is answered with the guard's message, the third ends the run with the SDK's
``ToolInputGuardrailTripwireTriggered``, whose verdict ``stop_of`` gives. For a real model,
give the agent a model name instead.

Run: python examples/agents_sdk.py
"""

from __future__ import annotations

import asyncio
from typing import Any

import agents
from agents import Agent, Runner, ToolInputGuardrailTripwireTriggered, function_tool
from scripted import QUESTION, agents_model, run_tool
from tripwire.adapters.agents import guard_agent, stop_of

agents.set_tracing_disabled(True)  # the SDK's tracing exports to OpenAI: off, no network
MODEL = agents_model()


@function_tool
def get_logs(service: str, since: str, level: str = "error") -> list[str]:
    """Log lines of a service."""
    result: list[str] = run_tool("get_logs", {"service": service, "since": since})
    return result


@function_tool
def get_metrics(service: str, metric: str) -> dict[str, Any]:
    """A metric of a service."""
    result: dict[str, Any] = run_tool("get_metrics", {"service": service, "metric": metric})
    return result


TOOLS = [get_logs, get_metrics]


def main() -> int:
    agent = Agent(name="triage", instructions="Find the cause.", tools=TOOLS, model=MODEL)
    loop_guard = guard_agent(agent)  # every function tool, one call
    try:
        result = asyncio.run(Runner.run(agent, QUESTION))
    except ToolInputGuardrailTripwireTriggered as exc:
        stop = stop_of(exc)  # None if another guardrail halted the run
        assert stop is not None and stop.reason == "loop_detected"
        print(f"stopped at step {stop.step} on {stop.tool} ({loop_guard.guard.steps} checked)")
        print(stop.message)
        return 0
    raise AssertionError(f"the scripted model loops, yet the run ended: {result.final_output}")


if __name__ == "__main__":
    raise SystemExit(main())
