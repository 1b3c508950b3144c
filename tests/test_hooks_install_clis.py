"""``tripwire install/uninstall gemini|codex|copilot|cursor|cline`` on settings files as people
have them: everything else kept, installing twice is installing once, uninstall takes out
exactly what install put in, a file that cannot be read safely is refused untouched."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from tripwire._entry import main

# A Codex config.toml as people keep it: comments, a profile, a provider, MCP servers, and a
# PreToolUse hook of their own (arrays of tables, which tripwire's block appends to).
CODEX_CONFIG = """\
# ~/.codex/config.toml
model = "gpt-5-codex"   # the default model
approval_policy = "on-request"

[profiles.fast]
model = "gpt-5-mini"

[model_providers.azure]
name = "Azure"
base_url = "https://example.openai.azure.com/openai"
env_key = "AZURE_OPENAI_API_KEY"

[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-mcp"]

[[hooks.PreToolUse]]
matcher = "Bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "~/.codex/hooks/no-rm-rf.sh"
"""

GEMINI_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "ui": {"theme": "GitHub"},
    "hooks": {
        "BeforeTool": [
            {
                "matcher": "write_file|replace",
                "hooks": [{"name": "lint", "type": "command", "command": "./lint.sh"}],
            }
        ],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send gemini"}]}],
    },
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.setenv("TRIPWIRE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    return home


# -- Codex: config.toml ------------------------------------------------------------------------


def test_codex_install_appends_a_block_and_keeps_every_byte(home: Path) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(CODEX_CONFIG)
    assert main(["install", "codex"]) == 0
    text = path.read_text()
    assert text.startswith(CODEX_CONFIG)  # the person's file, comments and all, untouched
    config = tomllib.loads(text)
    assert config["model"] == "gpt-5-codex" and config["mcp_servers"]["docs"]["command"] == "npx"
    groups = config["hooks"]["PreToolUse"]
    assert groups[0]["hooks"][0]["command"] == "~/.codex/hooks/no-rm-rf.sh"
    assert groups[1]["matcher"] == "*"
    assert groups[1]["hooks"][0]["command"].endswith("tripwire hook codex")
    assert set(config["hooks"]) == {"PreToolUse", "PostToolUse", "UserPromptSubmit"}
    assert (path.parent / "config.toml.tripwire-backup").read_text() == CODEX_CONFIG
    # Installing again changes nothing; uninstalling gives the file back byte for byte.
    assert main(["install", "codex"]) == 0
    assert path.read_text() == text
    assert main(["uninstall", "codex"]) == 0
    assert path.read_text() == CODEX_CONFIG
    assert main(["uninstall", "codex"]) == 0
    assert path.read_text() == CODEX_CONFIG


def test_codex_install_into_no_file_and_a_project(home: Path) -> None:
    assert main(["install", "codex"]) == 0
    assert tomllib.loads((home / ".codex" / "config.toml").read_text())["hooks"]
    assert main(["install", "codex", "--scope", "project"]) == 0
    assert Path(".codex/config.toml").is_file()
    assert main(["uninstall", "codex"]) == 0
    assert (home / ".codex" / "config.toml").read_text() == ""


def test_codex_command_with_quotes_is_valid_toml(home: Path) -> None:
    command = '/opt/a\\b "quoted"/tripwire hook codex'
    assert main(["install", "codex", "--command", command]) == 0
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert config["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == command


@pytest.mark.parametrize(
    "text, said",
    [
        ('model = "gpt-5\n', "not valid TOML"),
        ("hooks = { PreToolUse = [] }\n", "nothing was written"),
        (b"\xff\xfe".decode("latin-1"), "nothing was written"),
    ],
)
def test_codex_refuses_what_it_cannot_edit_safely(
    home: Path, text: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(text, encoding="latin-1")
    before = path.read_bytes()
    assert main(["install", "codex"]) == 1
    assert said in capsys.readouterr().err
    assert path.read_bytes() == before
    assert not (path.parent / "config.toml.tripwire-backup").exists()


def test_codex_serve_is_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "codex", "--serve", "http://127.0.0.1:8765"]) == 1
    assert "command hooks only" in capsys.readouterr().err


# -- JSON settings: Gemini, Copilot, Cursor ----------------------------------------------------


def test_gemini_install_merges_and_uninstall_is_exact(home: Path) -> None:
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GEMINI_SETTINGS))
    assert main(["install", "gemini"]) == 0
    settings = json.loads(path.read_text())
    assert settings["security"] == GEMINI_SETTINGS["security"]
    before = settings["hooks"]["BeforeTool"]
    assert before[0] == GEMINI_SETTINGS["hooks"]["BeforeTool"][0]
    assert before[1]["matcher"] == ".*"
    hook = before[1]["hooks"][0]
    assert hook["command"].endswith("tripwire hook gemini") and hook["timeout"] == 10_000
    assert "matcher" not in settings["hooks"]["SessionEnd"][0]
    once = path.read_bytes()
    assert main(["install", "gemini"]) == 0
    assert path.read_bytes() == once
    assert main(["uninstall", "gemini"]) == 0
    assert json.loads(path.read_text()) == GEMINI_SETTINGS


@pytest.mark.parametrize(
    "harness, relative, key",
    [
        ("copilot", ".github/hooks/tripwire.json", "bash"),
        ("cursor", ".cursor/hooks.json", "command"),
    ],
)
def test_flat_hook_files(home: Path, harness: str, relative: str, key: str) -> None:
    """Copilot's and Cursor's {"version": 1, "hooks": {event: [hook, ...]}}, in the project."""
    path = Path(relative)
    path.parent.mkdir(parents=True)
    theirs = {"version": 1, "hooks": {"preToolUse": [{key: "./audit.sh"}]}}
    path.write_text(json.dumps(theirs))
    assert main(["install", harness, "--scope", "project"]) == 0
    settings = json.loads(path.read_text())
    assert settings["version"] == 1
    pre = settings["hooks"]["preToolUse"]
    assert pre[0] == {key: "./audit.sh"} and pre[1][key].endswith(f"tripwire hook {harness}")
    once = path.read_bytes()
    assert main(["install", harness, "--scope", "project"]) == 0
    assert path.read_bytes() == once
    assert main(["uninstall", harness, "--scope", "project"]) == 0
    assert json.loads(path.read_text()) == theirs


def test_copilot_installs_in_the_project_by_default(home: Path) -> None:
    assert main(["install", "copilot"]) == 0
    settings = json.loads(Path(".github/hooks/tripwire.json").read_text())
    assert settings["hooks"]["preToolUse"][0]["timeoutSec"] == 10
    assert main(["install", "copilot", "--scope", "user"]) == 1


@pytest.mark.parametrize("harness", ["gemini", "cursor"])
def test_json_that_is_not_an_object_is_refused(
    home: Path, harness: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = home / (".gemini/settings.json" if harness == "gemini" else ".cursor/hooks.json")
    path.parent.mkdir()
    path.write_text("[1, 2")
    assert main(["install", harness]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    assert path.read_text() == "[1, 2"


# -- Cline: one script per event ---------------------------------------------------------------


def test_cline_scripts(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hooks = Path(".clinerules/hooks")
    assert main(["install", "cline", "--scope", "project"]) == 0
    names = sorted(os.listdir(hooks))
    assert names == sorted(
        ["PreToolUse", "PostToolUse", "UserPromptSubmit", "TaskComplete", "TaskCancel"]
    )
    script = (hooks / "PreToolUse").read_text()
    assert script.startswith("#!/bin/sh\n") and "tripwire hook cline" in script
    assert (hooks / "PreToolUse").stat().st_mode & stat.S_IXUSR
    assert main(["install", "cline", "--scope", "project"]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert main(["uninstall", "cline", "--scope", "project"]) == 0
    assert os.listdir(hooks) == []


def test_cline_never_overwrites_a_hook_of_their_own(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks = Path(".clinerules/hooks")
    hooks.mkdir(parents=True)
    (hooks / "PreToolUse").write_text("#!/bin/sh\necho '{\"cancel\": false}'\n")
    assert main(["install", "cline", "--scope", "project"]) == 1
    assert "not tripwire's" in capsys.readouterr().err
    assert os.listdir(hooks) == ["PreToolUse"]
    assert main(["uninstall", "cline", "--scope", "project"]) == 1
    assert (hooks / "PreToolUse").exists()
