"""Codex CLI rollout JSONL (``~/.codex/sessions/**/rollout-*.jsonl``): ``response_item`` lines
whose ``payload`` is a Responses item of the file's one run (named by ``session_meta``), usage
from ``event_msg`` ``token_count`` lines (``info.last_token_usage``, of the response just
logged), the model from ``turn_context``. Tool outputs lose their wall-clock times
(``duration_seconds``, ``Wall time:``) and the exec tools' ``Chunk ID:`` (random), which differ
on every run and would make every result look new. Record types this reader does not know
(Codex adds them) are skipped and counted."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from tripwire.replay.cost import UsageError, parse_usage
from tripwire.replay.formats._base import Event, Format, Source, kind, register
from tripwire.replay.formats.messages import Conversation

NAME: Final = "codex"
_TYPES: Final = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)


# Lines of an exec tool's output that differ on every run (Codex 0.171's exec_command).
_VOLATILE_LINES: Final = ("Wall time:", "Chunk ID:")


def is_record(value: dict[str, Any]) -> bool:
    return kind(value) in _TYPES and "payload" in value


def codex_output(value: Any) -> Any:
    """A Codex tool output without its wall-clock time, which differs on every run:
    ``metadata.duration_seconds`` of the JSON form, the ``Wall time:`` line of the text one."""
    if type(value) is dict:
        metadata = value.get("metadata")
        if type(metadata) is dict and "duration_seconds" in metadata:
            metadata = {k: v for k, v in metadata.items() if k != "duration_seconds"}
            return {**value, "metadata": metadata}
        return value
    if type(value) is str and ("Wall time:" in value or "Chunk ID:" in value):
        lines = value.splitlines(keepends=True)
        return "".join(line for line in lines if not line.startswith(_VOLATILE_LINES))
    return value


class _Lines:
    __slots__ = ("_conv", "_model", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._conv: Conversation | None = None
        self._model: str | None = None

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterator[Event]:
        source = self._source
        stats = source.stats
        stats.formats.add(NAME)
        record = value["type"]
        payload = value.get("payload")
        if record not in _TYPES:
            key = f"{NAME}:{record}"
            stats.unknown[key] = stats.unknown.get(key, 0) + 1
            return
        if not isinstance(payload, dict):
            stats.ignored += 1
            return
        if record == "response_item":
            if self._conv is None:
                self._conv = Conversation(
                    source.default_run, fmt=NAME, output=codex_output, model=self._model
                )
            yield from self._conv.feed(payload, size, line, where, source.path)
            return
        if record == "session_meta" and self._conv is None:
            session = payload.get("id")
            if isinstance(session, str) and session:
                source.default_run = session
            return
        if record == "turn_context":
            model = payload.get("model")
            if isinstance(model, str):
                self._model = model
                if self._conv is not None:
                    self._conv.model = model
            return
        if record == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            if last is not None and self._conv is not None:
                try:
                    usage = parse_usage(last)
                except UsageError as exc:
                    yield source.problem(line, f"{exc}; tokens estimated", where)
                    return
                if usage is not None and self._conv.usage(usage):
                    return
        stats.ignored += 1

    def finish(self) -> Iterable[Event]:
        if self._conv is None:
            return ()
        conv, self._conv = self._conv, None
        return conv.flush()


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "Codex CLI rollout JSONL (~/.codex/sessions/**/rollout-*.jsonl)"),),
        order=30,
        is_record=is_record,
        lines=_Lines,
        record_type=True,
    )
)
