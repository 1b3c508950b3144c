"""Scripted Gemini and OpenAI Responses APIs on loopback, for end-to-end tests of the real
Gemini CLI and Codex CLI.

Both stream as the real APIs stream (server-sent events) and enforce what the real APIs enforce
of a conversation, answering a 400 otherwise:

- Gemini (``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``): every
  ``functionCall`` of a model turn answered by one ``functionResponse`` of the same name in the
  next user turn.
- Responses (``POST /v1/responses``): every ``function_call`` item's ``call_id`` answered by
  exactly one ``function_call_output``, and no output for a call id never sent.

The script is a list of model responses, each a list of blocks (``text(...)``,
``tool_use(name, input)``, from ``_fake_messages``). Requests of the agent loop (those that
offer tools) get the next response; others (Gemini CLI's model router and next-speaker check)
get a short JSON text. Every request is kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from _fake_messages import Block, ConversationError, QuietHandler, ScriptedAPI

# What Gemini CLI's side requests (router, next speaker) parse: both answered by one text.
_SIDE_ANSWER = json.dumps(
    {
        "reasoning": "The model answered.",
        "next_speaker": "user",
        "complexity_reasoning": "A simple task.",
        "complexity_score": 10,
    }
)


class _ScriptedAPI(ScriptedAPI):
    """Gemini's and Responses' common server: JSON requests, answered by ``route``."""

    # -- per API --------------------------------------------------------------------------

    def route(self, path: str, request: dict[str, Any]) -> tuple[int, Any]:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self._send(404, b'{"error": {"message": "not here"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                    with api._lock:
                        api.requests.append({"path": self.path, **request})
                        status, answer = api.route(self.path, request)
                except ConversationError as exc:
                    api.errors.append(str(exc))
                    error = {"error": {"code": 400, "message": str(exc), "status": "INVALID"}}
                    self._send(400, json.dumps(error).encode())
                    return
                if isinstance(answer, (bytes, bytearray)):
                    self._send(status, bytes(answer), "text/event-stream")
                else:
                    self._send(status, json.dumps(answer).encode())

        return Handler


# -- Gemini -------------------------------------------------------------------------------------


def _gemini_parts(blocks: list[Block]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "text":
            parts.append({"text": block["text"]})
        else:
            parts.append({"functionCall": {"name": block["name"], "args": block["input"]}})
    return parts


def _check_gemini(contents: list[dict[str, Any]]) -> None:
    pending: list[str] = []
    for content in contents:
        parts = content.get("parts") or []
        if content.get("role") == "model":
            if pending:
                raise ConversationError(f"functionCall without functionResponse: {pending}")
            pending = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
            continue
        for part in parts:
            if "functionResponse" in part:
                name = part["functionResponse"].get("name")
                if name not in pending:
                    raise ConversationError(f"functionResponse {name!r} answers no functionCall")
                pending.remove(name)
        if pending and any("functionResponse" in p for p in parts):
            raise ConversationError(f"functionCall without functionResponse: {pending}")
    # A functionCall left unanswered at the end is the request being made now: fine only if
    # the last turn is the model's (it is not, in a well-formed request).
    if pending:
        raise ConversationError(f"functionCall without functionResponse: {pending}")


class FakeGeminiAPI(_ScriptedAPI):
    def agent_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("tools") and "stream" in r["path"]]

    def function_responses(self) -> list[dict[str, Any]]:
        """The function responses the model was shown, in order (the last request has them
        all)."""
        requests = self.agent_requests()
        if not requests:
            return []
        return [
            part["functionResponse"]
            for content in requests[-1].get("contents", [])
            for part in content.get("parts", [])
            if "functionResponse" in part
        ]

    def route(self, path: str, request: dict[str, Any]) -> tuple[int, Any]:
        if ":streamGenerateContent" in path and request.get("tools"):
            _check_gemini(request.get("contents", []))
            blocks = self._next_blocks()
            chunk = {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": _gemini_parts(blocks)},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": 100,
                    "candidatesTokenCount": 10,
                    "totalTokenCount": 110,
                },
                "modelVersion": "gemini-fake",
            }
            return 200, f"data: {json.dumps(chunk)}\r\n\r\n".encode()
        side = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": _SIDE_ANSWER}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10},
        }
        if ":streamGenerateContent" in path:
            return 200, f"data: {json.dumps(side)}\r\n\r\n".encode()
        if ":countTokens" in path:
            return 200, {"totalTokens": 100}
        return 200, side


# -- OpenAI Responses -----------------------------------------------------------------------------


def _check_responses(items: list[dict[str, Any]]) -> None:
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            called.add(item["call_id"])
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in called or call_id in answered:
                raise ConversationError(f"No tool call found for function call output {call_id}")
            answered.add(call_id)
    if called - answered:
        raise ConversationError(f"No tool output found for function calls {called - answered}")


def _sse(events: Iterator[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
    )


class FakeResponsesAPI(_ScriptedAPI):
    def agent_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/responses")]

    def outputs(self) -> dict[str, str]:
        """Every function call output the model was shown, by call id."""
        found: dict[str, str] = {}
        for request in self.agent_requests():
            for item in request.get("input", []):
                if item.get("type") == "function_call_output":
                    output = item.get("output")
                    found[item["call_id"]] = (
                        output if isinstance(output, str) else json.dumps(output)
                    )
        return found

    def route(self, path: str, request: dict[str, Any]) -> tuple[int, Any]:
        if not path.endswith("/responses"):
            return 404, {"error": {"message": f"no {path}"}}
        _check_responses(request.get("input", []))
        blocks = self._next_blocks()
        response_id = f"resp_{len(self.requests):04d}"

        items: list[dict[str, Any]] = []

        def events() -> Iterator[dict[str, Any]]:
            base = {"id": response_id, "object": "response", "model": request.get("model")}
            yield {"type": "response.created", "response": {**base, "status": "in_progress"}}
            for index, block in enumerate(blocks):
                if block["type"] == "text":
                    item: dict[str, Any] = {
                        "type": "message",
                        "id": f"msg_{response_id}_{index}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [
                            {"type": "output_text", "text": block["text"], "annotations": []}
                        ],
                    }
                else:
                    item = {
                        "type": "function_call",
                        "id": f"fc_{block['id']}",
                        "call_id": block["id"],
                        "name": block["name"],
                        "arguments": json.dumps(block["input"]),
                        "status": "completed",
                    }
                items.append(item)
                yield {"type": "response.output_item.added", "output_index": index, "item": item}
                yield {"type": "response.output_item.done", "output_index": index, "item": item}
            usage = {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 110,
            }
            yield {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": items, "usage": usage},
            }

        return 200, _sse(events())
