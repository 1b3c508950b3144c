"""Trace readers: every supported format turned into one stream of events.

A **turn** is one model call: one assistant message (chat, Anthropic, Claude Code), one
response's output items (Responses API), one agent step (ATIF, SWE-agent), with the tool calls
it asked for (maybe none: a final answer is a turn too, and costs money), its usage figures
and model if the trace has them, and the byte sizes used to estimate tokens when it does not.
Tool results (``Result``) follow the turn of their call, linked by the call's id; what a tool
returned is taken as the harness would have seen it (``result_value``: content blocks that
are all text become their text, and JSON text becomes its value). A person speaking is a
``UserMessage``; a run read whole ends with ``RunEnd``, carrying its reward where the trace
has one.

One module per format, each registering a ``Format`` (detection, reading, and its line of
``--help``) in ``FORMATS``; ``files`` reads files and hands each record or document to the
format that claims it. A new format is one new module, imported below.

Tool-call ids are not used to identify calls: traces reuse them (some servers number calls
``call_0`` in every turn), and a guard given a repeated id answers with its first verdict,
which would hide the very loops being looked for. They only link results to calls
(``Turn.call_ids``): a result belongs to the latest call of its run with that id.
"""

from __future__ import annotations

# Imported for their registration, in no particular order: ``Format.order`` decides detection.
from tripwire.replay.formats import (  # noqa: F401
    atif,
    claude_code,
    codex,
    copilot,
    events,
    gemini,
    messages,
    openhands,
    openinference,
    otlp,
    swe_agent,
    table,
    tau_bench,
)
from tripwire.replay.formats._base import (
    FORMATS,
    Call,
    Event,
    FileStats,
    Format,
    Problem,
    Result,
    RunEnd,
    TraceShapeError,
    Turn,
    UserMessage,
    location,
    register,
    result_value,
)
from tripwire.replay.formats.files import Reader, trace_suffixes


def help_text(indent: int = 2) -> str:
    """The formats, one per name, as ``tripwire replay --help`` lists them."""
    entries = [entry for fmt in FORMATS for entry in fmt.help]
    width = max(len(name) for name, _ in entries) + 2
    pad = " " * (indent + width)
    lines = []
    for name, text in entries:
        first, *rest = text.split("\n")
        lines.append(" " * indent + name.ljust(width) + first)
        lines += [pad + more for more in rest]
    return "\n".join(lines)


__all__ = (
    "FORMATS",
    "Call",
    "Event",
    "FileStats",
    "Format",
    "Problem",
    "Reader",
    "Result",
    "RunEnd",
    "TraceShapeError",
    "Turn",
    "UserMessage",
    "help_text",
    "location",
    "register",
    "result_value",
    "trace_suffixes",
)
