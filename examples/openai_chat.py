"""An OpenAI Chat Completions agent loop with the guard (``tripwire.adapters.openai``).

The model is scripted (``scripted.py``: the SDK's own client over a fake transport, no network,
no key) and loops as the seed's on-call agent did: it asks for checkout's error logs, gets
``[]``, and asks again, respelled. The guard runs the first call, nudges the second (the
model is told it repeated itself; the tool does not run) and stops the run on the third.
For a real model, make ``client = openai.OpenAI()``; nothing else changes.

Run: python examples/openai_chat.py
"""

from __future__ import annotations

from typing import Any

import tripwire
from scripted import MODEL, QUESTION, TOOLS, openai_chat_client, run_tool
from tripwire.adapters.openai import chat_turn

client = openai_chat_client()


def main() -> int:
    guard = tripwire.Guard()
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    while True:
        completion = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        turn = chat_turn(guard, completion)
        for call in turn.to_run:  # allowed, not a duplicate, arguments parsed
            turn.observe(call, run_tool(call.name, call.arguments))
        for call in turn.calls:
            print(f"step {call.verdict.step}: {call.name} -> {call.verdict.action}")
        messages += [completion.choices[0].message, *turn.tool_messages()]
        if turn.stopped or not turn.calls:
            break
    assert turn.stop is not None, "the scripted model loops: the guard must stop it"
    print(turn.stop.message)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
