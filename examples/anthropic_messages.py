"""An Anthropic Messages agent loop with the guard (``tripwire.adapters.anthropic``).

The scripted on-call model of ``scripted.py`` behind the Anthropic SDK's own client (no
network, no key): its ``tool_use`` blocks are checked as one turn (``message_turn``), and
``turn.user_message()`` is the next user message, one ``tool_result`` block per ``tool_use``
id (nudges and stops with ``is_error``). For a real model, make
``client = anthropic.Anthropic()``.

Run: python examples/anthropic_messages.py
"""

from __future__ import annotations

from typing import Any

import tripwire
from scripted import CLAUDE, QUESTION, anthropic_client, anthropic_tools, run_tool
from tripwire.adapters.anthropic import message_turn

client = anthropic_client()


def main() -> int:
    guard = tripwire.Guard()
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    while True:
        message = client.messages.create(
            model=CLAUDE, max_tokens=1024, messages=messages, tools=anthropic_tools()
        )
        turn = message_turn(guard, message)
        for call in turn.to_run:
            turn.observe(call, run_tool(call.name, call.arguments))
        for call in turn.calls:
            print(f"step {call.verdict.step}: {call.name} -> {call.verdict.action}")
        messages += [{"role": "assistant", "content": message.content}, turn.user_message()]
        if turn.stopped or not turn.calls:
            break
    assert turn.stop is not None, "the scripted model loops: the guard must stop it"
    print(turn.stop.message)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
