"""What the SDK adapters cost on top of the guard (issue 19): one Chat Completions turn of
three calls, from the response to the tool messages, three ways, in one process:

- ``check_turn``: the guard alone (``Guard.check_turn`` on the JSON-text arguments, then
  ``observe`` of each result): the floor;
- hand-written glue: the same, plus what every harness must do anyway (parse each call's
  arguments to run the tool, build one tool message per call id);
- the adapter: ``chat_turn``, ``observe`` and ``tool_messages``.

The response is the SDK's dict form. A guard is kept in a steady state (13 turns of distinct
arguments in rotation, so every verdict is "allow"). Issue target: the adapter adds no
measurable cost over the hand-written glue. Printed as ratios; nothing asserts on time.
"""

from __future__ import annotations

import json
from typing import Any

import _timing
import tripwire
from tripwire.adapters.openai import chat_turn

TURNS = 13


def _completion(turn: int) -> dict[str, Any]:
    calls = [
        ("call_a", "get_logs", {"service": "checkout", "since": f"{turn}m", "level": "error"}),
        ("call_b", "get_metrics", {"service": "checkout", "metric": "p99", "window": turn}),
        ("call_c", "get_traces", {"service": "checkout", "limit": 20 + turn}),
    ]
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in calls
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


COMPLETIONS = [_completion(turn) for turn in range(TURNS)]
RESULT = [{"ts": "02:00:13", "msg": "upstream timeout"}]


def run_tool(name: str, args: Any) -> Any:
    return RESULT


def bare(guard: Any) -> None:
    for completion in COMPLETIONS:
        calls = completion["choices"][0]["message"]["tool_calls"]
        turn = [(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in calls]
        for verdict in guard.check_turn(turn):
            guard.observe(verdict, RESULT)


def glue(guard: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for completion in COMPLETIONS:
        calls = completion["choices"][0]["message"]["tool_calls"]
        turn = [(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in calls]
        for call, verdict in zip(calls, guard.check_turn(turn), strict=True):
            if verdict.action == "allow":
                result = run_tool(verdict.tool, json.loads(call["function"]["arguments"]))
                guard.observe(verdict, result)
                content = json.dumps(result)
            else:
                content = verdict.message
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return messages


def adapter(guard: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for completion in COMPLETIONS:
        turn = chat_turn(guard, completion)
        for call in turn.to_run:
            turn.observe(call, run_tool(call.name, call.arguments))
        messages += turn.tool_messages()
    return messages


def test_adapter_messages_match_the_glue() -> None:
    """A precondition, not a timing: the three send the same and every verdict is allow."""
    assert adapter(tripwire.Guard()) == glue(tripwire.Guard())


def test_ratios_adapters() -> None:
    namespace = {
        "bare": bare,
        "glue": glue,
        "adapter": adapter,
        "g_bare": tripwire.Guard(),
        "g_glue": tripwire.Guard(),
        "g_adapter": tripwire.Guard(),
    }
    per_call = TURNS * 3
    ns = _timing.best_ns(
        {"bare": "bare(g_bare)", "glue": "glue(g_glue)", "adapter": "adapter(g_adapter)"},
        namespace,
        calls_per_stmt=per_call,
    )
    _timing.report(
        _timing.table(
            f"SDK adapter, Chat Completions turns of 3 calls ({tripwire.IMPLEMENTATION} guard)",
            ["per call", "check_turn + observe", "hand-written glue", "adapter", "adapter/glue"],
            [
                [
                    "",
                    _timing.fmt_ns(ns["bare"]),
                    _timing.fmt_ns(ns["glue"]),
                    _timing.fmt_ns(ns["adapter"]),
                    f"{ns['adapter'] / ns['glue']:.2f}x",
                ]
            ],
            [
                "check_turn + observe: the guard alone; glue: that plus parsing arguments and",
                "building tool messages, which a harness does anyway; adapter: chat_turn, observe,",
                "tool_messages. Target: adapter/glue about 1.0x (no measurable cost).",
            ],
        )
    )
