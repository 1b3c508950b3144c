"""Traces with tool results, shaped like the real thing, for the progress-aware replay tests
(``test_replay.py``, ``test_cli.py``); and ``run_calls``, the harness loop every test and
bench that plays a scripted run through a guard uses."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def run_calls(guard: Any, calls: Iterable[Mapping[str, Any]], *, observe: bool = True) -> list[Any]:
    """What a harness does with a scripted run: check each call (``args`` as values, or
    ``text``, JSON text, through ``check_json``; ``call_id`` if given), stop at a stop, and
    tell the guard the result of each allowed call (``result``, with ``error`` and
    ``transient`` where given, or what ``run()`` returns: a tool run only when allowed; a
    call with none of them never came back). ``calls`` may be a generator, resumed only
    after the previous call was dealt with. ``observe=False``: the hash-only harness, which
    tells nothing. Returns the verdicts, the stop included."""
    verdicts = []
    for call in calls:
        call_id = call.get("call_id")
        if "text" in call:
            verdict = guard.check_json(call["tool"], call["text"], call_id=call_id)
        else:
            verdict = guard.check(call["tool"], call["args"], call_id=call_id)
        verdicts.append(verdict)
        if verdict.action == "stop":
            break
        if not observe or verdict.action != "allow":
            continue
        if "run" in call:
            guard.observe(verdict, call["run"]())
        elif "result" in call or "error" in call:
            guard.observe(
                verdict,
                call.get("result"),
                error=call.get("error"),
                transient=call.get("transient"),
            )
    return verdicts


# A build that advances on every poll, then passes.
ADVANCING = ["queued", "running 10%", "running 45%", "running 80%", "passed"]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_doc(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def _build(state: str) -> str:
    return json.dumps({"build": 77, "state": state})


def chat_poll(states: list[str]) -> list[dict[str, Any]]:
    """OpenAI chat: a release agent polls build 77 with the same arguments until it passes
    (results as JSON text in ``role: "tool"`` messages), then deploys."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a release agent."},
        {"role": "user", "content": "Deploy build 77 once it passes."},
    ]
    for i, state in enumerate(states):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "build_status", "arguments": '{"build": 77}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": _build(state)})
    messages += [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_d",
                    "type": "function",
                    "function": {"name": "deploy", "arguments": '{"build": 77, "env": "prod"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_d", "content": '{"ok": true}'},
        {"role": "assistant", "content": "Build 77 passed and is deployed."},
    ]
    return messages


def anthropic_poll(states: list[str]) -> dict[str, Any]:
    """Anthropic Messages: the same agent; results as ``tool_result`` blocks whose content is
    a list of text blocks; usage figures on every assistant message."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Deploy build 77 once it passes."}
    ]
    for i, state in enumerate(states):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking the build."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i}",
                        "name": "build_status",
                        "input": {"build": 77},
                    },
                ],
                "usage": {"input_tokens": 3000 + 200 * i, "output_tokens": 60},
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": [{"type": "text", "text": _build(state)}],
                    }
                ],
            }
        )
    messages.append(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Build 77 passed."}],
            "usage": {"input_tokens": 4200, "output_tokens": 20},
        }
    )
    return {
        "model": "claude-sonnet-4-5",
        "system": "You are a release agent.",
        "messages": messages,
    }


EDIT = {"path": "src/cart.py", "old": "round(x)", "new": "round(x, 2)"}
UNDO = {"path": "src/cart.py", "old": "round(x, 2)", "new": "round(x)"}
TESTS = {"path": "tests/test_cart.py"}


def edit_undo_events(run: str = "fix-cart") -> list[dict[str, Any]]:
    """Events with inline results: a coding agent edits, tests, undoes its edit, tests, and
    goes round again; the tests fail the same way every time (with a different timing)."""
    rows: list[dict[str, Any]] = []
    for lap in range(3):
        for i, (tool, args, result) in enumerate(
            [
                ("edit_file", EDIT, "ok"),
                ("run_tests", TESTS, f"1 failed: test_rounding (0.{31 + lap}s)"),
                ("edit_file", UNDO, "ok"),
                ("run_tests", TESTS, f"1 failed: test_total (0.{52 + lap}s)"),
            ]
        ):
            step = 4 * lap + i
            rows.append(
                {
                    "run": run,
                    "tool": tool,
                    "args": args,
                    "result": result,
                    "usage": {"input_tokens": 5000 + 400 * step, "output_tokens": 120},
                }
            )
    return rows


def fruitless_search_responses() -> list[dict[str, Any]]:
    """OpenAI Responses items: a support agent rewords the same documentation search, and
    every ``function_call_output`` is ``"[]"``."""
    queries = [
        "refund policy for damaged items",
        "damaged item refund",
        "refunds: items that arrived broken",
        "policy on broken deliveries",
        "return damaged goods",
        "how to refund a broken order",
    ]
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "My mug arrived broken, can I get a refund?"}
    ]
    for i, query in enumerate(queries):
        items += [
            {"type": "reasoning", "id": f"rs_{i}", "summary": []},
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": "search_docs",
                "arguments": json.dumps({"query": query}),
            },
            {"type": "function_call_output", "call_id": f"call_{i}", "output": "[]"},
        ]
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "I could not find the policy."}],
        }
    )
    return items


PATCH = "*** Begin Patch\n*** Update File: cart.py\n-round(x)\n+round(x, 2)\n*** End Patch\n"
UNPATCH = "*** Begin Patch\n*** Update File: cart.py\n-round(x, 2)\n+round(x)\n*** End Patch\n"
PYTEST = '{"command":["bash","-lc","pytest -q tests/test_cart.py"],"workdir":"/repo"}'


def codex_edit_undo(laps: int = 3) -> list[dict[str, Any]]:
    """A Codex CLI rollout going round patch, test, unpatch, test: outputs as Codex writes
    them, with a wall-clock time that differs every time (JSON ``metadata.duration_seconds``
    for apply_patch, a ``Wall time:`` line for the shell)."""
    ts = "2026-05-02T17:09:04.407Z"
    rows: list[dict[str, Any]] = [
        {"timestamp": ts, "type": "session_meta", "payload": {"id": "codex-cart", "cwd": "/repo"}},
        {
            "timestamp": ts,
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": "fix the cart tests"},
        },
    ]
    step = 0
    for _ in range(laps):
        for patch in (PATCH, UNPATCH):
            for kind in ("custom_tool_call", "function_call"):
                step += 1
                call_id = f"call_{step:02}"
                if kind == "custom_tool_call":
                    call = {"type": kind, "call_id": call_id, "name": "apply_patch", "input": patch}
                    meta = {"exit_code": 0, "duration_seconds": step / 100}
                    output = json.dumps({"output": "Success. Updated cart.py", "metadata": meta})
                    output_type = "custom_tool_call_output"
                else:
                    call = {"type": kind, "call_id": call_id, "name": "shell", "arguments": PYTEST}
                    output = f"Exit code: 1\nWall time: {step / 10} seconds\nOutput:\n1 failed\n"
                    output_type = "function_call_output"
                usage = {"input_tokens": 9000 + 700 * step, "output_tokens": 90}
                rows += [
                    {"timestamp": ts, "type": "response_item", "payload": call},
                    {
                        "timestamp": ts,
                        "type": "event_msg",
                        "payload": {"type": "token_count", "info": {"last_token_usage": usage}},
                    },
                    {
                        "timestamp": ts,
                        "type": "response_item",
                        "payload": {"type": output_type, "call_id": call_id, "output": output},
                    },
                ]
    return rows
