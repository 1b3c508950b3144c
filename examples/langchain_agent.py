"""A LangChain v1 agent with the guard (``tripwire.adapters.langchain``): one middleware.

``LoopGuardMiddleware`` sees each model turn whole before its calls run; the guard lives in
the agent's state, so it is checkpointed with the run. The model is LangChain's own fake chat
model playing the seed's stuck on-call run (``scripted.py``); ``create_agent``, the tool node,
routing and checkpoints are the framework's. The first ``get_logs`` runs, the second is
answered with ``ToolMessage(status="error")`` and the guard's message, the third ends the
run with an ``AIMessage`` that says why. For a real model, pass a model name such as
``"openai:gpt-4o"``.

Run: python examples/langchain_agent.py
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from scripted import QUESTION, langchain_model, run_tool
from tripwire.adapters.langchain import LoopGuardMiddleware

MODEL = langchain_model()


@tool
def get_logs(service: str, since: str, level: str = "error") -> list[str]:
    """Log lines of a service."""
    result: list[str] = run_tool("get_logs", {"service": service, "since": since})
    return result


@tool
def get_metrics(service: str, metric: str) -> dict[str, Any]:
    """A metric of a service."""
    result: dict[str, Any] = run_tool("get_metrics", {"service": service, "metric": metric})
    return result


TOOLS = [get_logs, get_metrics]


def main() -> int:
    agent = create_agent(
        MODEL,
        TOOLS,
        middleware=[LoopGuardMiddleware()],
        checkpointer=InMemorySaver(),  # the guard is saved with the run
    )
    config: Any = {"configurable": {"thread_id": "checkout-latency"}}
    question = {"role": "user", "content": QUESTION}
    result = agent.invoke({"messages": [question]}, config)
    for message in result["messages"]:
        if isinstance(message, ToolMessage):
            print(f"{message.tool_call_id} ({message.status}): {message.content[:60]}")
    final = result["messages"][-1].content
    assert final.startswith("Stopped (loop_detected): get_logs"), final
    print(final)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
