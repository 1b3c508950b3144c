"""``tripwire fuzz mcp`` against real MCP servers from PyPI: ``mcp-server-time``
and ``mcp-server-git`` (the ``fuzz-servers`` extra, installed by ``.ci/run``), and a small
server of our own that hangs and crashes. The policies it writes are read by ``Guard`` and
``tripwire replay --tools``; with them the guard of both backends stops a loop on
``get_current_time`` that it misses without them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import BACKENDS
from _traces import run_calls

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from tripwire.cli import main
from tripwire.fuzz_mcp import McpServer, fuzz_server, policy_file

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def _server(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install 'tripwire[fuzz-servers]')")
    return path


@pytest.fixture(scope="module")
def time_reports() -> dict[str, Any]:
    command = [_server("mcp-server-time"), "--local-timezone", "UTC"]
    reports, skipped = fuzz_server(command, examples=30, out=_Null(), err=_Null())
    assert skipped == []
    return {r.name: r for r in reports}


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_time_current_time_is_result_volatile(time_reports: dict[str, Any]) -> None:
    report = time_reports["get_current_time"]
    found = report.finding("result")
    assert found is not None, report
    assert found.fields == ("datetime",)
    assert report.policy["policy"] == "volatile"
    assert report.policy["volatile_result_keys"] == ["datetime"]


def test_time_zone_names_see_their_whitespace(time_reports: dict[str, Any]) -> None:
    # " Europe/London" is no time zone: the key that collapses it would count the corrected
    # call as a repeat of the failed one.
    for name in ("get_current_time", "convert_time"):
        report = time_reports[name]
        found = report.finding("whitespace")
        assert found is not None, report
        assert report.policy["whitespace"] == "keep"


def test_convert_time_is_honest_on_everything_else(time_reports: dict[str, Any]) -> None:
    report = time_reports["convert_time"]
    assert [f.kind for f in report.findings] == ["whitespace"], report
    assert report.problem is None and not report.unsettled
    assert report.policy == {"policy": "read", "whitespace": "keep"}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("repo")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(repo)}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)

    git("init", "-q", "-b", "main")
    (repo / "a.txt").write_text("hello\n")
    git("add", "a.txt")
    git("commit", "-qm", "first")
    (repo / "a.txt").write_text("hello\nmore\n")
    return repo


def test_git_read_tools(repository: Path) -> None:
    command = [_server("mcp-server-git"), "--repository", str(repository)]
    reports, skipped = fuzz_server(
        command, examples=20, values={"repo_path": [str(repository)]}, out=_Null(), err=_Null()
    )
    by_name = {r.name: r for r in reports}
    # Its writes are not called without --allow-writes.
    assert {"git_commit", "git_add", "git_reset"} <= set(skipped)
    assert {"git_status", "git_log", "git_diff_unstaged", "git_show"} <= set(by_name)
    for report in reports:
        assert report.problem is None, report
        # Nothing of git's output changes between identical calls.
        assert report.finding("result") is None, report
    # A repository path with a space before it is another (refused) path.
    status = by_name["git_status"]
    assert status.finding("whitespace") is not None
    assert status.policy == {"policy": "read", "whitespace": "keep"}
    # context_lines: null is refused, absent is 3.
    nulls = by_name["git_diff_unstaged"].finding("nulls")
    assert nulls is not None and "context_lines" in nulls.advice


def test_a_hanging_and_a_crashing_tool_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "policy.json"
    command = [sys.executable, str(HERE / "_flaky_mcp_server.py")]
    args = ["fuzz", "mcp", "--timeout", "2", "--examples", "10", "--out", str(out)]
    code = main([*args, "--", *command])
    assert code == 1
    text = capsys.readouterr().out
    assert "get_length: honest" in text
    assert "get_stuck: could not be checked" in text and "no answer" in text
    assert "get_crash: could not be checked" in text and "the server exited" in text
    assert "not read-only, not called (--allow-writes calls them): ['delete_everything']" in text
    written = json.loads(out.read_text())
    assert written["get_length"] == "read"
    assert "delete_everything" not in written


def test_the_policy_file_is_read_by_replay(
    tmp_path: Path, time_reports: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy_file(list(time_reports.values()))))
    trace = tmp_path / "run.jsonl"
    trace.write_text(json.dumps({"tool": "get_current_time", "args": {"timezone": "UTC"}}) + "\n")
    assert main(["replay", "--tools", str(path), str(trace)]) == 0
    assert "1 run" in capsys.readouterr().out


@pytest.mark.parametrize("tw", BACKENDS)
def test_the_suggested_policy_stops_a_loop_on_get_current_time(
    tw: ModuleType, time_reports: dict[str, Any]
) -> None:
    """Real results of the real server: the model asks for the time, runs ``ls``, asks
    again, ... Without the policy the time differs each lap, so the laps never match and
    only ``ls``'s own repeats end the run, later; a guard that infers nothing about the
    clock (``infer=False``) never stops asking it. With the fuzzer's policy, the cycle
    stops at its second lap."""
    policies = policy_file(list(time_reports.values()))
    server = McpServer([_server("mcp-server-time"), "--local-timezone", "UTC"], 10.0, sys.stderr)
    server.start()
    try:

        def clock() -> Any:
            return server.call("get_current_time", {"timezone": "UTC"})

        def shown(verdicts: list[Any]) -> list[str]:
            return [v.action + (f"/{v.reason}" if v.reason else "") for v in verdicts]

        def cycle(guard: Any, laps: int) -> list[str]:
            def calls() -> Iterator[dict[str, Any]]:
                for _ in range(laps):
                    yield {"tool": "get_current_time", "args": {"timezone": "UTC"}, "run": clock}
                    time.sleep(1.05)  # the server's clock has whole seconds
                    yield {"tool": "Bash", "args": {"command": "ls"}, "result": "a.txt"}

            return shown(run_calls(guard, calls()))

        told = cycle(tw.Guard(tools=policies), 4)
        assert told == ["allow"] * 4 + ["stop/no_progress"]
        today = cycle(tw.Guard(tools={"get_current_time": "volatile"}), 4)
        assert today[:5] == ["allow"] * 5 and today[-1] == "stop/loop_detected"

        def asked(guard: Any, times: int) -> list[str]:
            def calls() -> Iterator[dict[str, Any]]:
                for _ in range(times):
                    yield {"tool": "get_current_time", "args": {"timezone": "UTC"}, "run": clock}
                    time.sleep(1.05)

            return [verdict.action for verdict in run_calls(guard, calls())]

        assert asked(tw.Guard(infer=False), 5) == ["allow"] * 5
        # Issue 25: after the nudge one more asking runs; the clock left out, it repeats.
        assert asked(tw.Guard(infer=False, tools=policies), 5) == [
            "allow",
            "nudge",
            "allow",
            "stop",
        ]
    finally:
        server.close()
