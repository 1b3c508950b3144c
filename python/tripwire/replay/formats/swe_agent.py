"""SWE-agent trajectories (``SWE-agent/SWE-agent``, ``*.traj``): a JSON object with a
``history`` of chat messages and a ``trajectory`` of steps, and ``info`` (``exit_status``,
``model_stats``).

Two kinds are on disk. Function-calling runs (SWE-agent 1.x) have assistant messages with
``tool_calls`` in ``history``, answered by ``role: "tool"`` messages naming their calls in
``tool_call_ids``: read as a chat list. Older runs (0.x, and the EnIGMA demonstrations) have
commands in the text: each ``trajectory[].action`` is one model turn whose command is the
call, and its ``observation`` the result. A command is split as SWE-agent parses it: a first
word that is one of SWE-agent's own commands (``open``, ``edit``, ``search_dir`` ...) is the
tool and the rest of the text (an ``edit``'s body too) its ``args``; anything else is a shell
command, tool ``bash``, the whole text its ``command``. Arguments are kept as text, not
re-tokenised: ``open a.py`` and ``open  a.py`` are the same call once whitespace collapses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from tripwire.replay.formats._base import (
    Call,
    Event,
    Format,
    Result,
    RunEnd,
    Source,
    Turn,
    UserMessage,
    register,
    reward,
    text_size,
)
from tripwire.replay.formats.messages import conversation

NAME: Final = "swe-agent"
# SWE-agent's own commands (its default and EnIGMA tool bundles); the rest run in bash.
COMMANDS: Final = frozenset(
    {
        "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "append",
        "search_dir", "search_file", "find_file", "filemap", "submit", "exit_forfeit",
        "str_replace_editor", "view_image", "decompile", "disassemble", "debug_start",
        "debug_add_breakpoint", "debug_continue", "debug_step", "debug_exec", "debug_stop",
        "connect_start", "connect_sendline", "connect_exec", "connect_stop", "exit_cost",
        "exit_context", "exit_api", "exit_format", "skip",
    }
)  # fmt: skip


def split_command(action: str) -> Call:
    """A command string as a call: ``open a.py`` is ``open`` with ``{"args": "a.py"}``;
    ``python x.py`` is ``bash`` with ``{"command": "python x.py"}``."""
    text = action.strip()
    first, _, rest = text.partition("\n")
    word, _, tail = first.partition(" ")
    if word in COMMANDS:
        args = (tail + ("\n" + rest if rest else "")).strip()
        return (word, {"args": args} if args else {}, False)
    return ("bash", {"command": text}, False)


def _has_tool_calls(history: Any) -> bool:
    return isinstance(history, list) and any(
        isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")
        for m in history
    )


def _is_document(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    steps = value.get("trajectory")
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        return "action" in steps[0]
    return _has_tool_calls(value.get("history"))


def _outcome(value: dict[str, Any]) -> float | None:
    """A resolved flag, where the file has one (SWE-bench evaluations add it to ``info``)."""
    info = value.get("info")
    if isinstance(info, dict):
        for key in ("resolved", "success"):
            if key in info:
                return reward(info[key])
    return None


def read(source: Source, value: Any, run: str, line: int | None, prefix: str) -> Iterator[Event]:
    source.stats.formats.add(NAME)
    history = value.get("history")
    if _has_tool_calls(history):
        for event in conversation(history, run, source.path, line, 0, f"{prefix}history"):
            if type(event) is Turn:
                event.format = NAME
            yield event
        yield RunEnd(run, _outcome(value))
        return
    sent = 0
    if isinstance(history, list):
        # The prompt the first turn was sent: the history up to the first assistant message.
        for message in history:
            if isinstance(message, dict) and message.get("role") == "assistant":
                break
            sent += text_size(message)
        yield UserMessage(run)
    for index, step in enumerate(value["trajectory"]):
        where = f"{prefix}trajectory[{index}]"
        if not isinstance(step, dict) or not isinstance(step.get("action"), str):
            yield source.problem(line, "step without an action; skipped", where)
            continue
        produced = text_size(step.get("response", step["action"]))
        call = split_command(step["action"])
        call_id = f"\x00{index}"
        yield Turn(run, [call], None, produced, sent, line, NAME, where, [call_id])
        observation = step.get("observation")
        if observation is not None:
            yield Result(run, call_id, observation, line, where)
        sent += produced + text_size(observation)
    yield RunEnd(run, _outcome(value))


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "SWE-agent .traj: history with tool_calls, or trajectory[].action commands"),),
        order=60,
        document=_is_document,
        read=read,
        suffixes=(".traj",),
    )
)
