"""ATIF trajectories (Agent Trajectory Interchange Format, harbor's RFC 0001, v1.0-v1.5):
``{"schema_version": "ATIF-v1.4", "session_id", "agent": {"model_name"}, "steps": [...]}``.
An agent step is one model call: its ``tool_calls[]`` (``tool_call_id``, ``function_name``,
``arguments``, an object), its ``metrics`` (``prompt_tokens`` including ``cached_tokens``,
``completion_tokens``; cache writes, where given, in ``metrics.extra``) and its
``observation.results[]`` (``source_call_id``, ``content``), the results of its calls. A user
step is a person speaking."""

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
    unexpected,
)
from tripwire.replay.formats._base import call_id as _id
from tripwire.replay.formats.messages import argument_call

NAME: Final = "atif"


def _is_document(value: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("steps"), list):
        return False
    version = value.get("schema_version")
    if isinstance(version, str) and version.upper().startswith("ATIF"):
        return True
    steps = value["steps"]
    return bool(steps) and isinstance(steps[0], dict) and "step_id" in steps[0]


def _usage(metrics: Any) -> dict[str, Any] | None:
    """ATIF metrics as a usage object: its cache writes are in ``extra``."""
    if not isinstance(metrics, dict):
        return None
    usage = {k: metrics[k] for k in ("prompt_tokens", "completion_tokens") if k in metrics}
    if not usage:
        return None
    if "cached_tokens" in metrics:
        usage["cached_tokens"] = metrics["cached_tokens"]
    extra = metrics.get("extra")
    if isinstance(extra, dict) and "cache_creation_input_tokens" in extra:
        usage["cache_creation_input_tokens"] = extra["cache_creation_input_tokens"]
    return usage


def read(source: Source, value: Any, run: str, line: int | None, prefix: str) -> Iterator[Event]:
    source.stats.formats.add(NAME)
    session = value.get("session_id")
    if isinstance(session, str) and session:
        run = session
    agent = value.get("agent")
    default_model = agent.get("model_name") if isinstance(agent, dict) else None
    sent = 0
    for index, step in enumerate(value["steps"]):
        where = f"{prefix}steps[{index}]"
        if not isinstance(step, dict):
            yield source.problem(line, f"not a step: {type(step).__name__}", where)
            continue
        origin = step.get("source")
        size = text_size(step.get("message")) + text_size(step.get("tool_calls"))
        if origin != "agent":
            if origin == "user":
                yield UserMessage(run)
            sent += size
            continue
        calls: list[Call] = []
        ids: list[str | None] = []
        # Absent (or empty, as some writers put it): a step without calls.
        logged = step.get("tool_calls") or []
        if type(logged) is not list:
            # The step is still a model call; only its calls cannot be read.
            shape = unexpected("tool_calls", logged, "a list")
            yield source.problem(line, f"{shape}; the step's calls skipped", where)
            logged = []
        for number, item in enumerate(logged):
            name = item.get("function_name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                yield source.problem(line, f"tool_calls[{number}] has no function_name", where)
                continue
            calls.append(argument_call(name, item.get("arguments")))
            ids.append(_id(item.get("tool_call_id")))
        usage: Usage | None = None
        try:
            usage = parse_usage(_usage(step.get("metrics")))
        except UsageError as exc:
            yield source.problem(line, f"{exc}; tokens estimated", where)
        model = step.get("model_name", default_model)
        yield Turn(
            run, calls, usage, size, sent, line, NAME, where, ids,
            model if isinstance(model, str) else None,
        )  # fmt: skip
        sent += size
        observation = step.get("observation")
        results = observation.get("results") if isinstance(observation, dict) else None
        for result in results if isinstance(results, list) else ():
            if not isinstance(result, dict):
                continue
            source_call = _id(result.get("source_call_id"))
            if source_call is not None:
                content = result_value(result.get("content"))
                yield Result(run, source_call, content, line, where)
            sent += text_size(result.get("content"))
    yield RunEnd(run)


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "ATIF trajectories: steps[].tool_calls[]{function_name, arguments}"),),
        order=45,
        document=_is_document,
        read=read,
    )
)
