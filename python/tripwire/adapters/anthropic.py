"""tripwire for the Anthropic SDK: Messages with ``tool_use`` blocks.

::

    turn = tripwire.adapters.anthropic.message_turn(guard, message)
    for call in turn.to_run:
        turn.observe(call, run_tool(call.name, call.arguments))
    messages += [{"role": "assistant", "content": message.content}, turn.user_message()]
    if turn.stopped: ...  # the run must end

Takes a ``Message`` or its dict, a streamed one once accumulated
(``stream.get_final_message()``), and needs no client. Nudges and stops are ``tool_result``
blocks with ``is_error``; results observed with ``error=`` are sent with ``is_error`` too.
"""

from __future__ import annotations

from typing import Any

from tripwire.adapters._turn import Answer, ToolCall, Turn, field_of

__all__ = ("Answer", "MessageTurn", "ToolCall", "message_turn")


class MessageTurn(Turn):
    """A Messages turn; ``tool_results`` are the blocks to send in the next user message."""

    def tool_results(self) -> list[dict[str, Any]]:
        """One ``tool_result`` block per ``tool_use`` id, in order (the API wants them first
        in the next user message)."""
        blocks = []
        for call_id, content, is_error in self._answers():
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            block["content"] = content
            if is_error:
                block["is_error"] = True
            blocks.append(block)
        return blocks

    def user_message(self) -> dict[str, Any]:
        """The next user message: ``{"role": "user", "content": tool_results}``."""
        return {"role": "user", "content": self.tool_results()}


def message_turn(guard: Any, message: Any) -> MessageTurn:
    """The ``tool_use`` blocks of a Message (or of its content list), checked as one turn."""
    content = message if isinstance(message, list) else field_of(message, "content")
    calls = [
        (field_of(block, "id"), field_of(block, "name"), field_of(block, "input"))
        for block in content or ()
        if field_of(block, "type") == "tool_use"
    ]
    return MessageTurn.check(guard, calls)
