"""Scripted models for the examples and the documentation: no network, no key.

Each stands in for a model provider the way the test suite does: the SDK's own client, with
an HTTP transport of the SDK's own HTTP library (``MockTransport``) that plays one scripted
response per request and, as the real APIs do, rejects with a 400 a request in which a tool
call id is left unanswered or answered twice. Swap in a real client and nothing else in an
example changes.

The script is the seed's stuck on-call run: the model asks the log service for checkout
errors, gets ``[]`` every time, and asks again, respelled (keys reordered, a stray space, a
fresh ``request_id``). Without a guard it would go on until its budget ran out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

try:  # the SDKs' HTTP library: httpx2 in their current releases, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older SDKs
    import httpx  # type: ignore[no-redef]

MODEL = "gpt-4o"
CLAUDE = "claude-sonnet-4-5"
QUESTION = "Why did checkout latency double at 02:00?"

# The model's get_logs call, as it respelled it from one step to the next (JSON text).
SPELLINGS = (
    '{"service":"checkout","since":"15m","level":"error"}',
    '{"service": "checkout", "level": "error", "since": "15m"}',
    '{"since":"15m","service":"checkout","level":"error","request_id":"req-8812"}',
    '{"service":"checkout ","since":"15m","level":"error"}',
)

# The tools, as Chat Completions takes them (``anthropic_tools()`` and ``response_tools()``
# give the other shapes).
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_logs",
            "description": "Log lines of a service.",
            "parameters": {
                "type": "object",
                "properties": {
                    "service": {"type": "string"},
                    "since": {"type": "string"},
                    "level": {"type": "string"},
                },
                "required": ["service", "since"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_metrics",
            "description": "A metric of a service.",
            "parameters": {
                "type": "object",
                "properties": {"service": {"type": "string"}, "metric": {"type": "string"}},
                "required": ["service", "metric"],
            },
        },
    },
]


def anthropic_tools() -> list[dict[str, Any]]:
    """``TOOLS`` as the Messages API takes them."""
    return [
        {
            "name": tool["function"]["name"],
            "description": tool["function"]["description"],
            "input_schema": tool["function"]["parameters"],
        }
        for tool in TOOLS
    ]


def response_tools() -> list[dict[str, Any]]:
    """``TOOLS`` as the Responses API takes them."""
    return [{"type": "function", **tool["function"]} for tool in TOOLS]


def run_tool(name: str, arguments: Any) -> Any:
    """The tools themselves: the log service has silently stopped returning errors."""
    if name == "get_logs":
        return []
    if name == "get_metrics":
        return {"service": arguments["service"], arguments["metric"]: 812}
    raise ValueError(f"no tool named {name!r}")


# -- the model's script -----------------------------------------------------------------------

Call = tuple[str, str, str]  # call id, tool name, arguments as JSON text


def triage_script() -> list[list[Call]]:
    """One list of calls per model response: a metric, then get_logs over and over."""
    turns: list[list[Call]] = [
        [("call_m", "get_metrics", '{"service": "checkout", "metric": "p99_latency"}')]
    ]
    turns += [[(f"call_{i}", "get_logs", SPELLINGS[i % len(SPELLINGS)])] for i in range(8)]
    return turns


# -- fake APIs that check what the real ones check --------------------------------------------


class RejectedRequest(Exception):
    """What the real API answers with a 400."""


def _chat_check(body: dict[str, Any]) -> None:
    messages = body["messages"]
    for index, message in enumerate(messages):
        ids = [call["id"] for call in message.get("tool_calls") or ()]
        if not ids:
            continue
        answered = []
        for following in messages[index + 1 :]:
            if following["role"] != "tool":
                break
            answered.append(following["tool_call_id"])
        if sorted(answered) != sorted(ids):
            raise RejectedRequest(f"tool_call_ids not answered one to one: {ids} vs {answered}")


def _responses_check(body: dict[str, Any]) -> None:
    items = body["input"] if isinstance(body["input"], list) else []
    calls = [item["call_id"] for item in items if item.get("type") == "function_call"]
    outputs = [item["call_id"] for item in items if item.get("type") == "function_call_output"]
    if sorted(calls) != sorted(outputs):
        raise RejectedRequest(f"No tool output found for function call ({calls} vs {outputs})")


def _messages_check(body: dict[str, Any]) -> None:
    messages = body["messages"]
    for index, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        ids = [block["id"] for block in content if block.get("type") == "tool_use"]
        if not ids:
            continue
        following = messages[index + 1]["content"] if index + 1 < len(messages) else []
        results = [b["tool_use_id"] for b in following if b.get("type") == "tool_result"]
        if sorted(results) != sorted(ids):
            raise RejectedRequest(f"tool_use ids without tool_result blocks: {ids} vs {results}")


class ScriptedApi:
    """A scripted model behind the SDK's HTTP transport. ``requests``: the bodies sent."""

    def __init__(
        self,
        check: Callable[[dict[str, Any]], None],
        respond: Callable[[list[Call]], dict[str, Any]],
        turns: list[list[Call]],
    ) -> None:
        self._check = check
        self._respond = respond
        self._turns = list(turns)
        self.requests: list[dict[str, Any]] = []

    def handle(self, request: Any) -> Any:
        body = json.loads(request.content)
        self.requests.append(body)
        try:
            self._check(body)
        except RejectedRequest as exc:
            error = {"error": {"type": "invalid_request_error", "message": str(exc)}}
            return httpx.Response(400, json=error)
        # When the script runs out, the model gives up and answers in text.
        return httpx.Response(200, json=self._respond(self._turns.pop(0) if self._turns else []))


def _chat_completion(calls: list[Call]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else "No errors."}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [choice],
    }


def _response(calls: list[Call]) -> dict[str, Any]:
    output: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": i,
            "name": n,
            "arguments": a,
            "status": "completed",
        }
        for i, n, a in calls
    ]
    if not calls:
        text = {"type": "output_text", "text": "No errors.", "annotations": []}
        output = [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        ]
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "status": "completed",
    }


def _message(calls: list[Call]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "Checking."}]
    content += [
        {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in calls
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": CLAUDE,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def openai_chat_client(turns: list[list[Call]] | None = None) -> Any:
    """An ``openai.OpenAI`` client whose Chat Completions are the scripted model's."""
    import openai

    api = ScriptedApi(_chat_check, _chat_completion, triage_script() if turns is None else turns)
    http = httpx.Client(transport=httpx.MockTransport(api.handle))
    return openai.OpenAI(api_key="scripted", base_url="http://model.test/v1", http_client=http)


def openai_responses_client(turns: list[list[Call]] | None = None) -> Any:
    """An ``openai.OpenAI`` client whose Responses are the scripted model's."""
    import openai

    api = ScriptedApi(_responses_check, _response, triage_script() if turns is None else turns)
    http = httpx.Client(transport=httpx.MockTransport(api.handle))
    return openai.OpenAI(api_key="scripted", base_url="http://model.test/v1", http_client=http)


def anthropic_client(turns: list[list[Call]] | None = None) -> Any:
    """An ``anthropic.Anthropic`` client whose Messages are the scripted model's."""
    import anthropic

    api = ScriptedApi(_messages_check, _message, triage_script() if turns is None else turns)
    http = httpx.Client(transport=httpx.MockTransport(api.handle))
    return anthropic.Anthropic(api_key="scripted", base_url="http://model.test", http_client=http)


# -- framework models ------------------------------------------------------------------------


def agents_model(turns: list[list[Call]] | None = None) -> Any:
    """The Agents SDK's own test double, ``agents.testing.ScriptedModel``, playing the script
    (one response per model call; then a text answer)."""
    from agents.testing import ScriptedModel, assistant_message, function_call

    steps: list[list[Any]] = [
        [function_call(n, a, call_id=i) for i, n, a in turn]
        for turn in (triage_script() if turns is None else turns)
    ]
    return ScriptedModel([*steps, [assistant_message("No errors.")]])


def langchain_model(turns: list[list[Call]] | None = None) -> Any:
    """LangChain's fake chat model (``GenericFakeChatModel``) playing the script as
    ``AIMessage``s with tool calls; ``bind_tools`` is the one method an agent needs that it
    lacks."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    script = triage_script() if turns is None else turns
    messages = [
        AIMessage(
            "",
            tool_calls=[
                {"id": i, "name": n, "args": json.loads(a), "type": "tool_call"} for i, n, a in turn
            ],
        )
        for turn in script
    ]
    return ScriptedChatModel(messages=iter([*messages, AIMessage("No errors.")]))
