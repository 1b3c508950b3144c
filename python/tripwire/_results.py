"""What the guard makes of a tool's result: one source for both backends (the native guard
calls ``describe_result``), and for ``tripwire replay``.

Harnesses hold results in many shapes: a plain value, JSON text, a chat tool message, an
Anthropic ``tool_result`` block or its content list, an MCP ``CallToolResult``, a LangChain
``ToolMessage``, a Responses ``function_call_output`` item. Each is reduced to what the tool
returned (its *value*: ids, roles and other envelope fields never count) and whether it
failed, and if so whether the failure was transient (worth retrying unchanged).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from tripwire._keys import call_key

# Content blocks whose text is the result.
_TEXT_BLOCKS: Final = frozenset({"text", "input_text", "output_text"})
# First characters of a text that may be JSON worth parsing (``null`` too).
_JSON_STARTS: Final = frozenset({"[", "{", '"', "n"})
# Text results that say they are errors, where no flag says either way (tau-bench's tools
# answer "Error: ..."; Claude Code wraps its own in <tool_use_error>).
_ERROR_TEXT: Final = re.compile(r"\s*(?:error\b|<tool_use_error>)", re.IGNORECASE)
# Failures that are worth retrying unchanged: timeouts, rate limits, 5xx, dropped
# connections, overload. Matched in an error's text only, never in a successful result.
_TRANSIENT_TEXT: Final = re.compile(
    r"\b(?:50[0-4]|429|408)\b|timed?[ -]?out|rate[ _-]?limit|too many requests"
    r"|service unavailable|bad gateway|temporar(?:il)?y unavailable|overloaded"
    r"|connection (?:reset|refused|aborted|error|closed)|econnreset|econnrefused|etimedout"
    r"|try again later",
    re.IGNORECASE,
)
# First characters of a text that may be JSON or an error, so not plain text ("" too: empty).
_NOT_PLAIN_TEXT: Final = frozenset({"", "[", "{", '"', "n", "e", "E", "<"})
# The fields that tell an MCP CallToolResult's dict from other results with a "content".
_MCP_FIELDS: Final = frozenset({"isError", "structuredContent", "is_error", "structured_content"})
# How much of an error's text a message quotes.
ERROR_TEXT_CHARS: Final = 200


def _named(kind: Any, names: frozenset[str]) -> bool:
    """Whether an envelope field (a block's ``"type"``, a message's ``"role"``) is one of
    ``names``: a str with those characters. Anything else (a JSON Schema's ``["string",
    "null"]``, a GraphQL ``{...}``, an object whose ``==`` raises or lies) names nothing:
    nothing a result holds can raise here, and a str subclass is read by its characters,
    never by what its ``__eq__`` or ``__hash__`` says."""
    return isinstance(kind, str) and str.__str__(kind) in names


def _is_text_block(block: Any) -> bool:
    """A content block whose text is the result (``{"type": "text", "text": ...}``)."""
    return type(block) is dict and _named(block.get("type"), _TEXT_BLOCKS)


def _starts_plain(text: str, starts: frozenset[str]) -> bool:
    """Whether a text's first character is none of ``starts`` nor white space: read as it is,
    without copying it to strip it (the common case)."""
    first = text[:1]
    return first not in starts and not first.isspace()


def plain_result(result: Any) -> bool | None:
    """Whether a result is one of the commonest kinds, that no envelope rule applies to, and
    if so whether it is empty; ``None``: the full rules apply. Plain: a list that is no
    content-block list (its first item is no text block), a text that can be neither JSON nor
    an error's ("Error: ...", "<tool_use_error>"). ``observe`` runs once per tool call, and
    this is its one short cut (``describe_result``); the native guard's twin,
    ``plain_result`` in ``rust/py_guard.rs``, tests the same and is kept equal by the
    backends' state machine."""
    kind = type(result)
    if kind is list:
        return None if result and _is_text_block(result[0]) else not result
    if kind is str and _starts_plain(result, _NOT_PLAIN_TEXT):
        return False
    return None


_TOOL_RESULT: Final = frozenset({"tool_result"})
_FUNCTION_CALL_OUTPUT: Final = frozenset({"function_call_output"})
_TOOL: Final = frozenset({"tool"})
_ERROR: Final = frozenset({"error"})


def content_value(raw: Any) -> Any:
    """A result's content as the tool returned it, as far as the harness tells: a list of
    content blocks that are all text is their text, joined by newlines; a text that is a JSON
    array, object, string or ``null`` is that value (tools' results are often JSON text:
    ``"[]"`` is an empty list). Anything else is as it is."""
    if type(raw) is list and raw:
        texts = []
        for block in raw:
            if not _is_text_block(block):
                return raw
            text = block.get("text")
            if type(text) is not str:
                return raw
            texts.append(text)
        raw = "\n".join(texts)
    if type(raw) is str:
        if _starts_plain(raw, _JSON_STARTS):
            return raw  # plain text
        text = raw.strip()
        if text[:1] in ("[", "{", '"') or text == "null":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                pass
    return raw


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def unwrap(result: Any) -> tuple[Any, bool | None]:
    """The value inside a harness's result envelope, and its error flag if it has one."""
    if result is None or isinstance(result, (str, int, float, bool)):
        return content_value(result), None
    if isinstance(result, (bytes, bytearray)):
        return content_value(bytes(result).decode("utf-8", "replace")), None
    if not isinstance(result, (dict, list, tuple)):
        dump = getattr(result, "model_dump", None)
        if not callable(dump):
            return _safe_str(result), None
        try:
            result = _dumped(dump)
        except MemoryError:
            raise  # the process is out of memory: not something the result said
        except Exception:
            # A broken SDK object must not stop the harness: compared by its text.
            return _safe_str(result), None
    if type(result) is not dict:
        return content_value(result), None
    kind = result.get("type")
    if _named(kind, _TOOL_RESULT) or "tool_use_id" in result:
        # Anthropic / Claude Code tool_result block.
        return content_value(result.get("content")), _flag(result.get("is_error"))
    if _named(kind, _FUNCTION_CALL_OUTPUT):
        return content_value(result.get("output")), None
    if _named(result.get("role"), _TOOL) or _named(kind, _TOOL) or "tool_call_id" in result:
        # Chat tool message, or a LangChain ToolMessage (its ids never count).
        return content_value(result.get("content")), _named(result.get("status"), _ERROR) or None
    if "content" in result and not _MCP_FIELDS.isdisjoint(result):
        # MCP CallToolResult: the structured content is the answer where there is one. Its
        # dict form has the wire's names, or the Python SDK's (``model_dump()`` of mcp 2).
        structured = result.get("structuredContent", result.get("structured_content"))
        if type(structured) is dict and len(structured) == 1 and "result" in structured:
            # How the Python SDK's servers send a tool's return value that is not an object
            # (a list, a str): wrapped in {"result": ...}. What is compared is the value.
            structured = structured["result"]
        value = structured if structured is not None else content_value(result.get("content"))
        return value, _flag(result.get("isError", result.get("is_error")))
    return result, None


def _dumped(dump: Callable[..., Any]) -> Any:
    """An SDK object's JSON form with the wire's field names (MCP's ``isError`` and
    ``structuredContent``: a dict form of the same result has them), or, from an object whose
    ``model_dump`` is not pydantic's and takes no ``by_alias``, its plain JSON form."""
    try:
        return dump(mode="json", by_alias=True)
    except TypeError:
        return dump(mode="json")


def _error_text(value: Any) -> str:
    # str.split, not value.split: a str subclass's own could raise or lie.
    text = value if isinstance(value, str) else _safe_repr(value)
    text = " ".join(str.split(text))
    if len(text) > ERROR_TEXT_CHARS:
        text = text[: ERROR_TEXT_CHARS - 1] + "…"
    return text


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except MemoryError:
        raise
    except Exception:
        return f"<{type(value).__name__}>"


def _safe_str(value: Any, broken: str | None = None) -> str:
    """``str(value)``, or (where that raises) ``broken``, by default the type's name."""
    try:
        return str(value)
    except MemoryError:
        raise
    except Exception:
        return f"<{type(value).__name__}>" if broken is None else broken


# ``call_key`` of either backend (which also takes ``volatile_keys=``).
KeyFunction = Callable[..., str]


def digest(
    name: str,
    value: Any,
    key: KeyFunction = call_key,
    volatile_keys: frozenset[str] | None = None,
) -> str | None:
    """The key of a value, or ``None`` where it cannot be keyed (nested too deep, an int too
    long to print, a type JSON cannot write, an object whose methods raise): the guard then
    knows only that the call ran, and says nothing about whether its result changed.
    ``key``: the backend's ``call_key`` (the native guard passes its own; the keys are
    equal, the native one is faster); ``volatile_keys``: the dict keys dropped at any depth
    (``None``: the default ones). Any ``Exception`` of the result's own is caught (a result
    is never raised); ``KeyboardInterrupt`` and the like go through, and so does
    ``MemoryError``: a process out of memory is not a result that cannot be keyed, and
    reading it as "result unknown" would hide it."""
    try:
        if volatile_keys is None:
            return key(name, value)
        return key(name, value, volatile_keys=volatile_keys)
    except MemoryError:
        raise
    except Exception:
        return None


def _is_empty(value: Any) -> bool:
    # The base types' own methods: a subclass's ``__len__`` or ``split`` could raise or lie.
    if value is None:
        return True
    if isinstance(value, str):
        return not str.split(value)
    if isinstance(value, list):
        return list.__len__(value) == 0
    if isinstance(value, dict):
        return dict.__len__(value) == 0
    if isinstance(value, tuple):
        return tuple.__len__(value) == 0
    return False


Description = tuple[str | None, bool, bool, bool, str | None]
# What a result that cannot be read at all says: nothing (as if it had not been observed).
_UNKNOWN: Final[Description] = (None, False, False, False, None)


def describe_result(
    result: Any, error: Any, transient: bool | None, policy: Any, key: KeyFunction = call_key
) -> Description:
    """``(digest, empty, failed, transient, error_text)`` of one result, as ``observe`` was
    told it. ``digest`` is ``None`` where the result cannot be keyed; equal digests mean equal
    results (a failure's digest is its error text's, so it never equals a success's). A
    policy's ``volatile_result_keys`` are dropped from the result at any depth before it is
    digested, as the default volatile keys always are.

    Never raises an ``Exception`` (a result is never raised): a result whose own methods
    raise while it is read (a ``__len__``, an ``__eq__``, a ``__getattr__``) is taken as
    unknown. ``KeyboardInterrupt``, ``SystemExit`` and ``MemoryError`` go through: running
    out of memory is never read as "result unknown"."""
    try:
        return _describe(result, error, transient, policy, key)
    except MemoryError:
        raise
    except Exception:
        return _UNKNOWN


def _describe(
    result: Any, error: Any, transient: bool | None, policy: Any, key: KeyFunction
) -> Description:
    volatile = None if policy is None else policy.result_volatile
    if policy is not None and policy.kind == "shell":
        return _shell_outcome(result, error, transient, key, volatile)
    if error is None and (
        policy is None or not (policy.empty_answers or policy.empty_digests or volatile)
    ):
        empty = plain_result(result)
        if empty is not None:
            found = digest("result", result, key)
            if found is None:
                return _UNKNOWN
            return found, empty, False, False, None
    value, flagged = unwrap(result)
    if error is None or error is True:
        failed = flagged if flagged is not None else error is True
        if error is None and flagged is None:
            failed = isinstance(value, str) and _ERROR_TEXT.match(value) is not None
        text = _error_text(value) if failed else None
    elif error is False:
        failed, text = False, None
    else:
        failed = True
        if isinstance(error, BaseException):
            message = _safe_str(error, "")
            text = _error_text(
                f"{type(error).__name__}: {message}" if message else type(error).__name__
            )
            if transient is None and isinstance(error, (TimeoutError, ConnectionError)):
                transient = True
        else:
            text = _error_text(error if isinstance(error, str) else _safe_repr(error))
    if not failed:
        found = digest("result", value, key, volatile)
        empty = found is not None and _policy_empty(value, found, policy)
        return found, empty, False, False, None
    assert text is not None
    if transient is None:
        transient = _TRANSIENT_TEXT.search(text) is not None
    return digest("error", text, key), False, True, bool(transient), text


def _shell_outcome(
    result: Any, error: Any, transient: bool | None, key: KeyFunction, volatile: Any
) -> tuple[str | None, bool, bool, bool, str | None]:
    """What a shell's result says (``tripwire._policy``): its output is its answer, whatever
    its exit status or error flag, never empty and never a failure. Only an exception (the
    harness could not run the command at all) is a failure, and a timeout a transient one."""
    if isinstance(error, BaseException):
        return describe_result(result, error, transient, None, key)
    value, _ = unwrap(result)
    if (value is None or value == "") and isinstance(error, str):
        value = error
    return digest("result", value, key, volatile), False, False, False, None


def _policy_empty(value: Any, key: str, policy: Any) -> bool:
    if policy is not None:
        if policy.empty_answers:
            return False
        if key in policy.empty_digests:
            return True
    return _is_empty(value)
