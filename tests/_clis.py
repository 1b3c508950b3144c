"""Real Gemini CLI and Codex CLI, headless, in a temporary HOME and project, against the fake
model APIs of ``_fake_models``.

The CLIs come from the npm registry (``.ci/run`` installs them into ``~/.cache/tripwire-clis``,
or ``$TRIPWIRE_CLIS``); where they are absent, the tests that need them skip, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

CLIS_DIR = Path(os.environ.get("TRIPWIRE_CLIS") or Path.home() / ".cache" / "tripwire-clis")
NPM_INSTALL = f"npm install --prefix {CLIS_DIR} @google/gemini-cli @openai/codex (.ci/run does it)"


def binary(name: str) -> str | None:
    path = CLIS_DIR / "node_modules" / ".bin" / name
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def version(package: str) -> str:
    manifest = CLIS_DIR / "node_modules" / package / "package.json"
    return str(json.loads(manifest.read_text())["version"])


class Sandbox:
    """A temporary HOME (the CLIs' settings and sessions, tripwire's state) and a project.
    ``CLEARED``: the prefixes of the environment variables the harnesses read, left out so
    the machine's own settings do not leak in; ``ENV``: what the sandbox sets."""

    CLEARED: ClassVar[tuple[str, ...]] = (
        "GEMINI_",
        "GOOGLE_",
        "OPENAI_",
        "CODEX_",
        "COPILOT_",
        "GH_",
        "GITHUB_",
        "TRIPWIRE_",
        "XDG_",
    )
    ENV: ClassVar[Mapping[str, str]] = {"NO_COLOR": "1"}

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.project = root / "home" / "project"
        self.state = root / "state"
        self.project.mkdir(parents=True)

    def env(self, **extra: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(self.CLEARED)}
        env.update(
            HOME=str(self.home),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            TRIPWIRE_STATE_DIR=str(self.state),
            **self.ENV,
        )
        env.update(extra)
        return env

    def tripwire(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tripwire", *args],
            env=self.env(**env),
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def install(self, harness: str, *args: str, **env: str) -> None:
        done = self.tripwire("install", harness, *args, **env)
        assert done.returncode == 0, done.stderr

    def sessions(self) -> list[dict[str, Any]]:
        done = self.tripwire("sessions", "--json")
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            env=self.env(**env),
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )

    # -- Gemini CLI ---------------------------------------------------------------------------

    def gemini_settings(self) -> None:
        """An API key's auth, as a person who ran ``gemini`` once has it."""
        path = self.home / ".gemini" / "settings.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))

    def gemini(self, api_url: str, prompt: str) -> subprocess.CompletedProcess[str]:
        gemini = binary("gemini")
        assert gemini is not None
        env = {
            "GEMINI_API_KEY": "fake-key",
            "GOOGLE_GEMINI_BASE_URL": api_url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        argv = [
            gemini,
            "-p",
            prompt,
            "-o",
            "json",
            "--approval-mode",
            "yolo",
            "-m",
            "gemini-2.5-pro",
        ]
        return self.run(argv, env)

    # -- Copilot CLI --------------------------------------------------------------------------

    def copilot(self, api_url: str, prompt: str) -> subprocess.CompletedProcess[str]:
        """Copilot CLI with a model of one's own (its BYOK provider settings), offline."""
        copilot = binary("copilot")
        assert copilot is not None
        env = {
            "COPILOT_PROVIDER_BASE_URL": f"{api_url}/v1",
            "COPILOT_PROVIDER_TYPE": "openai",
            "COPILOT_PROVIDER_WIRE_API": "responses",
            "COPILOT_PROVIDER_API_KEY": "fake-key",
            "COPILOT_PROVIDER_MODEL_ID": "gpt-5",
            "COPILOT_OFFLINE": "true",
            "COPILOT_AUTO_UPDATE": "false",
            # Repository hooks in prompt mode (-p): the opt-in for a folder not marked trusted.
            "GITHUB_COPILOT_PROMPT_MODE_REPO_HOOKS": "true",
        }
        return self.run([copilot, "-p", prompt, "--allow-all-tools"], env)

    # -- Codex CLI ----------------------------------------------------------------------------

    def codex_settings(self, api_url: str) -> None:
        """A model provider at the fake API, as config.toml names one."""
        path = self.home / ".codex" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# the person's own settings, kept by tripwire install\n"
            'model = "gpt-5"\n'
            'model_provider = "fake"\n\n'
            "[model_providers.fake]\n"
            'name = "fake"\n'
            f'base_url = "{api_url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "FAKE_OPENAI_KEY"\n'
            "supports_websockets = false\n"
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    def codex(self, prompt: str) -> subprocess.CompletedProcess[str]:
        codex = binary("codex")
        assert codex is not None
        argv = [
            codex,
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-hook-trust",
            "--dangerously-bypass-approvals-and-sandbox",
            "--json",
            prompt,
        ]
        return self.run(argv, {"FAKE_OPENAI_KEY": "fake-key"})
