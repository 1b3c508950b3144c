"""The ``tripwire`` command: in-process through ``main(argv)``, and once as a subprocess."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tripwire
from _traces import (
    ADVANCING,
    anthropic_poll,
    chat_poll,
    edit_undo_events,
    fruitless_search_responses,
    write_doc,
    write_jsonl,
)
from tripwire.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "checkout-triage.jsonl"
SEED_KEY = "20d17ea0860485d4"  # the README's key of the seed's get_logs call


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


class _Stdin:
    """A stand-in for ``sys.stdin`` with a binary ``buffer``."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def test_replay_example_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["replay", str(EXAMPLE)], capsys)
    assert (code, err) == (0, "")
    row = next(line for line in out.splitlines() if line.startswith("checkout-triage "))
    # Issue 25: nudged at step 5, the call after the nudge (step 6) runs and comes back
    # empty again, and step 7 (the 4th get_logs) is stopped.
    assert row.split() == [
        "checkout-triage", "39", "1", "5", "7", "loop_detected", "get_logs", "33", "732k",
        "$2.68", "$0.37", "$2.31",
    ]  # fmt: skip
    assert "33 of 39 saved (85%)" in out
    assert "$2.31 of $2.68 saved (86%); $0.37 spent with the guard" in out
    assert f"{EXAMPLE}:7" in out
    assert "tokens from the traces' own usage figures" in out
    assert "~" not in out


def test_replay_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["replay", "--json", str(EXAMPLE)], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["runs"][0]["stop_step"] == 7  # issue 25: the call after the nudge ran
    assert data["summary"]["cost"]["guarded"] == pytest.approx(0.37, abs=0.005)


def test_guard_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["replay", "--json", "--stop-at", "4", "--nudge-at", "3", str(EXAMPLE)], capsys
    )
    run_ = json.loads(out)["runs"][0]
    # Issue 25: nudged at the 3rd get_logs (step 6); step 7 runs and the stop needs 3 results
    # seen the same (steps 4, 5, 7): the 5th get_logs, step 8, is stopped.
    assert (code, run_["nudge_step"], run_["stop_step"], run_["steps_saved"]) == (0, 6, 8, 32)
    # Without results (hash only), the seed's count: the 4th occurrence is stopped.
    code, out, _ = run(
        ["replay", "--json", "--hash-only", "--stop-at", "4", "--nudge-at", "3", str(EXAMPLE)],
        capsys,
    )
    run_ = json.loads(out)["runs"][0]
    assert (code, run_["nudge_step"], run_["stop_step"], run_["steps_saved"]) == (0, 6, 7, 33)
    # A volatile key that hides the argument that differs: every get_logs is one action.
    _, out, _ = run(["replay", "--json", "--volatile-key", "since", str(EXAMPLE)], capsys)
    assert json.loads(out)["settings"]["volatile_keys"][-1] == "trace_id"
    assert "since" in json.loads(out)["settings"]["volatile_keys"]


def test_prices(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(
        ["replay", "--json", "--price-in", "0", "--price-out", "0", str(EXAMPLE)], capsys
    )
    assert json.loads(out)["summary"]["cost"]["total"] == 0


def test_fail_on_loop(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["replay", "--fail-on-loop", str(EXAMPLE)], capsys)[0] == 1


def test_healthy_run_exits_zero_with_fail_on_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pages.jsonl"
    path.write_text(
        "".join(
            json.dumps({"run": "pages", "tool": "list_orders", "args": {"cursor": f"p{n}"}}) + "\n"
            for n in range(1, 10)
        )
    )
    code, out, _ = run(["replay", "--fail-on-loop", str(path)], capsys)
    assert code == 0
    assert "0 looped" in out
    # No usage in this trace: estimated figures are marked.
    assert "~" in out and "estimated from transcript size" in out


def test_bad_input_exit_code_and_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(EXAMPLE.read_text().replace('"step": 9,', '"step": 9,,', 1))
    code, out, err = run(["replay", str(bad), str(tmp_path / "nope.jsonl")], capsys)
    assert code == 4
    assert f"tripwire: {bad}:9: not JSON" in err
    assert "nope.jsonl: cannot open" in err
    assert "Traceback" not in err
    assert "Bad input: 2 problems skipped, 1 file unreadable" in out
    assert "checkout-triage" in out  # the rest of the report still comes out
    code, _, _ = run(["replay", "--fail-on-loop", str(bad)], capsys)
    assert code == 5


def _codex_user_messages_only(path: Path) -> Path:
    """A Codex CLI rollout in which a person wrote twice and the model never called a tool."""
    ts = "2026-05-02T17:09:04.407Z"
    said = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        for text in ("hello", "are you there?")
    ]
    rows: list[dict[str, Any]] = [
        {"timestamp": ts, "type": "session_meta", "payload": {"id": "codex-q", "cwd": "/repo"}},
        *({"timestamp": ts, "type": "response_item", "payload": item} for item in said),
    ]
    return write_jsonl(path, rows)


def test_input_without_tool_calls_is_counted_not_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory of a session with no tool calls and an empty file: nothing to replay, and
    nothing wrong either, so --fail-on-loop in CI passes (issue 31)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    _codex_user_messages_only(traces / "rollout-2026-05-02.jsonl")
    (traces / "empty.jsonl").write_text("")
    code, out, err = run(["replay", "--fail-on-loop", str(traces)], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("tripwire replay: 2 files, 0 runs, 0 steps, 0 model calls\n")
    assert (
        "2 inputs held no tool calls, counted and not replayed (not bad input): "
        f"{traces / 'empty.jsonl'}: empty; "
        f"{traces / 'rollout-2026-05-02.jsonl'}: codex records, no tool calls."
    ) in out
    assert "Bad input" not in out
    code, out, _ = run(["replay", "--json", str(traces)], capsys)
    report = json.loads(out)
    assert code == 0
    assert (report["problems_total"], report["summary"]["without_calls"]) == (0, 2)
    assert [entry["why"] for entry in report["without_calls"]] == [
        "empty",
        "codex records, no tool calls",
    ]
    # A directory with no trace files at all is reported the same way.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a trace")
    code, out, err = run(["replay", "--fail-on-loop", str(tmp_path / "notes")], capsys)
    assert (code, err) == (0, "")
    assert "no trace files (*.json, *.jsonl, *.ndjson, *.parquet, *.traj) in directory." in out


def test_input_without_calls_beside_a_loop_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files without calls change no exit status: a loop still gives 1, unreadable input 4."""
    traces = tmp_path / "traces"
    traces.mkdir()
    _codex_user_messages_only(traces / "quiet.jsonl")
    (traces / "triage.jsonl").write_text(EXAMPLE.read_text())
    code, out, _ = run(["replay", "--fail-on-loop", str(traces)], capsys)
    assert code == 1
    assert "1 input held no tool calls" in out
    (traces / "broken.jsonl").write_text("{not json\n")
    code, out, err = run(["replay", "--fail-on-loop", str(traces)], capsys)
    assert code == 5
    assert "broken.jsonl:1: not JSON" in err
    assert "quiet.jsonl" not in err  # counted in the report, not a problem on stderr


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["replay", "--help"]):
        code, out, _ = run(argv, capsys)
        assert code == 0
        codes = out[out.index("exit status:") :].splitlines()[1:]
        listed = [line.split()[0] for line in codes if line.startswith("  ") and line[2] != " "]
        assert listed == ["0", "1", "2", "4", "5"], out


def test_many_problems_are_counted_not_all_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_text('{"run": "r", "tool": "t"}\n' + "junk\n" * 50)
    code, out, err = run(["replay", "--json", str(path)], capsys)
    assert code == 4
    assert err.count("not JSON") == 20
    assert "further problems are counted" in err
    assert json.loads(out)["problems_total"] == 50


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(gzip.compress(EXAMPLE.read_bytes())))
    code, out, _ = run(["replay", "--json", "-"], capsys)
    assert code == 0
    assert json.loads(out)["runs"][0]["file"] == "<stdin>"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["replay"],
        ["replay", "--window", "x", str(EXAMPLE)],
        ["replay", "--stop-at", "20", str(EXAMPLE)],
        ["replay", "--nudge-at", "1", str(EXAMPLE)],
        ["replay", "--price-in", "-1", str(EXAMPLE)],
        ["replay", "--price-out", "nan", str(EXAMPLE)],
        ["replay", "--limit", "-1", str(EXAMPLE)],
        ["frobnicate"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2
    assert "Traceback" not in err


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and tripwire.__version__ in out
    code, out, _ = run(["replay", "--help"], capsys)
    assert code == 0 and "claude-code" in out and "exit status" in out


def test_key(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    args = '{"service": "checkout", "since": "15m", "level": "error"}'
    assert run(["key", "get_logs", args], capsys) == (0, SEED_KEY + "\n", "")
    monkeypatch.setattr(
        sys, "stdin", _Stdin(b'{"level":"error","since":"15m","service":" checkout"}')
    )
    assert run(["key", "get_logs", "-"], capsys)[1] == SEED_KEY + "\n"
    code, out, _ = run(["key", "--canonical", "get_logs", args], capsys)
    assert code == 0
    canonical = '{"args":{"level":"error","service":"checkout","since":"15m"},"tool":"get_logs"}'
    assert out.splitlines()[1] == canonical
    # The keys below are written out: SHA-256 of the canonical JSON, first 16 hex digits.
    _, out, _ = run(["key", "--volatile-key", "since", "get_logs", args], capsys)
    without_since = '{"args":{"level":"error","service":"checkout"},"tool":"get_logs"}'
    assert out.strip() == hashlib.sha256(without_since.encode()).hexdigest()[:16]
    assert out.strip() == "c4f431af52cad280"
    _, out, _ = run(["key", "--no-default-volatile", "t", '{"request_id": 1}'], capsys)
    assert out.strip() == hashlib.sha256(b'{"args":{"request_id":1},"tool":"t"}').hexdigest()[:16]


def test_key_bad_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["key", "get_logs", "{service: checkout}"], capsys)
    assert (code, out) == (2, "")
    assert "not JSON" in err and "Traceback" not in err
    code, _, err = run(["key", "t", "[" * 300 + "]" * 300], capsys)
    assert code == 2 and "Traceback" not in err


def test_console_script_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, attr = project["scripts"]["tripwire"].partition(":")
    # The entry dispatches `tripwire hook` before importing the CLI's replay machinery.
    assert (module, attr) == ("tripwire._entry", "main")


def test_python_dash_m_tripwire() -> None:
    env: dict[str, Any] = {**os.environ}
    result = subprocess.run(
        [sys.executable, "-m", "tripwire", "replay", "examples/checkout-triage.jsonl"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "$0.37 spent with the guard" in result.stdout
    assert result.stderr == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from tripwire.replay import progress

    monkeypatch.setattr(progress, "MIN_BYTES", 0)
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["replay", str(EXAMPLE), str(EXAMPLE)]) == 0
    drawn = terminal.getvalue()
    assert "replay [" in drawn and "checkout-triage.jsonl" in drawn
    assert drawn.endswith("\r\x1b[K")  # erased at the end: nothing left in the scrollback


def test_no_progress_bar_when_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tripwire.replay import progress

    monkeypatch.setattr(progress, "MIN_BYTES", 0)
    assert run(["replay", str(EXAMPLE)], capsys)[2] == ""


def test_docs_sample_output_is_current(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = "pip install . && tripwire replay examples/checkout-triage.jsonl"
    assert command in readme.split("## Example")[0]
    page = (ROOT / "docs" / "replay.md").read_text(encoding="utf-8")
    sample = page.split("```text\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    code, out, _ = run(["replay", "examples/checkout-triage.jsonl"], capsys)
    assert code == 0
    assert out.replace(f"({tripwire.IMPLEMENTATION} core)", "(native core)") == sample


def test_console_script_when_installed() -> None:
    script = Path(sys.executable).parent / "tripwire"
    if not script.exists():
        pytest.skip("the tripwire script is installed by pip install / maturin develop")
    result = subprocess.run(
        [str(script), "replay", "--fail-on-loop", "examples/checkout-triage.jsonl"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1  # the example loops
    assert "$0.37 spent with the guard" in result.stdout


# -- results, --hash-only, --tools / --tool ----------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic"])
def test_polling_run_is_progress_unless_hash_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    doc = chat_poll(ADVANCING) if fmt == "openai-chat" else anthropic_poll(ADVANCING)
    path = str(write_doc(tmp_path / "release.json", doc))
    code, out, err = run(["replay", "--fail-on-loop", "--tool", "build_status=poll", path], capsys)
    assert (code, err) == (0, "")
    assert "stop at 3, results observed (" in out
    assert "tools: build_status poll\n" in out
    assert "0 stopped" in out
    code, out, _ = run(
        ["replay", "--fail-on-loop", "--hash-only", "--tool", "build_status=poll", path], capsys
    )
    assert code == 1
    assert "stop at 3, hash only (" in out
    assert "tools: build_status poll (ignored: hash only)" in out
    row = next(line.split() for line in out.splitlines() if "release.json" in line)
    steps = "6" if fmt == "openai-chat" else "5"  # the chat's deploy is a step too
    # STEPS, NUDGES (a count), NUDGED AT and STOPPED AT (step numbers), REASON, STOPPED ON
    assert row[1:7] == [steps, "1", "2", "3", "loop_detected", "build_status"]


def test_no_progress_stops_in_table_fleet_and_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cart = write_jsonl(tmp_path / "cart.jsonl", edit_undo_events())
    refund = write_doc(tmp_path / "refund.json", fruitless_search_responses())
    argv = ["replay", "--tool", "edit_file=write", str(cart), str(refund), str(EXAMPLE)]
    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    rows = [line.split() for line in out.splitlines() if "  no_progress  " in line]
    # Issue 25: the reworded empty searches: allow x3, nudge, allow, stop at the 6th.
    assert [row[4:7] for row in rows] == [
        ["9", "no_progress", "edit_file"],
        ["6", "no_progress", "search_docs"],
    ]
    assert "3 stopped (100%: 1 looped, 2 no progress)" in out
    assert "Stopped (no_progress): the last 8 calls went twice round the same cycle" in out
    tools = out.split("Top offending tools (each stop is a report on the tool):")[1]
    assert {line.split()[0] for line in tools.splitlines()[2:5]} == {
        "edit_file", "search_docs", "get_logs"
    }  # fmt: skip
    assert run(["replay", "--fail-on-loop", *argv[1:]], capsys)[0] == 1


def test_tools_file_and_tool_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stuck = write_doc(tmp_path / "stuck.json", chat_poll(["running 10%"] * 6))
    tools = tmp_path / "tools.json"
    policies = {"build_status": {"policy": "poll", "max_polls": 3}, "deploy": "write"}
    tools.write_text(json.dumps(policies))
    code, out, _ = run(["replay", "--json", "--tools", str(tools), str(stuck)], capsys)
    data = json.loads(out)
    assert code == 0
    assert (data["settings"]["mode"], data["settings"]["tools"]) == ("observe", policies)
    assert (data["runs"][0]["stop_step"], data["runs"][0]["reason"]) == (4, "loop_detected")
    assert "more than its limit of 3" in data["runs"][0]["stop_message"]
    # --tool wins over the file: a plain poll waits up to 20 times.
    argv = ["replay", "--json", "--tools", str(tools), "--tool", "build_status=poll", str(stuck)]
    data = json.loads(run(argv, capsys)[1])
    assert data["settings"]["tools"] == {"build_status": "poll", "deploy": "write"}
    assert data["runs"][0]["stop_step"] is None
    data = json.loads(run(["replay", "--json", "--hash-only", str(stuck)], capsys)[1])
    assert (data["settings"]["mode"], data["settings"]["tools"]) == ("hash-only", {})
    assert data["summary"]["reasons"] == {"loop_detected": 1, "no_progress": 0}


@pytest.mark.parametrize(
    ("content", "option", "message"),
    [
        (None, None, "cannot read"),
        ("{oops", None, "not JSON"),
        ('["read"]', None, "expected a JSON object"),
        ('{"deploy": "writes"}', None, "unknown policy 'writes' for tool 'deploy'"),
        ('{"b": {"policy": "read", "max_polls": 3}}', None, "max_polls is for 'poll' tools"),
        ('{"b": {"policy": "poll", "max_polls": 0}}', None, "max_polls must be at least 1"),
        ('{"b": {"policy": "poll", "colour": 1}}', None, "unknown setting 'colour'"),
        ('{"b": {"policy": "read", "empty": 3}}', None, "empty for tool 'b'"),
        ("{}", "deploy", "expected NAME=POLICY"),
        ("{}", "deploy=", "expected NAME=POLICY"),
        ("{}", "deploy=sometimes", "--tool: unknown policy 'sometimes'"),
    ],
)
def test_bad_tool_policies_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    option: str | None,
    message: str,
) -> None:
    tools = tmp_path / "tools.json"
    if content is not None:
        tools.write_text(content)
    argv = ["replay", "--tools", str(tools), str(EXAMPLE)]
    if option is not None:
        argv[1:3] = ["--tool", option]
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert message in err
    assert "Traceback" not in err


def test_results_matching_no_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"run": "r", "tool": "t", "args": {}, "call_id": "c1"},
        {"run": "r", "result_of": "c9", "result": "x"},
    ]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    code, out, err = run(["replay", str(path)], capsys)
    assert (code, err) == (0, "")  # not bad input
    assert "1 tool result matched no call of its run and was ignored." in out
    assert "No tool results in these traces" in out  # none was linked


# -- hostile traces (issue 17) ---------------------------------------------------------------


def test_lone_surrogates_in_a_trace_are_printed_escaped(tmp_path: Path) -> None:
    """A run label and arguments holding "\\ud800" (a lone surrogate once decoded): the
    report printed, escaped, not a UnicodeEncodeError traceback with the report lost. A
    subprocess, as stdout's encoding there is the real one."""
    trace = tmp_path / "surrogates.jsonl"
    line = '{"run": "r\\ud800", "tool": "get_\\udfff", "args": {"q": "\\ud800"}}\n'
    trace.write_text(line * 4)
    outputs = []
    for extra in ([], ["--json"]):
        result = subprocess.run(
            [sys.executable, "-m", "tripwire", "replay", str(trace), *extra],
            env={**os.environ, "PYTHONIOENCODING": "utf-8"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        assert "r\\ud800" in result.stdout
        outputs.append(result.stdout)
    assert json.loads(outputs[1])["runs"][0]["run"] == "r\ud800"
    # The table's columns line up: the label is escaped before it is measured.
    head, row = (line for line in outputs[0].splitlines() if line.startswith(("RUN ", "r\\")))
    assert head.index("STEPS") + len("STEPS") == row.index(" 4 ") + 2


def test_an_overlong_line_is_skipped_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tripwire.replay import formats

    monkeypatch.setattr(formats.files, "MAX_LINE_BYTES", 1_000)
    call = json.dumps({"run": "r", "tool": "get_logs", "args": {"q": 1}}) + "\n"
    long = json.dumps({"run": "r", "tool": "get_logs", "args": {"q": "x" * 5_000}}) + "\n"
    trace = tmp_path / "long.jsonl"
    trace.write_text(call + long + call + call)
    code, out, err = run(["replay", "--json", str(trace)], capsys)
    assert code == 4  # some input skipped
    assert f"{trace}:2: line longer than 1,000 bytes (5,052 bytes); line skipped" in err
    report = json.loads(out)
    assert report["summary"]["steps"] == 3  # the lines after the long one are read


def test_an_endless_line_ends_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As /dev/zero: no newline ever. Read through up to MAX_SKIP_BYTES, then given up."""
    from tripwire.replay import formats

    monkeypatch.setattr(formats.files, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(formats.files, "MAX_SKIP_BYTES", 8 << 20)
    call = json.dumps({"run": "r", "tool": "get_logs", "args": {"q": 1}}) + "\n"
    trace = tmp_path / "zero.jsonl"
    trace.write_bytes(call.encode() + b"\0" * (20 << 20))
    code, _, err = run(["replay", str(trace)], capsys)
    assert code == 4
    assert "zero.jsonl:2: line longer than 1 MiB, no end in 8,388,6" in err
    assert err.endswith("bytes; file not read further\n")
    # The first line, too long for a JSONL line or a JSON document: the file is skipped.
    trace.write_bytes(b"\0" * (3 << 20))
    code, _, err = run(["replay", str(trace)], capsys)
    assert code == 4
    assert "zero.jsonl:1: line longer than 1 MiB (3,145,728 bytes); file skipped" in err


def test_an_oversized_json_document_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tripwire.replay import formats

    monkeypatch.setattr(formats.files, "MAX_LINE_BYTES", 2_000)
    messages = [{"role": "user", "content": "x" * 100}] * 50
    trace = tmp_path / "chat.json"
    trace.write_text(json.dumps(messages, indent=1))
    code, _, err = run(["replay", str(trace)], capsys)
    assert code == 4
    assert "chat.json:1: JSON document over 2,000 bytes; file skipped" in err


def test_an_unreadable_directory_is_a_permission_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "no trace files in directory", which hid the error. Listing is made to fail
    rather than relying on file modes, which root (as CI runs) reads past."""
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "run.jsonl").write_text("{}\n")
    scandir = os.scandir

    def refuse(path: Any = ".") -> Any:
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    code, _, err = run(["replay", str(locked)], capsys)
    assert code == 4
    assert f"{locked}: cannot list directory: Permission denied" in err
    assert "no *.json" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_a_permission_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text("{}\n")
    trace.chmod(0)
    code, _, err = run(["replay", str(tmp_path)], capsys)
    assert code == 4
    assert "cannot open: Permission denied" in err


_THREADS_AFTER = """
import importlib.util, os, sys
from tripwire._entry import main

sys.argv = ["tripwire", *sys.argv[1:]]
main()
threads = None
if importlib.util.find_spec("pyarrow") is not None:
    import pyarrow.parquet  # noqa: F401  (numpy's OpenBLAS and jemalloc start threads now)

    threads = len(os.listdir("/proc/self/task"))
print(os.environ.get("OPENBLAS_NUM_THREADS"), threads, file=sys.stderr)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="threads counted in /proc")
def test_the_command_asks_libraries_for_no_idle_threads(tmp_path: Path) -> None:
    """pyarrow imports numpy, whose OpenBLAS threads spin while waiting for work a replay
    never gives, and starts jemalloc's background thread (a process with threads is not
    forked for --jobs): the command's own process asks for neither (the user's say kept)."""

    def after(env: dict[str, str]) -> list[str]:
        ours = ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")
        environ = {k: v for k, v in os.environ.items() if k not in ours}
        done = subprocess.run(
            [sys.executable, "-c", _THREADS_AFTER, "key", "get_logs", "{}"],
            capture_output=True, text=True, timeout=120, env={**environ, **env},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr.split()

    assert after({})[0] == "1"
    assert after({"OPENBLAS_NUM_THREADS": "2"})[0] == "2"
    _, threads = after({})
    if threads != "None":  # pyarrow installed: loaded, it started no thread of its own
        assert threads == "1"
