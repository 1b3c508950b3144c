"""GitHub Copilot CLI session events (``~/.copilot/session-state/<session>/events.jsonl``,
checked against Copilot CLI 1.0.102): records ``{"type", "data", "id", "timestamp",
"parentId"}``. ``session.start`` names the run (``data.sessionId``); each
``assistant.message`` is a model turn, its ``toolRequests`` the calls (``toolCallId``,
``name``, ``arguments``); ``tool.execution_complete`` is a call's result (``result.content``,
or ``error.message`` when ``success`` is false); ``user.message`` is a person speaking. Other
record types (hooks, usage, turn boundaries) are skipped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from tripwire.replay.formats._base import (
    MISSING,
    Event,
    Format,
    Result,
    Source,
    Turn,
    UserMessage,
    call_id,
    expect_object,
    kind,
    register,
)

NAME: Final = "copilot"


def is_record(value: dict[str, Any]) -> bool:
    record = kind(value)
    return (
        record is not None
        and "." in record
        and isinstance(value.get("data"), dict)
        and "id" in value
        and "timestamp" in value
    )


class _Lines:
    __slots__ = ("_sent", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._sent = 0

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterator[Event]:
        source = self._source
        source.stats.formats.add(NAME)
        record = value["type"]
        # Once the file is known to be Copilot's, a record is claimed by its type alone
        # (``record_type``): its ``data`` is checked where it is read.
        raw = value.get("data", MISSING)
        if record == "session.start":
            data = expect_object(raw, "data")
            session = data.get("sessionId")
            if isinstance(session, str) and session:
                source.default_run = session
            return
        if record == "user.message":
            self._sent += size
            yield UserMessage(source.default_run)
            return
        if record == "assistant.message":
            data = expect_object(raw, "data")
            requests = data.get("toolRequests")
            calls = []
            ids: list[str | None] = []
            for request in requests if isinstance(requests, list) else []:
                if isinstance(request, dict) and isinstance(request.get("name"), str):
                    calls.append((request["name"], request.get("arguments"), False))
                    ids.append(call_id(request.get("toolCallId")))
            self._sent += size
            model = data.get("model") if isinstance(data.get("model"), str) else None
            yield Turn(
                source.default_run,
                calls,
                None,
                size,
                self._sent,
                line,
                NAME,
                where,
                call_ids=ids or None,
                model=model,
            )
            return
        if record == "tool.execution_complete":
            data = expect_object(raw, "data")
            cid = call_id(data.get("toolCallId"))
            if cid is None:
                source.stats.ignored += 1
                return
            if data.get("success") is False:
                error = data.get("error")
                said = error.get("message") if isinstance(error, dict) else error
                yield Result(source.default_run, cid, said, line, where, error=True)
                return
            result = data.get("result")
            content = result.get("content") if isinstance(result, dict) else result
            yield Result(source.default_run, cid, content, line, where)
            return
        source.stats.ignored += 1

    def finish(self) -> Iterable[Event]:
        return ()


FORMAT = register(
    Format(
        name=NAME,
        help=(
            (NAME, "GitHub Copilot CLI session events (~/.copilot/session-state/*/events.jsonl)"),
        ),
        order=26,
        is_record=is_record,
        lines=_Lines,
        record_type=True,
    )
)
