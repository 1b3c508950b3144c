"""Message lists: OpenAI chat (``tool_calls`` with string ``arguments``; legacy
``function_call``; custom tools' free-text ``input``), Anthropic (``tool_use`` blocks, also
``server_tool_use`` and ``mcp_tool_use``, with an ``input`` object) and OpenAI Responses items
(``function_call``, ``mcp_call``, ``custom_tool_call``, ``local_shell_call`` and
``computer_call``, whose ``action`` is keyed as tools ``local_shell`` and ``computer``;
consecutive output items are one response). One reader for the three, because one list may
mix them (a Responses input holds chat messages) and the other formats build on it (tau-bench
and SWE-agent histories are chat lists, Codex rollouts Responses items).

A message list may be a whole JSON file (a list, or an object with ``messages``, or a list of
such objects), one JSONL line per conversation, or one JSONL line per message or item (the
file is then one run). A response object (``output`` + ``usage``, optionally ``input``) is a
run too. Usage on an assistant message (``"usage"``, as many loggers store it next to the
message) is used when present.

Results: chat ``role: "tool"`` messages (``tool_call_id``; SWE-agent's ``tool_call_ids``),
Responses ``*_output`` items (``call_id``; an ``mcp_call`` carries its own ``output``), and
``tool_result`` blocks (``tool_use_id``; also the server tools' ``*_tool_result`` blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from tripwire.replay.cost import Usage, UsageError, parse_usage
from tripwire.replay.formats._base import (
    Call,
    Event,
    Format,
    Problem,
    Result,
    RunEnd,
    Source,
    Turn,
    UserMessage,
    register,
    result_value,
)
from tripwire.replay.formats._base import call_id as _id
from tripwire.replay.formats._base import kind as _kind
from tripwire.replay.formats._base import text_size as _text_size


def has_text(content: Any) -> bool:
    """A user message's content holds words of a person (text, not only tool results)."""
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(
            isinstance(block, dict) and block.get("type") in ("text", "input_text")
            for block in content
        )
    return False


def block_results(content: Any, run: str, line: int | None, where: str | None) -> list[Result]:
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


def chat_calls(message: dict[str, Any], ids: list[str | None]) -> list[Call]:
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
            calls.append(argument_call(function["name"], function.get("arguments")))
            ids.append(_id(item.get("id")))
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        if not isinstance(legacy.get("name"), str):
            raise CallError("function_call has no name")
        calls.append(argument_call(legacy["name"], legacy.get("arguments")))
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


def linked(ids: list[str | None]) -> list[str | None] | None:
    return ids if any(call_id is not None for call_id in ids) else None


def argument_call(name: str, arguments: Any) -> Call:
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
        "_output",
        "_produced",
        "_results",
        "_sent",
        "_start",
        "_usage",
        "_where",
        "model",
        "run",
    )

    def __init__(
        self,
        run: str,
        base_bytes: int = 0,
        fmt: str | None = None,
        output: Callable[[Any], Any] | None = None,
        model: str | None = None,
    ) -> None:
        self.run = run
        # The model answering, unless a message names its own.
        self.model = model
        # What becomes of a ``*_output`` item's value (Codex drops wall-clock times).
        self._output = output
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
                call = argument_call(name, element.get(_RESPONSES_CALLS[kind]))
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
                calls = chat_calls(element, ids)
            except CallError as exc:
                yield Problem(path, line, f"{exc}; message skipped", where)
                self._sent += size
                return
            try:
                usage = parse_usage(element.get("usage"))
            except UsageError as exc:
                yield Problem(path, line, f"{exc}; tokens estimated", where)
            fmt = self.format
            model = element.get("model")
            if type(model) is not str:
                model = self.model
            ids_ = linked(ids)
            yield Turn(self.run, calls, usage, size, self._sent, line, fmt, where, ids_, model)
            self._sent += size
            # Server tools (web search, code execution) answer within the same message.
            yield from block_results(element.get("content"), self.run, line, where)
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
                if call_id is None:
                    # SWE-agent's history names the calls an observation answers in a list.
                    answered = element.get("tool_call_ids")
                    if type(answered) is list and answered:
                        call_id = _id(answered[0])
                if call_id is not None:
                    value = result_value(element.get("content"))
                    yield Result(self.run, call_id, value, line, where)
            else:
                content = element.get("content")
                yield from block_results(content, self.run, line, where)
                if role == "user" and has_text(content):
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
        if self._output is not None:
            value = self._output(value)
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
                linked(self._ids),
                self.model,
            )
            self._sent += self._produced
            if self._results:
                results, self._results = self._results, []
                yield from results


def _has_calls(message: dict[str, Any]) -> bool:
    if message.get("tool_calls") or message.get("function_call"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and _kind(block) in _ANTHROPIC_CALLS for block in content
    )


def base_bytes(doc: dict[str, Any]) -> int:
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


def response_object(doc: dict[str, Any], run: str, path: str, line: int | None) -> Iterator[Event]:
    """A Responses API response (``output`` items and ``usage``), with its request's
    ``input`` items before it when logged together."""
    conv = Conversation(run, base_bytes(doc))
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


# -- the format ----------------------------------------------------------------------------------


def _is_record(value: dict[str, Any]) -> bool:
    """One message or item of a file that is one conversation, a line each."""
    return "role" in value or _kind(value) in _RESPONSES_TYPES or value.get("type") == "message"


def _is_document(value: Any) -> bool:
    """A whole conversation: a message list, ``{"messages": [...]}`` or a response object."""
    return isinstance(value, list) or is_conversation(value)


def is_conversation(value: Any) -> bool:
    """``{"messages": [...]}`` or a response object."""
    return isinstance(value, dict) and (
        isinstance(value.get("messages"), list)
        or (isinstance(value.get("output"), list) and "role" not in value)
    )


def read(source: Source, value: Any, run: str, line: int | None, prefix: str) -> Iterator[Event]:
    """A whole conversation, one run."""
    path = source.path
    if isinstance(value, list):
        yield from conversation(value, run, path, line, 0, prefix)
        yield RunEnd(run)
        return
    messages = value.get("messages")
    if isinstance(messages, list):
        base = base_bytes(value)
        where = f"{prefix}messages"
        model = value.get("model")
        conv = Conversation(run, base, model=model if isinstance(model, str) else None)
        for index, element in enumerate(messages):
            yield from conv.feed(element, _text_size(element), line, f"{where}[{index}]", path)
        yield from conv.flush()
        yield RunEnd(run)
        return
    yield from response_object(value, run, path, line)


class _Lines:
    """A file that is one conversation, a message or item a line."""

    __slots__ = ("_conv", "_source")

    def __init__(self, source: Source) -> None:
        self._source = source
        self._conv: Conversation | None = None

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterable[Event]:
        if self._conv is None:
            self._conv = Conversation(self._source.default_run)
        return self._conv.feed(value, size, line, where, self._source.path)

    def finish(self) -> Iterable[Event]:
        if self._conv is None:
            return ()
        conv, self._conv = self._conv, None
        return conv.flush()


FORMAT = register(
    Format(
        name="messages",
        help=(
            ("openai-chat", "message lists; assistant tool_calls with string arguments"),
            ("openai-responses", "item lists; function_call items; response objects"),
            ("anthropic", "message lists; assistant tool_use blocks"),
        ),
        # Last: a list of anything is a message list to this reader, and a record with a
        # ``role`` could be many things the specific formats claim first.
        order=100,
        is_record=_is_record,
        lines=_Lines,
        document=_is_document,
        read=read,
    )
)
