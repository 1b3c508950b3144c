"""The live guard and ``tripwire replay`` give the same verdicts on the same trace.

A Claude Code session (a faithful reduction of the format: JSONL lines of ``user`` and
``assistant`` messages, ``tool_use`` and ``tool_result`` blocks with ``is_error``, human text
between) is replayed by the CLI, and driven by hand through a guard the way a live harness
wires it: ``check_turn`` per model response, ``observe`` of each ``tool_result`` block as it
is (the guard reads ``is_error`` itself), ``user_message`` at each human message. The first
nudge and the stop must be at the same steps, with the same tool and message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import tripwire

SESSION = "5b1d0c2e-1f3a-4c5d-8e9f-0a1b2c3d4e5f"


class Session:
    """Writes a Claude Code session, one JSONL line a message."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.n = 0

    def _line(self, kind: str, message: dict[str, Any]) -> None:
        self.n += 1
        self.lines.append(
            {
                "type": kind,
                "sessionId": SESSION,
                "uuid": f"u{self.n}",
                "timestamp": f"2026-11-02T10:{self.n // 60:02d}:{self.n % 60:02d}Z",
                "message": message,
            }
        )

    def say(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text})

    def call(self, *calls: tuple[str, dict[str, Any]]) -> list[str]:
        ids = [f"toolu_{self.n}_{i}" for i in range(len(calls))]
        content = [
            {"type": "tool_use", "id": i, "name": name, "input": args}
            for i, (name, args) in zip(ids, calls, strict=True)
        ]
        self._line(
            "assistant",
            {
                "id": f"msg_{self.n}",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": content,
                "usage": {"input_tokens": 100, "output_tokens": 20},
            },
        )
        return ids

    def results(self, *results: tuple[str, str, bool]) -> None:
        blocks = [
            {"type": "tool_result", "tool_use_id": i, "content": text, "is_error": failed}
            for i, text, failed in results
        ]
        self._line("user", {"role": "user", "content": blocks})

    def step(self, name: str, args: dict[str, Any], text: str, failed: bool = False) -> None:
        (call_id,) = self.call((name, args))
        self.results((call_id, text, failed))


def a_working_session() -> Session:
    """Commit after a hook reformatted files, tests after edits, the same read once per user
    message, a flaky 503 retried: healthy work; then a command failing the same way until the
    guard stops it."""
    s = Session()
    s.say("Fix the checkout rounding bug and commit.")
    s.step("Read", {"file_path": "src/tax.py"}, "def vat(x): return x * 0.2")
    s.step(
        "Edit",
        {"file_path": "src/tax.py", "old_string": "x * 0.2", "new_string": "round(x * 0.2, 2)"},
        "ok",
    )
    s.step("Bash", {"command": "mix test"}, "1 failure", failed=True)
    s.step(
        "Edit",
        {
            "file_path": "src/tax.py",
            "old_string": "round(x * 0.2, 2)",
            "new_string": "round(x * 0.2 + 1e-9, 2)",
        },
        "ok",
    )
    s.step("Bash", {"command": "mix test"}, "0 failures")
    s.step("Bash", {"command": "git commit -am 'fix rounding'"}, "black reformatted 1 file", True)
    s.step("Bash", {"command": "git commit -am 'fix rounding'"}, "[main 1a2b3c] fix rounding")
    s.say("Thanks. What does tax.py say now?")
    s.step("Read", {"file_path": "src/tax.py"}, "def vat(x): return round(x * 0.2 + 1e-9, 2)")
    s.say("And again, please: I edited it by hand.")
    s.step("Read", {"file_path": "src/tax.py"}, "def vat(x): return round(x * 0.2 + 1e-9, 2)")
    s.step(
        "WebFetch", {"url": "https://status.example.com"}, "Error: 503 Service Unavailable", True
    )
    s.step("WebFetch", {"url": "https://status.example.com"}, "all systems operational")
    s.say("Now deploy it.")
    # Parallel reads in one response, one of them twice.
    ids = s.call(("Read", {"file_path": "deploy.yml"}), ("Read", {"file_path": "deploy.yml"}))
    s.results((ids[0], "stages: [build]", False), (ids[1], "stages: [build]", False))
    for _ in range(5):
        s.step("Bash", {"command": "make deploy"}, "Error: no such target 'deploy'", True)
    return s


def replayed(path: Path, *flags: str) -> dict[str, Any]:
    code = "import sys; from tripwire.cli import main; sys.exit(main())"
    out = subprocess.run(
        [sys.executable, "-c", code, "replay", "--json", *flags, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)["runs"]
    return dict(run)


def live(session: Session) -> dict[str, Any]:
    """A harness's loop over the same session, with a fresh guard."""
    guard = tripwire.Guard()
    waiting: dict[str, Any] = {}
    seen: dict[str, Any] = {"nudge_step": None, "stop_step": None}
    for line in session.lines:
        message = line["message"]
        content = message["content"]
        if line["type"] == "assistant":
            calls = [(b["name"], b["input"], b["id"]) for b in content if b["type"] == "tool_use"]
            for verdict in guard.check_turn(calls):
                if verdict.action == "nudge" and seen["nudge_step"] is None:
                    seen["nudge_step"] = verdict.step
                if verdict.action == "stop":
                    seen.update(stop_step=verdict.step, tool=verdict.tool)
                    seen["stop_message"] = verdict.message
                    return seen
                if verdict.action == "allow" and verdict.duplicate_of is None:
                    waiting[verdict.call_id] = verdict
            continue
        if isinstance(content, str):
            guard.user_message()
            continue
        for block in content:
            verdict = waiting.pop(block["tool_use_id"], None)
            if verdict is not None:
                guard.observe(verdict, block)  # the block as the harness holds it
    return seen


def test_live_guard_and_replay_agree(tmp_path: Path) -> None:
    session = a_working_session()
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in session.lines), encoding="utf-8")
    run, by_hand = replayed(path), live(session)
    assert run["format"] == "claude-code"
    fields = ("nudge_step", "stop_step", "tool", "stop_message")
    assert {f: run[f] for f in fields} == {f: by_hand[f] for f in fields}
    # The working part was not stopped: the stop is the failing deploy, by its 4th attempt.
    assert run["tool"] == "Bash" and "make deploy" in run["stop_call"]
    assert run["stop_step"] == 16
    assert run["nudge_step"] == 15
    # The hash-only guard stopped the healthy part: the second `git commit` was nudged and the
    # re-read after the user's hand edit was the third Read of tax.py.
    hash_only = replayed(path, "--hash-only")
    assert hash_only["stop_step"] < 13
