"""The README's example is part of the contract: its asserts run here."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks, "the README has no python example"
    exec(compile(blocks[0], str(README), "exec"), {})


def test_readme_commands_are_what_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install '.[test]' && pytest" in text
    assert "pytest" in ci


def test_readme_state_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    state = [block for block in blocks if "from_snapshot" in block]
    assert state, "the README has no snapshot example"
    exec(compile(state[0], str(README), "exec"), {})
