"""Gemini CLI session JSONL (``~/.gemini/tmp/<project>/chats/session-*.jsonl``, checked
against Gemini CLI 0.61.0): a first record naming the session (``sessionId``,
``projectHash``), then messages (``type`` ``user`` or ``gemini``) and ``$set`` updates. A
``gemini`` message is written again, whole, as it grows (its tool calls, then their results):
the last record of an id is the message. Its ``toolCalls`` carry each call's ``name``,
``args`` and ``result`` (the ``functionResponse`` parts the model was sent); a user message
holding text (not function responses) is a person speaking."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from tripwire.replay.formats._base import (
    Event,
    Format,
    Result,
    Source,
    Turn,
    UserMessage,
    call_id,
    kind,
    register,
    text_size,
)

NAME: Final = "gemini"
_MESSAGES: Final = frozenset({"user", "gemini", "info", "error", "warning"})


def is_record(value: dict[str, Any]) -> bool:
    if "$set" in value and len(value) == 1:
        return True
    if "projectHash" in value and "sessionId" in value and "type" not in value:
        return True
    return (
        kind(value) in _MESSAGES
        and "id" in value
        and "timestamp" in value
        and "message" not in value
        and "uuid" not in value
        and "sessionId" not in value
    )


def _response(parts: Any) -> tuple[Any, bool | None]:
    """A call's result as the model was sent it: the functionResponse's output (or its
    error, a failure)."""
    if not isinstance(parts, list):
        return parts, None
    for part in parts:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(response, dict):
            body = response.get("response")
            if isinstance(body, dict) and "error" in body:
                return body["error"], True
            if isinstance(body, dict) and "output" in body:
                return body["output"], None
            return body, None
    return parts, None


class _Lines:
    __slots__ = ("_pending", "_sent", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        # The gemini message being written: (record, line, size), replaced as it grows.
        self._pending: tuple[dict[str, Any], int | None, int] | None = None
        self._sent = 0

    def _flush(self) -> Iterator[Event]:
        if self._pending is None:
            return
        record, line, size = self._pending
        self._pending = None
        source = self._source
        calls_logged = record.get("toolCalls")
        calls_logged = calls_logged if isinstance(calls_logged, list) else []
        calls = []
        ids: list[str | None] = []
        results = []
        for index, logged in enumerate(calls_logged):
            if not isinstance(logged, dict) or not isinstance(logged.get("name"), str):
                continue
            calls.append((logged["name"], logged.get("args"), False))
            cid = call_id(logged.get("id")) or f"{record.get('id')}#{index}"
            ids.append(cid)
            if "result" in logged:
                value, error = _response(logged["result"])
                results.append(Result(source.default_run, cid, value, line, error=error))
        model = record.get("model") if isinstance(record.get("model"), str) else None
        self._sent += size
        yield Turn(
            source.default_run,
            calls,
            None,
            size,
            self._sent,
            line,
            NAME,
            call_ids=ids or None,
            model=model,
        )
        yield from results

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterator[Event]:
        source = self._source
        source.stats.formats.add(NAME)
        if "$set" in value:
            source.stats.ignored += 1
            return
        if "projectHash" in value:
            session = value.get("sessionId")
            if isinstance(session, str) and session and self._pending is None:
                source.default_run = session
            return
        record = kind(value)
        if record == "gemini":
            if self._pending is not None and self._pending[0].get("id") != value.get("id"):
                yield from self._flush()
            self._pending = (value, line, size)
            return
        yield from self._flush()
        if record == "user":
            content = value.get("content")
            parts = content if isinstance(content, list) else [content]
            spoke = isinstance(content, str) or any(
                isinstance(p, dict) and "text" in p for p in parts
            )
            if spoke and not any(isinstance(p, dict) and "functionResponse" in p for p in parts):
                yield UserMessage(source.default_run)
            self._sent += text_size(content)
            return
        source.stats.ignored += 1

    def finish(self) -> Iterable[Event]:
        return list(self._flush())


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "Gemini CLI session JSONL (~/.gemini/tmp/*/chats/session-*.jsonl)"),),
        order=25,
        is_record=is_record,
        lines=_Lines,
        record_type=True,
    )
)
