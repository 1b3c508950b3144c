"""``tripwire serve``: the command hook's verdicts over loopback HTTP, and nothing gets in."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tripwire.hooks.serve import MAX_BODY, HookServer, make_server, serve_in_thread

SECRET = "s3cret-for-tests"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HookServer]:
    monkeypatch.setenv("TRIPWIRE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TRIPWIRE_CONFIG", str(tmp_path / "none.toml"))
    server = make_server("127.0.0.1", 0, key=SECRET)
    serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def post(
    server: HookServer,
    body: bytes | dict[str, Any],
    secret: str | None = SECRET,
    path: str = "/hooks/claude-code",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), int(port), timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if secret is not None:
        sent["X-Tripwire-Secret"] = secret
    connection.request("POST", path, body=data, headers=sent)
    response = connection.getresponse()
    payload = json.loads(response.read() or b"{}")
    connection.close()
    return response.status, payload


def pre(call_id: str, session: str = "s1") -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": "Read",
        "tool_input": {"file_path": "/work/app.log"},
        "tool_use_id": call_id,
    }


def test_binds_loopback_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIPWIRE_STATE_DIR", str(tmp_path / "state"))
    server = make_server(key=SECRET)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


def test_the_command_hooks_verdicts(server: HookServer) -> None:
    answers = [post(server, pre(f"t{i}")) for i in range(3)]
    assert [status for status, _ in answers] == [200, 200, 200]
    assert answers[0][1] == {}
    assert answers[1][1]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert (
        "second identical call to Read"
        in answers[1][1]["hookSpecificOutput"]["permissionDecisionReason"]
    )
    assert answers[2][1]["continue"] is False
    # Sessions are apart.
    assert post(server, pre("t1", session="other")) == (200, {})


@pytest.mark.parametrize("secret", [None, "", "wrong", SECRET + "x"])
def test_requests_without_the_secret_are_refused(server: HookServer, secret: str | None) -> None:
    for i in range(3):
        assert post(server, pre(f"t{i}"), secret=secret)[0] == 401
    assert server.store.records() == []


def test_big_bodies_are_refused_unread(server: HookServer) -> None:
    # Announced bigger than the bound: refused before a byte of it is read.
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), int(port), timeout=10)
    connection.putrequest("POST", "/hooks/claude-code")
    connection.putheader("X-Tripwire-Secret", SECRET)
    connection.putheader("Content-Length", str(MAX_BODY + 1))
    connection.endheaders()
    assert connection.getresponse().status == 413
    connection.close()
    assert server.store.records() == []


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1]", b'{"hook_event_name": "PreToolUse"}', b"[" * 100_000, b"\xff\xfe"],
)
def test_hostile_bodies_fail_open(server: HookServer, body: bytes) -> None:
    assert post(server, body) == (200, {})
    assert post(server, pre("t1")) == (200, {})  # and it goes on serving


def test_unknown_paths(server: HookServer) -> None:
    assert post(server, pre("t1"), path="/hooks/nope")[0] == 404
    assert post(server, pre("t1"), path="/../../etc/passwd")[0] == 404
