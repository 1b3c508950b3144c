"""``tripwire replay`` on the layouts people have on disk: tau-bench results, OpenHands event
lists, SWE-agent ``.traj`` (both kinds), ATIF, forward-compatible Codex and Claude Code records,
and a directory of all of them in one command; and the money, against figures worked by hand.

Every fixture is a faithful reduction written here (a few steps, shortened text) of the public
format named beside it, not a copy of anyone's file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tripwire.cli import main
from tripwire.replay import Settings, replay, to_json
from tripwire.replay.cost import Prices, Usage, parse_usage
from tripwire.replay.formats.swe_agent import split_command


def write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# -- fixtures ------------------------------------------------------------------------------------


def tau_bench() -> list[dict[str, Any]]:
    """Reduces sierra-research/tau-bench ``historical_trajectories/gpt-4o-airline.json`` (2024):
    rows of {task_id, reward, info, traj, trial}, traj an OpenAI chat list. Task 0 books the same
    flight three times over (reward 0); task 1 looks a user up once (reward 1)."""
    book = '{"user_id":"mia_li_3668","flight":"HAT136","cabin":"economy"}'
    stuck: list[dict[str, Any]] = [
        {"role": "system", "content": "# Airline Agent Policy"},
        {"role": "user", "content": "Book me HAT136, please."},
    ]
    for i in range(4):
        stuck.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "book_reservation", "arguments": book},
                    }
                ],
            }
        )
        stuck.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "name": "book_reservation",
                "content": "Error: payment amount does not add up",
            }
        )
    stuck.append({"role": "assistant", "content": "Sorry, I could not book it."})
    healthy = [
        {"role": "user", "content": "Who am I? mia_li_3668"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_x",
                    "type": "function",
                    "function": {
                        "name": "get_user_details",
                        "arguments": '{"user_id":"mia_li_3668"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_x", "content": '{"name": "Mia"}'},
        {"role": "assistant", "content": "You are Mia."},
    ]
    info = {"task": {"user_id": "mia_li_3668"}, "source": "user", "user_cost": 0.01}
    return [
        {"task_id": 0, "reward": 0.0, "info": info, "traj": stuck, "trial": 0},
        {"task_id": 1, "reward": 1.0, "info": info, "traj": healthy, "trial": 0},
    ]


def openhands_events() -> list[dict[str, Any]]:
    """Reduces All-Hands-AI/OpenHands ``tests/runtime/trajs/basic.json`` (0.2x event stream):
    a user message, then the agent running one command four times through function calling
    (``tool_call_metadata`` with the LiteLLM response), each observed with the same output."""
    events: list[dict[str, Any]] = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "Run the tests"}},
        {"id": 1, "source": "environment", "observation": "agent_state_changed", "content": ""},
    ]
    for i in range(4):
        action_id = 2 + 2 * i
        call_id = f"toolu_{i}"
        arguments = json.dumps({"command": "pytest -q", "is_input": "false"})
        metadata = {
            "function_name": "execute_bash",
            "tool_call_id": call_id,
            "model_response": {
                "id": f"chatcmpl-{i}",
                "model": "claude-3-5-sonnet-20241022",
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": "Running the tests.",
                            "tool_calls": [
                                {
                                    "id": call_id,
                                    "type": "function",
                                    "function": {"name": "execute_bash", "arguments": arguments},
                                }
                            ],
                        }
                    }
                ],
                # LiteLLM: prompt_tokens includes the cache fields beside it.
                "usage": {
                    "prompt_tokens": 3000,
                    "completion_tokens": 100,
                    "cache_creation_input_tokens": 200,
                    "cache_read_input_tokens": 2700,
                    "prompt_tokens_details": {"cached_tokens": 2700},
                },
            },
            "total_calls_in_response": 1,
        }
        events.append(
            {
                "id": action_id,
                "source": "agent",
                "action": "run",
                "tool_call_metadata": metadata,
                "args": {"command": "pytest -q", "thought": f"attempt {i}", "blocking": False},
            }
        )
        events.append(
            {
                "id": action_id + 1,
                "source": "agent",
                "cause": action_id,
                "observation": "run",
                "content": "1 failed: test_total",
                "extras": {"metadata": {"exit_code": 1}},
            }
        )
    return events


def swe_agent_commands() -> dict[str, Any]:
    """Reduces SWE-agent/SWE-agent ``trajectories/demonstrations/*.traj`` (0.x, commands in the
    text): ``trajectory[].action`` strings with their observations; ``open`` four times."""
    steps = [
        ("find_file missing_colon.py\n", "Found 1 matches"),
        ("open tests/missing_colon.py\n", "[File: tests/missing_colon.py (10 lines total)]"),
        ("open tests/missing_colon.py\n", "[File: tests/missing_colon.py (10 lines total)]"),
        ("open  tests/missing_colon.py\n", "[File: tests/missing_colon.py (10 lines total)]"),
        ("open tests/missing_colon.py\n", "[File: tests/missing_colon.py (10 lines total)]"),
        ("python tests/missing_colon.py\n", "SyntaxError"),
    ]
    return {
        "environment": "swe_main",
        "trajectory": [
            {"action": a, "observation": o, "response": f"DISCUSSION\n```\n{a}```", "thought": ""}
            for a, o in steps
        ],
        "history": [
            {"role": "system", "content": "SETTING: You are an autonomous programmer."},
            {"role": "user", "content": "ISSUE: SyntaxError in missing_colon.py"},
        ],
        "info": {"exit_status": "submitted", "model_stats": {"api_calls": 6}},
    }


def swe_agent_tool_calls() -> dict[str, Any]:
    """Reduces SWE-agent ``demo__function_calling_simple.traj`` (1.x): a ``history`` chat whose
    tool messages name their calls in ``tool_call_ids``."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "SETTING: ...", "message_type": "system_prompt"},
        {"role": "user", "content": "ISSUE: ...", "message_type": "observation"},
    ]
    for i in range(4):
        history.append(
            {
                "role": "assistant",
                "content": "Let me search.",
                "action": 'find_file "missing_colon.py"',
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {
                            "name": "find_file",
                            "arguments": '{"file_name": "missing_colon.py"}',
                        },
                    }
                ],
                "message_type": "action",
            }
        )
        history.append(
            {
                "role": "tool",
                "content": "Found 1 matches for missing_colon.py",
                "tool_call_ids": [f"call_{i}"],
                "message_type": "observation",
            }
        )
    return {"trajectory": [], "history": history, "info": {"exit_status": "submitted"}}


def atif() -> dict[str, Any]:
    """Reduces an ATIF v1.4 trajectory (harbor RFC 0001): agent steps with ``tool_calls`` of
    ``function_name`` and ``arguments``, ``observation.results`` by ``source_call_id``."""
    steps: list[dict[str, Any]] = [
        {"step_id": 1, "source": "system", "message": "You are a terminal agent."},
        {"step_id": 2, "source": "user", "message": "Fix the failing build."},
    ]
    for i in range(4):
        steps.append(
            {
                "step_id": 3 + i,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {
                        "tool_call_id": f"c{i}",
                        "function_name": "bash_command",
                        "arguments": {"keystrokes": "make\n"},
                    }
                ],
                "observation": {
                    "results": [{"source_call_id": f"c{i}", "content": "make: *** Error 1"}]
                },
                "metrics": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 800},
            }
        )
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": "atif-session-1",
        "agent": {"name": "terminus", "version": "1.0", "model_name": "gpt-4.1"},
        "steps": steps,
    }


def codex_rollout(unknown: bool) -> list[dict[str, Any]]:
    """Reduces a Codex CLI rollout (``~/.codex/sessions/**/rollout-*.jsonl``, 0.4x), with a
    record type of a later Codex when ``unknown``."""
    ts = "2025-10-01T10:00:00.000Z"
    rows: list[dict[str, Any]] = [
        {"timestamp": ts, "type": "session_meta", "payload": {"id": "codex-1", "cwd": "/w"}},
        {"timestamp": ts, "type": "turn_context", "payload": {"model": "gpt-5-codex"}},
    ]
    if unknown:
        rows.append({"timestamp": ts, "type": "ghost_commit", "payload": {"sha": "abc"}})
    rows.append(
        {
            "timestamp": ts,
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["ls"]}',
                "call_id": "call_1",
            },
        }
    )
    rows.append(
        {
            "timestamp": ts,
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "last_token_usage": {
                        "input_tokens": 10000,
                        "cached_input_tokens": 9000,
                        "output_tokens": 100,
                    }
                },
            },
        }
    )
    return rows


def claude_session(unknown: bool) -> list[dict[str, Any]]:
    """Reduces a Claude Code 2.0 session (``~/.claude/projects/*/*.jsonl``): one assistant
    response with a tool call and Anthropic usage (cache reads and writes); a record type of a
    later Claude Code when ``unknown``."""
    rows: list[dict[str, Any]] = [
        {
            "type": "user",
            "sessionId": "cc-1",
            "uuid": "u1",
            "message": {"role": "user", "content": "List the files"},
        },
        {
            "type": "assistant",
            "sessionId": "cc-1",
            "uuid": "a1",
            "message": {
                "id": "msg_1",
                "model": "claude-sonnet-4-5-20250929",
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"c": 1}}],
                "usage": {
                    "input_tokens": 10,
                    "cache_creation_input_tokens": 1000,
                    "cache_read_input_tokens": 20000,
                    "output_tokens": 500,
                },
            },
        },
    ]
    if unknown:
        rows.append({"type": "agent-status", "sessionId": "cc-1", "status": "idle"})
    return rows


# -- each format --------------------------------------------------------------------------------


def test_tau_bench_runs_keep_their_rewards(tmp_path: Path) -> None:
    report = replay([str(write(tmp_path / "gpt-4o-airline.json", tau_bench()))])
    runs = {run.run: run for run in report.runs}
    assert set(runs) == {"task 0 trial 0", "task 1 trial 0"}
    stuck, healthy = runs["task 0 trial 0"], runs["task 1 trial 0"]
    assert (stuck.format, stuck.reward, stuck.tool, stuck.stop_step) == (
        "openai-chat", 0.0, "book_reservation", 3
    )  # fmt: skip
    assert (healthy.reward, healthy.stopped, healthy.steps) == (1.0, False, 1)
    outcomes = to_json(report)["summary"]["outcomes"]
    assert outcomes == {"labelled": 2, "succeeded": 1, "stopped": 1, "stopped_succeeded": 0}
    assert report.files[0].formats == {"tau-bench", "openai-chat"}


def test_openhands_event_list(tmp_path: Path) -> None:
    report = replay([str(write(tmp_path / "basic.json", openhands_events()))])
    (run,) = list(report.runs)
    # A shell command with no policy gets one more repeat, judged by its result: the same.
    assert (run.format, run.steps, run.tool, run.stop_step) == ("openhands", 4, "execute_bash", 4)
    assert run.results == 3  # the stopped call's result is not looked at
    assert run.model == "claude-3-5-sonnet-20241022"
    # LiteLLM's prompt_tokens already holds the cache reads and writes: 3000 a call, not 5900.
    assert (run.input_tokens, run.cached_tokens, run.cache_write_tokens) == (12000, 10800, 800)


def test_swe_agent_commands_are_split_into_tool_and_arguments() -> None:
    assert split_command("open tests/a.py\n") == ("open", {"args": "tests/a.py"}, False)
    assert split_command("edit 1:1\nx = 1\nend_of_edit\n") == (
        "edit", {"args": "1:1\nx = 1\nend_of_edit"}, False
    )  # fmt: skip
    assert split_command("submit") == ("submit", {}, False)
    assert split_command("python x.py | tail") == (
        "bash", {"command": "python x.py | tail"}, False
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["commands", "tool_calls"])
def test_swe_agent_traj(tmp_path: Path, kind: str) -> None:
    doc = swe_agent_commands() if kind == "commands" else swe_agent_tool_calls()
    path = write(tmp_path / "missing_colon.traj", doc)
    report = replay([str(tmp_path)])  # .traj files are found in directories
    assert [f.path for f in report.files] == [str(path)]
    (run,) = list(report.runs)
    assert run.format == "swe-agent"
    # Issue 25: the call after the nudge runs (its result is the evidence a stop needs), and
    # the 4th identical call is stopped.
    if kind == "commands":
        assert (run.tool, run.stop_step, run.steps, run.results) == ("open", 5, 6, 4)
    else:
        assert (run.tool, run.stop_step, run.results) == ("find_file", 4, 3)


def test_atif_trajectory(tmp_path: Path) -> None:
    report = replay([str(write(tmp_path / "trajectory.json", atif()))])
    (run,) = list(report.runs)
    assert (run.run, run.format, run.tool, run.stop_step) == (
        "atif-session-1", "atif", "bash_command", 4
    )  # fmt: skip
    assert (run.input_tokens, run.cached_tokens, run.model) == (4000, 3200, "gpt-4.1")


@pytest.mark.parametrize("fmt", ["codex", "claude-code"])
def test_unknown_record_types_are_skipped_and_counted(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = codex_rollout(unknown=True) if fmt == "codex" else claude_session(unknown=True)
    path = write_lines(tmp_path / "session.jsonl", rows)
    assert main(["replay", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    unknown = "codex:ghost_commit" if fmt == "codex" else "claude-code:agent-status"
    assert f"Records of types this version does not read, skipped: {unknown} x1." in out
    report = replay([str(path)])
    assert report.files[0].unknown == {unknown: 1}
    assert len(report.runs) == 1 and not report.bad_input


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("", "empty"),
        (json.dumps([{"role": "user", "content": "hi"}]), "no tool calls"),
    ],
)
def test_a_file_with_no_runs_says_so_and_is_not_bad_input(
    tmp_path: Path, content: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nothing.json"
    path.write_text(content)
    assert main(["replay", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"1 input held no tool calls, counted and not replayed (not bad input): {path}: " in out
    assert out.rstrip().endswith(f"{why}.")


def test_a_directory_of_mixed_traces_in_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tau").mkdir()
    write(tmp_path / "tau" / "results.json", tau_bench())
    write(tmp_path / "openhands.json", openhands_events())
    write(tmp_path / "old.traj", swe_agent_commands())
    write(tmp_path / "new.traj", swe_agent_tool_calls())
    write(tmp_path / "trajectory.json", atif())
    write_lines(tmp_path / "rollout.jsonl", codex_rollout(unknown=False))
    write_lines(tmp_path / "session.jsonl", claude_session(unknown=False))
    assert main(["replay", "--json", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    data = json.loads(out)
    formats = {Path(f["path"]).name: f["formats"] for f in data["files"]}
    assert formats == {
        "new.traj": ["swe-agent"],
        "old.traj": ["swe-agent"],
        "openhands.json": ["openhands"],
        "results.json": ["openai-chat", "tau-bench"],
        "rollout.jsonl": ["codex"],
        "session.jsonl": ["claude-code"],
        "trajectory.json": ["atif"],
    }
    assert data["summary"]["runs"] == 8
    assert data["summary"]["stopped"] == 5
    stopped = {run["tool"] for run in data["runs"] if run["stop_step"]}
    assert stopped == {"book_reservation", "execute_bash", "open", "find_file", "bash_command"}


# -- money ----------------------------------------------------------------------------------------


def test_claude_code_cache_priced_as_anthropic_bills_it(tmp_path: Path) -> None:
    """claude-sonnet-4-5: $3 in, $15 out, cache reads $0.30 (0.1x), writes $3.75 (1.25x).
    10 fresh x 3 + 1,000 written x 3.75 + 20,000 read x 0.30 + 500 out x 15 = $0.017280."""
    path = write_lines(tmp_path / "session.jsonl", claude_session(unknown=False))
    report = replay([str(path)])
    (run,) = list(report.runs)
    assert (run.input_tokens, run.cached_tokens, run.cache_write_tokens) == (21010, 20000, 1000)
    assert run.cost == pytest.approx((10 * 3 + 1000 * 3.75 + 20000 * 0.30 + 500 * 15) / 1e6)
    assert run.cost == pytest.approx(0.017280)
    summary = to_json(report)["summary"]["tokens"]
    assert summary["cached_share"] == round(20000 / 21010, 6)
    # Priced as fresh input, as before, it would have been $0.070530: four times as much.
    flat = replay([str(path)], Settings(prices=Prices(cache_read=3.0, cache_write=3.0)))
    assert next(iter(flat.runs)).cost == pytest.approx((21010 * 3 + 500 * 15) / 1e6)


def test_openai_cached_input_at_its_listed_price(tmp_path: Path) -> None:
    """gpt-4o: $2.50 in, $10 out, cached input $1.25. A call of 10,000 prompt tokens, 8,000 of
    them cached, and 200 out: 2,000 x 2.50 + 8,000 x 1.25 + 200 x 10 = $0.017000."""
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "model": "gpt-4o-2024-08-06",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "usage": {
                "prompt_tokens": 10000,
                "completion_tokens": 200,
                "prompt_tokens_details": {"cached_tokens": 8000},
            },
        },
    ]
    path = write(tmp_path / "chat.json", messages)
    (run,) = list(replay([str(path)]).runs)
    assert (run.input_tokens, run.cached_tokens, run.cache_write_tokens) == (10000, 8000, 0)
    assert run.cost == pytest.approx(0.017)
    # Flags override: cached input at $0.25 for every model.
    (cheap,) = list(replay([str(path)], Settings(prices=Prices(cache_read=0.25))).runs)
    assert cheap.cost == pytest.approx((2000 * 2.5 + 8000 * 0.25 + 200 * 10) / 1e6)


def test_codex_cached_input_and_model_from_turn_context(tmp_path: Path) -> None:
    """gpt-5-codex: $1.25 in, $10 out, cached $0.125: 1,000 x 1.25 + 9,000 x 0.125 + 100 x 10."""
    path = write_lines(tmp_path / "rollout.jsonl", codex_rollout(unknown=False))
    (run,) = list(replay([str(path)]).runs)
    assert run.model == "gpt-5-codex"
    assert run.cost == pytest.approx((1000 * 1.25 + 9000 * 0.125 + 100 * 10) / 1e6)


def test_usage_shapes() -> None:
    # Anthropic: input_tokens excludes the cache fields, which are added.
    anthropic = {"input_tokens": 5, "cache_read_input_tokens": 90, "output_tokens": 1}
    assert parse_usage(anthropic) == Usage(95, 1, 90, 0)
    # Responses / Codex: input_tokens includes the cached part.
    responses = {"input_tokens": 100, "output_tokens": 1, "cached_input_tokens": 60}
    assert parse_usage(responses) == Usage(100, 1, 60, 0)
    # LiteLLM reports Anthropic's cache beside an inclusive prompt_tokens.
    litellm = {
        "prompt_tokens": 100,
        "completion_tokens": 1,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 60,
    }
    assert parse_usage(litellm) == Usage(100, 1, 60, 30)


def test_the_run_table_says_which_tool_was_nudged_and_which_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run nudged on one tool and stopped on another: the table's STOPPED ON names the
    stopped tool, NUDGES is a count, and the JSON names the nudged tool too."""
    rows = [
        {"run": "r", "tool": "search", "args": {"q": "x"}},
        {"run": "r", "tool": "search", "args": {"q": "x"}},  # step 2: nudge on search
        {"run": "r", "tool": "get_logs", "args": {"s": 1}},
        {"run": "r", "tool": "get_logs", "args": {"s": 1}},  # step 4: nudge on get_logs
        {"run": "r", "tool": "get_logs", "args": {"s": 1}},  # step 5: stop on get_logs
    ]
    path = write_lines(tmp_path / "two.jsonl", rows)
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    header, row = (line.split("  ") for line in out.splitlines()[3:5])
    cells = dict(zip([h.strip() for h in header if h], [c.strip() for c in row if c], strict=True))
    assert cells["NUDGES"] == "2" and cells["NUDGED AT"] == "2" and cells["STOPPED AT"] == "5"
    assert cells["STOPPED ON"] == "get_logs"
    assert "NUDGES: calls nudged (a count); NUDGED AT, STOPPED AT: step numbers" in out
    (run,) = list(replay([str(path)]).runs)
    assert (run.nudge_tool, run.tool, run.nudges) == ("search", "get_logs", 2)
