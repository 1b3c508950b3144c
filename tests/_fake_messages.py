"""A scripted Anthropic Messages API on loopback, for end-to-end tests of real Claude Code.

It streams as the real API streams (server-sent events: ``message_start``, per block
``content_block_start`` / ``content_block_delta`` / ``content_block_stop``, ``message_delta``
with the stop reason, ``message_stop``) and enforces what the real API enforces of a
conversation: every ``tool_use`` of an assistant message answered by exactly one
``tool_result`` in the next user message, and no ``tool_result`` for an id it never sent
(a 400 ``invalid_request_error`` otherwise, as the real API answers).

The script is a list of model responses, each a list of blocks: ``text(...)`` or
``tool_use(name, input)``. Requests of the agent loop (those that offer tools) get the next
response; requests without tools (titles, summaries) get a short text. Every request is kept,
so a test reads what the model was shown (``tool_results()``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Block = dict[str, Any]


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any]) -> Block:
    return {"type": "tool_use", "name": name, "input": input}


class ConversationError(ValueError):
    """What the real API rejects with a 400."""


def _check_conversation(messages: list[dict[str, Any]]) -> None:
    """One tool_result per tool_use id, in the user message right after it."""
    pending: set[str] = set()
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "assistant":
            if pending:
                raise ConversationError(f"tool_use ids without tool_result: {sorted(pending)}")
            pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
            continue
        for block in blocks:
            if block.get("type") != "tool_result":
                continue
            if block["tool_use_id"] not in pending:
                raise ConversationError(
                    f"tool_result for an unknown or answered id {block['tool_use_id']}"
                )
            pending.discard(block["tool_use_id"])
        if pending:
            raise ConversationError(f"tool_use ids without tool_result: {sorted(pending)}")


def _events(response_id: str, blocks: list[Block], model: str) -> Iterator[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    usage = {"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 0}
    yield event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": response_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        yield event(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
        yield event("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    yield event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
    )
    yield event("message_stop", {"type": "message_stop"})


class ScriptedAPI:
    """What every scripted model API of the tests shares (this one and ``_fake_models``'):
    ``with API(script) as api:`` serves on ``api.url`` until the block ends; each agent
    request is answered by the script's next response, its tool calls given ids
    (``TOOL_ID``, formatted with the response's and the block's numbers and the request's);
    every request is kept."""

    TOOL_ID = "call_{response:02d}{index:02d}"

    def __init__(self, script: list[list[Block]]) -> None:
        self.script = [list(response) for response in script]
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._next = 0
        self._ids = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def served(self) -> int:
        return self._next

    def sent_ids(self) -> list[list[str]]:
        """The tool call ids of each scripted response served, in order."""
        return [[b["id"] for b in r if b["type"] == "tool_use"] for r in self.script[: self._next]]

    def _next_blocks(self) -> list[Block]:
        """The script's next response (the caller holds the lock), or "Done." past its end."""
        if self._next >= len(self.script):
            return [text("Done.")]
        blocks = self.script[self._next]
        for index, block in enumerate(blocks):
            if block["type"] == "tool_use" and "id" not in block:
                block["id"] = self.TOOL_ID.format(
                    response=self._next, index=index, request=self._ids
                )
        self._next += 1
        return blocks

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class QuietHandler(BaseHTTPRequestHandler):
    """A keep-alive handler that logs nothing and sends whole bodies."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeMessagesAPI(ScriptedAPI):
    """The Anthropic Messages API (see the module's docstring)."""

    TOOL_ID = "toolu_{response:02d}{index:02d}fake{request:04d}"

    def agent_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("tools")]

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """Every tool_result the model was sent, by tool_use id."""
        results: dict[str, dict[str, Any]] = {}
        for request in self.requests:
            for message in request.get("messages", []):
                content = message.get("content")
                for block in content if isinstance(content, list) else []:
                    if block.get("type") == "tool_result":
                        results[block["tool_use_id"]] = block
        return results

    def _respond(self, request: dict[str, Any]) -> tuple[str, list[Block]]:
        with self._lock:
            self.requests.append(request)
            self._ids += 1
            response_id = f"msg_fake{self._ids:04d}"
            if not request.get("tools"):
                return response_id, [text("ok")]
            _check_conversation(request.get("messages", []))
            return response_id, self._next_blocks()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(QuietHandler):
            def do_HEAD(self) -> None:
                self._send(200, b"")

            def do_GET(self) -> None:
                self._send(200, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    # count_tokens and the like: answered, not scripted
                    self._send(200, json.dumps({"input_tokens": 100}).encode())
                    return
                try:
                    request = json.loads(body)
                    response_id, blocks = api._respond(request)
                except ConversationError as exc:
                    api.errors.append(str(exc))
                    error = {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": str(exc)},
                    }
                    self._send(400, json.dumps(error).encode())
                    return
                model = str(request.get("model", "claude-fake"))
                if not request.get("stream"):
                    stop = (
                        "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                    )
                    message = {
                        "id": response_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": blocks,
                        "stop_reason": stop,
                        "stop_sequence": None,
                        "usage": {"input_tokens": 100, "output_tokens": 10},
                    }
                    self._send(200, json.dumps(message).encode())
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in _events(response_id, blocks, model):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                self.close_connection = True

        return Handler
