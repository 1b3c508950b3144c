"""What a hook costs Claude Code per tool call (issue 27). Prints times and ratios; asserts
nothing about time.

    python benches/hooks.py [--rounds N] [--redis]

1. ``tripwire hook claude-code`` spawned as Claude Code spawns a command hook (``/bin/sh -c
   COMMAND``, the event on stdin), per event kind, against ``/bin/sh -c 'python -c pass'``
   measured interleaved in the same run: the hook's p50 (target <= 30 ms) and what it adds to
   a bare interpreter. Both the command ``tripwire install`` writes (``python -m tripwire``)
   and the console script. Python's bytecode cache is on for these processes (as in an
   installed wheel; this machine's PYTHONDONTWRITEBYTECODE would make every hook compile
   tripwire from source).
2. ``tripwire serve`` in its own process, the events POSTed on one keep-alive connection on
   loopback: p50 per event (target <= 1 ms).
3. With ``--redis`` (and redis-server on PATH): the hook with ``--redis URL``.
4. Per harness (issue 28): ``tripwire hook HARNESS`` (the console script) for each harness's
   pre-tool and post-tool events in its own shape, against the bare interpreter, interleaved.
   Gemini CLI, Copilot CLI, Cursor and Cline give no call id: their calls are keyed by content
   (one hash of the call more per event).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tripwire

PYTHON = sys.executable
SCRIPT = str(Path(PYTHON).with_name("tripwire"))


def events(n: int, sessions: int = 5) -> list[tuple[str, dict[str, Any]]]:
    """Sessions' events in the order Claude Code sends them: a prompt, then per call a
    PreToolUse and a PostToolUse (distinct reads: every call allowed, the window full);
    ``n`` calls over ``sessions`` sessions (the first event of each makes its state)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for session in range(sessions):
        base = {"session_id": f"bench-{session}", "transcript_path": "/nonexistent", "cwd": "/w"}
        prompt = {**base, "hook_event_name": "UserPromptSubmit", "prompt": "go"}
        out.append(("UserPromptSubmit", prompt))
        for i in range(n // sessions):
            call = {
                **base,
                "tool_name": "Read",
                "tool_input": {"file_path": f"/work/src/module_{i}.py"},
                "tool_use_id": f"toolu_bench{session}_{i:05d}",
            }
            out.append(("PreToolUse", {**call, "hook_event_name": "PreToolUse"}))
            result = {"type": "text", "file": {"content": f"line {i}\n" * 20}}
            done = {**call, "hook_event_name": "PostToolUse", "tool_response": result}
            out.append(("PostToolUse", done))
    return out


def spawn(command: str, data: bytes, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(["/bin/sh", "-c", command], input=data, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"{command}: exit {done.returncode}: {done.stderr.decode()[:500]}")
    return elapsed


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def bench_command(rounds: int, extra: str = "", label: str = "") -> None:
    with tempfile.TemporaryDirectory() as root:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIPWIRE_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(TRIPWIRE_STATE_DIR=f"{root}/state", TRIPWIRE_CONFIG=f"{root}/none.toml")
        commands = {
            "bare python -c pass": f"{shlex.quote(PYTHON)} -c pass",
            "python -m tripwire hook": f"{shlex.quote(PYTHON)} -m tripwire hook claude-code{extra}",
        }
        if os.path.exists(SCRIPT):
            commands["tripwire hook (script)"] = f"{shlex.quote(SCRIPT)} hook claude-code{extra}"
        times: dict[tuple[str, str], list[float]] = {}
        session = events(rounds)
        for kind, event in session:
            data = json.dumps(event).encode()
            # Interleaved: a burst of load from elsewhere hits every candidate alike.
            for name, command in commands.items():
                times.setdefault((name, kind), []).append(spawn(command, data, env))
        bare = statistics.median(times[("bare python -c pass", "PreToolUse")]) * 1000
        print(
            f"\n== tripwire hook claude-code{label}, spawned by /bin/sh as Claude Code does "
            f"({rounds} calls, {tripwire.IMPLEMENTATION} core)"
        )
        columns = ("p50 ms", "p90 ms", "over bare")
        print(f"{'command':28s} {'event':18s} {' '.join(f'{c:>9s}' for c in columns)}  target")
        for (name, kind), values in times.items():
            p50 = pct(values, 0.5)
            verdict = ""
            if name != "bare python -c pass":
                verdict = "ok" if p50 <= 30 else "MISS"
            print(
                f"{name:28s} {kind:18s} {p50:8.1f} {pct(values, 0.9):8.1f} "
                f"{p50 - bare:+9.1f}  {'<= 30 ms ' + verdict if verdict else ''}"
            )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(500):
        if process.poll() is not None:
            raise SystemExit("the server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.01)
    raise SystemExit("the server did not start")


def bench_serve(rounds: int) -> None:
    """The client speaks HTTP/1.1 on a raw socket: what is timed is the server's round trip
    (Claude Code's client is Node's; http.client's own parsing would be most of the time)."""
    port = free_port()
    secret = "bench-secret"
    env = {**os.environ, "TRIPWIRE_SECRET": secret}
    process = subprocess.Popen(
        [PYTHON, "-m", "tripwire", "serve", "--port", str(port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(port, process)
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        head = (
            "POST /hooks/claude-code HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nX-Tripwire-Secret: {secret}\r\n"
        ).encode()

        def post(event: dict[str, Any]) -> float:
            body = json.dumps(event).encode()
            request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
            start = time.perf_counter()
            sock.sendall(request)
            status = reader.readline()
            length = 0
            while (line := reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            elapsed = time.perf_counter() - start
            assert b" 200 " in status, status
            return elapsed

        times: dict[str, list[float]] = {}
        for kind, event in events(rounds * 10):
            times.setdefault(kind, []).append(post(event))
        sock.close()
        print(f"\n== tripwire serve on loopback, one keep-alive connection ({rounds * 10} calls)")
        print(f"{'event':18s} {'p50 ms':>8s} {'p90 ms':>8s}  target")
        for kind, values in times.items():
            p50 = pct(values, 0.5)
            verdict = "ok" if p50 <= 1 else "MISS"
            print(f"{kind:18s} {p50:8.3f} {pct(values, 0.9):8.3f}  <= 1 ms {verdict}")
    finally:
        process.terminate()
        process.wait()


def bench_redis(rounds: int, run: Callable[[int, str, str], None]) -> None:
    server = shutil.which("redis-server")
    if server is None:
        print("\n== redis: skipped (redis-server is not on PATH)")
        return
    port = free_port()
    flags = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([server, *flags], stdout=subprocess.DEVNULL)
    try:
        wait_for(port, process)
        run(rounds, f" --redis redis://127.0.0.1:{port}/0", " --redis")
    finally:
        process.terminate()
        process.wait()


def harness_events(harness: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    """One session's pre- and post-tool events of ``harness``, in its own shape (distinct
    reads: every call allowed, the window full)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(n):
        args = {"file_path": f"/work/src/module_{i}.py"}
        result = f"line {i}\n" * 20
        pre: dict[str, Any]
        post: dict[str, Any]
        if harness == "gemini":
            base = {"session_id": "bench", "cwd": "/w", "tool_name": "read_file"}
            pre = {**base, "hook_event_name": "BeforeTool", "tool_input": args}
            post = {
                **base,
                "hook_event_name": "AfterTool",
                "tool_input": args,
                "tool_response": {"llmContent": result},
            }
        elif harness == "codex":
            base = {"session_id": "bench", "cwd": "/w", "tool_name": "Read"}
            base["tool_use_id"] = f"call_{i}"
            pre = {**base, "hook_event_name": "PreToolUse", "tool_input": args}
            post = {**base, "hook_event_name": "PostToolUse", "tool_input": args}
            post["tool_response"] = result
        elif harness == "copilot":
            base = {"sessionId": "bench", "cwd": "/w", "toolName": "view"}
            pre = {**base, "timestamp": i, "toolArgs": json.dumps(args)}
            post = {**pre, "toolResult": {"resultType": "success", "textResultForLlm": result}}
        elif harness == "cursor":
            base = {"conversation_id": "bench", "workspace_roots": ["/w"], "tool_name": "Read"}
            pre = {**base, "hook_event_name": "preToolUse", "tool_input": args}
            post = {**pre, "hook_event_name": "postToolUse", "tool_output": result}
        else:
            base = {"taskId": "bench", "workspaceRoots": ["/w"]}
            call = {"toolName": "read_file", "parameters": args}
            pre = {**base, "hookName": "PreToolUse", "preToolUse": call}
            post = {
                **base,
                "hookName": "PostToolUse",
                "postToolUse": {**call, "result": result, "success": True},
            }
        out += [("pre", pre), ("post", post)]
    return out


def bench_harnesses(rounds: int) -> None:
    from tripwire.hooks import HARNESSES

    with tempfile.TemporaryDirectory() as root:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIPWIRE_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(TRIPWIRE_STATE_DIR=f"{root}/state", TRIPWIRE_CONFIG=f"{root}/none.toml")
        hook = (
            shlex.quote(SCRIPT) if os.path.exists(SCRIPT) else f"{shlex.quote(PYTHON)} -m tripwire"
        )
        bare_command = f"{shlex.quote(PYTHON)} -c pass"
        names = [name for name in HARNESSES if name != "claude-code"]
        streams = {name: harness_events(name, rounds) for name in names}
        times: dict[tuple[str, str], list[float]] = {}
        bare: list[float] = []
        for index in range(rounds * 2):
            bare.append(spawn(bare_command, b"", env))
            for name in names:
                kind, event = streams[name][index]
                command = f"{hook} hook {name}"
                times.setdefault((name, kind), []).append(
                    spawn(command, json.dumps(event).encode(), env)
                )
        bare_p50 = pct(bare, 0.5)
        print(
            f"\n== tripwire hook HARNESS per harness, spawned by /bin/sh ({rounds} calls each, "
            f"{tripwire.IMPLEMENTATION} core; bare python -c pass p50 {bare_p50:.1f} ms)"
        )
        print(
            f"{'harness':10s} {'event':6s} {'p50 ms':>8s} {'p90 ms':>8s} {'over bare':>9s}  target"
        )
        for (name, kind), values in times.items():
            p50 = pct(values, 0.5)
            verdict = "ok" if p50 <= 30 else "MISS"
            print(
                f"{name:10s} {kind:6s} {p50:8.1f} {pct(values, 0.9):8.1f} "
                f"{p50 - bare_p50:+9.1f}  <= 30 ms {verdict}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="tool calls per session (30)")
    parser.add_argument("--redis", action="store_true", help="also the hook with --redis")
    args = parser.parse_args()
    # The bytecode of tripwire's modules, as an installed wheel has it.
    compileall.compile_dir(str(Path(tripwire.__file__).parent), quiet=1)
    bench_command(args.rounds)
    bench_serve(args.rounds)
    bench_harnesses(args.rounds)
    if args.redis:
        bench_redis(args.rounds, bench_command)


if __name__ == "__main__":
    main()
