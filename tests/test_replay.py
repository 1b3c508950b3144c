"""``tripwire.replay``: every input format, with samples shaped like the real thing, through
whichever backend ``tripwire`` picked (public API only)."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
import tripwire
from _traces import (
    ADVANCING,
    anthropic_poll,
    chat_poll,
    codex_edit_undo,
    edit_undo_events,
    fruitless_search_responses,
    run_calls,
    write_doc,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tripwire._results import content_value
from tripwire.replay import Prices, RunResult, Settings, render, replay, to_json, write_json
from tripwire.replay import simulate as simulate_module
from tripwire.testing import json_values

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "checkout-triage.jsonl"

LOGS = {"service": "checkout", "since": "15m", "level": "error"}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def one(report: Any) -> RunResult:
    runs = list(report.runs)
    assert len(runs) == 1, runs
    run: RunResult = runs[0]
    return run


# -- samples ----------------------------------------------------------------------------------


def openai_chat() -> list[dict[str, Any]]:
    """A support agent, OpenAI Chat Completions messages: a parallel turn, then a loop on
    search_orders with the arguments respelled each time (key order, spacing)."""
    spellings = [
        '{"customer_id": "c_981", "status": "open"}',
        '{"status":"open","customer_id":"c_981"}',
        '{"customer_id":"c_981",  "status":"open" }',
        '{"customer_id":"c_981","status":"open"}',
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent for Acme. Use the tools."},
        {"role": "user", "content": "Where is my order? I'm customer c_981."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a1",
                    "type": "function",
                    "function": {"name": "get_customer", "arguments": '{"customer_id":"c_981"}'},
                },
                {
                    "id": "call_a2",
                    "type": "function",
                    "function": {"name": "list_tickets", "arguments": '{"customer_id":"c_981"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a1", "content": '{"name":"Ada","tier":"gold"}'},
        {"role": "tool", "tool_call_id": "call_a2", "content": "[]"},
    ]
    for i, arguments in enumerate(spellings):
        messages.append(
            {
                "role": "assistant",
                "content": "Let me look up the open orders." if i else None,
                "tool_calls": [
                    {
                        "id": f"call_b{i}",
                        "type": "function",
                        "function": {"name": "search_orders", "arguments": arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_b{i}", "content": "[]"})
    messages.append({"role": "assistant", "content": "I could not find any open orders."})
    return messages


def anthropic_conversation() -> dict[str, Any]:
    """A coding agent, Anthropic Messages: reads a file, edits it, then reads the same file
    over and over; usage figures on each assistant message, as a logger stores them."""
    read = {"path": "src/checkout/cart.py"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the rounding bug in cart.py"}
    ]
    calls = [
        ("read_file", read),
        ("edit_file", {"path": "src/checkout/cart.py", "old": "round(x)", "new": "round(x, 2)"}),
        ("run_tests", {"path": "tests/test_cart.py"}),
        ("read_file", read),
        ("read_file", {"path": "src/checkout/cart.py "}),
        ("read_file", read),
        ("read_file", read),
        ("read_file", read),
    ]
    for i, (name, args) in enumerate(calls):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check the file again."},
                    {"type": "tool_use", "id": f"toolu_0{i}", "name": name, "input": args},
                ],
                "usage": {
                    "input_tokens": 2000 + 600 * i,
                    "cache_read_input_tokens": 8000,
                    "output_tokens": 150,
                },
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_0{i}", "content": "ok"}],
            }
        )
    return {
        "model": "claude-sonnet-4-5",
        "system": "You are a careful coding agent.",
        "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        "messages": messages,
    }


def responses_items() -> list[dict[str, Any]]:
    """OpenAI Responses input items of a finished run: reasoning + function_call per response,
    function_call_output after it; the agent keeps asking for the same weather."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "Should I cycle to work in Paris today?"}
    ]
    for i in range(5):
        items += [
            {"type": "reasoning", "id": f"rs_{i}", "summary": []},
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": "get_weather",
                "arguments": '{"city":"Paris","units":"metric"}'
                if i % 2
                else '{"units": "metric", "city": "Paris"}',
                "status": "completed",
            },
            {
                "type": "function_call_output",
                "call_id": f"call_{i}",
                "output": '{"error":"timeout"}',
            },
        ]
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "I could not get the forecast."}],
        }
    )
    return items


def claude_code_session(session: str = "3f2a9c1e-7b44-4e0e-9d51-2c8f0e6a1b77") -> list[dict]:
    """A Claude Code session file: metadata lines, a response split over several lines sharing
    message.id (thinking, then two parallel tool_use blocks), tool results as user lines, a
    subagent line, and a loop re-running the same failing test command."""
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/shop",
        "sessionId": session,
        "version": "2.1.63",
        "gitBranch": "main",
    }
    usage = {
        "input_tokens": 4,
        "cache_creation_input_tokens": 1200,
        "cache_read_input_tokens": 18000,
        "output_tokens": 210,
    }
    lines: list[dict[str, Any]] = [
        {
            "type": "file-history-snapshot",
            "messageId": "u-0",
            "snapshot": {"trackedFileBackups": {}},
            "isSnapshotUpdate": False,
        },
        {
            **base,
            "type": "user",
            "uuid": "u-0",
            "parentUuid": None,
            "message": {"role": "user", "content": "The checkout tests fail, fix them"},
        },
    ]
    # One API response, written as three lines with the same message.id.
    blocks = [
        {"type": "thinking", "thinking": "Look at the tests first.", "signature": "EoX..."},
        {"type": "tool_use", "id": "toolu_01A", "name": "Glob", "input": {"pattern": "tests/**"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {"file_path": "a.py"}},
    ]
    for j, block in enumerate(blocks):
        lines.append(
            {
                **base,
                "type": "assistant",
                "uuid": f"a-1-{j}",
                "requestId": "req_011",
                "message": {
                    "model": "claude-opus-4-6",
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "content": [block],
                    "stop_reason": None,
                    "usage": usage,
                },
            }
        )
    for tool_id in ("toolu_01A", "toolu_01B"):
        lines.append(
            {
                **base,
                "type": "user",
                "uuid": f"r-{tool_id}",
                "message": {
                    "role": "user",
                    "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": "x"}],
                },
                "toolUseResult": {"stdout": "x"},
            }
        )
    for i in range(6):
        command = "npm test -- --grep checkout" if i % 2 else "npm  test -- --grep checkout"
        lines.append(
            {
                **base,
                "type": "assistant",
                "uuid": f"a-{i + 2}",
                "requestId": f"req_0{i + 2}",
                "message": {
                    "model": "claude-opus-4-6",
                    "id": f"msg_0{i + 2}",
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"toolu_0{i + 2}",
                            "name": "Bash",
                            "input": {"command": command, "description": "Run checkout tests"},
                        }
                    ],
                    "stop_reason": "tool_use",
                    "usage": {**usage, "cache_read_input_tokens": 18000 + 900 * i},
                },
            }
        )
        lines.append(
            {
                **base,
                "type": "user",
                "uuid": f"r-{i + 2}",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "tool_use_id": f"toolu_0{i + 2}",
                            "type": "tool_result",
                            "content": "1 failing",
                            "is_error": True,
                        }
                    ],
                },
            }
        )
        if i == 0:
            lines.append(
                {
                    **base,
                    "isSidechain": True,
                    "agentId": "a1b2",
                    "type": "assistant",
                    "uuid": "s-1",
                    "message": {
                        "id": "msg_sub1",
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": "toolu_s1", "name": "Grep", "input": {}}
                        ],
                        "usage": {"input_tokens": 900, "output_tokens": 40},
                    },
                }
            )
    lines.append({"type": "summary", "summary": "Fixing checkout tests", "leafUuid": "a-7"})
    return lines


def codex_rollout(session: str = "0199a1b2-7c3d-7e4f-9a0b-1c2d3e4f5a6b") -> list[dict]:
    """A Codex CLI rollout: session_meta, turn_context, response_item payloads (reasoning,
    function_call shell, custom_tool_call apply_patch, outputs) and token_count events after
    each response; the agent re-runs the same failing test command. (Four re-runs after the
    patch: ``shell`` has no policy, so since issue 16 each re-run is judged by its result and
    the loop is nudged at the third, stopped at the fourth.)"""
    ts = "2026-05-02T17:09:04.407Z"
    rows: list[dict[str, Any]] = [
        {
            "timestamp": ts,
            "type": "session_meta",
            "payload": {
                "id": session,
                "timestamp": ts,
                "cwd": "/repo",
                "originator": "codex_cli_rs",
                "cli_version": "0.128.0",
            },
        },
        {"timestamp": ts, "type": "turn_context", "payload": {"cwd": "/repo", "model": "gpt-5"}},
        {
            "timestamp": ts,
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "make the cart tests pass"}],
            },
        },
        {
            "timestamp": ts,
            "type": "event_msg",
            "payload": {"type": "user_message", "message": "go"},
        },
    ]
    pytest_args = [
        '{"command":["bash","-lc","pytest -q tests/test_cart.py"],"workdir":"/repo"}',
        None,  # an apply_patch in between
        '{"workdir":"/repo","command":["bash","-lc","pytest -q tests/test_cart.py"]}',
        '{"command":["bash","-lc","pytest -q tests/test_cart.py"],"workdir":"/repo"}',
        '{"command":["bash","-lc","pytest -q tests/test_cart.py"],"workdir":"/repo"}',
        '{"command": ["bash", "-lc", "pytest -q tests/test_cart.py"], "workdir": "/repo"}',
        '{"command":["bash","-lc","pytest -q tests/test_cart.py"],"workdir":"/repo"}',
    ]
    for i, arguments in enumerate(pytest_args):
        call_id = f"call_{i:02}"
        rows.append(
            {
                "timestamp": ts,
                "type": "response_item",
                "payload": {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"},
            }
        )
        if arguments is None:
            call = {
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call_id,
                "name": "apply_patch",
                "input": "*** Begin Patch\n*** Update File: cart.py\n-round(x)\n+round(x, 2)\n",
            }
        else:
            call = {
                "type": "function_call",
                "name": "shell",
                "arguments": arguments,
                "call_id": call_id,
            }
        rows.append({"timestamp": ts, "type": "response_item", "payload": call})
        last = {
            "input_tokens": 12000 + 1500 * i,
            "cached_input_tokens": 9000 + 1500 * i,
            "output_tokens": 150,
            "reasoning_output_tokens": 64,
            "total_tokens": 12150 + 1500 * i,
        }
        rows.append(
            {
                "timestamp": ts,
                "type": "event_msg",
                "payload": {
                    "type": "token_count",
                    "info": {"total_token_usage": last, "last_token_usage": last},
                },
            }
        )
        rows.append(
            {
                "timestamp": ts,
                "type": "event_msg",
                "payload": {"type": "token_count", "info": None, "rate_limits": {}},
            }
        )
        output_type = "custom_tool_call_output" if arguments is None else "function_call_output"
        rows.append(
            {
                "timestamp": ts,
                "type": "response_item",
                "payload": {"type": output_type, "call_id": call_id, "output": "1 failed"},
            }
        )
    return rows


def events_two_runs() -> list[dict[str, Any]]:
    """A fleet log: two runs interleaved, one looping on get_logs (object arguments), one
    healthy paging through orders; one parallel turn grouped by ``turn``."""
    rows: list[dict[str, Any]] = []
    for i in range(10):
        rows.append(
            {
                "run": "triage-7",
                "tool": "get_logs",
                "args": LOGS if i % 2 else {**LOGS, "request_id": f"r{i}"},
                "usage": {"input_tokens": 1000 + 100 * i, "output_tokens": 50},
            }
        )
        rows.append(
            {
                "run": "orders-2",
                "tool": "list_orders",
                "args": {"cursor": f"p{i + 1}"},
                "usage": {"prompt_tokens": 800, "completion_tokens": 20},
            }
        )
    rows.append({"run": "orders-2", "turn": 11, "tool": "get_order", "args": '{"id": 1}'})
    rows.append({"run": "orders-2", "turn": 11, "tool": "get_order", "args": '{"id": 2}'})
    rows.append(
        {
            "run": "orders-2",
            "turn": 11,
            "tool": "get_order",
            "args": '{"id":1}',
            "usage": {"input_tokens": 900, "output_tokens": 30},
        }
    )
    return rows


def healthy_run() -> list[dict[str, Any]]:
    """Paging p1..p9 through one listing, a re-read after a write, a poll with a changing
    argument: all progress, nothing to stop."""
    rows: list[dict[str, Any]] = [
        {"run": "healthy", "tool": "list_orders", "args": {"status": "open", "cursor": f"p{n}"}}
        for n in range(1, 10)
    ]
    rows += [
        {"run": "healthy", "tool": "read_file", "args": {"path": "config.yaml"}},
        {"run": "healthy", "tool": "write_file", "args": {"path": "config.yaml", "text": "a: 1"}},
        {"run": "healthy", "tool": "read_file", "args": {"path": "config.yaml"}},
        {"run": "healthy", "tool": "get_build", "args": {"id": 77, "after": "2026-03-02T02:00"}},
        {"run": "healthy", "tool": "get_build", "args": {"id": 77, "after": "2026-03-02T02:05"}},
    ]
    return rows


# -- the example -------------------------------------------------------------------------------


def test_example_is_the_seed_run() -> None:
    report = replay([str(EXAMPLE)])
    run = one(report)
    # Issue 25: nudged at step 5; step 6 runs and comes back empty again (the evidence a
    # stop needs), and step 7, the 4th get_logs, is stopped.
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (39, 5, 7, 33)
    assert (run.reason, run.tool, run.repeats) == ("loop_detected", "get_logs", 4)
    assert run.tokens_source == "usage"
    assert round(run.cost, 2) == 2.68
    assert round(run.cost_guarded, 2) == 0.37
    # The seed: the money saved is a larger share than the steps saved.
    assert run.cost_saved / run.cost > run.steps_saved / run.steps
    assert run.stop_location == f"{EXAMPLE}:7"
    assert run.stop_call == 'get_logs {"level":"error","service":"checkout","since":"15m"}'
    assert report.problems_total == 0
    assert report.files[0].ignored == 1  # step 40: the budget's own entry, not a call


def test_example_input_grows_every_step() -> None:
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    inputs = [row["usage"]["input_tokens"] for row in rows if "usage" in row]
    assert len(inputs) == 39
    assert all(b > a for a, b in itertools.pairwise(inputs))


def test_prices_are_configurable() -> None:
    """$1 in and $5 out per million tokens: the example's usage figures (summed here from
    the file) are 834,821 tokens in and 11,706 out, so $0.834821 + $0.058530."""
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    usage = [row["usage"] for row in rows if "usage" in row]
    tokens = (sum(u["input_tokens"] for u in usage), sum(u["output_tokens"] for u in usage))
    assert tokens == (834_821, 11_706)
    settings = Settings(prices=Prices(input=1.0, output=5.0))
    run = one(replay([str(EXAMPLE)], settings))
    assert (run.input_tokens, run.output_tokens) == tokens
    assert run.cost == pytest.approx(0.893351)


# -- each format ----------------------------------------------------------------------------


def test_openai_chat(tmp_path: Path) -> None:
    path = tmp_path / "support.json"
    path.write_text(json.dumps(openai_chat(), indent=2))
    run = one(replay([str(path)]))
    assert run.format == "openai-chat"
    # Steps 1-2: the parallel turn; 3, 4 (nudge), 5 (run: issue 25, a stop needs a result
    # seen after the nudge), 6 (stop): search_orders respelled.
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (6, 4, 6, 1)
    assert run.tool == "search_orders"
    # Six model calls; the stopping one was made; the final answer saved.
    assert (run.turns, run.turns_saved) == (6, 1)
    assert run.tokens_source == "estimated"
    assert run.cost_saved > 0


def test_openai_chat_parallel_duplicates_count_once(tmp_path: Path) -> None:
    call = {"type": "function", "function": {"name": "get_quote", "arguments": '{"sku":"A1"}'}}
    messages = [{"role": "user", "content": "price of A1?"}]
    for i in range(4):
        messages.append({"role": "assistant", "tool_calls": [{**call, "id": f"c{i}a"}] * 2})
        messages.append({"role": "tool", "tool_call_id": f"c{i}a", "content": "9.99"})
    path = tmp_path / "dup.json"
    path.write_text(json.dumps({"messages": messages}))
    run = one(replay([str(path)]))
    # Identical calls within a turn are one action: four turns, four steps, stop at the
    # fourth (issue 25: the third, after the nudge, runs).
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (4, 2, 4, 1)
    hashed = one(replay([str(path)], HASH_ONLY))
    assert (hashed.steps, hashed.nudge_step, hashed.stop_step, hashed.steps_saved) == (4, 2, 3, 2)


def test_anthropic(tmp_path: Path) -> None:
    path = tmp_path / "coder.json"
    path.write_text(json.dumps(anthropic_conversation()))
    run = one(replay([str(path)]))
    assert run.format == "anthropic"
    # read(1) edit(2) test(3) read(4) read(5: nudge) read(6) read(7: stop) read(8). Issue 16:
    # edit_file is a write by its name, so read(4) after it is a new question; read(5) is its
    # repeat. Issue 25: read(6), after the nudge, runs; the stop rests on its result.
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (8, 5, 7, 2)
    assert run.tool == "read_file"
    assert run.tokens_source == "usage"
    # Anthropic input = input_tokens + cache reads; cache reads are priced at 0.1x input.
    assert run.input_tokens == sum(2000 + 600 * i + 8000 for i in range(8))
    assert run.cached_tokens == 8 * 8000
    assert run.input_tokens_saved == sum(2000 + 600 * i + 8000 for i in (7,))
    full_price = one(replay([str(path)], Settings(prices=Prices(cache_read=3.0))))
    assert full_price.cost > run.cost


def test_openai_responses(tmp_path: Path) -> None:
    path = tmp_path / "weather.json"
    path.write_text(json.dumps(responses_items()))
    run = one(replay([str(path)]))
    assert run.format == "openai-responses"
    # Allow, nudge, allow (issue 25: the call after the nudge runs), stop at the 4th.
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (5, 2, 4, 2)
    assert run.tool == "get_weather"
    # 5 responses with a call, one final message: 6 model calls, 2 after the stopping one.
    assert (run.turns, run.turns_saved) == (6, 2)


def test_responses_object_with_usage(tmp_path: Path) -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        ],
        "usage": {
            "input_tokens": 5000,
            "input_tokens_details": {"cached_tokens": 4000},
            "output_tokens": 100,
        },
    }
    path = tmp_path / "resp.json"
    path.write_text(json.dumps(response))
    run = one(replay([str(path)]))
    assert (run.steps, run.turns, run.input_tokens, run.cached_tokens) == (2, 1, 5000, 4000)
    assert run.tokens_source == "usage"


def test_claude_code_session(tmp_path: Path) -> None:
    session = "3f2a9c1e-7b44-4e0e-9d51-2c8f0e6a1b77"
    path = write_jsonl(tmp_path / f"{session}.jsonl", claude_code_session(session))
    report = replay([str(path)])
    assert report.problems_total == 0
    runs = {run.run: run for run in report.runs}
    main = runs[session]
    assert main.format == "claude-code"
    # The split response is one turn with two steps (Glob, Read); then Bash x6, whose
    # spellings differ only in whitespace. Every Bash result is the same error (is_error);
    # Bash has no policy, and a shell command may change things even when it fails (a
    # pre-commit hook reformats and fails the commit), so its repeats get one more (issue
    # 16): steps 3, 4, 5 (nudge, the same error twice), 6 (stop).
    assert (main.turns, main.steps) == (7, 8)
    assert (main.nudge_step, main.stop_step, main.steps_saved, main.tool) == (5, 6, 3, "Bash")
    # Usage of the split response is counted once: input = 4 + 1200 + 18000.
    first_turn_input = 4 + 1200 + 18000
    assert main.input_tokens == first_turn_input + sum(19204 + 900 * i for i in range(6))
    assert main.tokens_source == "usage"
    sub = runs[f"{session}/agent-a1b2"]
    assert (sub.steps, sub.stop_step) == (1, None)


def test_codex_rollout(tmp_path: Path) -> None:
    session = "0199a1b2-7c3d-7e4f-9a0b-1c2d3e4f5a6b"
    path = write_jsonl(tmp_path / f"rollout-2026-05-02T17-09-04-{session}.jsonl", codex_rollout())
    report = replay([str(path)])
    assert report.problems_total == 0
    run = one(report)
    assert (run.run, run.format) == (session, "codex")
    # shell(1) apply_patch(2) shell(3) shell(4) shell(5: nudge) shell(6: stop) shell(7). Issue
    # 16: apply_patch is a write, so shell(3) is a new question; shell has no policy, so its
    # repeats run and are judged by their (unchanged) results: nudge and stop one later.
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (7, 5, 6, 2)
    assert run.tool == "shell"
    assert run.tokens_source == "usage"
    assert (run.turns, run.turns_saved) == (7, 1)
    assert run.input_tokens == sum(12000 + 1500 * i for i in range(7))
    assert run.cached_tokens == sum(9000 + 1500 * i for i in range(7))


def test_events_interleaved_runs_and_parallel_turn(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "fleet.jsonl", events_two_runs())
    report = replay([str(path)])
    runs = {run.run: run for run in report.runs}
    triage, orders = runs["triage-7"], runs["orders-2"]
    # request_id is volatile: every get_logs call is the same action.
    assert (triage.steps, triage.nudge_step, triage.stop_step, triage.steps_saved) == (
        10,
        2,
        3,
        8,
    )
    assert triage.stop_location == f"{path}:5"
    # Paging is progress; the parallel turn's duplicate get_order counts once.
    assert (orders.steps, orders.turns, orders.stop_step, orders.nudges) == (12, 11, None, 0)
    assert orders.tokens_source == "usage"
    assert orders.input_tokens == 10 * 800 + 900
    assert [run.run for run in report.runs] == ["triage-7", "orders-2"]


def test_healthy_run_is_not_stopped(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "healthy.jsonl", healthy_run())
    run = one(replay([str(path)]))
    assert run.steps == 14
    assert (run.stop_step, run.reason, run.steps_saved, run.turns_saved) == (None, None, 0, 0)
    assert run.cost_saved == 0
    assert run.tokens_source == "estimated"


def test_jsonl_conversation_per_line(tmp_path: Path) -> None:
    """Fine-tuning / eval style: one whole conversation a line, each a run."""
    rows = [
        {"id": "conv-1", "messages": openai_chat()},
        {"id": "conv-2", "messages": openai_chat()[:5]},
    ]
    path = write_jsonl(tmp_path / "evals.jsonl", rows)
    report = replay([str(path)])
    runs = {run.run: run for run in report.runs}
    assert runs["conv-1"].stop_step == 6  # as test_openai_chat (issue 25)
    assert (runs["conv-2"].steps, runs["conv-2"].stop_step) == (2, None)


def test_jsonl_message_per_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "transcript.jsonl", openai_chat())
    run = one(replay([str(path)]))
    assert (run.run, run.stop_step, run.steps) == (str(path), 6, 6)  # as test_openai_chat


def test_invalid_json_arguments_repeated_are_a_loop(tmp_path: Path) -> None:
    rows = [{"run": "r", "tool": "lookup", "args": '{"q": "refund policy"'} for _ in range(4)]
    path = write_jsonl(tmp_path / "broken.jsonl", rows)
    run = one(replay([str(path)]))
    assert (run.stop_step, run.invalid_arguments) == (3, 3)


def test_parallel_turn_with_invalid_json(tmp_path: Path) -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": "{oops"}}
    messages = [{"role": "user", "content": "go"}]
    for i in range(3):
        messages.append({"role": "assistant", "tool_calls": [{**call, "id": f"x{i}"}] * 2})
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(messages))
    run = one(replay([str(path)]))
    assert (run.steps, run.stop_step) == (3, 3)


# -- containers: gz, stdin, directories -------------------------------------------------------


def test_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "triage.jsonl.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    run = one(replay([str(path)]))
    assert (run.stop_step, run.steps_saved) == (7, 33)  # as test_example_is_the_seed_run


def test_gzip_json_document_without_suffix(tmp_path: Path) -> None:
    path = tmp_path / "chat.bin"
    path.write_bytes(gzip.compress(json.dumps(openai_chat(), indent=1).encode()))
    assert one(replay([str(path)])).stop_step == 6  # as test_openai_chat


def test_stdin(tmp_path: Path) -> None:
    report = replay(["-"], stdin=io.BytesIO(EXAMPLE.read_bytes()))
    run = one(report)
    assert (run.file, run.stop_step) == ("<stdin>", 7)  # as test_example_is_the_seed_run


def test_stdin_gzip() -> None:
    report = replay(["-"], stdin=io.BytesIO(gzip.compress(EXAMPLE.read_bytes())))
    assert one(report).steps_saved == 33  # as test_example_is_the_seed_run


def test_directory(tmp_path: Path) -> None:
    project = tmp_path / "projects" / "-home-dev-shop"
    project.mkdir(parents=True)
    write_jsonl(project / "s1.jsonl", claude_code_session("s1"))
    write_jsonl(project / "s2.jsonl", claude_code_session("s2"))
    (project / "notes.txt").write_text("not a trace")
    report = replay([str(tmp_path / "projects")])
    assert len(report.files) == 2
    assert sorted(r.run for r in report.runs if r.looped) == ["s1", "s2"]


# -- bad input ---------------------------------------------------------------------------------


def test_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    good = [json.dumps({"run": "r", "tool": "get_logs", "args": LOGS})] * 3
    lines = [
        good[0],
        '{"run": "r", "tool": "get_logs", "args": ',  # 2: truncated
        "not json at all",  # 3
        '{"hello": "world"}',  # 4: JSON of no known shape
        '{"run": "r", "tool": 5}',  # 5: tool is not a name
        good[1],
        '{"run": "r", "tool": "x", "args": {}, "usage": {"input_tokens": "many"}}',  # 7
        "",
        good[2],
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    seen: list[str] = []
    report = replay([str(path)], on_problem=lambda p: seen.append(str(p)))
    assert report.problems_total == 5
    assert [p.line for p in report.problems] == [2, 3, 4, 5, 7]
    assert all(s.startswith(f"{path}:") for s in seen)
    run = one(report)
    # The good lines still count: get_logs x3 (x at 7 in between) -> stop at the 4th step.
    assert (run.steps, run.stop_step) == (4, 4)


def test_bad_files_do_not_stop_the_report(tmp_path: Path) -> None:
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(EXAMPLE.read_bytes())[:-40])
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "messages": [\n    {"role": "user", "content": "hi"},\n  oops\n')
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage\n\x80\x81\n")
    scalar = tmp_path / "number.json"
    scalar.write_text("42\n")
    missing = tmp_path / "missing.jsonl"
    report = replay([str(p) for p in (truncated, broken, binary, scalar, missing, EXAMPLE)])
    by_file = {p.path: p for p in report.problems}
    assert "corrupt or truncated" in by_file[str(truncated)].message
    assert by_file[str(broken)].line == 4
    assert "not UTF-8" in by_file[str(binary)].message
    assert "not a trace line" in by_file[str(scalar)].message
    assert "cannot open" in by_file[str(missing)].message
    # The truncated file's readable part is replayed, and the good file is whole.
    files = {run.file: run for run in report.runs}
    # As test_example_is_the_seed_run (issue 25: stopped at step 7).
    assert files[str(EXAMPLE)].steps_saved == 33
    assert files[str(truncated)].stop_step == 7


def test_deeply_nested_arguments_are_skipped(tmp_path: Path) -> None:
    deep: Any = "x"
    for _ in range(300):
        deep = {"a": deep}
    rows = [{"run": "r", "tool": "get_logs", "args": LOGS}, {"run": "r", "tool": "t", "args": deep}]
    rows += [{"run": "r", "tool": "get_logs", "args": LOGS}] * 2
    path = tmp_path / "deep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = replay([str(path)])
    run = one(report)
    assert (run.skipped_calls, run.steps, run.stop_step) == (1, 3, 3)
    assert report.problems[0].line == 2


def test_unrecognised_document(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"name": "x", "version": 2}, indent=2))
    report = replay([str(path)])
    assert len(report.runs) == 0 and report.problems_total == 1
    assert "not a recognised trace" in report.problems[0].message


# -- the JSON report ---------------------------------------------------------------------------


def test_json_report_schema() -> None:
    data = to_json(replay([str(EXAMPLE)]))
    json.dumps(data)  # plain JSON data
    assert data["schema"] == "tripwire.replay/1"
    assert data["tripwire"]["implementation"] == tripwire.IMPLEMENTATION
    assert set(data) == {
        "schema", "tripwire", "settings", "summary", "tools", "runs", "files", "problems",
        "problems_total", "without_calls",
    }  # fmt: skip
    assert (data["without_calls"], data["summary"]["without_calls"]) == ([], 0)
    assert (data["settings"]["mode"], data["settings"]["tools"]) == ("observe", {})
    summary = data["summary"]
    assert summary["runs"] == summary["looped"] == summary["stopped"] == 1
    assert summary["reasons"] == {"loop_detected": 1, "no_progress": 0}
    # As test_example_is_the_seed_run (issue 25: stopped at step 7).
    assert (summary["steps"], summary["steps_saved"]) == (39, 33)
    assert (summary["model_calls"], summary["model_calls_saved"]) == (39, 32)
    assert summary["cost"]["total"] == pytest.approx(2.68, abs=0.005)
    assert summary["cost"]["guarded"] == pytest.approx(0.37, abs=0.005)
    assert summary["cost"]["saved_share"] > summary["steps_saved_share"]
    assert summary["tokens"]["source"] == "usage"
    assert data["tools"] == [
        {
            "tool": "get_logs",
            "stops": 1,
            "reasons": {"loop_detected": 1, "no_progress": 0},
            "nudges": 1,
            "steps_saved": 33,
            "cost_saved": summary["cost"]["saved"],
        }
    ]
    run = data["runs"][0]
    assert {k: run[k] for k in ("steps", "nudge_step", "stop_step", "steps_saved")} == {
        "steps": 39,
        "nudge_step": 5,
        "stop_step": 7,
        "steps_saved": 33,
    }
    assert set(run["tokens"]) == {
        "source", "input", "output", "cached", "cache_write", "input_saved", "output_saved",
        "saved",
    }  # fmt: skip
    assert set(run["cost"]) == {"total", "guarded", "saved"}
    assert data["files"][0]["formats"] == ["events"]


def test_open_runs_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate_module, "MAX_OPEN_RUNS", 2)
    rows = [{"run": f"r{i % 3}", "tool": "t", "args": {"i": i // 3}} for i in range(9)]
    path = write_jsonl(tmp_path / "many.jsonl", rows)
    report = replay([str(path)])
    assert report.split_runs > 0
    assert sum(run.steps for run in report.runs) == 9


def test_finished_runs_spill_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate_module, "SPILL_AFTER", 3)
    monkeypatch.setattr(simulate_module, "CHUNK", 2)
    rows = [{"run": f"r{i}", "tool": "t", "args": {}} for i in range(11)]
    rows += [{"run": "loop", "tool": "t", "args": {}}] * 3
    path = write_jsonl(tmp_path / "many.jsonl", rows)
    report = replay([str(path)])
    assert report.runs.spilled
    names = [run.run for run in report.runs]
    assert names == [f"r{i}" for i in range(11)] + ["loop"]
    assert [run.run for run in report.runs] == names  # iterable again
    assert (report.totals.runs, report.totals.looped, report.totals.steps) == (12, 1, 14)
    data = to_json(report)
    assert [run["run"] for run in data["runs"]] == names
    report.runs.close()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_pipe_is_read_once(tmp_path: Path, jobs: str) -> None:
    # `tripwire replay <(zcat fleet.jsonl.gz)`: looking for Parquet's magic bytes in a pipe
    # used to eat them, and the reader after it then waited for a writer that was gone.
    import subprocess
    import sys
    import threading

    pipes = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    rows = [{"run": "loop", "tool": "t", "args": {"q": 1}}] * 4

    def write(pipe: Path) -> None:
        with open(pipe, "w", encoding="utf-8") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows))

    writers = []
    for pipe in pipes:
        os.mkfifo(pipe)
        writers.append(threading.Thread(target=write, args=(pipe,), daemon=True))
        writers[-1].start()
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from tripwire.cli import main; main(sys.argv[1:])",
         "replay", "--json", "--jobs", jobs, *map(str, pipes)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    summary = json.loads(done.stdout)["summary"]
    assert (summary["runs"], summary["stopped"], summary["steps"]) == (2, 2, 8), done.stderr


def test_a_run_store_takes_over_another_stores_files_in_order(tmp_path: Path) -> None:
    # What a --jobs worker hands the parent: its runs' files, moved, never read.
    def run(name: str) -> RunResult:
        return RunResult(name, "f", None, "events", 1, simulate_module.Counts(steps=1))

    worker = simulate_module.RunStore(spill_after=0, directory=str(tmp_path))
    for name in ("w1", "w2", "w3"):
        worker.append(run(name))
    detached = worker.detach()
    paths = detached.paths
    assert detached.in_files == 3 and detached.memory == []
    assert paths and all(Path(p).parent == tmp_path for p in paths)
    assert len(worker) == 0 and list(worker) == []
    worker.close()  # the files are no longer its to remove
    assert all(Path(p).exists() for p in paths)

    parent = simulate_module.RunStore()
    parent.append(run("p1"))
    parent.adopt(detached)
    parent.append(run("p2"))
    assert not any(Path(p).exists() for p in paths)  # moved
    assert [r.run for r in parent] == ["p1", "w1", "w2", "w3", "p2"]
    assert [r.run for r in parent] == ["p1", "w1", "w2", "w3", "p2"]  # iterable again
    assert len(parent) == 5 and parent.spilled
    own = list(parent._files.paths)
    parent.close()
    assert not any(Path(p).exists() for p in own)


@given(
    ours=st.integers(0, 12),
    theirs=st.integers(0, 12),
    spill_ours=st.integers(0, 4),
    spill_theirs=st.integers(0, 4),
    in_memory=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_a_run_store_takes_another_in_this_process_in_order(
    ours: int, theirs: int, spill_ours: int, spill_theirs: int, in_memory: bool
) -> None:
    """A fleet aside hands its runs over in memory (``in_memory``), or spilled: whichever,
    spilled or not on either side, the runs come in the order they finished."""

    def run(name: str) -> RunResult:
        return RunResult(name, "f", None, "events", 1, simulate_module.Counts(steps=1))

    parent = simulate_module.RunStore(spill_after=spill_ours)
    aside = simulate_module.RunStore(spill_after=spill_theirs)
    for n in range(ours):
        parent.append(run(f"p{n}"))
    for n in range(theirs):
        aside.append(run(f"a{n}"))
    detached = aside.detach(in_memory=in_memory)
    assert detached.in_files + len(detached.memory) == theirs
    assert in_memory or not detached.memory
    parent.adopt(detached)
    parent.append(run("last"))
    expected = [f"p{n}" for n in range(ours)] + [f"a{n}" for n in range(theirs)] + ["last"]
    assert [r.run for r in parent] == expected and len(parent) == len(expected)
    aside.close()
    assert [r.run for r in parent] == expected
    parent.close()


def test_a_run_store_that_keeps_none_counts_them() -> None:
    """The terminal report lists the runs it chose as they finished: the rest are counted,
    not written out; asking for them is an error, not an empty list."""
    store = simulate_module.RunStore(spill_after=0, keep=False)
    for name in ("a", "b"):
        store.append(RunResult(name, "f", None, "events", 1, simulate_module.Counts(steps=1)))
    assert len(store) == 2 and not store.spilled
    with pytest.raises(RuntimeError, match="2 runs were counted, not kept"):
        list(store)
    other = simulate_module.RunStore(keep=False)
    other.adopt(store.detach())
    assert len(other) == 2 and len(store) == 0
    with pytest.raises(ValueError, match="keep_runs=False needs a limit"):
        replay([], keep_runs=False, limit=0)


@given(
    kinds=st.lists(st.tuples(st.sampled_from("snr"), st.integers(0, 3)), max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    limit=st.sampled_from([0, 1, 2, 5, 20]),
)
@settings(max_examples=300, deadline=None)
def test_runs_chosen_as_they_finish_are_those_chosen_after(
    kinds: list[tuple[str, int]], cuts: list[int], limit: int
) -> None:
    # The report's choice made as runs finish, and merged file by file (--jobs), is the
    # choice made by sorting every run: ties in money saved go to the earlier run.
    def run(index: int, kind: str, saved: int) -> RunResult:
        counts = simulate_module.Counts(
            nudges=int(kind == "n"), cost=float(saved), cost_guarded=0.0
        )
        return RunResult(
            f"r{index}", "f", None, "events", 1, counts,
            stop_step=1 if kind == "s" else None,
        )  # fmt: skip

    runs = [run(i, kind, saved) for i, (kind, saved) in enumerate(kinds)]
    stopped = sorted((r for r in runs if r.stopped), key=lambda r: (-r.cost_saved, int(r.run[1:])))
    nudged = [r for r in runs if not r.stopped and r.nudges]
    rest = [r for r in runs if not r.stopped and not r.nudges]
    expected = (
        (stopped[:limit] + nudged[:limit] + rest[:limit])[:limit]
        if limit
        else (stopped + nudged + rest)
    )
    whole = simulate_module.Selection(limit)
    told = simulate_module.Selection(limit)
    for r in runs:
        whole.add(r)
        # Told before a run is made whether it will be chosen (a run that will not, nor
        # kept, is never made): skipped, the choice is the same.
        if told.takes(r.stopped, r.nudges > 0, r.cost_saved):
            told.add(r)
        else:
            assert r not in expected
            told.skip()
    assert whole.runs() == expected and told.runs() == expected
    merged = simulate_module.Selection(limit)
    bounds = sorted({0, len(runs), *(min(c, len(runs)) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        part = simulate_module.Selection(limit)
        for r in runs[start:end]:
            part.add(r)
        merged.merge(part)
    assert merged.runs() == expected


def test_the_table_lists_the_runs_chosen_as_they_finished(tmp_path: Path) -> None:
    rows = [{"run": f"loop{i}", "tool": "t", "args": {"i": i}} for i in range(30) for _ in range(4)]
    rows += [
        {"run": f"ok{i}", "tool": "t", "args": {"step": j}} for i in range(30) for j in range(3)
    ]
    path = write_jsonl(tmp_path / "fleet.jsonl", rows)
    for limit in (1, 7, 20):
        chosen = replay([str(path)], limit=limit)
        after = replay([str(path)], limit=0)
        assert chosen.selection is not None and after.selection is None
        assert render(chosen, limit=limit) == render(after, limit=limit)
        assert render(chosen, limit=limit + 1) == render(after, limit=limit + 1)  # not its own
        chosen.runs.close()
        after.runs.close()


def test_sums_cover_every_field() -> None:
    # Written out field by field for speed: a field added and not summed would be lost.
    fields = simulate_module._COUNT_FIELDS
    counts = simulate_module.Counts(*range(1, len(fields) + 1))
    summed = simulate_module.Counts()
    summed.add(counts)
    assert summed == counts
    totals = simulate_module.Totals(counts, *range(2, 8), "usage", *range(8, 12))  # type: ignore[arg-type]
    merged = simulate_module.Totals()
    merged.merge(totals)
    assert merged == totals
    tool = simulate_module.ToolStats(1, 2, 3, 4, 5.5)
    merged_tool = simulate_module.ToolStats()
    merged_tool.merge(tool)
    assert merged_tool == tool


def test_run_results_pickle_as_they_were() -> None:
    import pickle

    counts = simulate_module.Counts(*range(1, len(simulate_module._COUNT_FIELDS) + 1))
    run = RunResult(
        "r", "f.jsonl", 3, "events", 2, counts, nudge_step=1, nudge_tool="t", stop_step=4,
        reason="loop_detected", tool="t", repeats=3, key="k", stop_location="f.jsonl:9",
        stop_call="t {}", stop_message="m", stop_lead=((1, "allow", "t {}"),),
        tokens_source="estimated", timeline="aans", model="m1", reward=0.5,
    )  # fmt: skip
    back = pickle.loads(pickle.dumps(run, pickle.HIGHEST_PROTOCOL))
    assert back == run and back.counts == counts and back.steps == 1


def test_write_json_is_to_json(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "fleet.jsonl", events_two_runs())
    for paths in ([str(path), str(EXAMPLE)], [str(tmp_path / "missing.jsonl")]):
        report = replay(paths)
        out = io.StringIO()
        write_json(report, out)
        assert json.loads(out.getvalue()) == json.loads(json.dumps(to_json(report)))


def test_detection_of_json_and_jsonl(tmp_path: Path) -> None:
    # A pretty-printed document whose second line is a JSON value on its own.
    pretty = tmp_path / "one.txt"
    pretty.write_text('[\n  {"role": "assistant", "tool_calls": []}\n]\n')
    assert replay([str(pretty)]).problems_total == 0
    # A JSONL file whose first line is broken is still JSONL: one bad line, the rest replayed.
    jsonl = tmp_path / "events.log"
    jsonl.write_text("{broken\n" + EXAMPLE.read_text())
    report = replay([str(jsonl)])
    assert [p.line for p in report.problems] == [1]
    assert one(report).stop_step == 7  # as test_example_is_the_seed_run
    # A list of message lists: one run each (each as test_openai_chat).
    lists = tmp_path / "many.json"
    lists.write_text(json.dumps([openai_chat(), openai_chat()]))
    assert [r.stop_step for r in replay([str(lists)]).runs] == [6, 6]


def test_events_field_aliases_and_custom_tools(tmp_path: Path) -> None:
    rows = [{"run_id": 7, "tool": "t", "input": {"q": 1}} for _ in range(3)]
    path = write_jsonl(tmp_path / "aliases.jsonl", rows)
    run = one(replay([str(path)]))
    assert (run.run, run.stop_step) == ("7", 3)
    custom = {"type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}
    messages = [{"role": "assistant", "tool_calls": [{**custom, "id": f"c{i}"}]} for i in range(3)]
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(messages))
    run = one(replay([str(path)]))
    assert (run.tool, run.stop_step) == ("apply_patch", 3)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lines=st.lists(
        st.one_of(
            json_values(max_leaves=12).map(json.dumps),
            st.fixed_dictionaries(
                {"type": st.sampled_from(["assistant", "message", "function_call", "user"])},
                optional={
                    "role": st.sampled_from(["assistant", "user", "tool"]),
                    "content": json_values(max_leaves=6),
                    "tool_calls": json_values(max_leaves=6),
                    "message": json_values(max_leaves=6),
                    "sessionId": st.just("s"),
                    "name": json_values(max_leaves=2),
                    "arguments": json_values(max_leaves=4),
                },
            ).map(json.dumps),
            st.fixed_dictionaries(
                {"tool": json_values(max_leaves=2)},
                optional={
                    "run": json_values(max_leaves=2),
                    "args": json_values(max_leaves=6),
                    "usage": json_values(max_leaves=4),
                    "turn": json_values(max_leaves=2),
                },
            ).map(json.dumps),
            st.text(max_size=40),
        ),
        max_size=12,
    ),
    as_document=st.booleans(),
)
def test_any_input_gets_a_report_whose_counts_add_up(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], as_document: bool
) -> None:
    """Whatever the file holds, the replay reports and never raises; the report is the same
    for the same input, and its totals are the sums of its parts."""
    path = tmp_path_factory.mktemp("fuzz") / "trace"
    if as_document:
        text = "[\n" + ",\n".join(line for line in lines if _is_json(line)) + "\n]\n"
    else:
        text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    report = replay([str(path)])
    data = to_json(report)
    # The same input twice: the same report, in data and as text.
    again = replay([str(path)])
    assert to_json(again) == data
    assert render(again) == render(report)

    (file,) = data["files"]
    runs, summary = data["runs"], data["summary"]
    if not as_document:
        assert file["lines"] == text.count("\n")
    # Every problem is counted in its file's count; the listed ones are some of them.
    assert data["problems_total"] == file["problems"] >= len(data["problems"])
    assert summary["runs"] == len(runs) == file["runs"]
    for name in ("steps", "steps_saved", "model_calls", "model_calls_saved", "results"):
        assert summary[name] == sum(run[name] for run in runs), name
    stopped = [run for run in runs if run["stop_step"] is not None]
    nudged = [run for run in runs if run["nudges"] > 0]
    assert summary["stopped"] == len(stopped) == sum(summary["reasons"].values())
    assert summary["stopped"] == sum(tool["stops"] for tool in data["tools"])
    assert summary["nudged"] == len(nudged)
    assert summary["nudged_only"] == len([run for run in nudged if run["stop_step"] is None])
    assert sum(tool["nudges"] for tool in data["tools"]) == sum(run["nudges"] for run in runs)
    for run in runs:
        # A verdict per step: nudges and the stop are steps of the run.
        assert 0 <= run["nudges"] <= run["steps"]
        assert (run["nudge_step"] is None) == (run["nudges"] == 0)
        if run["nudge_step"] is not None:
            assert 1 <= run["nudge_step"] <= run["steps"]
        if run["stop_step"] is None:
            assert (run["reason"], run["tool"], run["steps_saved"]) == (None, None, 0)
        else:
            assert 1 <= run["stop_step"] <= run["steps"]
            # The stopped call and every one after it were saved.
            assert run["steps_saved"] == run["steps"] - run["stop_step"] + 1
            assert run["reason"] in summary["reasons"]


# A JSON integer longer than Python converts to an int (4,300 digits by default).
LONG_NUMBER = "9" * 5_000


def _long_int(digits: str) -> int | str:
    """How replay reads a JSON integer: an int, or past Python's limit its digits."""
    return int(digits) if len(digits.lstrip("-")) <= 4_300 else digits


# Results as traces hold them: plain values, texts (JSON, errors), content lists whose
# blocks' "type" is anything JSON allows (JSON Schema's ["string", "null"], GraphQL's {}).
_BLOCK_TYPES = st.one_of(
    st.sampled_from(["text", "output_text", "image", "tool_use"]),
    st.just(["string", "null"]),
    st.just({"kind": "OBJECT"}),
    st.integers(0, 3),
    st.none(),
)
_RESULT_JSON = st.one_of(
    json_values(max_leaves=4).map(json.dumps),
    st.sampled_from(["a", "b", "", "[]", "Error: boom", "timed out", "null"]).map(json.dumps),
    st.lists(
        st.fixed_dictionaries(
            {"type": _BLOCK_TYPES, "text": st.sampled_from(["a", "b", "Error: x", "[]"])}
        ),
        min_size=1,
        max_size=3,
    ).map(json.dumps),
    st.just(f"[{LONG_NUMBER}]"),
    st.just(f"[-{LONG_NUMBER}1]"),
)
_ARGS_JSON = st.one_of(
    st.sampled_from(['{"q": 1}', '{"q": 2}', "{}", "null", '"{\\"q\\": 1}"', '"not json"']),
    st.just(f'{{"n": {LONG_NUMBER}}}'),
    st.dictionaries(st.sampled_from(["q", "path", "n"]), json_values(max_leaves=2), max_size=2).map(
        json.dumps
    ),
)


# A run's calls, drawn from a few distinct ones so that loops (and stops) are common.
_CALLS = st.lists(
    st.tuples(st.sampled_from(["search", "read_file", "run"]), _ARGS_JSON, _RESULT_JSON),
    min_size=1,
    max_size=4,
).flatmap(lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=14))


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(calls=_CALLS, chat=st.booleans())
def test_replay_reads_what_the_trace_says(
    tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[str, str, str]], chat: bool
) -> None:
    """Issue 26: the replay of a trace is what a guard given the same calls and results
    says, whatever the results hold (blocks whose "type" is a list or an object, numbers
    longer than Python converts): same steps, nudges, stop and results read. As events
    lines (arguments as values), and as one Chat Completions document (arguments as JSON
    text, results as tool messages' content)."""
    if chat:
        path = tmp_path_factory.mktemp("fuzz") / "chat.json"
        messages = ['{"role": "user", "content": "go"}']
        for index, (tool, args, result) in enumerate(calls):
            function = {"name": tool, "arguments": "ARGS"}
            call = {"id": f"c{index}", "type": "function", "function": function}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            messages.append(json.dumps(message).replace('"ARGS"', json.dumps(args)))
            messages.append(f'{{"role": "tool", "tool_call_id": "c{index}", "content": {result}}}')
        path.write_text("[\n" + ",\n".join(messages) + "\n]\n", encoding="utf-8")
    else:
        path = tmp_path_factory.mktemp("fuzz") / "trace.jsonl"
        lines = [
            f'{{"run": "r", "tool": "{tool}", "args": {args}, "result": {result}}}\n'
            for tool, args, result in calls
        ]
        path.write_text("".join(lines), encoding="utf-8")
    report = replay([str(path)])
    assert report.problems_total == 0
    run = one(report)

    script: list[dict[str, Any]] = []
    for tool, args_text, result_text in calls:
        call: dict[str, Any] = {"tool": tool}
        if chat:
            call["text"] = args_text
        else:
            args = json.loads(args_text, parse_int=_long_int)
            args = {} if args is None else args
            call["text" if type(args) is str else "args"] = args
        call["result"] = content_value(json.loads(result_text, parse_int=_long_int))
        script.append(call)
    verdicts = run_calls(Settings().guard(), script)
    stop = verdicts[-1] if verdicts[-1].action == "stop" else None
    nudges = [verdict.step for verdict in verdicts if verdict.action == "nudge"]
    results = len(verdicts) - (stop is not None)
    assert (run.nudges, run.nudge_step) == (len(nudges), nudges[0] if nudges else None)
    assert (run.stop_step, run.reason, run.tool) == (
        (stop.step, stop.reason, stop.tool) if stop else (None, None, None)
    )
    # Steps: every call of the trace (those after the stop too: the steps it saved).
    assert (run.steps, run.results) == (len(calls), results)
    assert stop is not None or run.stop_step is None


@pytest.mark.parametrize("as_document", [False, True])
def test_numbers_longer_than_python_converts_are_read(tmp_path: Path, as_document: bool) -> None:
    """Issue 26: a JSON number of 5,000 digits is valid JSON; Python's int conversion
    refuses it (``ValueError``, not a ``JSONDecodeError``). The trace is read, the number
    kept as its digits, in a JSONL line and in a whole JSON document alike: the replay is
    the one of the same trace with a short number in its place."""

    def trace(number: str) -> str:
        if as_document:
            return json.dumps(openai_chat()).replace("{", f'{{"big": {number}, ', 1)
        line = f'{{"run": "r", "tool": "t", "args": {{"n": {number}}}, "result": [-{number}]}}'
        return "\n".join([line] * 4)

    runs = []
    for name, number in (("long", LONG_NUMBER), ("short", "7")):
        path = tmp_path / (name + (".json" if as_document else ".jsonl"))
        path.write_text(trace(number))
        report = replay([str(path)])
        assert report.problems_total == 0
        run = one(report)
        runs.append((run.nudge_step, run.stop_step, run.tool, run.steps, run.results))
    assert runs[0] == runs[1]
    assert runs[0][1] is not None  # both stopped: the calls were read


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


# -- results: progress-aware replay ------------------------------------------------------------

HASH_ONLY = Settings(observe=False)
POLL = {"build_status": "poll"}


def test_results_are_linked_in_every_format(tmp_path: Path) -> None:
    """Each format's results reach the guard, linked to their calls: every call checked
    before the stop has its result (the nudged ones too: linked, though not observed)."""
    cases = {
        "chat.json": json.dumps(openai_chat()),
        "anthropic.json": json.dumps(anthropic_conversation()),
        "responses.json": json.dumps(responses_items()),
        "session.jsonl": "".join(json.dumps(row) + "\n" for row in claude_code_session("s")),
        "rollout.jsonl": "".join(json.dumps(row) + "\n" for row in codex_rollout("c")),
    }
    linked = {}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        report = replay([str(tmp_path / name)])
        run = next(r for r in report.runs if r.stopped)
        assert run.results_unlinked == 0, name
        assert report.problems_total == 0, name
        linked[name] = (run.results, run.stop_step)
    # All but the stopped call's: chat 5 (2 parallel + 3 searches), anthropic 6 (read, edit,
    # test, read x3: issue 16, the edit is an inferred write), responses 3, Claude Code 5
    # (Glob, Read, Bash x3), Codex 5 (shell, patch, shell x3: issue 16, see codex_rollout).
    # Issue 25: with results observed, the chat, anthropic and responses loops (reads) run
    # the call after the nudge and stop one call later.
    assert linked == {
        "chat.json": (5, 6),
        "anthropic.json": (6, 7),
        "responses.json": (3, 4),
        "session.jsonl": (5, 6),
        "rollout.jsonl": (5, 6),
    }
    hash_only = one(replay([str(tmp_path / "chat.json")], HASH_ONLY))
    assert (hash_only.results, hash_only.stop_step) == (0, 5)


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic"])
def test_poll_that_advances_is_progress(tmp_path: Path, fmt: str) -> None:
    doc = chat_poll(ADVANCING) if fmt == "openai-chat" else anthropic_poll(ADVANCING)
    path = write_doc(tmp_path / "release.json", doc)
    run = one(replay([str(path)], Settings(tools=POLL)))
    assert run.format == fmt
    # Five polls (and, in the chat, the deploy): every result linked, none stopped.
    results = 6 if fmt == "openai-chat" else 5
    assert (run.stop_step, run.nudges, run.results, run.results_unlinked) == (None, 0, results, 0)
    # The same run to the hash-only guard: the third identical poll is a loop.
    hashed = one(replay([str(path)], Settings(observe=False, tools=POLL)))
    assert (hashed.nudge_step, hashed.stop_step, hashed.reason) == (2, 3, "loop_detected")
    assert hashed.results == 0


def test_poll_that_never_advances_stops_at_max_polls(tmp_path: Path) -> None:
    path = write_doc(tmp_path / "stuck.json", chat_poll(["running 10%"] * 6))
    tools = {"build_status": {"policy": "poll", "max_polls": 3}}
    run = one(replay([str(path)], Settings(tools=tools)))
    assert (run.nudges, run.stop_step, run.reason, run.tool) == (
        0,
        4,
        "loop_detected",
        "build_status",
    )
    assert run.stop_message is not None and "more than its limit of 3" in run.stop_message


def test_edit_undo_cycle_stops_with_no_progress(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "cart.jsonl", edit_undo_events())
    run = one(replay([str(path)], Settings(tools={"edit_file": "write"})))
    # edit, test, undo, test twice; the 9th call would start a third round.
    assert (run.nudges, run.stop_step, run.reason, run.tool) == (0, 9, "no_progress", "edit_file")
    assert run.stop_message is not None
    assert "edit_file -> run_tests -> edit_file -> run_tests" in run.stop_message
    assert run.steps_saved == 4 and run.cost_saved > 0
    # Undeclared, edit_file is a write by its name's verb (issue 16): the same cycle, stopped
    # at the same call. (Before issue 16 an undeclared edit was not known to change anything,
    # and re-running the tests was stopped as a loop at step 6.)
    undeclared = one(replay([str(path)]))
    assert (undeclared.stop_step, undeclared.reason, undeclared.tool) == (
        9,
        "no_progress",
        "edit_file",
    )
    hashed = one(replay([str(path)], Settings(observe=False, tools={"edit_file": "write"})))
    assert (hashed.stop_step, hashed.reason, hashed.tool) == (6, "loop_detected", "run_tests")


def test_fruitless_rewording_stops_with_no_progress(tmp_path: Path) -> None:
    path = write_doc(tmp_path / "refund.json", fruitless_search_responses())
    run = one(replay([str(path)]))
    # Every query differs, every answer is "[]" (JSON text: an empty list). Issue 25: one
    # question reworded (free text); allow x3, nudge, allow (the evidence), stop at the 6th.
    assert (run.nudge_step, run.stop_step, run.reason, run.tool) == (
        4,
        6,
        "no_progress",
        "search_docs",
    )
    assert one(replay([str(path)], HASH_ONLY)).stopped is False
    # A tool whose empty answers are answers is never stopped for them.
    tools = {"search_docs": {"policy": "read", "empty": False}}
    assert one(replay([str(path)], Settings(tools=tools))).stopped is False


def test_results_linked_by_call_id_across_lines(tmp_path: Path) -> None:
    """Events with ``call_id``, results on lines of their own, runs interleaved, a parallel
    turn answered in reverse order, ids reused in every turn (``call_0``)."""
    # One question reworded (free text: issue 25, empty answers to different questions are
    # exploration), six times.
    queries = [f"why did build 77 fail ({i})" for i in range(6)]
    rows: list[dict[str, Any]] = []
    for i, state in enumerate(ADVANCING):
        rows.append(
            {"run": "release", "tool": "build_status", "args": {"build": 77}, "call_id": "call_0"}
        )
        rows.append(
            {"run": "search", "tool": "search", "args": {"q": queries[i]}, "call_id": "call_0"}
        )
        rows.append({"run": "release", "result_of": "call_0", "result": {"state": state}})
        rows.append({"run": "search", "result_of": "call_0", "result": []})
    rows.append({"run": "search", "tool": "search", "args": {"q": queries[5]}, "call_id": "call_0"})
    rows.append({"run": "search", "result_of": "call_0", "result": []})
    # A parallel turn of two calls, its results given in reverse order after it.
    rows += [
        {"run": "release", "turn": 9, "tool": "read", "args": {"p": "a"}, "call_id": 1},
        {"run": "release", "turn": 9, "tool": "read", "args": {"p": "b"}, "call_id": 2},
        {"run": "release", "result_of": 2, "result": "b"},
        {"run": "release", "result_of": 1, "result": "a"},
    ]
    path = write_jsonl(tmp_path / "fleet.jsonl", rows)
    report = replay([str(path)], Settings(tools=POLL))
    runs = {run.run: run for run in report.runs}
    assert report.problems_total == 0
    assert (runs["release"].stop_step, runs["release"].results) == (None, 7)
    # The searches' empty results reached the guard, each linked to its own call (the
    # nudged 4th's too, though not observed): allow x3, nudge, allow, stop at the 6th.
    assert (runs["search"].stop_step, runs["search"].reason, runs["search"].results) == (
        6,
        "no_progress",
        5,
    )
    # To the hash-only guard: a loop on the poll, and nothing wrong with the searches.
    hashed = {run.run: run for run in replay([str(path)], Settings(observe=False, tools=POLL)).runs}
    assert (hashed["release"].stop_step, hashed["search"].stop_step) == (3, None)


def test_inline_results_of_a_parallel_turn(tmp_path: Path) -> None:
    rows = [
        {
            "run": "r",
            "turn": t,
            "tool": "search",
            "args": {"q": f"refund policy {q}{t}"},
            "result": [],
        }
        for t in range(4)
        for q in ("a", "b")
    ]
    run = one(replay([str(write_jsonl(tmp_path / "t.jsonl", rows))]))
    # Turns of two empty searches, one question reworded (free text: issue 25, different
    # one-word queries are different questions): the third turn starts with 4 empties in a
    # row behind it (the second turn's calls were checked before either's result was in), so
    # its first call is nudged and its second runs (issue 25: a stop needs a result seen
    # after the nudge); the fourth turn is stopped.
    assert (run.results, run.nudges, run.nudge_step, run.stop_step, run.reason) == (
        6,
        1,
        5,
        7,
        "no_progress",
    )


def test_result_for_an_unknown_call_is_ignored_and_counted(tmp_path: Path) -> None:
    """Not bad input (real traces have such results: a resumed log, a result for a call
    before the log began), so no problem and no exit status; counted, and noted."""
    rows: list[dict[str, Any]] = [
        {"run": "r", "result_of": "before-the-log", "result": "x"},
        {"run": "r", "tool": "get_logs", "args": LOGS, "call_id": "c1"},
        {"run": "r", "result_of": "c1", "result": []},
        {"run": "r", "result_of": "c1", "result": []},  # answered already
        {"run": "r", "result_of": "nobody", "result": []},
        {"run": "r", "tool": "get_logs", "args": LOGS, "call_id": "c2"},
    ]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    report = replay([str(path)])
    run = one(report)
    assert report.problems_total == 0
    assert (run.results, run.results_unlinked, report.totals.results_unlinked) == (1, 2, 3)
    assert "3 tool results matched no call of their run and were ignored." in render(report)
    data = to_json(report)
    assert (data["summary"]["results"], data["summary"]["results_unlinked"]) == (1, 3)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"run": "r", "result_of": [1], "result": 1}])
    assert replay([str(bad)]).problems_total == 1


def test_pending_results_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate_module, "MAX_PENDING", 2)
    rows: list[dict[str, Any]] = [
        {"run": "r", "tool": "t", "args": {"i": i}, "call_id": f"c{i}"} for i in range(3)
    ]
    rows += [{"run": "r", "result_of": f"c{i}", "result": i} for i in range(3)]
    run = one(replay([str(write_jsonl(tmp_path / "r.jsonl", rows))]))
    assert (run.results, run.results_unlinked) == (2, 1)  # c0 was forgotten


def test_claude_code_results_that_change_are_progress(tmp_path: Path) -> None:
    lines = claude_code_session("s")
    failing = iter(["5 failing", "4 failing", "3 failing", "2 failing", "1 failing", "0 failing"])
    for line in lines:
        content = line.get("message", {}).get("content")
        if isinstance(content, list) and content and content[0].get("content") == "1 failing":
            content[0]["content"] = next(failing)
    path = write_jsonl(tmp_path / "s.jsonl", lines)
    run = next(
        r for r in replay([str(path)], Settings(tools={"Bash": "poll"})).runs if r.run == "s"
    )
    assert (run.stop_step, run.results) == (None, 8)
    assert next(iter(replay([str(path)], HASH_ONLY).runs)).stop_step == 5


def test_codex_wall_time_is_not_a_change(tmp_path: Path) -> None:
    """Codex outputs carry the command's wall-clock time; it differs every time, so unless it
    is dropped, a patch and its undo never give the same results twice and the cycle is
    missed."""
    path = write_jsonl(tmp_path / "rollout.jsonl", codex_edit_undo())
    run = one(replay([str(path)], Settings(tools={"apply_patch": "write"})))
    assert (run.format, run.results, run.results_unlinked) == ("codex", 8, 0)
    assert (run.nudges, run.stop_step, run.reason, run.tool) == (0, 9, "no_progress", "apply_patch")
    hashed = one(replay([str(path)], HASH_ONLY))
    assert (hashed.stop_step, hashed.reason, hashed.tool) == (6, "loop_detected", "shell")


def test_codex_outputs_lose_their_wall_time() -> None:
    from tripwire.replay.formats.codex import codex_output as _codex_output

    text = "Exit code: 1\nWall time: 2.5 seconds\nOutput:\n1 failed\n"
    assert _codex_output(text) == "Exit code: 1\nOutput:\n1 failed\n"
    meta = {"output": "ok", "metadata": {"exit_code": 0, "duration_seconds": 0.3}}
    assert _codex_output(meta) == {"output": "ok", "metadata": {"exit_code": 0}}
    assert _codex_output([1]) == [1]


def test_result_values_as_the_harness_saw_them() -> None:
    from tripwire.replay.formats import result_value

    assert result_value("[]") == []
    assert result_value(' {"a": 1} ') == {"a": 1}
    assert result_value("null") is None
    assert result_value('"ok"') == "ok"
    assert result_value("1 failed") == "1 failed"
    assert result_value("[not json") == "[not json"
    assert result_value([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "a\nb"
    assert result_value([{"type": "text", "text": "[]"}]) == []
    image = [{"type": "text", "text": "a"}, {"type": "image", "source": {}}]
    assert result_value(image) == image
    assert result_value([]) == []
    assert result_value("[" * 5000 + "]" * 5000).startswith("[[[")


def test_mcp_call_output_and_server_tool_results(tmp_path: Path) -> None:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "find it"}]
    for i in range(5):
        items.append(
            {
                "type": "mcp_call",
                "id": f"mcp_{i}",
                "server_label": "docs",
                "name": "search",
                "arguments": '{"q": "x"}',
                "output": f"page {i}",
            }
        )
        items.append({"type": "message", "role": "user", "content": "go on"})
    path = write_doc(tmp_path / "mcp.json", items)
    run = one(replay([str(path)], Settings(tools={"search": "poll"})))
    assert (run.results, run.stop_step) == (5, None)
    blocks: list[dict[str, Any]] = [{"role": "user", "content": "news?"}]
    for i in range(4):
        blocks.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": f"srv_{i}",
                        "name": "web_search",
                        "input": {"query": "x"},
                    },
                    {"type": "web_search_tool_result", "tool_use_id": f"srv_{i}", "content": []},
                ],
            }
        )
    run = one(replay([str(write_doc(tmp_path / "web.json", blocks))]))
    # web_search is volatile, as Claude Code's WebSearch is (issue 16): the same search again
    # at once, with an empty answer, is nudged (its result linked, not observed), the third
    # runs (issue 25: a stop needs a result seen after the nudge), the fourth is stopped.
    assert (run.results, run.stop_step) == (3, 4)


def test_json_report_mode_tools_and_reasons(tmp_path: Path) -> None:
    cart = write_jsonl(tmp_path / "cart.jsonl", edit_undo_events())
    tools = {"edit_file": "write", "build_status": {"policy": "poll", "max_polls": 30}}
    data = to_json(replay([str(cart), str(EXAMPLE)], Settings(tools=tools)))
    assert (data["settings"]["mode"], data["settings"]["tools"]) == ("observe", tools)
    summary = data["summary"]
    assert summary["reasons"] == {"loop_detected": 1, "no_progress": 1}
    assert (summary["stopped"], summary["looped"], summary["no_progress"]) == (2, 1, 1)
    by_tool = {tool["tool"]: tool for tool in data["tools"]}
    assert by_tool["edit_file"]["reasons"] == {"loop_detected": 0, "no_progress": 1}
    assert by_tool["get_logs"]["reasons"] == {"loop_detected": 1, "no_progress": 0}
    runs = {run["run"]: run for run in data["runs"]}
    assert runs["fix-cart"]["reason"] == "no_progress"
    assert runs["fix-cart"]["stop_message"].startswith("Stopped (no_progress)")
    # Steps 1-6, the nudged 5th linked though not observed (issue 25: stopped at step 7).
    assert (runs["checkout-triage"]["results"], runs["checkout-triage"]["results_unlinked"]) == (
        6,
        0,
    )
    text = render(replay([str(cart), str(EXAMPLE)], Settings(tools=tools)))
    assert "results observed" in text
    assert "tools: edit_file write, build_status poll (max_polls 30)" in text
    assert "2 stopped (100%: 1 looped, 1 no progress)" in text
    hashed = to_json(replay([str(cart)], Settings(observe=False, tools=tools)))
    assert (hashed["settings"]["mode"], hashed["settings"]["tools"]) == ("hash-only", tools)
    assert hashed["summary"]["reasons"] == {"loop_detected": 1, "no_progress": 0}


def test_example_with_results_stops_one_call_later_than_without() -> None:
    """Issue 25: with results observed, a stop rests on a result seen after the nudge, so the
    call after it (step 6) runs and step 7 is stopped; the hash-only guard stops step 6."""
    for given_settings in (Settings(), Settings(tools={"get_logs": "read"})):
        run = one(replay([str(EXAMPLE)], given_settings))
        assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (39, 5, 7, 33)
        assert (run.reason, run.repeats, round(run.cost, 2), round(run.cost_guarded, 2)) == (
            "loop_detected",
            4,
            2.68,
            0.37,
        )
    run = one(replay([str(EXAMPLE)], HASH_ONLY))
    assert (run.steps, run.nudge_step, run.stop_step, run.steps_saved) == (39, 5, 6, 34)
    assert (run.reason, run.repeats, round(run.cost, 2), round(run.cost_guarded, 2)) == (
        "loop_detected",
        3,
        2.68,
        0.31,
    )
    assert one(replay([str(EXAMPLE)])).results == 6  # steps 1-6 (the 5th was nudged)
    assert "No tool results" not in render(replay([str(EXAMPLE)]))
