"""An OpenAI Responses agent loop with the guard (``tripwire.adapters.openai``).

The same scripted on-call model as ``openai_chat.py``, through the Responses API: its
``function_call`` items are checked as one turn (``responses_turn``), and ``turn.outputs()``
gives one ``function_call_output`` item per call id, nudges and stops included, so the next
request is never rejected for an unanswered call. For a real model, make
``client = openai.OpenAI()``.

Run: python examples/openai_responses.py
"""

from __future__ import annotations

from typing import Any

import tripwire
from scripted import MODEL, QUESTION, openai_responses_client, response_tools, run_tool
from tripwire.adapters.openai import responses_turn

client = openai_responses_client()


def main() -> int:
    guard = tripwire.Guard()
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    while True:
        response = client.responses.create(model=MODEL, input=items, tools=response_tools())
        turn = responses_turn(guard, response)
        for call in turn.to_run:
            turn.observe(call, run_tool(call.name, call.arguments))
        for call in turn.calls:
            print(f"step {call.verdict.step}: {call.name} -> {call.verdict.action}")
        items += [*response.output, *turn.outputs()]
        if turn.stopped or not turn.calls:
            break
    assert turn.stop is not None, "the scripted model loops: the guard must stop it"
    print(turn.stop.message)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
