"""Real Claude Code, headless, in a temporary HOME and project, against the fake Messages API.

The binary is the one the ``claude-agent-sdk`` wheel bundles (``claude_agent_sdk/_bundled/
claude``; the ``claude`` extra installs it). ``claude_binary()`` is ``None`` where it is not
installed: the tests that need it skip, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import _clis
from _fake_messages import FakeMessagesAPI

NO_CLAUDE = (
    "Claude Code is not installed (pip install 'tripwire[claude]': claude-agent-sdk bundles it)"
)
# The tools the scripted sessions use, allowed without asking (headless runs cannot ask).
ALLOWED_TOOLS = ["Bash", "Read", "Edit", "Write", "Grep", "Glob"]


def claude_binary() -> str | None:
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "_bundled" / "claude"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


class Sandbox(_clis.Sandbox):
    """A temporary HOME (Claude Code's settings and transcripts, tripwire's state and
    settings) and a trusted project directory in it."""

    CLEARED: ClassVar[tuple[str, ...]] = ("ANTHROPIC_", "CLAUDE", "TRIPWIRE_", "XDG_")
    ENV: ClassVar[Mapping[str, str]] = {
        "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        (self.project / ".claude").mkdir()
        (self.home / ".claude.json").write_text(
            json.dumps(
                {
                    "hasCompletedOnboarding": True,
                    "projects": {str(self.project): {"hasTrustDialogAccepted": True}},
                }
            )
        )
        # The project's own settings: permissions, as a real project has them.
        (self.project / ".claude" / "settings.json").write_text(
            json.dumps({"permissions": {"allow": ALLOWED_TOOLS}}, indent=2)
        )

    def claude(self, api: FakeMessagesAPI, prompt: str, **env: str) -> dict[str, Any]:
        binary = claude_binary()
        assert binary is not None
        done = subprocess.run(
            [binary, "-p", prompt, "--output-format", "json"],
            env=self.env(ANTHROPIC_BASE_URL=api.url, **env),
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=180,
        )
        try:
            result: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise AssertionError(
                f"claude exited {done.returncode} without a JSON result:\n"
                f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
            ) from None
        result["_stderr"] = done.stderr
        return result
