"""Trace readers: every supported format turned into one stream of model turns.

A **turn** is one model call: one assistant message (chat, Anthropic, Claude Code) or one
response's output items (Responses API), with the tool calls it asked for (maybe none: a final
answer is a turn too, and costs money), its usage figures if the trace has them, and the byte
sizes used to estimate tokens when it does not.

Formats are detected per file, and within a JSONL file per line, by shape rather than by
file name:

========================  ==============================================================
``events``                JSONL of ``{"run", "tool", "args", "usage"}``; ``args`` (or
                          ``arguments``, ``input``) an object or a JSON string; ``run`` (or
                          ``run_id``) defaults to the file, and runs may interleave. Optional
                          ``turn``: consecutive events of a run with the same ``turn`` are one
                          model call's parallel calls (its ``usage`` given on any of them; the
                          last one given counts). A line without ``tool`` but with ``usage`` is
                          a model call without tool calls; one with only ``run``/``event`` (a
                          budget entry, say) is noted and ignored. Results: ``"result"`` on a
                          call's line is what it returned (``null`` too: it returned nothing);
                          or the call carries ``"call_id"`` and a later line
                          ``{"run", "result_of": <call_id>, "result"}`` gives its result.
``openai-chat``           Message lists: assistant ``tool_calls[].function`` with
                          ``arguments`` as a JSON string (legacy ``function_call`` and custom
                          tools' free-text ``input`` too).
``anthropic``             Message lists: assistant ``content`` blocks of type ``tool_use``
                          (also ``server_tool_use``, ``mcp_tool_use``) with an ``input`` object.
``openai-responses``      Item lists: ``function_call`` (``arguments`` string), ``mcp_call``,
                          ``custom_tool_call`` (``input`` is free text, keyed as a string),
                          ``local_shell_call`` and ``computer_call`` (their ``action``, as
                          tools ``local_shell`` and ``computer``); consecutive output items are
                          one response. A response object (``output`` + ``usage``, optionally
                          ``input``) is a run too.
``claude-code``           Claude Code session JSONL: ``{"type": "assistant", "sessionId",
                          "message": {"id", "content": [tool_use...], "usage"}}``. One API
                          response is written as several lines sharing ``message.id``; they are
                          one turn, its usage counted once (the largest figures of its lines).
                          Subagent lines (``isSidechain``) are runs of their own.
``codex``                 Codex CLI rollout JSONL: ``response_item`` lines whose ``payload`` is
                          a Responses item, usage from ``event_msg`` ``token_count`` lines; the
                          run is named by ``session_meta``.
========================  ==============================================================

**Results.** Where a trace has tool results, they are read too, each linked to its call by the
call's id, and come after the turn of their call (a ``Result`` event): chat ``role: "tool"``
messages (``tool_call_id``), Responses ``*_output`` items (``call_id``; an ``mcp_call``
carries its own ``output``), Anthropic and Claude Code ``tool_result`` blocks
(``tool_use_id``; also the server tools' ``*_tool_result`` blocks), Codex ``*_output``
payloads, and the events format's ``result``. What the tool returned is taken as the harness
would have seen it: content blocks that are all text become their text, and a text that is a
JSON array, object, string or ``null`` becomes that value (a chat tool message ``"[]"`` is an
empty list). Codex shell outputs lose their wall-clock times (``duration_seconds``, ``Wall
time:``), which differ on every run and would make every result look new.

A message list may be a whole JSON file (a list, or an object with ``messages``, or a list
of such objects), one JSONL line per conversation, or one JSONL line per message or item
(the file is then one run). Usage on an assistant message (``"usage"``, as many loggers
store it next to the message) is used when present.

Decisions:

* Whole-document JSON is read whole (such files are small by nature); JSONL is streamed line
  by line in bounded memory. A file is JSONL when its first non-blank line is a JSON value
  on its own, or, failing that, when its second one is an object or list (the first is then
  reported as bad) and the first is not a lone ``[`` or ``{``; otherwise it is one JSON
  document. ``.gz`` is recognised by its magic bytes, on stdin too, not by its name.
* Bad data never raises: a line that is not JSON, or JSON of no recognised shape, is a
  ``Problem`` naming file and line and is skipped; an unreadable or corrupt file is a
  ``Problem`` too, and whatever was read before the damage still counts.
* Tool-call ids are not used to identify calls: traces reuse them (some servers number calls
  ``call_0`` in every turn), and a guard given a repeated id answers with its first verdict,
  which would hide the very loops being looked for. They only link results to calls
  (``Turn.call_ids``): a result belongs to the latest call of its run with that id.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final, cast

from tripwire._results import content_value
from tripwire.replay.cost import Usage, UsageError, parse_usage

# (tool name, arguments, arguments are JSON text to be parsed as the harness would)
Call = tuple[str, Any, bool]

GZIP_MAGIC: Final = b"\x1f\x8b"
# How often (in lines) a reader reports its position for the progress bar.
TICK_LINES: Final = 4096

# Longest line (or whole JSON document) read: parsing one costs several times its size in
# memory, and /dev/zero or a multi-GB line must end in a clear message, not a MemoryError.
# A longer line is read through without being kept, for at most MAX_SKIP_BYTES (an endless
# line, as /dev/zero's, then ends the file).
MAX_LINE_BYTES = 64 << 20
MAX_SKIP_BYTES = 4 << 30
_SKIP_CHUNK: Final = 1 << 20


class TooLong(bytes):
    """Stands, empty, for a line longer than ``MAX_LINE_BYTES``: ``size`` bytes were read
    through and not kept; ``ended``: whether its end was found."""

    size: int
    ended: bool

    def problem(self, skipped: str = "line skipped") -> str:
        if self.ended:
            return f"line longer than {_limit()} ({self.size:,} bytes); {skipped}"
        return f"line longer than {_limit()}, no end in {self.size:,} bytes; file not read further"


def _limit() -> str:
    mib, rest = divmod(MAX_LINE_BYTES, 1 << 20)
    return f"{mib} MiB" if mib and not rest else f"{MAX_LINE_BYTES:,} bytes"


def bounded_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The stream's lines, each at most ``MAX_LINE_BYTES`` long; a longer one is a
    ``TooLong``, and if its end is not found the lines end there."""
    cap = MAX_LINE_BYTES
    while line := stream.readline(cap + 1):
        if len(line) <= cap or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        del line
        ended = False
        while size < MAX_SKIP_BYTES:
            chunk = stream.readline(_SKIP_CHUNK)
            size += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                ended = True
                break
        too_long = TooLong()
        too_long.size, too_long.ended = size, ended
        yield too_long
        if not ended:
            return


_decode = json.JSONDecoder().raw_decode


@dataclass(slots=True)
class Turn:
    """One model call of a run."""

    run: str
    calls: list[Call]
    usage: Usage | None
    # Bytes the model produced in this turn (its message or items, as logged).
    produced: int
    # Bytes of transcript sent with this call; ``None``: the run's own running total of
    # ``produced`` (the events format, whose runs interleave and carry no transcript).
    sent: int | None
    line: int | None
    format: str
    where: str | None = None
    # Each call's id in the trace (``None``: it has none), for linking results to calls;
    # ``None``: no call has one.
    call_ids: list[str | None] | None = None


@dataclass(slots=True)
class Result:
    """What a tool call returned: ``value`` is the result of the call ``call_id`` of ``run``
    (see ``result_value`` for what is made of the logged form)."""

    run: str
    call_id: str
    value: Any
    line: int | None
    where: str | None = None
    # Whether the call failed, where the trace says (an Anthropic / Claude Code
    # ``is_error``); ``None``: it does not, and the guard reads the result.
    error: bool | None = None


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A human message in the run's conversation (not a tool result): the guard is told,
    as a live harness tells it (``Guard.user_message``)."""

    run: str


@dataclass(frozen=True, slots=True)
class Problem:
    """Bad input, skipped: where it is and what is wrong with it."""

    path: str
    line: int | None
    message: str
    where: str | None = None

    def location(self) -> str:
        return location(self.path, self.line, self.where)

    def __str__(self) -> str:
        return f"{self.location()}: {self.message}"


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The run has no more turns (a whole conversation was read)."""

    run: str


Event = Turn | Result | UserMessage | Problem | RunEnd


def location(path: str, line: int | None, where: str | None) -> str:
    """``file:line``, ``file (messages[4])`` or both: where something is in a trace."""
    text = path if line is None else f"{path}:{line}"
    return text if where is None else f"{text} ({where})"


@dataclass(slots=True)
class FileStats:
    """What reading one file found."""

    path: str
    size: int | None = None
    lines: int = 0
    position: int = 0
    formats: set[str] = field(default_factory=set)
    ignored: int = 0
    problems: int = 0
    unreadable: bool = False
    runs: int = 0


def _text_size(value: Any) -> int:
    """Bytes of a value as JSON, for token estimates."""
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        return 0


def _run_name(obj: dict[str, Any], default: str) -> str:
    for name in ("run", "run_id", "session_id", "conversation_id", "id"):
        value = obj.get(name)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return default


def _id(value: Any) -> str | None:
    """A call id as logged (a string, or a number), or ``None``."""
    if type(value) is str:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


# What the guard makes of a logged result's content: the one source, shared with
# ``Guard.observe`` (so the live guard and replay agree).
result_value = content_value


def _has_text(content: Any) -> bool:
    """A user message's content holds words of a person (text, not only tool results)."""
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(
            isinstance(block, dict) and block.get("type") in ("text", "input_text")
            for block in content
        )
    return False


def _block_results(content: Any, run: str, line: int | None, where: str | None) -> list[Result]:
    """Results in an Anthropic message's content: ``tool_result`` blocks and the server
    tools' ``*_tool_result`` blocks, by ``tool_use_id``."""
    results: list[Result] = []
    if type(content) is list:
        for block in content:
            if type(block) is not dict:
                continue
            kind = _kind(block)
            if kind is None or not kind.endswith("tool_result"):
                continue
            call_id = _id(block.get("tool_use_id"))
            if call_id is not None:
                value = result_value(block.get("content"))
                flag = block.get("is_error")
                error = flag if isinstance(flag, bool) else None
                results.append(Result(run, call_id, value, line, where, error))
    return results


# -- message lists: chat, Anthropic, Responses ----------------------------------------------

# Responses items that are tool calls, and the field holding their arguments.
_RESPONSES_CALLS: Final = {"function_call": "arguments", "mcp_call": "arguments"}
# Built-in tools whose items carry an ``action`` rather than a name: keyed as tool ``name``.
_RESPONSES_ACTIONS: Final = {"local_shell_call": "local_shell", "computer_call": "computer"}
# Other items a response produces (they belong to the turn but call no tool).
_RESPONSES_OUTPUT: Final = frozenset(
    {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)
_ANTHROPIC_CALLS: Final = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
# Items that are a call's result, by ``call_id``.
_RESPONSES_RESULTS: Final = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "computer_call_output",
    }
)
_RESPONSES_TYPES: Final = frozenset(
    {*_RESPONSES_CALLS, *_RESPONSES_ACTIONS, "custom_tool_call", *_RESPONSES_OUTPUT}
    | _RESPONSES_RESULTS
    | {"mcp_approval_response"}
)


class CallError(ValueError):
    """A tool call in a message that cannot be checked (no name)."""


def _chat_calls(message: dict[str, Any], ids: list[str | None]) -> list[Call]:
    """The tool calls of an assistant message; their ids are appended to ``ids``."""
    calls: list[Call] = []
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        for index, item in enumerate(tool_calls):
            custom = item.get("custom") if isinstance(item, dict) else None
            if isinstance(custom, dict) and isinstance(custom.get("name"), str):
                # A custom tool: free-text input, keyed as a string.
                raw = custom.get("input")
                calls.append((custom["name"], "" if raw is None else raw, False))
                ids.append(_id(item.get("id")))
                continue
            function = item.get("function") if isinstance(item, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise CallError(f"tool_calls[{index}] has no function name")
            calls.append(_argument_call(function["name"], function.get("arguments")))
            ids.append(_id(item.get("id")))
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        if not isinstance(legacy.get("name"), str):
            raise CallError("function_call has no name")
        calls.append(_argument_call(legacy["name"], legacy.get("arguments")))
        ids.append(None)
    content = message.get("content")
    if isinstance(content, list):
        for index, block in enumerate(content):
            if isinstance(block, dict) and _kind(block) in _ANTHROPIC_CALLS:
                name = block.get("name")
                if not isinstance(name, str):
                    raise CallError(f"content[{index}] ({block['type']}) has no name")
                args = block.get("input")
                calls.append((name, {} if args is None else args, False))
                ids.append(_id(block.get("id")))
    return calls


def _linked(ids: list[str | None]) -> list[str | None] | None:
    return ids if any(call_id is not None for call_id in ids) else None


def _kind(obj: dict[str, Any]) -> str | None:
    """An object's ``type``, if it is a string (other values, such as lists, are no type)."""
    kind = obj.get("type")
    return kind if type(kind) is str else None


def _argument_call(name: str, arguments: Any) -> Call:
    """An OpenAI-style call: string arguments are JSON text, anything else a value."""
    if isinstance(arguments, str):
        return (name, arguments, True)
    return (name, {} if arguments is None else arguments, False)


def _message_format(message: dict[str, Any]) -> str | None:
    if message.get("tool_calls") or message.get("function_call") or message.get("role") == "tool":
        return "openai-chat"
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") in (*_ANTHROPIC_CALLS, "tool_result"):
                return "anthropic"
    return None


class Conversation:
    """Turns of one message or item list, fed one element at a time (so a JSONL file of one
    message per line streams). Chat and Anthropic assistant messages are a turn each;
    consecutive Responses output items are one turn, ended by the next input item."""

    __slots__ = (
        "_calls",
        "_format",
        "_ids",
        "_line",
        "_produced",
        "_results",
        "_sent",
        "_start",
        "_usage",
        "_where",
        "run",
    )

    def __init__(self, run: str, base_bytes: int = 0, fmt: str | None = None) -> None:
        self.run = run
        # Bytes sent with every call: system prompt and tool definitions, where known.
        self._sent = base_bytes
        self._format: str | None = fmt
        self._usage: Usage | None = None
        # The open Responses turn, if any: its calls and their ids, results its items carry
        # (an ``mcp_call``'s output), bytes produced, where it started.
        self._calls: list[Call] | None = None
        self._ids: list[str | None] = []
        self._results: list[Result] = []
        self._produced = 0
        self._start = 0
        self._line: int | None = None
        self._where: str | None = None

    @property
    def format(self) -> str:
        return self._format or "messages"

    def feed(
        self, element: Any, size: int, line: int | None, where: str | None, path: str
    ) -> Iterator[Turn | Result | UserMessage | Problem]:
        if not isinstance(element, dict):
            yield Problem(path, line, f"not a message: {type(element).__name__}", where)
            return
        kind = _kind(element)
        role = element.get("role")
        if kind in _RESPONSES_CALLS or kind == "custom_tool_call":
            self._format = self._format or "openai-responses"
            name = element.get("name")
            if not isinstance(name, str):
                yield Problem(path, line, f"{kind} has no name; call skipped", where)
                return
            if kind == "custom_tool_call":
                raw = element.get("input")
                call: Call = (name, "" if raw is None else raw, False)
            else:
                call = _argument_call(name, element.get(_RESPONSES_CALLS[kind]))
            self._open(line, where).append(call)
            self._produced += size
            call_id = _id(element.get("call_id"))
            if kind == "mcp_call":
                # Run by the API within the response: its output is in the item itself.
                call_id = call_id or _id(element.get("id")) or f"\x00{line}{where}"
                error = element.get("error")
                if error is not None:
                    self._results.append(Result(self.run, call_id, {"error": error}, line, where))
                elif "output" in element:
                    value = result_value(element["output"])
                    self._results.append(Result(self.run, call_id, value, line, where))
            self._ids.append(call_id)
            return
        if kind in _RESPONSES_ACTIONS:
            self._format = self._format or "openai-responses"
            action = element.get("action")
            self._open(line, where).append(
                (_RESPONSES_ACTIONS[kind], {} if action is None else action, False)
            )
            self._ids.append(_id(element.get("call_id")))
            self._produced += size
            return
        if kind in _RESPONSES_OUTPUT or (
            kind == "message"
            and role == "assistant"
            and not _has_calls(element)
            and "usage" not in element
        ):
            self._format = self._format or "openai-responses"
            self._open(line, where)
            self._produced += size
            return
        yield from self.flush()
        if role == "assistant":
            self._format = self._format or _message_format(element)
            usage: Usage | None = None
            ids: list[str | None] = []
            try:
                calls = _chat_calls(element, ids)
            except CallError as exc:
                yield Problem(path, line, f"{exc}; message skipped", where)
                self._sent += size
                return
            try:
                usage = parse_usage(element.get("usage"))
            except UsageError as exc:
                yield Problem(path, line, f"{exc}; tokens estimated", where)
            fmt = self.format
            yield Turn(self.run, calls, usage, size, self._sent, line, fmt, where, _linked(ids))
            self._sent += size
            # Server tools (web search, code execution) answer within the same message.
            yield from _block_results(element.get("content"), self.run, line, where)
            return
        if kind in _RESPONSES_TYPES:
            self._format = self._format or "openai-responses"
            if kind in _RESPONSES_RESULTS:
                result = self._item_result(element, kind, line, where)
                if result is not None:
                    yield result
        else:
            if self._format is None:
                self._format = _message_format(element)
            if role == "tool":
                call_id = _id(element.get("tool_call_id"))
                if call_id is not None:
                    value = result_value(element.get("content"))
                    yield Result(self.run, call_id, value, line, where)
            else:
                content = element.get("content")
                yield from _block_results(content, self.run, line, where)
                if role == "user" and _has_text(content):
                    yield UserMessage(self.run)
        self._sent += size

    def _item_result(
        self, element: dict[str, Any], kind: str, line: int | None, where: str | None
    ) -> Result | None:
        """A Responses ``*_output`` item's result (``local_shell_call_output`` names its call
        by ``id``, the others by ``call_id``)."""
        call_id = _id(element.get("call_id"))
        if call_id is None and kind == "local_shell_call_output":
            call_id = _id(element.get("id"))
        if call_id is None:
            return None
        value = result_value(element.get("output"))
        if self._format == "codex":
            value = _codex_output(value)
        return Result(self.run, call_id, value, line, where)

    def _open(self, line: int | None, where: str | None) -> list[Call]:
        if self._calls is None:
            self._calls = []
            self._ids = []
            self._produced = 0
            self._start = self._sent
            self._line = line
            self._where = where
        return self._calls

    def usage(self, usage: Usage) -> bool:
        """Usage figures for the open Responses turn (Codex logs them after its items);
        False when no turn is open."""
        if self._calls is None:
            return False
        self._usage = usage
        return True

    def flush(self, usage: Usage | None = None) -> Iterator[Turn | Result]:
        """Ends the open Responses turn, if any (``usage``: the response's own figures),
        followed by the results its items carried."""
        if self._calls is not None:
            calls, self._calls = self._calls, None
            usage, self._usage = usage or self._usage, None
            yield Turn(
                self.run,
                calls,
                usage,
                self._produced,
                self._start,
                self._line,
                self.format,
                self._where,
                _linked(self._ids),
            )
            self._sent += self._produced
            if self._results:
                results, self._results = self._results, []
                yield from results


def _codex_output(value: Any) -> Any:
    """A Codex tool output without its wall-clock time, which differs on every run:
    ``metadata.duration_seconds`` of the JSON form, the ``Wall time:`` line of the text one."""
    if type(value) is dict:
        metadata = value.get("metadata")
        if type(metadata) is dict and "duration_seconds" in metadata:
            metadata = {k: v for k, v in metadata.items() if k != "duration_seconds"}
            return {**value, "metadata": metadata}
        return value
    if type(value) is str and "Wall time:" in value:
        lines = value.splitlines(keepends=True)
        return "".join(line for line in lines if not line.startswith("Wall time:"))
    return value


def _has_calls(message: dict[str, Any]) -> bool:
    if message.get("tool_calls") or message.get("function_call"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and _kind(block) in _ANTHROPIC_CALLS for block in content
    )


def _base_bytes(doc: dict[str, Any]) -> int:
    """Bytes every call of a conversation sends besides its messages: the system prompt,
    instructions and tool definitions, where the document has them."""
    return sum(_text_size(doc[k]) for k in ("system", "instructions", "tools") if k in doc)


def conversation(
    items: list[Any], run: str, path: str, line: int | None, base: int = 0, prefix: str = ""
) -> Iterator[Turn | Result | UserMessage | Problem]:
    """Turns of a whole message or item list."""
    conv = Conversation(run, base)
    for index, element in enumerate(items):
        where = f"{prefix}[{index}]"
        yield from conv.feed(element, _text_size(element), line, where, path)
    yield from conv.flush()


def _response_object(doc: dict[str, Any], run: str, path: str, line: int | None) -> Iterator[Event]:
    """A Responses API response (``output`` items and ``usage``), with its request's
    ``input`` items before it when logged together."""
    conv = Conversation(run, _base_bytes(doc))
    inputs = doc.get("input")
    if isinstance(inputs, str):
        inputs = [{"role": "user", "content": inputs}]
    for name, items in (("input", inputs), ("output", doc.get("output"))):
        if isinstance(items, list):
            for index, element in enumerate(items):
                where = f"{name}[{index}]"
                yield from conv.feed(element, _text_size(element), line, where, path)
        if name == "input":
            yield from conv.flush()
    usage: Usage | None = None
    try:
        usage = parse_usage(doc.get("usage"))
    except UsageError as exc:
        yield Problem(path, line, f"{exc}; tokens estimated", "usage" if line is None else None)
    yield from conv.flush(usage)
    yield RunEnd(run)


# -- Claude Code sessions ---------------------------------------------------------------------

# Line types of a Claude Code session that carry no model call.
_CLAUDE_META: Final = frozenset(
    {"summary", "system", "file-history-snapshot", "queue-operation", "progress", "attachment"}
)


def _is_claude_code(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if kind in ("user", "assistant"):
        return isinstance(obj.get("message"), dict) and (
            "sessionId" in obj or "uuid" in obj or "parentUuid" in obj
        )
    return isinstance(kind, str) and (
        kind in _CLAUDE_META or "sessionId" in obj or "leafUuid" in obj or "messageId" in obj
    )


class _ClaudeSession:
    """One session (or subagent) of a Claude Code file: lines of one API response share
    ``message.id`` and are one turn, whose usage is the largest figure any of them gives
    (the streamed lines repeat it, output growing). The turn is complete when a line of
    another response comes (or the file ends); tool results logged before that (Claude Code
    may run a tool while the response is still being written) wait for it in ``results``."""

    __slots__ = ("calls", "id", "ids", "line", "produced", "results", "sent", "start", "usage")

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

    def flush(self, run: str) -> Iterator[Turn | Result | UserMessage]:
        if self.id is not None:
            yield Turn(
                run,
                self.calls,
                self.usage,
                self.produced,
                self.start,
                self.line,
                "claude-code",
                None,
                _linked(self.ids),
            )
            self.sent += self.produced
            self.id = None
            self.calls = []
            self.ids = []
            self.usage = None
            if self.results:
                results, self.results = self.results, []
                yield from results


def _claude_run(obj: dict[str, Any], default: str) -> str:
    session = obj.get("sessionId")
    run = session if isinstance(session, str) and session else default
    if obj.get("isSidechain") is True:
        agent = obj.get("agentId")
        return f"{run}/agent-{agent}" if isinstance(agent, str) else f"{run}/sidechain"
    return run


def _merge_usage(old: Usage | None, new: Usage | None) -> Usage | None:
    if old is None or new is None:
        return new or old
    return Usage(
        max(old.input, new.input), max(old.output, new.output), max(old.cached, new.cached)
    )


# -- Codex CLI rollouts ----------------------------------------------------------------------

_CODEX_TYPES: Final = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)


# -- the events format -------------------------------------------------------------------------


@dataclass(slots=True)
class _PendingTurn:
    """A turn of the events format still taking calls, and the results given on its lines
    (they follow it once it is complete)."""

    turn: Any
    value: Turn
    results: list[Result] = field(default_factory=list)


# -- files ----------------------------------------------------------------------------------


class Reader:
    """Reads one file (or stdin) into events. ``tick(position)`` is called every
    ``TICK_LINES`` lines with how far into the file (on disk) reading has got; ``results``:
    whether the events format's results are wanted."""

    def __init__(
        self,
        path: str,
        stats: FileStats,
        *,
        stdin: IO[bytes] | None = None,
        tick: Callable[[int], None] | None = None,
        results: bool = True,
    ) -> None:
        self.path = path
        self.stats = stats
        self._stdin = stdin
        self._tick = tick
        self._default_run = path
        self._document_name = path.removesuffix(".gz").endswith(".json")
        self._conv: Conversation | None = None
        self._claude: dict[str, _ClaudeSession] = {}
        self._pending: dict[str, _PendingTurn] = {}
        # Whether to read the events format's results (skipped when no one wants them: the
        # hot path of big fleet logs); the other formats' results are read regardless.
        self._results = results

    # -- opening ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Event]:
        try:
            raw: IO[bytes] = self._stdin if self._stdin is not None else open(self.path, "rb")  # noqa: SIM115
        except OSError as exc:
            self.stats.unreadable = True
            self.stats.problems += 1
            yield self._problem(None, f"cannot open: {exc.strerror or exc}")
            return
        try:
            if self._stdin is None:
                try:
                    self.stats.size = os.fstat(raw.fileno()).st_size
                except OSError:
                    self.stats.size = None
            yield from self._read(raw)
        finally:
            if self._stdin is None:
                raw.close()

    def _read(self, raw: IO[bytes]) -> Iterator[Event]:
        if not hasattr(raw, "peek"):
            raw = cast(IO[bytes], io.BufferedReader(cast(io.RawIOBase, raw)))
        compressed = _peek(raw, 2) == GZIP_MAGIC
        stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if compressed else raw
        stats = self.stats

        def position() -> int:
            return _tell(raw) if compressed else stats.position

        tick = self._tick
        lineno = 0
        try:
            lines = bounded_lines(stream)
            first, lineno = self._next_nonblank(lines, lineno)
            if first is None:
                return
            if isinstance(first, TooLong):
                # Too long for a JSONL line or a JSON document: the file cannot be read.
                stats.problems += 1
                yield self._problem(lineno, first.problem("file skipped"))
                return
            if lineno == 1 and first.startswith(b"\xef\xbb\xbf"):
                first = first[3:]
            value, error = _parse_line(first)
            if error is not None:
                # Either a JSONL file with a bad first line, or one JSON document (which a
                # line holding only an opening bracket always is).
                start = lineno
                second, lineno = self._next_nonblank(lines, lineno)
                if isinstance(second, TooLong):
                    # No document has a line that long: two bad lines of a JSONL file.
                    stats.problems += 2
                    yield self._problem(start, error)
                    yield self._problem(lineno, second.problem())
                    value = first = None
                else:
                    second_value, second_error = _parse_line(second) if second else (None, "")
                    if (
                        first.strip() in (b"[", b"{")
                        or second is None
                        or second_error is not None
                        or not isinstance(second_value, (dict, list))
                    ):
                        rest, lineno = self._rest(first + (second or b""), lines, lineno)
                        if rest is None:
                            stats.problems += 1
                            yield self._problem(
                                start, f"JSON document over {_limit()}; file skipped"
                            )
                            return
                        yield from self._document(rest, start)
                        return
                    stats.problems += 1
                    yield self._problem(start, error)
                    value, first = second_value, second
            if first is not None:
                yield from self._guarded(value, lineno, len(first))
            for line in lines:
                lineno += 1
                stats.position += len(line)
                if tick is not None and not lineno % TICK_LINES:
                    tick(position())
                if isinstance(line, TooLong):
                    stats.position += line.size
                    stats.problems += 1
                    yield self._problem(lineno, line.problem())
                    continue
                value, error = _parse_line(line)
                if error is not None:
                    if error:
                        stats.problems += 1
                        yield self._problem(lineno, error)
                elif type(value) is dict and "tool" in value:
                    yield from self._event(value, lineno, len(line), None)
                else:
                    yield from self._guarded(value, lineno, len(line))
        except (OSError, EOFError, zlib.error) as exc:
            stats.unreadable = True
            stats.problems += 1
            what = "corrupt or truncated" if compressed else "read error"
            yield self._problem(lineno + 1, f"{what}; not read past line {lineno}: {exc}")
        finally:
            stats.lines = lineno
            if tick is not None:
                tick(position())
        yield from self._finish()

    def _guarded(self, value: Any, line: int, size: int) -> Iterator[Event]:
        """``_line_value``, with anything a line's shape can still break reported as a
        problem with that line, never raised: bad data must not end the replay."""
        try:
            yield from self._line_value(value, line, size)
        except (TypeError, ValueError, AttributeError, LookupError, RecursionError) as exc:
            self.stats.problems += 1
            yield self._problem(line, f"unexpected shape ({type(exc).__name__}: {exc}); skipped")

    def _next_nonblank(self, lines: Iterator[bytes], lineno: int) -> tuple[bytes | None, int]:
        for line in lines:
            lineno += 1
            self.stats.position += len(line)
            if isinstance(line, TooLong):
                self.stats.position += line.size
                return line, lineno
            if line.strip():
                return line, lineno
        return None, lineno

    def _rest(self, start: bytes, lines: Iterator[bytes], lineno: int) -> tuple[bytes | None, int]:
        """A whole JSON document: ``start`` and the rest of the lines, or ``None`` if it is
        longer than ``MAX_LINE_BYTES``; and the number of the last line read."""
        parts, size = [start], len(start)
        for line in lines:
            lineno += line.count(b"\n")
            size += len(line) + (line.size if isinstance(line, TooLong) else 0)
            self.stats.position += len(line)
            if size > MAX_LINE_BYTES or isinstance(line, TooLong):
                return None, lineno
            parts.append(line)
        return b"".join(parts), lineno

    def _problem(self, line: int | None, message: str, where: str | None = None) -> Problem:
        return Problem(self.path, line, message, where)

    # -- whole JSON documents ----------------------------------------------------------------

    def _document(self, data: bytes, start: int) -> Iterator[Event]:
        """A whole JSON document, whose first line is line ``start`` of the file."""
        try:
            text = data.decode("utf-8-sig")
            doc = json.loads(text)
        except UnicodeDecodeError as exc:
            self.stats.problems += 1
            yield self._problem(None, f"not UTF-8 text (byte {exc.start}); file skipped")
            return
        except json.JSONDecodeError as exc:
            self.stats.problems += 1
            line = exc.lineno + start - 1
            yield self._problem(line, f"not JSON or JSONL ({exc.msg}); file skipped")
            return
        except RecursionError:
            self.stats.problems += 1
            yield self._problem(None, "JSON nested too deeply; file skipped")
            return
        try:
            yield from self._document_value(doc)
        except (TypeError, ValueError, AttributeError, LookupError, RecursionError) as exc:
            self.stats.problems += 1
            what = f"{type(exc).__name__}: {exc}"
            yield self._problem(None, f"unexpected shape ({what}); rest of file skipped")

    def _document_value(
        self, doc: Any, run: str | None = None, line: int | None = None
    ) -> Iterator[Event]:
        """A whole JSON document, or a JSONL line holding a list (``line``): events, Claude
        Code lines, conversations, or one conversation. ``run`` names what has no name."""
        run = self._default_run if run is None else run
        if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
            first = doc[0]
            if "tool" in first or ("run" in first and ("usage" in first or "event" in first)):
                for index, item in enumerate(doc):
                    yield from self._line_value(item, line, _text_size(item), f"[{index}]")
                yield from self._finish()
                return
            if isinstance(first.get("messages"), list) or (
                isinstance(first.get("output"), list) and "role" not in first
            ):
                for index, item in enumerate(doc):
                    name = _run_name(item, f"{run}[{index}]")
                    yield from self._conversation_value(item, name, line, f"[{index}].")
                return
            if _is_claude_code(first):
                for index, item in enumerate(doc):
                    yield from self._line_value(item, line, _text_size(item), f"[{index}]")
                yield from self._finish()
                return
        if isinstance(doc, list) and doc and all(isinstance(x, list) for x in doc):
            for index, item in enumerate(doc):  # a list of message lists
                yield from self._conversation_value(item, f"{run}[{index}]", line, f"[{index}]")
            return
        if isinstance(doc, (list, dict)):
            name = _run_name(doc, run) if isinstance(doc, dict) else run
            yield from self._conversation_value(doc, name, line, "")
            return
        self.stats.problems += 1
        yield self._problem(line, f"not a trace: a JSON {type(doc).__name__}; skipped")

    def _conversation_value(
        self, value: Any, run: str, line: int | None, prefix: str
    ) -> Iterator[Event]:
        """A whole conversation: a list, ``{"messages": [...]}`` or a response object."""
        if isinstance(value, list):
            self.stats.formats.add("messages")
            fmt = yield from self._counted(conversation(value, run, self.path, line, 0, prefix))
            self._note_format(fmt)
            yield RunEnd(run)
            return
        if isinstance(value, dict):
            messages = value.get("messages")
            if isinstance(messages, list):
                base = _base_bytes(value)
                turns = conversation(messages, run, self.path, line, base, f"{prefix}messages")
                fmt = yield from self._counted(turns)
                self._note_format(fmt)
                yield RunEnd(run)
                return
            if isinstance(value.get("output"), list):
                self._note_format("openai-responses")
                yield from self._counted(_response_object(value, run, self.path, line))
                return
            if "tool" in value:
                yield from self._line_value(value, line, _text_size(value), prefix or None)
                yield from self._finish()
                return
        self.stats.problems += 1
        keys = ", ".join(sorted(value)[:6]) if isinstance(value, dict) else type(value).__name__
        yield self._problem(
            line, f"not a recognised trace (has: {keys}); skipped", prefix.rstrip(".") or None
        )

    def _counted(self, events: Iterable[Event]) -> Generator[Event, None, str]:
        """Passes events on, counting problems; returns the format of the turns seen."""
        fmt = "messages"
        for event in events:
            if isinstance(event, Problem):
                self.stats.problems += 1
            elif isinstance(event, Turn) and event.format != "messages":
                fmt = event.format
            yield event
        return fmt

    def _note_format(self, fmt: str) -> None:
        self.stats.formats.discard("messages")
        self.stats.formats.add(fmt)

    # -- JSONL lines ----------------------------------------------------------------------------

    def _line_value(
        self, value: Any, line: int | None, size: int, where: str | None = None
    ) -> Iterator[Event]:
        if type(value) is dict:
            if "tool" in value:
                yield from self._event(value, line, size, where)
            elif _is_claude_code(value):
                yield from self._claude_line(value, line, size)
            elif _kind(value) in _CODEX_TYPES and "payload" in value:
                yield from self._codex_line(value, line, size)
            elif isinstance(value.get("messages"), list) or (
                isinstance(value.get("output"), list) and "role" not in value
            ):
                name = _run_name(value, self._line_run(line))
                yield from self._conversation_value(value, name, line, "")
            elif (
                "role" in value
                or _kind(value) in _RESPONSES_TYPES
                or (value.get("type") == "message")
            ):
                yield from self._message_line(value, line, size, where)
            elif "run" in value or "run_id" in value or "event" in value or "result_of" in value:
                yield from self._event(value, line, size, where)
            else:
                self.stats.problems += 1
                keys = ", ".join(sorted(map(str, value))[:6])
                yield self._problem(line, f"not a recognised trace line (has: {keys})", where)
        elif isinstance(value, list):
            yield from self._document_value(value, self._line_run(line), line)
        else:
            self.stats.problems += 1
            yield self._problem(line, f"not a trace line: a JSON {type(value).__name__}", where)

    def _line_run(self, line: int | None) -> str:
        """The name of a run that is one whole line: ``file:line``, or the file's name for
        the first line of a ``.json`` file (a document that happens to fit on one line)."""
        if line is None or (line == 1 and self._document_name):
            return self.path
        return f"{self.path}:{line}"

    def _message_line(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterator[Event]:
        """One message or item of the file's single conversation."""
        if self._conv is None:
            self._conv = Conversation(self._default_run)
        for event in self._conv.feed(value, size, line, where, self.path):
            if isinstance(event, Problem):
                self.stats.problems += 1
            yield event

    def _event(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> tuple[Event, ...]:
        """One line of the events format: usually one turn (the hot path of big fleet logs,
        so a plain function returning a tuple rather than a generator)."""
        self.stats.formats.add("events")
        run = value.get("run")
        if run is None:
            run = value.get("run_id", self._default_run)
        if type(run) is not str or not run:
            if isinstance(run, int) and not isinstance(run, bool):
                run = str(run)
            else:
                self.stats.problems += 1
                return (self._problem(line, f"run is {run!r}, not a name; line skipped", where),)
        calls: list[Call] = []
        call_id: str | None = None
        result: Result | None = None
        if "tool" in value:
            name = value["tool"]
            if type(name) is not str or not name:
                self.stats.problems += 1
                return (self._problem(line, f"tool is {name!r}, not a name; line skipped", where),)
            args = value.get("args")
            if args is None:
                args = value.get("arguments", value.get("input"))
            if type(args) is str:
                calls.append((name, args, True))
            else:
                calls.append((name, {} if args is None else args, False))
            if "call_id" in value:
                call_id = _id(value["call_id"])
            if "result" in value and self._results:
                # Linked by the call's own id, or one only this line has.
                call_id = call_id or f"\x00{line}{where}"
                result = Result(run, call_id, result_value(value["result"]), line, where)
        elif "result_of" in value:
            return self._result_line(value, run, line, where)
        usage: Usage | None = None
        problem: tuple[Event, ...] = ()
        raw_usage = value.get("usage")
        if raw_usage is not None:
            try:
                usage = parse_usage(raw_usage)
            except UsageError as exc:
                self.stats.problems += 1
                problem = (self._problem(line, f"{exc}; tokens estimated", where),)
        turn_id = value.get("turn")
        pending = self._pending.get(run) if self._pending else None
        flushed: tuple[Event, ...] = ()
        if pending is not None:
            if turn_id is not None and pending.turn == turn_id:
                merged = pending.value
                if call_id is not None or merged.call_ids is not None:
                    merged_ids = merged.call_ids or [None] * len(merged.calls)
                    merged_ids.extend([call_id] * len(calls))
                    merged.call_ids = merged_ids
                merged.calls.extend(calls)
                merged.produced += size
                if usage is not None:
                    merged.usage = usage
                if result is not None:
                    pending.results.append(result)
                return problem
            del self._pending[run]
            flushed = (pending.value, *pending.results)
        if not calls and usage is None:
            # A budget entry, a note: part of the trace, not a model call.
            self.stats.ignored += 1
            return problem + flushed
        ids: list[str | None] | None = None if call_id is None else [call_id]
        turn = Turn(run, calls, usage, size, None, line, "events", where, ids)
        if turn_id is not None:
            self._pending[run] = _PendingTurn(turn_id, turn, [] if result is None else [result])
            return problem + flushed
        if result is not None:
            return (*problem, *flushed, turn, result)
        if problem or flushed:
            return (*problem, *flushed, turn)
        return (turn,)

    def _result_line(
        self, value: dict[str, Any], run: str, line: int | None, where: str | None
    ) -> tuple[Event, ...]:
        """``{"run", "result_of": <call id>, "result"}``: the result of an earlier call. One
        given while its run's turn is still taking calls waits for the turn."""
        call_id = _id(value["result_of"])
        if call_id is None:
            self.stats.problems += 1
            what = f"result_of is {value['result_of']!r}, not a call id; line skipped"
            return (self._problem(line, what, where),)
        if "result" not in value:
            self.stats.problems += 1
            return (self._problem(line, "result_of without a result; line skipped", where),)
        result = Result(run, call_id, result_value(value["result"]), line, where)
        pending = self._pending.get(run) if self._pending else None
        if pending is not None:
            pending.results.append(result)
            return ()
        return (result,)

    def _claude_line(self, value: dict[str, Any], line: int | None, size: int) -> Iterator[Event]:
        self.stats.formats.add("claude-code")
        kind = value.get("type")
        message = value.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            self.stats.ignored += 1
            return
        run = _claude_run(value, self._default_run)
        session = self._claude.get(run)
        if session is None:
            session = self._claude[run] = _ClaudeSession()
        if kind == "user":
            session.sent += size
            content = message.get("content")
            events: list[Result | UserMessage] = []
            events += _block_results(content, run, line, None)
            # Meta lines are Claude Code's own (command output, caveats), not a person's.
            if not value.get("isMeta") and _has_text(content):
                events.append(UserMessage(run))
            if session.id is not None:
                session.results += events
            else:
                yield from events
            return
        if message.get("model") == "<synthetic>":
            # Written by Claude Code itself (an API error, an interruption): no model call.
            self.stats.ignored += 1
            return
        ids: list[str | None] = []
        try:
            calls = _chat_calls(message, ids)
        except CallError as exc:
            self.stats.problems += 1
            yield self._problem(line, f"{exc}; line skipped")
            return
        usage: Usage | None = None
        try:
            usage = parse_usage(message.get("usage"))
        except UsageError as exc:
            self.stats.problems += 1
            yield self._problem(line, f"{exc}; tokens estimated")
        message_id = message.get("id")
        if not isinstance(message_id, str):
            message_id = f"line {line}"
        if session.id != message_id:
            yield from session.flush(run)
            session.id = message_id
            session.start = session.sent
            session.line = line or 0
            session.produced = 0
        session.calls.extend(calls)
        session.ids.extend(ids)
        session.produced += size
        session.usage = _merge_usage(session.usage, usage)

    def _codex_line(self, value: dict[str, Any], line: int | None, size: int) -> Iterator[Event]:
        """A Codex CLI rollout line: ``response_item`` payloads are Responses items of the
        file's one run (named by ``session_meta``); ``token_count`` events carry the usage of
        the response just logged (``info.last_token_usage``)."""
        self.stats.formats.add("codex")
        kind = value["type"]
        payload = value["payload"]
        if not isinstance(payload, dict):
            self.stats.ignored += 1
            return
        if kind == "response_item":
            if self._conv is None:
                self._conv = Conversation(self._default_run, fmt="codex")
            yield from self._message_line(payload, line, size, None)
            return
        if kind == "session_meta" and self._conv is None:
            session = payload.get("id")
            if isinstance(session, str) and session:
                self._default_run = session
            return
        if kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            if last is not None and self._conv is not None:
                try:
                    usage = parse_usage(last)
                except UsageError as exc:
                    self.stats.problems += 1
                    yield self._problem(line, f"{exc}; tokens estimated")
                    return
                if usage is not None and self._conv.usage(usage):
                    return
            self.stats.ignored += 1
            return
        self.stats.ignored += 1

    def _finish(self) -> Iterator[Event]:
        """End of file: turns still open are complete."""
        if self._conv is not None:
            self._note_format(self._conv.format)
            yield from self._conv.flush()
            self._conv = None
        for run, session in self._claude.items():
            yield from session.flush(run)
        self._claude.clear()
        pending, self._pending = self._pending, {}
        for item in pending.values():
            yield item.value
            yield from item.results


def _parse_line(line: bytes) -> tuple[Any, str | None]:
    """A JSONL line's value, or why it is not one ("" for a blank line, which is skipped)."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start}); line skipped"
    if not text:
        return None, ""
    try:
        value, end = _decode(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno}); line skipped"
    except RecursionError:
        return None, "JSON nested too deeply; line skipped"
    if end != len(text):
        return None, f"not JSON (extra data at column {end + 1}); line skipped"
    return value, None


def _peek(raw: IO[bytes], n: int) -> bytes:
    peek = getattr(raw, "peek", None)
    if peek is not None:
        try:
            return bytes(peek(n)[:n])
        except (OSError, ValueError):
            return b""
    return b""


def _tell(raw: IO[bytes]) -> int:
    try:
        return raw.tell()
    except (OSError, ValueError):
        return 0
