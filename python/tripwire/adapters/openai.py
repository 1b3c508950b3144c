"""tripwire for the OpenAI SDK: Chat Completions and Responses.

Chat Completions::

    turn = tripwire.adapters.openai.chat_turn(guard, completion)
    for call in turn.to_run:
        turn.observe(call, run_tool(call.name, call.arguments))
    messages += [completion.choices[0].message, *turn.tool_messages()]
    if turn.stopped: ...  # the run must end

Responses: ``responses_turn(guard, response)`` and ``turn.outputs()`` (``function_call_output``
items). Both take the SDK's objects or their dicts, a streamed response once accumulated
(``stream.get_final_completion()``, ``stream.get_final_response()``), and need no client.
Arguments are JSON text, checked as such (``Guard.check_turn``): respelled copies of one call
are one call, and broken text is answered without running the tool.
"""

from __future__ import annotations

from typing import Any

from tripwire.adapters._turn import Answer, ToolCall, Turn, field_of

__all__ = ("Answer", "ChatTurn", "ResponsesTurn", "ToolCall", "chat_turn", "responses_turn")


def _message(response: Any) -> Any:
    """The assistant message of a ChatCompletion (first choice), or the message itself."""
    choices = field_of(response, "choices")
    if choices:
        return field_of(choices[0], "message")
    return response


class ChatTurn(Turn):
    """A Chat Completions turn; ``tool_messages`` are the ``role: "tool"`` messages to send."""

    def tool_messages(self) -> list[dict[str, Any]]:
        """One ``{"role": "tool", "tool_call_id", "content"}`` message per call id (nudges
        and stops carry the guard's message: Chat Completions has no error flag)."""
        return [
            {"role": "tool", "tool_call_id": call_id, "content": content}
            for call_id, content, _ in self._answers()
        ]


def chat_turn(guard: Any, response: Any) -> ChatTurn:
    """The tool calls of a ChatCompletion (or of its message), checked as one turn."""
    message = _message(response)
    if type(message) is dict:
        # The dict form (a harness's own message list), read without the generic accessor.
        tool_calls = message.get("tool_calls") or ()
        if all(type(c) is dict and type(c.get("function")) is dict for c in tool_calls):
            return ChatTurn.check(
                guard,
                [
                    (c.get("id"), c["function"].get("name"), c["function"].get("arguments") or "")
                    for c in tool_calls
                ],
            )
    calls = []
    for call in field_of(message, "tool_calls") or ():
        function = field_of(call, "function")
        if function is not None:
            name, raw = field_of(function, "name"), field_of(function, "arguments")
        else:  # a custom tool call: free text input, keyed as given
            custom = field_of(call, "custom")
            name, raw = field_of(custom, "name"), {"input": field_of(custom, "input")}
        calls.append((field_of(call, "id"), name, "" if raw is None else raw))
    return ChatTurn.check(guard, calls)


class ResponsesTurn(Turn):
    """A Responses turn; ``outputs`` are the ``function_call_output`` items to send."""

    def outputs(self) -> list[dict[str, Any]]:
        """One ``{"type": "function_call_output", "call_id", "output"}`` item per call."""
        return [
            {"type": "function_call_output", "call_id": call_id, "output": content}
            for call_id, content, _ in self._answers()
        ]


def responses_turn(guard: Any, response: Any) -> ResponsesTurn:
    """The ``function_call`` items of a Response (or of its ``output`` list), checked as one
    turn."""
    items = field_of(response, "output") if not isinstance(response, list) else response
    calls = [
        (field_of(item, "call_id"), field_of(item, "name"), field_of(item, "arguments") or "")
        for item in items or ()
        if field_of(item, "type") == "function_call"
    ]
    return ResponsesTurn.check(guard, calls)
