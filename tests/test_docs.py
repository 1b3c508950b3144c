"""Every Python block of the documentation runs, offline, as a reader would run it.

The blocks of one page run in order in one namespace (a page may set things up in one block
and use them in the next), with the repository as the working directory and ``examples/`` on
the path, where the scripted models live (``examples/scripted.py``: no network, no key).
Files a block includes with ``--8<-- "PATH"`` (pymdownx.snippets, as the site builds them)
are read in. A page whose blocks need a package that is not installed skips, naming it;
``pip install '.[test]'`` brings them all. The Redis page gets a ``redis-server`` of its own
on a free port through ``REDIS_URL``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
# A fence may be indented (inside an admonition); its block is dedented.
FENCE = re.compile(r"^(?P<indent>[ ]*)```python\n(?P<code>.*?)^(?P=indent)```$", re.DOTALL | re.M)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)
# Optional packages, by the top-level module a block imports.
OPTIONAL = ("openai", "anthropic", "agents", "langchain", "langgraph", "mcp", "redis")


def python_blocks(text: str) -> list[str]:
    """The page's ```python blocks, with included files read in."""
    blocks = []
    for fence in FENCE.finditer(text):
        indent = len(fence["indent"])
        block = "".join(line[indent:] for line in fence["code"].splitlines(keepends=True))
        blocks.append(SNIPPET.sub(lambda m: (ROOT / m[1]).read_text(encoding="utf-8"), block))
    return blocks


def _pages() -> list[str]:
    return sorted(
        str(path.relative_to(DOCS))
        for path in DOCS.rglob("*.md")
        if python_blocks(path.read_text(encoding="utf-8"))
    )


def test_blocks_are_found() -> None:
    """The extraction itself: a page known to have blocks has them, and a block that
    includes a file gets its text."""
    assert {"index.md", "guard/index.md", "adapters/openai.md"} <= set(_pages())
    included = python_blocks('```python\n--8<-- "examples/scripted.py"\n```\n')
    assert included == [(EXAMPLES / "scripted.py").read_text(encoding="utf-8") + "\n"]


@pytest.fixture
def redis_url() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("page", _pages())
def test_page_runs(
    page: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = DOCS / page
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    imported = {
        m.split(".")[0]
        for block in blocks
        for m in re.findall(r"^\s*(?:from|import) ([\w.]+)", block, re.MULTILINE)
    }
    for module in sorted(imported & set(OPTIONAL)):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install '.[test]' brings it)")
    if "REDIS_URL" in "".join(blocks):
        monkeypatch.setenv("REDIS_URL", request.getfixturevalue("redis_url"))
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    # A page's blocks share one namespace; __name__ is not "__main__", so an included
    # script defines its main() without running it.
    namespace: dict[str, object] = {"__name__": f"docs.{page}"}
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{path}, block {number}", "exec")
        exec(code, namespace)
    # Modules a page imported from examples/ are fresh for the next page.
    for name in [
        n for n, m in sys.modules.items() if str(EXAMPLES) in str(getattr(m, "__file__", ""))
    ]:
        del sys.modules[name]
