"""Replays real public agent traces through the guard, three ways, and says where it would
have got in the way of healthy work and whether it answers the real loops (issue 16).

    PYTHONPATH=python TRIPWIRE_IMPLEMENTATION=reference python3 benches/real_traces.py CORPUS

CORPUS defaults to ``$TRIPWIRE_CORPUS``, else ``../shared/corpus`` beside the repository. It
holds traces nobody here wrote (its ``MANIFEST.md`` names their sources and licences); the
script finds them by shape, not by name: tau-bench results (a JSON list of ``{task_id,
reward, info, traj, trial}``), OpenAI chat message lists (``tool_calls``, or the
``<function=...>`` text calls of SWE-agent's XML tools), SWE-agent ``.traj`` files and the
``nebius`` SWE-agent rows, OpenHands event lists, mini-swe-agent trajectories (text or
``tool_calls``, a dict or a bare message list; labelled by a SWE-bench ``<instance>.report.json``
beside them), AgentInstruct conversations (text actions) and Claude Code session JSONL (labelled
by the harbor trial's ``result.json`` reward). ``--nudges`` lists every nudge and stop in healthy
runs with the calls before it.

Each run becomes model turns (the tool calls of one response, with their results and error
flags as the trace holds them, and the human messages before it) and is replayed through:

* ``hash``: ``Guard(infer=False)``, ``check_turn`` per turn, nothing observed;
* ``progress``: ``Guard()`` (policies inferred), ``check_turn``, ``observe`` of each allowed
  call's result, ``user_message()`` at each human message;
* ``declared``: the same with a small hand-written policy table per source (below).

A run is *healthy* when its trace says it succeeded (tau-bench reward 1, SWE resolved) or,
where the trace has no label, assumed healthy (counted apart). A *real loop* is decided from
the trace alone, not by the guard: one identical call (same name, same arguments as sorted
JSON) failing with the same error 3 or more times, or returning the same result 3 or more
times with no other call between. The tau-bench runs are replayed a second time with
injected transient faults (seeded): some calls first fail once or twice with
``Error: 503 Service Unavailable`` and then return what the trace holds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import tripwire

# -- what a run is -----------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    """One tool call and what came back, as the trace holds it."""

    name: str
    args: Any
    call_id: str | None
    result: Any = None
    has_result: bool = False
    # True/False where the trace flags it (is_error, an error observation); None: it does not
    # say, and the guard reads the result (an "Error: ..." text).
    error: bool | None = None


@dataclass(slots=True)
class Step:
    """One model response with tool calls; ``users``: human messages just before it."""

    calls: list[Call]
    users: int = 0


@dataclass(slots=True)
class Run:
    source: str  # the policy table to use
    harness: str  # the row group
    file: str
    name: str
    success: bool | None  # None: the trace has no label
    steps: list[Step] = field(default_factory=list)


# -- policy tables, per source, for the "declared" configuration ---------------------------

KEEP_WRITE: Final = {"policy": "write", "whitespace": "keep"}

# tau-bench's tools, from tau_bench/envs/*/tools: what changes the booking database is a write.
_TAU_COMMON: Final[dict[str, Any]] = {
    "get_user_details": "read",
    "calculate": "read",
    "think": "volatile",
    "transfer_to_human_agents": "write",
}
POLICIES: Final[dict[str, dict[str, Any]]] = {
    "tau-bench": {
        **_TAU_COMMON,
        # airline
        "get_reservation_details": "read",
        "search_direct_flight": "read",
        "search_onestop_flight": "read",
        "list_all_airports": "read",
        "book_reservation": "write",
        "cancel_reservation": "write",
        "send_certificate": "write",
        "update_reservation_baggages": "write",
        "update_reservation_flights": "write",
        "update_reservation_passengers": "write",
        # retail
        "find_user_id_by_email": "read",
        "find_user_id_by_name_zip": "read",
        "get_order_details": "read",
        "get_product_details": "read",
        "list_all_product_types": "read",
        "cancel_pending_order": "write",
        "exchange_delivered_order_items": "write",
        "modify_pending_order_address": "write",
        "modify_pending_order_items": "write",
        "modify_pending_order_payment": "write",
        "modify_user_address": "write",
        "return_delivered_order_items": "write",
    },
    "claude-code": {
        "Read": "read",
        "Grep": "read",
        "Glob": "read",
        "LS": "read",
        "WebFetch": "read",
        "WebSearch": "read",
        "Edit": KEEP_WRITE,
        "MultiEdit": KEEP_WRITE,
        "Write": KEEP_WRITE,
        "NotebookEdit": KEEP_WRITE,
        "TodoWrite": "volatile",
        # Output of a background shell: asked again while it runs.
        "BashOutput": {"policy": "poll", "max_polls": 30},
    },
    # OpenHands' editor both views and edits (its ``command`` says which): a write, to be safe.
    "openhands": {"str_replace_editor": KEEP_WRITE, "think": "volatile", "finish": "write"},
    # SWE-agent's commands (first word of the action) and its XML-tool variant.
    "swe-agent": {
        "open": "read",
        "goto": "read",
        "find_file": "read",
        "search_file": "read",
        "search_dir": "read",
        "edit": KEEP_WRITE,
        "create": "write",
        "submit": "write",
        "str_replace_editor": KEEP_WRITE,
    },
    "mini-swe-agent": {},
    # AgentInstruct (AgentBench tasks): a web shop, a text household, a database, a KB, a shell.
    "agentinstruct": {
        "search": "read",
        "look": "read",
        "inventory": "read",
        "examine": "read",
        "get_relations": "read",
        "get_neighbors": "read",
        "get_attributes": "read",
        "take": "write",
        "put": "write",
        "answer": "write",
        "Answer": "write",
    },
}


# -- readers ------------------------------------------------------------------------------

_ERROR_PREFIXES: Final = ("Error:", "error:", "ERROR:")
# Prefixes harnesses put before a tool's own text.
_OBSERVATION_PREFIX: Final = re.compile(r"^(OBSERVATION:\s*|EXECUTION RESULT of \[[^\]]*\]:\s*)")


def _text(value: Any) -> str:
    """The text of a result as logged (content blocks joined), for the loop judge."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "content" in value:
            return _text(value["content"])
        return json.dumps(value, sort_keys=True)
    if isinstance(value, list):
        return "\n".join(
            part.get("text", "") if isinstance(part, dict) else _text(part) for part in value
        )
    return "" if value is None else json.dumps(value, sort_keys=True, default=str)


def _parse_args(text: Any) -> Any:
    """Arguments as the harness would pass them: JSON text parsed, anything else as is."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _result_to(steps: list[Step], call_id: str | None, result: Any, error: bool | None) -> None:
    """Links a result to the latest call with that id: providers reuse ids across turns."""
    for step in reversed(steps):
        for call in step.calls:
            if call.call_id == call_id and not call.has_result:
                call.result, call.has_result, call.error = result, True, error
                return


_XML_CALL: Final = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|$)", re.S)
_XML_PARAM: Final = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.S)


def _xml_calls(content: str) -> list[Call]:
    calls = []
    for name, body in _XML_CALL.findall(content):
        args = {key: value.strip("\n") for key, value in _XML_PARAM.findall(body)}
        calls.append(Call(name, args, None))
    return calls


def chat_steps(messages: list[dict[str, Any]]) -> list[Step]:
    """Steps of an OpenAI chat list. Calls are ``tool_calls`` or, in SWE-agent's XML tool
    format, ``<function=name>`` text; in the latter the next user message is their result,
    not a human."""
    steps: list[Step] = []
    users = 0
    awaiting_text_result: list[Call] = []
    seen_assistant = False
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            seen_assistant = True
            calls = []
            for index, item in enumerate(message.get("tool_calls") or []):
                function = item.get("function") or {}
                call_id = item.get("id") or f"#{len(steps)}.{index}"
                calls.append(
                    Call(
                        str(function.get("name")),
                        _parse_args(function.get("arguments")),
                        call_id,
                    )
                )
            if not calls and isinstance(content, str) and "<function=" in content:
                calls = _xml_calls(content)
                awaiting_text_result = calls
            if calls:
                steps.append(Step(calls, users))
                users = 0
        elif role == "tool":
            _result_to(steps, message.get("tool_call_id"), message, None)
        elif role == "user":
            if awaiting_text_result:
                for call in awaiting_text_result:
                    call.result, call.has_result = content, True
                awaiting_text_result = []
            elif seen_assistant:
                # The first user message is the task, given before any call: no news to the
                # guard. Later ones are a human (or a simulated user) speaking.
                users += 1
    return steps


def read_tau(path: Path, data: list[dict[str, Any]]) -> Iterator[Run]:
    for row in data:
        name = f"task {row.get('task_id')} trial {row.get('trial')}"
        success = float(row.get("reward") or 0.0) >= 1.0
        yield Run("tau-bench", "tau-bench", str(path), name, success, chat_steps(row["traj"]))


def read_chat_rows(path: Path, data: list[dict[str, Any]]) -> Iterator[Run]:
    """Rows with ``messages`` (SWE-Gym OpenHands, SWE-smith, SWE-Play)."""
    for index, row in enumerate(data):
        messages = row["messages"]
        text = json.dumps(messages[:1])
        harness = (
            "openhands"
            if "OpenHands" in text or "tool_calls" in json.dumps(messages)
            else "swe-agent"
        )
        resolved = row.get("resolved")
        name = str(row.get("instance_id") or row.get("id") or index)
        source = "openhands" if harness == "openhands" else "swe-agent"
        success = resolved if isinstance(resolved, bool) else None
        yield Run(source, harness, str(path), name, success, chat_steps(messages))


_FENCE: Final = re.compile(r"```[\w-]*\n(.*?)```", re.S)


def _command_call(command: str, call_id: str) -> Call:
    """A SWE-agent command line as a call: its first word is the tool."""
    command = command.strip()
    name, _, rest = command.partition(" ")
    first, _, tail = name.partition("\n")
    if tail:
        name, rest = first, tail + (" " + rest if rest else "")
    # The rest of the line as a value: a str given to check_turn is JSON text (issue 19).
    return Call(name or "(empty)", {"args": rest}, call_id)


def read_nebius(path: Path, data: list[dict[str, Any]]) -> Iterator[Run]:
    """nebius/SWE-agent-trajectories rows: ``ai`` messages end with a fenced command, the next
    ``user`` message is its output."""
    for row in data:
        steps: list[Step] = []
        pending: Call | None = None
        for message in row["trajectory"]:
            if message.get("role") == "ai":
                blocks = _FENCE.findall(message.get("text") or "")
                if blocks:
                    pending = _command_call(blocks[-1], f"#{len(steps)}")
                    steps.append(Step([pending]))
            elif message.get("role") == "user" and pending is not None:
                pending.result, pending.has_result = message.get("text"), True
                pending = None
        success = row.get("target") if isinstance(row.get("target"), bool) else None
        yield Run("swe-agent", "swe-agent", str(path), str(row["instance_id"]), success, steps)


def read_swe_traj(path: Path, data: dict[str, Any]) -> Iterator[Run]:
    steps = []
    for index, entry in enumerate(data.get("trajectory") or []):
        call = _command_call(str(entry.get("action") or ""), f"#{index}")
        call.result, call.has_result = entry.get("observation"), True
        steps.append(Step([call]))
    yield Run("swe-agent", "swe-agent", str(path), path.stem, None, steps)


def _swebench_resolved(path: Path, instance: str) -> bool | None:
    """The SWE-bench harness's verdict on an instance, from a ``<instance>.report.json``
    beside the trajectory (``{instance: {"resolved": bool, ...}}``), if there is one."""
    report = path.with_name(f"{instance}.report.json")
    try:
        verdict = json.loads(report.read_text(encoding="utf-8")).get(instance) or {}
    except (OSError, ValueError, AttributeError):
        return None
    resolved = verdict.get("resolved")
    return resolved if isinstance(resolved, bool) else None


def _mini_messages(messages: list[dict[str, Any]]) -> list[Step]:
    """mini-swe-agent messages: its tool-calling mode logs OpenAI ``tool_calls`` with ``tool``
    results; its text mode ends each response with a fenced command, answered by the next
    user message."""
    if any(message.get("tool_calls") for message in messages):
        return chat_steps(messages)
    steps: list[Step] = []
    pending: Call | None = None
    for message in messages:
        role, content = message.get("role"), _text(message.get("content"))
        if role == "assistant":
            blocks = _FENCE.findall(content)
            if blocks:
                pending = Call("bash", {"command": blocks[-1].strip()}, f"#{len(steps)}")
                steps.append(Step([pending]))
        elif role == "user" and pending is not None:
            pending.result, pending.has_result = content, True
            pending = None
    return steps


def read_mini(path: Path, data: dict[str, Any] | list[dict[str, Any]]) -> Iterator[Run]:
    """A mini-swe-agent trajectory (``{info, messages, instance_id}``, or a bare message
    list); labelled where a SWE-bench ``report.json`` lies beside it."""
    if isinstance(data, list):
        yield Run(
            "mini-swe-agent", "mini-swe-agent", str(path), path.stem, None, _mini_messages(data)
        )
        return
    instance = str(data.get("instance_id") or path.name.removesuffix(".traj.json"))
    success = _swebench_resolved(path, instance)
    steps = _mini_messages(data.get("messages") or [])
    yield Run("mini-swe-agent", "mini-swe-agent", str(path), instance, success, steps)


def read_openhands(path: Path, data: list[dict[str, Any]]) -> Iterator[Run]:
    """OpenHands events: agent actions with ``tool_call_metadata``, observations linked by its
    ``tool_call_id``, user ``message`` actions as humans."""
    steps: list[Step] = []
    users = 0
    for event in data:
        meta = event.get("tool_call_metadata") or {}
        if "action" in event:
            if event.get("source") == "user" and event["action"] == "message":
                users += 1 if steps else 0
            elif meta.get("function_name"):
                # The model's thought rides in the args: it is not part of the call.
                args = {k: v for k, v in (event.get("args") or {}).items() if k != "thought"}
                steps.append(
                    Step([Call(meta["function_name"], args, meta.get("tool_call_id"))], users)
                )
                users = 0
        elif "observation" in event and meta.get("tool_call_id"):
            error = event["observation"] == "error" or None
            _result_to(steps, meta["tool_call_id"], event.get("content"), error)
    yield Run("openhands", "openhands", str(path), path.stem, None, steps)


_ACTION: Final = re.compile(r"(?:^|\n)\s*(?:Act|Action|ACTION)\s*:\s*(.*)\Z", re.S)
_BRACKET: Final = re.compile(r"^(\w+)\s*[\[(](.*)[\])]\s*$", re.S)


def _text_action(content: str, call_id: str) -> Call | None:
    found = _ACTION.search(content)
    if found is None:
        return None
    action = found.group(1).strip()
    head, _, rest = action.partition("\n")
    block = _FENCE.search(rest)
    if block is not None:  # "Act: bash" / "Action: Operation" and a fenced script
        return Call(head.strip(), {"code": block.group(1).strip()}, call_id)
    bracket = _BRACKET.match(action)
    if bracket is not None:  # search[...], get_relations(...), answer(...)
        return Call(bracket.group(1), {"arg": bracket.group(2).strip()}, call_id)
    name, _, arg = action.partition(" ")
    return Call(name, {"arg": arg.strip()}, call_id)


def read_agentinstruct(path: Path, data: list[dict[str, Any]]) -> Iterator[Run]:
    """AgentInstruct conversations: the model's text ends with an action; the next user turn
    is what the environment said. Some tasks open with a worked example as earlier turns, cut
    off where the real problem starts."""
    for row in data:
        steps: list[Step] = []
        pending: Call | None = None
        for message in row.get("conversations") or []:
            content = str(message.get("content") or message.get("value") or "")
            role = message.get("role") or message.get("from")
            if role in ("assistant", "gpt"):
                pending = _text_action(content, f"#{len(steps)}")
                if pending is not None:
                    steps.append(Step([pending]))
            elif pending is not None:
                pending.result, pending.has_result = content, True
                pending = None
            if role not in ("assistant", "gpt") and "start a new problem" in content:
                steps, pending = [], None
        yield Run("agentinstruct", "agentinstruct", str(path), str(row.get("id")), None, steps)


def _human(entry: dict[str, Any]) -> bool:
    """A Claude Code line that is a person typing (not a tool result, not the harness's own
    meta or command lines, not a subagent's prompt)."""
    if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta"):
        return False
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, list):
        return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return isinstance(content, str) and not content.startswith("<command-")


def _harbor_reward(path: Path) -> bool | None:
    """A harbor trial's verdict on the Claude Code session under its ``agent/sessions/``:
    ``verifier_result.rewards.reward`` in the trial's ``result.json`` (1.0 success, 0.0
    failure). Laid out as harbor writes it, or flattened into one directory with ``__`` for
    ``/`` (``<trial>__agent__sessions__...jsonl`` beside ``<trial>__result.json``)."""
    candidates = [p / "result.json" for p in path.parents if (p / "agent").is_dir()]
    marker = "__agent__sessions__"
    if marker in path.name:
        candidates.insert(0, path.with_name(path.name.split(marker)[0] + "__result.json"))
    for candidate in candidates:
        try:
            result = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        reward = ((result.get("verifier_result") or {}).get("rewards") or {}).get("reward")
        if isinstance(reward, (int, float)):
            return float(reward) >= 1.0
    return None


def read_claude(path: Path) -> Iterator[Run]:
    """A Claude Code session file. tripwire.replay's reader is not used here: it hands results
    over as values (``is_error`` dropped) and skips the human messages, and both are what
    the progress-aware guard is to be given."""
    runs: dict[str, Run] = {}
    success = _harbor_reward(path)
    by_message: dict[str, Step] = {}
    pending_users: Counter[str] = Counter()
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
                continue
            session = str(entry.get("sessionId") or path.stem)
            if entry.get("isSidechain"):
                session = f"{session} agent {entry.get('agentId') or path.stem}"
            run = runs.setdefault(
                session, Run("claude-code", "claude-code", str(path), session, success)
            )
            message = entry.get("message") or {}
            content = message.get("content")
            if entry["type"] == "assistant" and isinstance(content, list):
                # One API response is logged as several lines sharing message.id.
                step = by_message.get(str(message.get("id")))
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        if step is None:
                            step = Step([], pending_users.pop(session, 0))
                            by_message[str(message.get("id"))] = step
                            run.steps.append(step)
                        step.calls.append(Call(block["name"], block.get("input"), block.get("id")))
            elif _human(entry):
                pending_users[session] += 1
            elif isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        _result_to(run.steps, block.get("tool_use_id"), block, None)
    yield from runs.values()


def read_file(path: Path) -> Iterator[Run]:
    """Runs in one file, by the shape of its content; nothing for files of no known shape."""
    if path.suffix == ".jsonl":
        yield from read_claude(path)
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        if "trajectory" in data and path.suffix == ".traj":
            yield from read_swe_traj(path, data)
        elif "messages" in data:
            yield from read_mini(path, data)
        return
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return
    first = data[0]
    if "role" in first and "content" in first:
        yield from read_mini(path, data)
        return
    if "traj" in first and "reward" in first:
        yield from read_tau(path, data)
    elif "trajectory" in first and "target" in first:
        yield from read_nebius(path, data)
    elif "messages" in first:
        yield from read_chat_rows(path, data)
    elif "conversations" in first:
        yield from read_agentinstruct(path, data)
    elif "action" in first or "observation" in first:
        yield from read_openhands(path, data)


def read_corpus(root: Path) -> tuple[list[Run], int]:
    """The runs with at least one tool call, and how many runs had none (a final answer
    only, or a subagent's warm-up): the guard is never asked about those."""
    runs = []
    empty = 0
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".traj"):
            for run in read_file(path):
                if run.steps:
                    runs.append(run)
                else:
                    empty += 1
    return runs, empty


# -- injected transient faults --------------------------------------------------------------

FAULT: Final = "Error: 503 Service Unavailable"
FAULT_RATE: Final = 0.1  # share of calls that fail transiently before their real result


def with_faults(run: Run, seed: int) -> Run:
    """The run with some calls failing once or twice (``FAULT``) before the result the trace
    holds: the model retries the same call in a new turn each time. Seeded per run, so the
    numbers are the same on every machine."""
    rng = random.Random(f"{seed}:{run.file}:{run.name}")
    steps: list[Step] = []
    for step in run.steps:
        retries: list[tuple[Call, int]] = []
        first: list[Call] = []
        for call in step.calls:
            failures = rng.choice((1, 2)) if call.has_result and rng.random() < FAULT_RATE else 0
            if failures:
                first.append(Call(call.name, call.args, call.call_id, FAULT, True))
                retries.append((call, failures))
            else:
                first.append(call)
        steps.append(Step(first, step.users))
        for attempt in range(1, 3):
            again = []
            for call, failures in retries:
                if attempt < failures:
                    again.append(
                        Call(call.name, call.args, f"{call.call_id}~{attempt}", FAULT, True)
                    )
                elif attempt == failures:
                    # A retry is a new call from the model, with an id of its own (the same id
                    # would be a redelivery, which the guard answers with its first verdict).
                    again.append(
                        Call(
                            call.name,
                            call.args,
                            f"{call.call_id}~{attempt}",
                            call.result,
                            True,
                            call.error,
                        )
                    )
            if again:
                steps.append(Step(again))
    return Run(run.source, "tau-bench + faults", run.file, run.name, run.success, steps)


# -- the loop judge, from the trace alone ---------------------------------------------------


def _failed(call: Call) -> bool:
    if call.error is not None:
        return call.error
    if isinstance(call.result, dict) and call.result.get("is_error") is True:
        return True
    text = _OBSERVATION_PREFIX.sub("", _text(call.result)).lstrip()
    return text.startswith(_ERROR_PREFIXES)


def _same_call(call: Call) -> str:
    return call.name + "\x00" + json.dumps(call.args, sort_keys=True, default=str)


def real_loops(run: Run) -> set[str]:
    """Keys of the calls that looped in the trace: one call failing with one error 3+ times,
    or one result 3+ times in a row with no other call between."""
    loops: set[str] = set()
    failures: Counter[tuple[str, str]] = Counter()
    streak: tuple[str, str] | None = None
    length = 0
    for step in run.steps:
        for call in step.calls:
            key = _same_call(call)
            text = _text(call.result) if call.has_result else ""
            if call.has_result and _failed(call):
                failures[key, text] += 1
                if failures[key, text] >= 3:
                    loops.add(key)
            current = (key, text) if call.has_result else None
            length = length + 1 if current is not None and current == streak else 1
            streak = current
            if current is not None and length >= 3:
                loops.add(key)
    return loops


# -- replay ---------------------------------------------------------------------------------

CONFIGS: Final = ("hash", "progress", "declared", "3 in a row", "5 in a row")
# The simplest peers' rules: stop at N identical calls in a row (opencode's doom_loop: 3;
# Gemini CLI's loop detection: 5), no nudge, no results read.
PEERS: Final = {"3 in a row": 3, "5 in a row": 5}


class InARow:
    """A peer's rule, for comparison: stop the Nth identical call (same tool, same raw
    arguments) in a row."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.last: str | None = None
        self.count = 0

    def check(self, call: Call) -> str:
        key = _same_call(call)
        self.count = self.count + 1 if key == self.last else 1
        self.last = key
        return "stop" if self.count >= self.limit else "allow"


def _may_change(name: str, policies: dict[str, Any]) -> bool:
    """Whether a call of this tool could change the world, by the policy the zero-config
    guard infers for it (a write, a shell, or a tool of unknown kind)."""
    if name not in policies:
        policies[name] = tripwire.Guard().policy_of(name)[0]
    return policies[name] in (None, "write", "shell")


def _outcome(call: Call) -> tuple[bool, str] | None:
    return (_failed(call), _text(call.result)) if call.has_result else None


def justified(calls: list[Call], at: int, stop_at: int, policies: dict[str, Any]) -> bool:
    """Whether the trace shows the evidence a stop at ``calls[at]`` needs (issue 25): the
    stopped call (its raw arguments) made at least ``stop_at - 1`` times before, each time
    with one identical result or error, and nothing between that could change the world; or
    two laps of a cycle with the same results, the stopped call starting a third. The
    trace's own results count, whatever the guard said of those calls."""
    stopped = _same_call(calls[at])
    seen: list[tuple[bool, str] | None] = []
    for call in reversed(calls[:at]):
        if _same_call(call) == stopped:
            seen.append(_outcome(call))
            if len(seen) >= stop_at - 1:
                break
        elif _may_change(call.name, policies):
            break
    if len(seen) >= stop_at - 1 and seen[0] is not None and all(o == seen[0] for o in seen):
        return True
    for period in range(2, at // 2 + 1):
        first, second = calls[at - 2 * period : at - period], calls[at - period : at]
        if _same_call(first[0]) != stopped:
            continue
        if len({_same_call(c) for c in first}) < 2:
            continue
        if all(
            _same_call(a) == _same_call(b)
            and _outcome(a) is not None
            and _outcome(a) == _outcome(b)
            for a, b in zip(first, second, strict=True)
        ):
            return True
    return False


class Unsupported(Exception):
    """The tree under test lacks part of the API a configuration needs."""


def _without_whitespace(tools: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {k: v for k, v in spec.items() if k != "whitespace"}
        if isinstance(spec, dict)
        else spec
        for name, spec in tools.items()
    }


def make_guard(config: str, source: str, notes: set[str]) -> Any:
    try:
        if config == "hash":
            # Passed by name at run time: the tree under test may not have ``infer`` yet (its
            # absence is reported, below), and the native stub may lag the reference.
            options: dict[str, Any] = {"infer": False}
            return tripwire.Guard(**options)
        if config == "progress":
            return tripwire.Guard()
        tools = POLICIES[source]
        try:
            return tripwire.Guard(tools=tools)
        except (TypeError, ValueError) as exc:
            # Per-tool whitespace is part of the spec being built: without it the table still
            # says which tools read and write.
            notes.add(f"declared: tools= refused the whitespace key ({exc}); dropped it")
            return tripwire.Guard(tools=_without_whitespace(tools))
    except TypeError as exc:
        raise Unsupported(f"{config}: Guard() refused its arguments: {exc}") from exc


CONTEXT: Final = 4  # calls shown before a nudge or stop in ``--nudges``
STOP_AT: Final = 3  # the guards' default, which the bench replays with


def _show(call: Call, width: int = 100) -> str:
    """One call and what came back, on one line, for a reader of ``--nudges``."""
    args = json.dumps(call.args, sort_keys=True, default=str, ensure_ascii=False)
    if len(args) > width:
        args = args[: width - 3] + "..."
    if not call.has_result:
        return f"{call.name} {args}"
    text = " ".join(_OBSERVATION_PREFIX.sub("", _text(call.result)).split())
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{call.name} {args} -> {'(error) ' if _failed(call) else ''}{text}"


@dataclass(slots=True)
class Stop:
    file: str
    run: str
    step: int
    tool: str
    reason: str
    message: str
    # The calls just before it (``_show``), oldest first.
    before: list[str] = field(default_factory=list)
    # The trace itself shows this call looping (``real_loops``): a stop that is right about
    # the loop, in a run that got over it.
    looped: bool = False
    # The trace shows the evidence the stop needs (``justified``).
    justified: bool = False


@dataclass(slots=True)
class Nudge:
    file: str
    run: str
    group: str
    step: int
    call: str
    message: str
    before: list[str]


@dataclass(slots=True)
class Tally:
    runs: int = 0
    calls: int = 0
    healthy_runs: int = 0
    assumed_runs: int = 0
    healthy_calls: int = 0
    healthy_stops: int = 0
    unjustified: int = 0
    successful_stops: int = 0
    healthy_nudges: int = 0
    loops: int = 0
    loops_answered: int = 0
    stopped: list[Stop] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    nudged: list[Nudge] = field(default_factory=list)  # in healthy runs


def replay_peer(run: Run, config: str) -> tuple[list[Nudge], Stop | None, set[str]]:
    """``replay`` for a peer's rule (``PEERS``): it only stops, and reads no result."""
    rule = InARow(PEERS[config])
    flat = [call for step in run.steps for call in step.calls]
    for at, call in enumerate(flat):
        if rule.check(call) == "stop":
            stop = Stop(run.file, run.name, at, call.name, "loop_detected", "", [])
            stop.justified = justified(flat, at, rule.limit, {})
            return [], stop, {_same_call(call)}
    return [], None, set()


def replay(run: Run, config: str, notes: set[str]) -> tuple[list[Nudge], Stop | None, set[str]]:
    """Nudges, the stop (if any), and the keys (``_same_call``) the guard nudged or stopped."""
    if config in PEERS:
        return replay_peer(run, config)
    guard = make_guard(config, run.source, notes)
    flat = [call for step in run.steps for call in step.calls]
    position = 0
    observing = config != "hash"
    nudges: list[Nudge] = []
    flagged: set[str] = set()
    seen: list[str] = []  # every call checked so far, shown
    for index, step in enumerate(run.steps):
        if observing:
            for _ in range(step.users):
                try:
                    guard.user_message()
                except AttributeError as exc:
                    raise Unsupported(f"{config}: no Guard.user_message ({exc})") from exc
            if step.users:
                seen.append(f"(user message x{step.users})")
        verdicts = guard.check_turn([(c.name, c.args, c.call_id) for c in step.calls])
        for call, verdict in zip(step.calls, verdicts, strict=True):
            position += 1
            before = seen[-CONTEXT:]
            if verdict.action == "stop":
                flagged.add(_same_call(call))
                stop = Stop(
                    run.file,
                    run.name,
                    index,
                    verdict.tool,
                    str(verdict.reason),
                    verdict.message or "",
                    [*before, f"STOP {_show(call)}"],
                )
                stop.justified = justified(flat, position - 1, STOP_AT, {})
                return nudges, stop, flagged
            if verdict.action == "nudge":
                flagged.add(_same_call(call))
                nudges.append(
                    Nudge(
                        run.file,
                        run.name,
                        run.harness,
                        index,
                        _show(call),
                        verdict.message or "",
                        before,
                    )
                )
                seen.append(f"(nudged) {_show(call)}")
                continue
            seen.append(_show(call))
            if observing and call.has_result and verdict.duplicate_of is None:
                try:
                    if call.error is None:
                        guard.observe(verdict, call.result)
                    else:
                        guard.observe(verdict, call.result, error=call.error)
                except TypeError as exc:
                    raise Unsupported(f"{config}: observe() refused its arguments: {exc}") from exc
    return nudges, None, flagged


def measure(
    runs: list[Run], configs: tuple[str, ...]
) -> tuple[dict[tuple[str, str], Tally], list[str]]:
    tallies: dict[tuple[str, str], Tally] = {}
    notes: set[str] = set()
    broken: dict[str, str] = {}
    for config in configs:
        for run in runs:
            if config in broken:
                break
            loops = real_loops(run)
            calls = sum(len(step.calls) for step in run.steps)
            try:
                nudges, stop, flagged = replay(run, config, notes)
            except Unsupported as exc:
                broken[config] = str(exc)
                break
            for group in (run.harness, "all (real traces)"):
                if group == "all (real traces)" and run.harness == "tau-bench + faults":
                    continue
                tally = tallies.setdefault((group, config), Tally())
                tally.runs += 1
                tally.calls += calls
                if run.success is not False:
                    tally.healthy_runs += 1
                    tally.assumed_runs += run.success is None
                    tally.healthy_calls += calls
                    tally.healthy_nudges += len(nudges)
                    tally.nudged += nudges
                    if stop is not None:
                        stop.looped = bool(loops & flagged)
                        tally.healthy_stops += 1
                        tally.successful_stops += run.success is True
                        tally.unjustified += not stop.justified
                        tally.stopped.append(stop)
                if loops:
                    tally.loops += 1
                    if loops & flagged:
                        tally.loops_answered += 1
                    else:
                        tally.missed.append(f"{run.file} :: {run.name}")
    messages = sorted(notes) + [f"could not run {reason}" for reason in broken.values()]
    return tallies, messages


# -- report ---------------------------------------------------------------------------------

HEADERS: Final = (
    "runs",
    "group",
    "guard",
    "calls",
    "healthy runs (assumed)",
    "stops in healthy runs (successful)",
    "unjustified",
    "nudges / 1k calls, healthy",
    "real loops answered",
)


def rows(tallies: dict[tuple[str, str], Tally]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    groups = list(dict.fromkeys(group for group, _ in tallies))
    groups.sort(key=lambda g: (g.startswith("all"), g))
    for group in groups:
        for config in CONFIGS:
            tally = tallies.get((group, config))
            if tally is None:
                continue
            rate = 1000 * tally.healthy_nudges / tally.healthy_calls if tally.healthy_calls else 0.0
            out.append(
                (
                    str(tally.runs),
                    group,
                    config,
                    str(tally.calls),
                    f"{tally.healthy_runs} ({tally.assumed_runs})",
                    f"{tally.healthy_stops} ({tally.successful_stops})",
                    str(tally.unjustified),
                    f"{rate:.1f}",
                    f"{tally.loops_answered} of {tally.loops}",
                )
            )
    return out


def render(table: list[tuple[str, ...]], markdown: bool) -> str:
    headers = HEADERS
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row) + " |" for row in table]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i in (1, 2) else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*headers), *(fmt.format(*row) for row in table)])


def default_corpus() -> Path | None:
    env = os.environ.get("TRIPWIRE_CORPUS")
    if env:
        return Path(env)
    # The repository's parent holds shared/ beside the checkout.
    return Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, help="corpus directory")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--seed", type=int, default=16, help="seed of the injected faults")
    parser.add_argument("--no-faults", action="store_true", help="skip the injected-fault rows")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the progress guard misses a target"
    )
    parser.add_argument(
        "--nudges",
        nargs="?",
        const="progress",
        choices=CONFIGS,
        help="list every nudge and stop in healthy runs, with the calls before it, for one "
        "guard (default: progress)",
    )
    args = parser.parse_args(argv)
    root = args.corpus or default_corpus()
    if root is None or not root.is_dir():
        print(
            f"real_traces: no corpus at {root}: give a directory, or set TRIPWIRE_CORPUS "
            "(the traces are not in the repository; see the corpus MANIFEST.md)",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    runs, empty = read_corpus(root)
    if not runs:
        print(f"real_traces: no runs of a known shape under {root}", file=sys.stderr)
        return 2
    if not args.no_faults:
        runs += [with_faults(run, args.seed) for run in runs if run.harness == "tau-bench"]
    tallies, notes = measure(runs, CONFIGS)
    elapsed = time.perf_counter() - started
    harnesses = Counter(run.harness for run in runs)
    print(
        f"real_traces: {root}, {tripwire.IMPLEMENTATION} implementation, {elapsed:.1f} s; "
        + ", ".join(f"{name} {count}" for name, count in sorted(harnesses.items()))
        + f" runs; {empty} more runs made no tool call"
    )
    print(
        "healthy = labelled success, or unlabelled and assumed healthy (in brackets); "
        "targets (progress guard, issue 25): 0 unjustified stops in healthy runs, < 3 nudges "
        "per 1k calls, every real loop answered, and no more successful runs stopped than by "
        '"3 in a row"\n'
    )
    print(render(rows(tallies), args.markdown))
    for note in notes:
        print(f"\nnote: {note}")
    _print_details(tallies)
    if args.nudges:
        _print_nudges(tallies, args.nudges)
    missed = targets_missed(tallies)
    for line in missed:
        print(f"\ntarget missed: {line}")
    return 1 if missed and args.check else 0


def targets_missed(tallies: dict[tuple[str, str], Tally]) -> list[str]:
    """What the zero-config progress guard misses of issue 25's targets, on every group."""
    missed: list[str] = []
    for (group, config), tally in tallies.items():
        if config != "progress":
            continue
        if tally.unjustified:
            missed.append(f"{group}: {tally.unjustified} unjustified stops in healthy runs")
        rate = 1000 * tally.healthy_nudges / tally.healthy_calls if tally.healthy_calls else 0.0
        if group.startswith("all") and rate >= 3.0:
            missed.append(f"{group}: {rate:.1f} nudges per 1k calls in healthy runs")
        if tally.loops_answered < tally.loops:
            missed.append(f"{group}: {tally.loops - tally.loops_answered} real loops missed")
        peer = tallies.get((group, "3 in a row"))
        if peer is not None and tally.successful_stops > peer.successful_stops:
            missed.append(
                f"{group}: {tally.successful_stops} successful runs stopped, "
                f'"3 in a row" stops {peer.successful_stops}'
            )
    return missed


def _print_details(tallies: dict[tuple[str, str], Tally]) -> None:
    for (group, config), tally in tallies.items():
        if group.startswith("all"):
            continue
        if tally.stopped:
            print(f"\nstopped while healthy: {group}, {config} guard")
            for stop in tally.stopped:
                looped = ", a real loop in the trace" if stop.looped else ""
                looped += ", justified" if stop.justified else ", UNJUSTIFIED"
                print(
                    f"  {stop.file} :: {stop.run} :: step {stop.step} :: {stop.tool} "
                    f"({stop.reason}{looped})"
                )
                print(f"      {stop.message}")
        if tally.missed:
            print(f"\nreal loops not answered: {group}, {config} guard")
            for missed in tally.missed:
                print(f"  {missed}")


def _print_nudges(tallies: dict[tuple[str, str], Tally], config: str) -> None:
    """Every nudge and stop in a healthy run under one guard, with the calls before it."""
    for (group, name), tally in tallies.items():
        if name != config or group.startswith("all"):
            continue
        rate = 1000 * tally.healthy_nudges / tally.healthy_calls if tally.healthy_calls else 0.0
        print(
            f"\nnudges in healthy runs: {group}, {config} guard: {tally.healthy_nudges} in "
            f"{tally.healthy_calls} calls ({rate:.1f} per 1k)"
        )
        for nudge in tally.nudged:
            print(f"  {nudge.file} :: {nudge.run} :: step {nudge.step}")
            for line in nudge.before:
                print(f"      {line}")
            print(f"    > NUDGE {nudge.call}")
            print(f"      {nudge.message}")
        for stop in tally.stopped:
            print(f"  {stop.file} :: {stop.run} :: step {stop.step} (stop, {stop.reason})")
            for line in stop.before:
                print(f"      {line}")
            print(f"      {stop.message}")


if __name__ == "__main__":
    sys.exit(main())
