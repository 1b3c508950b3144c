"""``tripwire hook claude-code`` as Claude Code runs it: a process per event, JSON on stdin.

Its guarantees: the verdicts are the guard's; parallel hooks of one session lose no call; it
never bricks the agent (any failure: exit 0, nothing on stdout, one line on stderr); nothing
from the harness becomes a path. Every test runs on both backends (``TRIPWIRE_IMPLEMENTATION``
of the hook process).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from _guards import BACKEND_NAMES


@pytest.fixture(params=BACKEND_NAMES)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIPWIRE_", "XDG_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        TRIPWIRE_STATE_DIR=str(tmp_path / "state"),
        TRIPWIRE_CONFIG=str(tmp_path / "config.toml"),
        TRIPWIRE_IMPLEMENTATION=request.param,
    )
    return env


def hook(env: dict[str, str], event: Any, *options: str) -> tuple[int, str, str]:
    data = event if isinstance(event, bytes) else json.dumps(event).encode()
    done = subprocess.run(
        [sys.executable, "-m", "tripwire", "hook", "claude-code", *options],
        input=data,
        env=env,
        capture_output=True,
        timeout=60,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def pre(call_id: str, tool: str = "Read", session: str = "s1", **args: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "transcript_path": "/nonexistent/transcript.jsonl",
        "cwd": "/work",
        "tool_name": tool,
        "tool_input": args or {"file_path": "/work/app.log"},
        "tool_use_id": call_id,
    }


def post(
    call_id: str, result: Any, tool: str = "Read", session: str = "s1", **args: Any
) -> dict[str, Any]:
    return {
        "hook_event_name": "PostToolUse",
        "session_id": session,
        "tool_name": tool,
        "tool_input": args or {"file_path": "/work/app.log"},
        "tool_use_id": call_id,
        "tool_response": result,
    }


def decision(out: str) -> str:
    if not out:
        return "allow"
    reply = json.loads(out)
    return "stop" if reply.get("continue") is False else "nudge"


def records(env: dict[str, str]) -> list[dict[str, Any]]:
    directory = Path(env["TRIPWIRE_STATE_DIR"]) / "sessions"
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def assert_failed_open(code: int, out: str, err: str, *words: str) -> None:
    assert code == 0 and out == ""
    assert err.count("\n") == 1 and err.startswith("tripwire: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


# -- the protocol ------------------------------------------------------------------------------


def test_nudge_then_stop_with_the_guards_words(env: dict[str, str]) -> None:
    answers = [hook(env, pre(f"toolu_{i}")) for i in range(3)]
    assert [a[0] for a in answers] == [0, 0, 0]
    assert [decision(a[1]) for a in answers] == ["allow", "nudge", "stop"]
    nudge = json.loads(answers[1][1])["hookSpecificOutput"]
    assert nudge["hookEventName"] == "PreToolUse" and nudge["permissionDecision"] == "deny"
    assert nudge["permissionDecisionReason"].startswith("This is the second identical call to Read")
    stop = json.loads(answers[2][1])
    assert "Read was called 3 times" in stop["stopReason"] and "loop_detected" in stop["stopReason"]
    assert stop["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_results_tell_progress_from_loops(env: dict[str, str]) -> None:
    """A shell command (no policy) whose output changes is progress; the same output again
    and again is a loop, nudged then stopped."""
    bash = {"command": "make test", "description": "Run the tests"}
    verdicts = []
    for i, output in enumerate(["1 failed", "2 failed", "2 failed", "2 failed", "2 failed"]):
        code, out, _ = hook(env, pre(f"toolu_{i}", "Bash", **bash))
        assert code == 0
        verdicts.append(decision(out))
        if decision(out) == "allow":
            assert hook(env, post(f"toolu_{i}", {"stdout": output}, "Bash", **bash))[0] == 0
    assert verdicts == ["allow", "allow", "allow", "nudge", "stop"]


def test_a_user_prompt_after_a_stop_starts_afresh(env: dict[str, str]) -> None:
    for i in range(3):
        hook(env, pre(f"toolu_{i}"))
    assert decision(hook(env, pre("toolu_3"))[1]) == "stop"
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "go on"}
    assert hook(env, prompt)[:2] == (0, "")
    assert decision(hook(env, pre("toolu_4"))[1]) == "allow"
    [record] = records(env)
    assert record["counts"]["stops"] == 1  # the stop is remembered for `tripwire sessions`


def test_session_end_keeps_the_summary_only(env: dict[str, str]) -> None:
    hook(env, pre("toolu_1"))
    hook(env, pre("toolu_2"))
    end = {"hook_event_name": "SessionEnd", "session_id": "s1", "reason": "other"}
    assert hook(env, end)[:2] == (0, "")
    [record] = records(env)
    assert record["guard"] is None and record["calls"] == [] and record["ended"]
    assert record["counts"] == {"calls": 2, "nudges": 1, "stops": 0}
    listing = subprocess.run(
        [sys.executable, "-m", "tripwire", "sessions"], env=env, capture_output=True, text=True
    )
    assert "claude-code  s1  ended  calls 2  nudges 1  stops 0" in listing.stdout


def test_a_subagent_is_a_run_of_its_own(env: dict[str, str]) -> None:
    """A subagent reading what the main agent read is not repeating itself; its own
    repeats are. SubagentStop ends its run, not the session's."""
    sub = {"agent_id": "a1b2c3", "agent_type": "general-purpose"}
    assert decision(hook(env, pre("t1"))[1]) == "allow"
    assert decision(hook(env, {**pre("t2"), **sub})[1]) == "allow"
    assert decision(hook(env, {**pre("t3"), **sub})[1]) == "nudge"
    stop = {"hook_event_name": "SubagentStop", "session_id": "s1", **sub}
    assert hook(env, stop)[:2] == (0, "")
    assert decision(hook(env, pre("t4"))[1]) == "nudge"  # the main agent's second read
    by_session = {r["session"]: r for r in records(env)}
    assert by_session["s1/a1b2c3"]["ended"] and not by_session["s1"]["ended"]


def test_other_events_are_ignored(env: dict[str, str]) -> None:
    for event in ({"hook_event_name": "Notification", "session_id": "s1"}, {"hook_event_name": 5}):
        assert hook(env, event) == (0, "", "")
    assert not (Path(env["TRIPWIRE_STATE_DIR"]) / "sessions").exists()


def test_settings_file_sets_thresholds_and_policies(env: dict[str, str]) -> None:
    Path(env["TRIPWIRE_CONFIG"]).write_text(
        '[guard]\nnudge_at = 3\nstop_at = 4\n\n[tools]\nget_logs = "read"\n'
    )
    verdicts = [decision(hook(env, pre(f"t{i}", "get_logs", service="x"))[1]) for i in range(4)]
    assert verdicts == ["allow", "allow", "nudge", "stop"]


def test_a_bad_settings_file_warns_and_guards_with_defaults(env: dict[str, str]) -> None:
    Path(env["TRIPWIRE_CONFIG"]).write_text("[guard]\nnudge_at = 7\nstop_at = 3\n")
    code, out, err = hook(env, pre("t1"))
    assert (code, out) == (0, "") and "defaults used" in err and err.count("\n") == 1
    assert decision(hook(env, pre("t2"))[1]) == "nudge"


# -- state files ---------------------------------------------------------------------------------


def test_state_is_private(env: dict[str, str]) -> None:
    hook(env, pre("t1"))
    state = Path(env["TRIPWIRE_STATE_DIR"])
    for directory in (state, state / "sessions"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = list((state / "sessions").iterdir())
    assert len(files) == 2  # the record and its lock
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600


def test_abandoned_sessions_expire(env: dict[str, str]) -> None:
    hook(env, pre("t1", session="old"))
    [old] = (Path(env["TRIPWIRE_STATE_DIR"]) / "sessions").glob("*.json")
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (week_ago, week_ago))
    # A record half written by a hook that was killed, long ago.
    left = old.with_name(old.name + ".4242.1.tmp")
    left.write_text("{")
    os.utime(left, (week_ago, week_ago))
    hook(env, pre("t1", session="new"))
    assert [r["session"] for r in records(env)] == ["new"]
    assert not left.exists()


def test_parallel_hooks_lose_no_call(env: dict[str, str]) -> None:
    """8 hook processes at once on one session: every call counted once, and the verdicts
    are those of the calls checked one after another in the order the locks gave."""
    # Four files read twice each: the second read of each is nudged, whichever it is.
    calls = [pre(f"toolu_{i}", "Read", file_path=f"/work/{i % 4}.txt") for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda event: hook(env, event), calls))
    assert all(code == 0 and err == "" for code, _, err in answers)
    [record] = records(env)
    assert record["counts"]["calls"] == 8
    checked = sorted(record["calls"], key=lambda call: call[2])
    assert [call[2] for call in checked] == list(range(1, 9))
    assert record["counts"]["nudges"] == 4
    # The same calls, one at a time in that order, in a fresh guard.
    import tripwire.reference

    guard = tripwire.reference.Guard()
    by_id = {event["tool_use_id"]: event for event in calls}
    for call_id, key, _, action, *_ in checked:
        verdict = guard.check("Read", by_id[call_id]["tool_input"], call_id=call_id)
        assert (verdict.key, verdict.action) == (key, action)
    answered = {e["tool_use_id"]: decision(a[1]) for e, a in zip(calls, answers, strict=True)}
    assert answered == {call[0]: call[3] for call in checked}


# -- failures: each allows the call, exit 0, one line on stderr ----------------------------------


def _state_file(env: dict[str, str]) -> Path:
    hook(env, pre("t1"))
    [path] = (Path(env["TRIPWIRE_STATE_DIR"]) / "sessions").glob("*.json")
    return path


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda r: b"\x00garbage{{{", "corrupt"),
        (lambda r: json.dumps([1, 2]).encode(), "not a session record"),
        (lambda r: json.dumps({**r, "version": 0}).encode(), "another format or version"),
        (lambda r: json.dumps({**r, "session": "someone-else"}).encode(), "another session"),
        (
            lambda r: json.dumps(
                {**r, "guard": base64.b64encode(b"TWGS\x01junk").decode()}
            ).encode(),
            "guard state is unusable",
        ),
        (lambda r: b" " * (2 << 20), "too big"),
    ],
)
def test_a_damaged_state_file_starts_a_fresh_guard(
    env: dict[str, str], damage: Any, said: str
) -> None:
    path = _state_file(env)
    path.write_bytes(damage(json.loads(path.read_text())))
    code, out, err = hook(env, pre("t2"))
    # Warned once, and checked by a fresh guard: the first call of it, allowed.
    assert (code, out) == (0, "") and said in err and err.count("\n") == 1
    assert decision(hook(env, pre("t3"))[1]) == "nudge"  # and the state works again


def test_a_state_file_from_a_guard_with_other_settings(env: dict[str, str]) -> None:
    _state_file(env)
    Path(env["TRIPWIRE_CONFIG"]).write_text("[guard]\nwindow = 20\n")
    code, out, err = hook(env, pre("t2"))
    assert (code, out) == (0, "") and "another configuration" in err


def test_an_unusable_state_directory_allows_the_call(env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = {**env, "TRIPWIRE_STATE_DIR": str(blocker / "state")}
    assert_failed_open(*hook(env, pre("t1")), "the call is allowed")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever a directory's mode")
def test_a_read_only_state_directory_allows_the_call(env: dict[str, str]) -> None:
    _state_file(env)
    sessions = Path(env["TRIPWIRE_STATE_DIR"]) / "sessions"
    sessions.chmod(0o500)
    try:
        assert_failed_open(*hook(env, pre("t2", session="another")), "the call is allowed")
    finally:
        sessions.chmod(0o700)


def test_missing_redis_allows_the_call(env: dict[str, str]) -> None:
    code, out, err = hook(env, pre("t1"), "--redis", "redis://127.0.0.1:9/0")
    assert_failed_open(code, out, err, "the call is allowed")


def test_an_exception_inside_tripwire_allows_the_call(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    import tripwire.hooks
    from tripwire.hooks import commands

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in tripwire")

    for name in ("TRIPWIRE_STATE_DIR", "TRIPWIRE_CONFIG"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setattr(tripwire.hooks, "handle", broken)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(pre("t1")).encode())))
    assert commands.hook(["claude-code"]) == 0
    out, err = capsys.readouterr()
    assert_failed_open(0, out, err, "RuntimeError: a bug in tripwire", "the call is allowed")


def test_a_tripwire_that_cannot_import_never_exits_2(env: dict[str, str]) -> None:
    """Where the package itself cannot be imported (here: a backend that cannot be chosen),
    no code of the hook runs: Python exits 1, which Claude Code reports and goes on from (2
    would block the call)."""
    code, out, err = hook({**env, "TRIPWIRE_IMPLEMENTATION": "bogus"}, pre("t1"))
    assert code == 1 and out == "" and "TRIPWIRE_IMPLEMENTATION" in err


def test_bad_usage_never_exits_2(env: dict[str, str]) -> None:
    for options in ((), ("--frobnicate",)):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tripwire",
                "hook",
                *(("claude-code",) if options else ()),
                *options,
            ],
            input=b"{}",
            env=env,
            capture_output=True,
        )
        assert done.returncode == 0 and done.stdout == b""
    assert_failed_open(*hook(env, pre("t1"), "--redis"))


# -- nothing gets in -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "session",
    ["../../escaped", "/etc/passwd", "a/../../../b", "..", "x\x00y", "C:\\Windows\\x", "é" * 5000],
)
def test_session_ids_never_become_paths(env: dict[str, str], tmp_path: Path, session: str) -> None:
    before = set(tmp_path.rglob("*"))
    code, out, _ = hook(env, pre("t1", session=session))
    assert code == 0 and out == ""
    made = set(tmp_path.rglob("*")) - before
    state = Path(env["TRIPWIRE_STATE_DIR"])
    assert made and all(state in path.parents or path == state for path in made)
    names = sorted(p.name for p in (state / "sessions").iterdir())
    assert len(names) == 2 and all(n.startswith("claude-code-") for n in names)
    [record] = records(env)
    assert record["session"] == session[:512]


@pytest.mark.parametrize(
    ("event", "said"),
    [
        # Megabytes of tool_input, over the bound: not read whole.
        (json.dumps(pre("t1", content="x" * (9 << 20))).encode(), "MiB"),
        # Nested deeper than JSON parsers go.
        (b'{"tool_input": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "RecursionError"),
        # Invalid UTF-8.
        (b'{"hook_event_name": "PreToolUse", "session_id": "\xff\xfe"}', "UnicodeDecodeError"),
        (b"", "JSONDecodeError"),
        (b"[1, 2]", "not an object"),
        (json.dumps({**pre("t1"), "session_id": 5}).encode(), "session_id"),
    ],
)
def test_hostile_events_fail_open(env: dict[str, str], event: bytes, said: str) -> None:
    assert_failed_open(*hook(env, event), said)


def test_big_and_deep_tool_input_within_bounds(env: dict[str, str]) -> None:
    """A large event under the bound is checked; arguments nested deeper than keys go
    (256 levels) cannot be keyed: the call is allowed with a warning."""
    big = pre("t1", content="x" * (4 << 20))
    assert hook(env, big)[:2] == (0, "")
    assert decision(hook(env, {**big, "tool_use_id": "t2"})[1]) == "nudge"
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    assert_failed_open(*hook(env, pre("t3", content=deep)), "RecursionError")


# -- sessions in Redis ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    flags = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--port", str(port)]
    process = subprocess.Popen([server, *flags], stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()
        process.wait()


def test_sessions_in_redis(env: dict[str, str], redis_url: str) -> None:
    """Parallel hooks of one session through Redis: every call counted once, four nudges;
    nothing written to the state directory."""
    from tripwire.hooks._redis import Client
    from tripwire.hooks._store import session_name

    session = f"redis-{env['TRIPWIRE_IMPLEMENTATION']}-{time.time()}"
    calls = [
        pre(f"toolu_{i}", "Read", session=session, file_path=f"/work/{i % 4}.txt") for i in range(8)
    ]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda event: hook(env, event, "--redis", redis_url), calls))
    assert all(code == 0 and err == "" for code, _, err in answers)
    assert sorted(decision(out) for _, out, _ in answers) == ["allow"] * 4 + ["nudge"] * 4
    client = Client(redis_url)
    key = "tripwire:hook:{" + session_name("claude-code", session) + "}"
    record = json.loads(client.call("GET", key))
    assert record["counts"] == {"calls": 8, "nudges": 4, "stops": 0}
    assert 0 < client.call("PTTL", key) <= 168 * 3600 * 1000
    # A corrupt record: a fresh guard, one warning.
    client.call("SET", key, b"\xff garbage")
    code, out, err = hook(env, calls[0], "--redis", redis_url)
    assert (code, out) == (0, "") and "corrupt" in err
    client.close()
    assert not Path(env["TRIPWIRE_STATE_DIR"]).exists()


def _imported(env: dict[str, str], argv: list[str], data: bytes) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], input=data, env=env, capture_output=True
    )
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_the_hook_imports_only_what_it_needs(env: dict[str, str]) -> None:
    """A hook process runs per tool call: no replay, adapters, SDKs, argparse or
    importlib.metadata (~40 ms) on its path, nor hashlib (OpenSSL) with the native core
    (the reference hashes in Python)."""
    data = json.dumps(pre("t1")).encode()
    bare = _imported(env, ["-c", "pass"], b"")
    hook = _imported(env, ["-m", "tripwire", "hook", "claude-code"], data) - bare
    # The measurement sees the hook's imports (not the harness module's own line: it is
    # imported by importlib.import_module, which -X importtime does not log).
    assert "tripwire.hooks._store" in hook
    heavy = {
        name
        for name in hook
        if name.startswith(("tripwire.replay", "tripwire.adapters", "tripwire.cli", "redis"))
        or name in {"importlib.metadata", "argparse", "tomllib"}
        or (name in {"hashlib", "_hashlib"} and env["TRIPWIRE_IMPLEMENTATION"] == "native")
        or name.startswith(("anthropic", "openai", "claude_agent_sdk", "agents", "langchain"))
    }
    assert heavy == set()


def _peak_rss_mb(env: dict[str, str], event: bytes, tmp_path: Path) -> float:
    """The hook's peak resident memory, measured by a parent of its own that never holds
    the event (a forked child's peak counts its parent's pages until it execs)."""
    path = tmp_path / "event.json"
    path.write_bytes(event)
    probe = (
        "import resource, subprocess, sys\n"
        "with open(sys.argv[1], 'rb') as event:\n"
        "    done = subprocess.run([sys.executable, '-m', 'tripwire', 'hook', 'claude-code'],"
        " stdin=event, capture_output=True)\n"
        "assert done.returncode == 0 and done.stdout == b'', done\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(path)], env=env, capture_output=True, check=True
    )
    return float(done.stdout)


def test_hostile_events_take_bounded_memory(env: dict[str, str], tmp_path: Path) -> None:
    """Megabytes of tool_input: under the bound (8 MiB) it is checked, over it not even read
    whole: a 64 MiB event costs the hook no more than a 7 MiB one."""
    small = _peak_rss_mb(env, json.dumps(pre("t0")).encode(), tmp_path)
    big = _peak_rss_mb(env, json.dumps(pre("t1", content="x" * (7 << 20))).encode(), tmp_path)
    huge = _peak_rss_mb(env, json.dumps(pre("t2", content="x" * (64 << 20))).encode(), tmp_path)
    assert big < small + 80 and huge < small + 30, (small, big, huge)


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("redis://127.0.0.1:6379/0", ("127.0.0.1", 6379, None, None, "0")),
        ("redis://cache", ("cache", 6379, None, None, "")),
        ("redis://:pw@cache:6380/2", ("cache", 6380, None, "pw", "2")),
        ("redis://user:p%40ss@cache", ("cache", 6379, "user", "p@ss", "")),
        ("redis://[::1]:7000/3", ("::1", 7000, None, None, "3")),
    ],
)
def test_redis_urls(url: str, parsed: tuple[Any, ...]) -> None:
    from tripwire.hooks._redis import parse_url

    assert parse_url(url) == parsed


@pytest.mark.parametrize("url", ["http://cache", "redis://cache:port", "cache:6379"])
def test_bad_redis_urls(url: str) -> None:
    from tripwire.hooks._redis import parse_url

    with pytest.raises(ValueError, match="--redis"):
        parse_url(url)


def test_running_out_of_memory_loading_the_state_keeps_it(tmp_path: Path) -> None:
    """A ``MemoryError`` while the guard's state is loaded is not a damaged state: it is
    raised (the hook then allows the call, ``commands.hook``), and the stored state is left
    as it was, not replaced by a fresh guard's."""
    import tripwire
    from tripwire.hooks._store import FileStore

    class OutOfMemory:
        """A guard whose state cannot be loaded for want of memory."""

        def __init__(self) -> None:
            self._guard = tripwire.Guard()

        def load(self, data: bytes) -> None:
            raise MemoryError

        def __getattr__(self, name: str) -> Any:
            return getattr(self._guard, name)

    store = FileStore(str(tmp_path / "state"), 24.0, tripwire.Guard)
    with store.session("claude-code", "s1") as session:
        session.guard.check("Read", {"file_path": "/work/app.log"})
    [path] = (tmp_path / "state" / "sessions").glob("*.json")
    kept = path.read_bytes()
    assert json.loads(kept)["guard"]
    starved = FileStore(str(tmp_path / "state"), 24.0, OutOfMemory)
    with pytest.raises(MemoryError), starved.session("claude-code", "s1"):
        pass
    assert path.read_bytes() == kept
