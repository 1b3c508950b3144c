"""OpenHands event lists and trajectories (``All-Hands-AI/OpenHands``: the event stream a
session saves, ``--save-trajectory`` files, ``tests/runtime/trajs/*.json``; evaluation
``output.jsonl`` rows keep the same events under ``history``).

Events are ``{"id", "source", "action" | "observation", "args" | "content", ...}``. An agent
action made through function calling carries ``tool_call_metadata``: the tool
(``function_name``), and the model response it came from (``model_response``: its ``id``,
``model``, ``usage`` and the ``tool_calls`` with their argument text). Actions of one model
response are one turn, its usage counted once. An action without that metadata (older
sessions) is a call of the tool its ``action`` names (``run``, ``edit``, ``read`` ...), with its
``args`` less the agent's narration (``thought``) and OpenHands' own bookkeeping. An agent
``message`` is a model call without tool calls; a user ``message`` is a person speaking.
Observations answer the action their ``cause`` names; an ``error`` observation is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from tripwire.replay.cost import Usage, UsageError, parse_usage
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
    result_value,
    text_size,
)
from tripwire.replay.formats._base import call_id as _id

NAME: Final = "openhands"
_SOURCES: Final = frozenset({"agent", "user", "environment"})
# Agent actions that are the controller's, not the model's: no model call.
_INTERNAL: Final = frozenset({"change_agent_state", "recall", "system", "null", "condensation"})
# Action arguments that are not the call's: the model's narration, how OpenHands ran it.
_NOT_ARGUMENTS: Final = frozenset(
    {
        "thought",
        "impl_source",
        "translated_ipython_code",
        "confirmation_state",
        "security_risk",
        "blocking",
        "hidden",
        "is_confirmed",
        "wait_for_response",
        "image_urls",
    }
)


def is_event(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    # A source that is not text (a list, an object) names no source, and cannot be hashed.
    origin = value.get("source")
    return (
        type(origin) is str and origin in _SOURCES and ("action" in value or "observation" in value)
    )


def _is_document(value: Any) -> bool:
    """An event list (its first element an event), or a row holding one."""
    if isinstance(value, list):
        return bool(value) and is_event(value[0])
    if isinstance(value, dict):
        for name in ("history", "trajectory"):
            events = value.get(name)
            if isinstance(events, list) and events and is_event(events[0]):
                return True
    return False


def _arguments(event: dict[str, Any], metadata: dict[str, Any]) -> Any:
    """The call's arguments: the text the model sent, found in the response by call id; else
    the action's own ``args``, less what is not the model's call."""
    wanted = metadata.get("tool_call_id")
    response = metadata.get("model_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict) and call.get("id") == wanted:
                function = call.get("function")
                if isinstance(function, dict) and "arguments" in function:
                    return function["arguments"]
    args = event.get("args")
    if not isinstance(args, dict):
        return {}
    return {k: v for k, v in args.items() if k not in _NOT_ARGUMENTS}


def read(source: Source, value: Any, run: str, line: int | None, prefix: str) -> Iterator[Event]:
    source.stats.formats.add(NAME)
    events = value
    if isinstance(value, dict):
        name = "history" if isinstance(value.get("history"), list) else "trajectory"
        events = value[name]
        prefix = f"{prefix}{name}"
        instance = value.get("instance_id")
        if isinstance(instance, str) and instance:
            run = instance
    sent = 0
    turn: Turn | None = None
    response_id: object = None
    # Results of the open turn's calls, which follow it once it is complete (a response's
    # later actions come after the first one's observation).
    waiting: list[Event] = []
    for index, event in enumerate(events):
        where = f"{prefix}[{index}]"
        if not isinstance(event, dict):
            yield source.problem(line, f"not an event: {type(event).__name__}", where)
            continue
        size = text_size(event)
        if "observation" in event:
            sent += size
            cause = _id(event.get("cause"))
            if cause is not None:
                error = True if event.get("observation") == "error" else None
                content = event.get("content", event.get("message"))
                result = Result(run, cause, result_value(content), line, where, error)
                if turn is not None:
                    waiting.append(result)
                else:
                    yield result
            continue
        action = event.get("action")
        origin = event.get("source")
        if origin == "user" and action == "message":
            if turn is not None:
                yield turn
                yield from waiting
                turn, waiting = None, []
            sent += size
            yield UserMessage(run)
            continue
        if origin != "agent" or not isinstance(action, str) or action in _INTERNAL:
            sent += size
            continue
        metadata = event.get("tool_call_metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        response = metadata.get("model_response")
        response = response if isinstance(response, dict) else {}
        this_response = response.get("id")
        if turn is None or this_response is None or this_response != response_id:
            if turn is not None:
                yield turn
                yield from waiting
                waiting = []
            usage: Usage | None = None
            try:
                usage = parse_usage(response.get("usage"))
            except UsageError as exc:
                yield source.problem(line, f"{exc}; tokens estimated", where)
            model = response.get("model")
            turn = Turn(
                run, [], usage, 0, sent, line, NAME, where, [],
                model if isinstance(model, str) else None,
            )  # fmt: skip
            response_id = this_response
        turn.produced += size
        sent += size
        if action == "message" and not metadata:
            continue  # the model answering in words: a model call without tool calls
        tool = metadata.get("function_name")
        call: Call
        arguments = _arguments(event, metadata)
        name = tool if isinstance(tool, str) and tool else action
        call = (name, arguments, True) if isinstance(arguments, str) else (name, arguments, False)
        turn.calls.append(call)
        assert turn.call_ids is not None
        turn.call_ids.append(_id(event.get("id")))
    if turn is not None:
        yield turn
        yield from waiting
    yield RunEnd(run)


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "OpenHands event lists and trajectories (action/observation events)"),),
        order=50,
        document=_is_document,
        read=read,
    )
)
