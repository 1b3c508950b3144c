"""``tripwire install/uninstall claude-code`` on settings files as people have them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from tripwire._entry import main

# A user's settings as they are in the wild: permissions, env, a status line, and hooks of
# their own on the events tripwire uses (and one it does not).
REAL_SETTINGS: dict[str, Any] = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "model": "opus",
    "permissions": {
        "allow": ["Bash(npm run lint)", "Bash(git diff:*)", "Read(~/.zshrc)"],
        "deny": ["Bash(curl:*)", "Read(./.env)"],
        "defaultMode": "acceptEdits",
    },
    "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "0", "NODE_OPTIONS": "--max-old-space-size=8192"},
    "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "command", "command": "~/.claude/hooks/block-rm-rf.py", "timeout": 5}
                ],
            }
        ],
        "PostToolUse": [
            {
                "matcher": "Edit|MultiEdit|Write",
                "hooks": [{"type": "command", "command": 'npx prettier --write "$FILE"'}],
            }
        ],
        "Notification": [
            {"hooks": [{"type": "command", "command": "notify-send 'Claude Code' 'needs you'"}]}
        ],
    },
    "includeCoAuthoredBy": False,
}
EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "SubagentStop",
    "SessionEnd",
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("TRIPWIRE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    return home


def settings_path(home: Path) -> Path:
    return home / ".claude" / "settings.json"


def write(path: Path, data: Any) -> bytes:
    raw = json.dumps(data, indent=4).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return raw


def ours(settings: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [
        hook
        for group in settings["hooks"].get(event, [])
        for hook in group["hooks"]
        if "tripwire" in json.dumps(hook).lower()
    ]


def test_install_merges_and_keeps_everything(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = settings_path(home)
    raw = write(path, REAL_SETTINGS)
    assert main(["install", "claude-code"]) == 0
    installed = json.loads(path.read_text())
    # Everything that was there is there, in the same order, the user's hooks first.
    assert list(installed) == list(REAL_SETTINGS)
    for key in REAL_SETTINGS:
        if key != "hooks":
            assert installed[key] == REAL_SETTINGS[key]
    for event, groups in REAL_SETTINGS["hooks"].items():
        assert installed["hooks"][event][: len(groups)] == groups
    for event in EVENTS:
        [hook] = ours(installed, event)
        assert hook["type"] == "command"
        assert hook["command"].endswith("tripwire hook claude-code")
    assert installed["hooks"]["PreToolUse"][-1]["matcher"] == "*"
    assert "matcher" not in installed["hooks"]["SessionEnd"][-1]
    assert ours(installed, "Notification") == []
    # The file as it was, byte for byte.
    assert (path.parent / "settings.json.tripwire-backup").read_bytes() == raw
    assert "installed" in capsys.readouterr().out


def test_install_twice_is_install_once(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = settings_path(home)
    write(path, REAL_SETTINGS)
    assert main(["install", "claude-code"]) == 0
    once = path.read_bytes()
    assert main(["install", "claude-code"]) == 0
    assert path.read_bytes() == once
    assert "nothing to change" in capsys.readouterr().out
    # Another way of running the hook replaces the first, it is not added beside it.
    assert main(["install", "claude-code", "--command", "tripwire hook claude-code"]) == 0
    installed = json.loads(path.read_text())
    for event in EVENTS:
        assert [h["command"] for h in ours(installed, event)] == ["tripwire hook claude-code"]


def test_uninstall_removes_exactly_what_install_added(home: Path) -> None:
    path = settings_path(home)
    write(path, REAL_SETTINGS)
    assert main(["install", "claude-code"]) == 0
    assert main(["uninstall", "claude-code"]) == 0
    assert json.loads(path.read_text()) == REAL_SETTINGS
    # Into a file that had no hooks at all: the "hooks" key goes too.
    plain = {"model": "sonnet"}
    write(path, plain)
    assert main(["install", "claude-code"]) == 0
    assert main(["uninstall", "claude-code"]) == 0
    assert json.loads(path.read_text()) == plain


def test_user_hook_beside_ours_in_one_group_is_kept(home: Path) -> None:
    """A user who added their own hook to tripwire's group keeps it on uninstall."""
    path = settings_path(home)
    assert main(["install", "claude-code"]) == 0
    edited = json.loads(path.read_text())
    mine = {"type": "command", "command": "~/audit.sh"}
    edited["hooks"]["PreToolUse"][0]["hooks"].append(mine)
    write(path, edited)
    assert main(["uninstall", "claude-code"]) == 0
    assert json.loads(path.read_text()) == {
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [mine]}]}
    }


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "opus",}',  # a trailing comma
        b'{\n  // my settings\n  "model": "opus"\n}',  # a comment
        b'["not", "an", "object"]',
        b'{"hooks": {"PreToolUse": {"matcher": "*"}}}',  # an event that is not a list
        b'{"hooks": []}',
        b"\xff\xfe{}",
    ],
)
def test_unparsable_settings_are_refused(
    home: Path, raw: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    path = settings_path(home)
    path.write_bytes(raw)
    assert main(["install", "claude-code"]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err
    assert path.read_bytes() == raw
    assert sorted(os.listdir(path.parent)) == ["settings.json"]


def test_dry_run_writes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = settings_path(home)
    raw = write(path, REAL_SETTINGS)
    assert main(["install", "claude-code", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "tripwire hook claude-code" in out
    assert path.read_bytes() == raw
    assert sorted(os.listdir(path.parent)) == ["settings.json"]


@pytest.mark.parametrize(
    ("scope", "name"), [("project", "settings.json"), ("local", "settings.local.json")]
)
def test_project_scopes(home: Path, tmp_path: Path, scope: str, name: str) -> None:
    project = tmp_path / "repo"
    assert main(["install", "claude-code", "--scope", scope, "--project", str(project)]) == 0
    written = json.loads((project / ".claude" / name).read_text())
    assert set(written["hooks"]) == set(EVENTS)
    assert not settings_path(home).exists()


def test_serve_hooks_carry_the_secret(home: Path, tmp_path: Path) -> None:
    path = settings_path(home)
    write(path, REAL_SETTINGS)
    assert main(["install", "claude-code", "--serve", "http://127.0.0.1:8765"]) == 0
    installed = json.loads(path.read_text())
    [hook] = ours(installed, "PreToolUse")
    assert hook["type"] == "http"
    assert hook["url"] == "http://127.0.0.1:8765/hooks/claude-code"
    assert hook["headers"] == {"X-Tripwire-Secret": "$TRIPWIRE_SECRET"}
    assert hook["allowedEnvVars"] == ["TRIPWIRE_SECRET"]
    secret_file = tmp_path / "state" / "serve-secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert installed["env"]["TRIPWIRE_SECRET"] == secret_file.read_text().strip()
    assert installed["env"]["NODE_OPTIONS"] == REAL_SETTINGS["env"]["NODE_OPTIONS"]
    # Back to commands, then out: the file is as it was.
    assert main(["install", "claude-code"]) == 0
    assert main(["uninstall", "claude-code"]) == 0
    assert json.loads(path.read_text()) == REAL_SETTINGS
