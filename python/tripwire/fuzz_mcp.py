"""``tripwire fuzz mcp -- <server command...>``: ``check_tool`` on every tool of an MCP
server over stdio (issue 30).

The server is started as a subprocess (the ``mcp`` package's stdio client, in an event loop
of its own thread), its tools are listed, and the read-only ones (``readOnlyHint``) are
checked; the others only with ``--allow-writes``, after saying what will be called. Every
call has a timeout; a tool that hangs or kills the server is reported, the server started
again, and the next tool checked. The policies found are written as a JSON file that
``Guard(tools=...)`` and ``tripwire replay --tools`` read.

Needs ``hypothesis`` (``tripwire[test]``) and ``mcp`` (``tripwire[mcp]``).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

if TYPE_CHECKING:
    from tripwire._toolcheck import ToolReport

# hypothesis (through tripwire._toolcheck) and mcp are imported when a fuzz runs, not when
# the CLI builds its parser.

DEFAULT_TIMEOUT: Final = 10.0
# Time to start the server and list its tools.
START_TIMEOUT: Final = 60.0
# JSON-RPC error code of a call whose connection closed (the server exited).
CONNECTION_CLOSED: Final = -32000


class McpServer:
    """One MCP server subprocess and a client session to it, driven from synchronous code:
    the session lives in a task of a private event loop, so that the client's task groups
    are entered and left in one task."""

    def __init__(self, command: Sequence[str], timeout: float, errlog: TextIO) -> None:
        self._command = list(command)
        self._timeout = timeout
        self._errlog = errlog
        # Closed in close(), which owns the server it logs.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._held: concurrent.futures.Future[None] | None = None

    def start(self) -> list[Any]:
        """Starts the server; its tools."""
        from tripwire._toolcheck import ToolUnavailable

        ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
        try:
            return ready.result(START_TIMEOUT)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ToolUnavailable(f"the server did not start within {START_TIMEOUT:g} s") from None

    async def _hold(self, ready: concurrent.futures.Future[list[Any]]) -> None:
        import mcp
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self._command[0], args=self._command[1:])
        self._closing = asyncio.Event()
        try:
            # The server's own log goes to a file, not between the reports; its last lines
            # tell why it died, if it does.
            transport = stdio_client(params, errlog=self._stderr)
            async with mcp.Client(transport, mode="legacy") as client:
                self._client = client
                listed = await client.list_tools()
                ready.set_result(list(listed.tools))
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    def call(self, name: str, arguments: Any) -> Any:
        """The ``CallToolResult`` of one call; ``ToolUnavailable`` if the server does not
        answer in time or is gone."""
        from tripwire._toolcheck import ToolUnavailable

        client = self._client
        if client is None:
            raise ToolUnavailable("the server is not running (it exited)")
        future = asyncio.run_coroutine_threadsafe(
            client.call_tool(name, arguments, read_timeout_seconds=self._timeout), self._loop
        )
        try:
            return future.result(self._timeout + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolUnavailable(f"no answer within {self._timeout:g} s") from None
        except Exception as exc:
            gone = self._client is None or _error_code(exc) == CONNECTION_CLOSED
            if gone or _is_timeout(exc):
                why = "no answer" if _is_timeout(exc) else "the server exited"
                raise ToolUnavailable(f"{why} ({type(exc).__name__}: {exc}){self._log()}") from None
            if type(exc).__name__ in ("MCPError", "McpError"):
                # A protocol error (invalid params): the tool's answer to these arguments.
                raise
            raise ToolUnavailable(f"the call failed ({type(exc).__name__}: {exc})") from None

    def _log(self) -> str:
        """The last line the server wrote on stderr, if any."""
        try:
            self._stderr.seek(0)
            lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends: {lines[-1][:200]}" if lines else ""

    def close(self) -> None:
        if self._closing is not None:
            self._loop.call_soon_threadsafe(self._closing.set)
        if self._held is not None:
            try:
                self._held.result(30)
            except Exception as exc:
                self._errlog.write(f"tripwire fuzz: closing the server: {exc}\n")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._stderr.close()


def _error_code(exc: BaseException) -> Any:
    error = getattr(exc, "error", None)
    return getattr(error, "code", getattr(exc, "code", None))


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, TimeoutError) or "timed out" in text or "timeout" in text


def _read_only(tool: Any) -> bool:
    hints = getattr(tool, "annotations", None)
    return getattr(hints, "read_only_hint", None) is True


def fuzz_server(
    command: Sequence[str],
    *,
    allow_writes: bool = False,
    examples: int = 30,
    timeout: float = DEFAULT_TIMEOUT,
    values: Mapping[str, Sequence[Any]] | None = None,
    only: Sequence[str] = (),
    out: TextIO | None = None,
    err: TextIO | None = None,
    seed: int | None = 0,
) -> tuple[list[ToolReport], list[str]]:
    """Checks the tools of the MCP server that ``command`` starts; the reports, and the
    names of the tools skipped as not read-only."""
    from tripwire._toolcheck import check_tool

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    server = McpServer(command, timeout, err)
    try:
        tools = server.start()
    except BaseException:
        server.close()
        raise
    chosen = [t for t in tools if not only or t.name in only]
    skipped = [t.name for t in chosen if not _read_only(t) and not allow_writes]
    checked = [t for t in chosen if _read_only(t) or allow_writes]
    writes = [t.name for t in checked if not _read_only(t)]
    if writes:
        out.write(f"--allow-writes: these tools will be called, with drawn arguments: {writes}\n")
    if skipped:
        out.write(f"not read-only, not called (--allow-writes calls them): {skipped}\n")
    out.flush()
    reports: list[ToolReport] = []
    try:
        for tool in checked:
            definition = tool.model_dump(mode="json", by_alias=True)
            name = tool.name

            def call(arguments: Any, name: str = name, server: McpServer = server) -> Any:
                return server.call(name, arguments)

            report = check_tool(
                call,
                definition,
                name=name,
                examples=examples,
                values=values,
                call="dict",
                timeout=None,  # the server's own timeout applies
                seed=seed,
            )
            reports.append(report)
            out.write(f"{report}\n\n")
            out.flush()
            if report.problem is not None:
                # Whatever the tool did to the server (a hang, an exit), the next tool gets
                # a fresh one.
                server.close()
                server = McpServer(command, timeout, err)
                server.start()
    finally:
        server.close()
    return reports, skipped


def policy_file(reports: Sequence[ToolReport]) -> dict[str, Any]:
    """The tools' policies as ``Guard(tools=...)`` takes them: the tools whose kind is
    known."""
    return {r.name: r.policy for r in reports if r.policy is not None}


def _value(text: str) -> tuple[str, Any]:
    name, equals, raw = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(
            f"expected NAME=JSON, e.g. repo_path='\"/tmp/r\"': {text!r}"
        )
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw  # a bare string


def add_parser(commands: Any) -> None:
    """Adds ``fuzz mcp`` to the CLI's subcommands (nothing imported until it runs)."""
    fuzz = commands.add_parser(
        "fuzz",
        help="run your tools on spellings the key treats as one: where would it lie?",
        description="Calls a tool with arguments and their equivalent spellings (key order, "
        "whitespace, nulls, 1 vs 1.0, volatile keys) and with the same arguments twice, and "
        "reports where the guard's key would lie, with the policy that makes it truthful.",
    )
    kinds = fuzz.add_subparsers(dest="fuzz_kind", metavar="KIND", required=True)
    mp = kinds.add_parser(
        "mcp",
        help="the tools of an MCP server over stdio",
        description="Starts an MCP server (the command after --), checks its read-only "
        "tools (readOnlyHint), prints a report per tool, and writes their policies.",
    )
    mp.add_argument(
        "--allow-writes", action="store_true", help="also call tools that are not read-only"
    )
    mp.add_argument(
        "--out",
        metavar="FILE",
        help="write the policies (JSON) for Guard(tools=...) / replay --tools",
    )
    mp.add_argument(
        "--examples", type=int, default=30, metavar="N", help="arguments tried per kind (30)"
    )
    mp.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help="seconds a call may take (10)",
    )
    mp.add_argument(
        "--value",
        action="append",
        type=_value,
        default=[],
        metavar="NAME=JSON",
        help="a value to use for argument NAME in every tool (repeatable: candidates)",
    )
    mp.add_argument(
        "--tool", action="append", default=[], metavar="NAME", help="only this tool (repeatable)"
    )
    mp.add_argument("--seed", type=int, default=0, help="random seed (0: reproducible runs)")
    mp.add_argument(
        "server", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the server's command"
    )


def main(args: argparse.Namespace) -> int:
    """Runs ``tripwire fuzz mcp``; the exit status (0: ran, 1: a tool would make the key
    lie or failed, 2: bad usage)."""
    command = list(args.server)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        sys.stderr.write("tripwire fuzz mcp: give the server's command after --\n")
        return 2
    if shutil.which(command[0]) is None:
        sys.stderr.write(f"tripwire fuzz mcp: command not found: {command[0]}\n")
        return 2
    from tripwire._toolcheck import ToolUnavailable

    values: dict[str, list[Any]] = {}
    for name, value in args.value:
        values.setdefault(name, []).append(value)
    try:
        reports, _ = fuzz_server(
            command,
            allow_writes=args.allow_writes,
            examples=args.examples,
            timeout=args.timeout,
            values=values,
            only=args.tool,
            seed=args.seed,
        )
    except ToolUnavailable as exc:
        sys.stderr.write(f"tripwire fuzz mcp: {exc}\n")
        return 2
    except Exception as exc:
        sys.stderr.write(
            f"tripwire fuzz mcp: cannot talk to the server: {type(exc).__name__}: {exc}\n"
        )
        return 2
    if args.out is not None:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(policy_file(reports), file, indent=2, sort_keys=True)
            file.write("\n")
        sys.stdout.write(f"policies written to {args.out}\n")
    return 0 if all(r.honest for r in reports) else 1
