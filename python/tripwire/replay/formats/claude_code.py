"""Claude Code session JSONL (``~/.claude/projects/*/*.jsonl``): ``{"type": "assistant",
"sessionId", "message": {"id", "model", "content": [tool_use...], "usage"}}``. One API response
is written as several lines sharing ``message.id``; they are one turn, its usage counted once
(the largest figures of its lines). Subagent lines (``isSidechain``) are runs of their own.
Results are the ``tool_result`` blocks of ``user`` lines (with ``is_error``). Record types this
reader does not know (Claude Code adds them) are skipped and counted."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from tripwire.replay.cost import Usage, UsageError, merge_usage, parse_usage
from tripwire.replay.formats._base import (
    Call,
    Event,
    Format,
    Result,
    Source,
    Turn,
    UserMessage,
    register,
)
from tripwire.replay.formats.messages import CallError, block_results, chat_calls, has_text, linked

NAME: Final = "claude-code"

# Line types of a Claude Code session that carry no model call.
_META: Final = frozenset(
    {"summary", "system", "file-history-snapshot", "queue-operation", "progress", "attachment"}
)


def is_record(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if kind in ("user", "assistant"):
        return isinstance(obj.get("message"), dict) and (
            "sessionId" in obj or "uuid" in obj or "parentUuid" in obj
        )
    return isinstance(kind, str) and (
        kind in _META or "sessionId" in obj or "leafUuid" in obj or "messageId" in obj
    )


class _Session:
    """One session (or subagent) of a Claude Code file: lines of one API response share
    ``message.id`` and are one turn, whose usage is the largest figure any of them gives
    (the streamed lines repeat it, output growing). The turn is complete when a line of
    another response comes (or the file ends); tool results logged before that (Claude Code
    may run a tool while the response is still being written) wait for it in ``results``."""

    __slots__ = (
        "calls",
        "id",
        "ids",
        "line",
        "model",
        "produced",
        "results",
        "sent",
        "start",
        "usage",
    )

    def __init__(self) -> None:
        self.id: str | None = None
        self.calls: list[Call] = []
        self.ids: list[str | None] = []
        self.results: list[Result | UserMessage] = []
        self.produced = 0
        self.sent = 0
        self.start = 0
        self.line = 0
        self.usage: Usage | None = None
        self.model: str | None = None

    def flush(self, run: str) -> Iterator[Turn | Result | UserMessage]:
        if self.id is not None:
            yield Turn(
                run,
                self.calls,
                self.usage,
                self.produced,
                self.start,
                self.line,
                NAME,
                None,
                linked(self.ids),
                self.model,
            )
            self.sent += self.produced
            self.id = None
            self.calls = []
            self.ids = []
            self.usage = None
            if self.results:
                results, self.results = self.results, []
                yield from results


def _run(obj: dict[str, Any], default: str) -> str:
    session = obj.get("sessionId")
    run = session if isinstance(session, str) and session else default
    if obj.get("isSidechain") is True:
        agent = obj.get("agentId")
        return f"{run}/agent-{agent}" if isinstance(agent, str) else f"{run}/sidechain"
    return run


class _Lines:
    __slots__ = ("_sessions", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._sessions: dict[str, _Session] = {}

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterator[Event]:
        source = self._source
        stats = source.stats
        stats.formats.add(NAME)
        kind = value.get("type")
        message = value.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            if kind not in _META and isinstance(kind, str):
                key = f"{NAME}:{kind}"
                stats.unknown[key] = stats.unknown.get(key, 0) + 1
            else:
                stats.ignored += 1
            return
        run = _run(value, source.default_run)
        session = self._sessions.get(run)
        if session is None:
            session = self._sessions[run] = _Session()
        if kind == "user":
            session.sent += size
            content = message.get("content")
            events: list[Result | UserMessage] = []
            events += block_results(content, run, line, where)
            # Meta lines are Claude Code's own (command output, caveats), not a person's.
            if not value.get("isMeta") and has_text(content):
                events.append(UserMessage(run))
            if session.id is not None:
                session.results += events
            else:
                yield from events
            return
        model = message.get("model")
        if model == "<synthetic>":
            # Written by Claude Code itself (an API error, an interruption): no model call.
            stats.ignored += 1
            return
        ids: list[str | None] = []
        try:
            calls = chat_calls(message, ids)
        except CallError as exc:
            yield source.problem(line, f"{exc}; line skipped", where)
            return
        usage: Usage | None = None
        try:
            usage = parse_usage(message.get("usage"))
        except UsageError as exc:
            yield source.problem(line, f"{exc}; tokens estimated", where)
        message_id = message.get("id")
        if not isinstance(message_id, str):
            message_id = f"line {line}"
        if session.id != message_id:
            yield from session.flush(run)
            session.id = message_id
            session.start = session.sent
            session.line = line or 0
            session.produced = 0
            session.model = model if isinstance(model, str) else None
        session.calls.extend(calls)
        session.ids.extend(ids)
        session.produced += size
        session.usage = merge_usage(session.usage, usage)

    def finish(self) -> Iterable[Event]:
        events: list[Event] = []
        for run, session in self._sessions.items():
            events.extend(session.flush(run))
        self._sessions.clear()
        return events


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "Claude Code session JSONL (~/.claude/projects/*/*.jsonl)"),),
        order=20,
        is_record=is_record,
        lines=_Lines,
        record_type=True,
    )
)
