"""Every script in ``examples/`` runs, offline, and ends as its docstring says.

Each is run as a user runs it (``python examples/NAME.py``, a fresh process), with no API key
in its environment: the adapters' scripts drive the SDKs' own types with a scripted model
(``examples/scripted.py``), so a script that reached for the network or a key would fail.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Issue 25: with results observed, the call after the nudge runs and the 4th is stopped.
STOP = (
    "Stopped (loop_detected): get_logs was called 4 times with the same arguments and the same"
    " result"
)

# Script -> the module it needs (an extra: `pip install '.[test]'` brings them all).
NEEDS = {
    "openai_chat.py": "openai",
    "openai_responses.py": "openai",
    "anthropic_messages.py": "anthropic",
    "agents_sdk.py": "agents",
    "langchain_agent.py": "langchain",
    "mcp_session.py": "mcp",
    "checkout_triage.py": None,
}


def _scripts() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "scripted.py")


def test_every_script_is_listed() -> None:
    assert _scripts() == sorted(NEEDS), "a new example needs a line in NEEDS"


@pytest.mark.parametrize("script", sorted(NEEDS))
def test_example_runs_offline(script: str) -> None:
    module = NEEDS[script]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install '.[test]' brings it)")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    # Nothing may be reached: a proxy that does not exist catches a stray request.
    env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if script == "checkout_triage.py":
        assert "loop_detected" in done.stdout
    else:
        assert done.stdout.rstrip().endswith(STOP + " within the last 12 calls."), done.stdout
