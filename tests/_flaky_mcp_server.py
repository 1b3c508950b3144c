"""A small MCP server for tests/test_fuzz_mcp.py: one honest tool, one that hangs, one that
kills its server, one that is not read-only. Run as ``python _flaky_mcp_server.py``."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
server = MCPServer("flaky")


@server.tool(annotations=READ_ONLY)
def get_length(text: str) -> int:
    """Honest: the length of the text's words, joined by one space."""
    return len(" ".join(text.split()))


@server.tool(annotations=READ_ONLY)
def get_stuck(text: str) -> str:
    """Never answers."""
    time.sleep(3600)
    return text


@server.tool(annotations=READ_ONLY)
def get_crash(text: str) -> str:
    """Kills the server."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=False))
def delete_everything(text: str) -> str:
    """Must not be called without --allow-writes."""
    raise SystemExit("called a write tool")


if __name__ == "__main__":
    server.run("stdio")
