"""The ``tripwire`` command (also ``python -m tripwire``).

``tripwire replay PATH...`` puts recorded agent runs through the guard and reports where it
would have nudged and stopped them and what that would have saved. ``tripwire key NAME
ARGS_JSON`` prints a call's key.

Exit status, a bit mask so that both conditions can be reported at once:

* 0: done, nothing to report; input that held no tool calls (an empty file, a session of
  messages only, a directory with no trace files) is counted and named in the report, and
  is not an error;
* 1: ``--fail-on-loop`` was given and the guard stopped at least one run (``loop_detected``
  or ``no_progress``);
* 2: bad usage (unknown option, invalid guard settings or tool policies, a ``--tools`` file
  that cannot be read or is not a JSON object, ``--html`` not writable, ``key`` arguments
  that are not JSON);
* 4: some input could not be read (a file or directory unreadable, a line not JSON or too
  long, a record of no known shape, a call the guard could not key): it was reported on
  stderr with file and line, skipped, and the report covers the rest;
* 5: both 1 and 4.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import tripwire
from tripwire.replay import cost, export, html, progress
from tripwire.replay.formats import Problem, help_text, table, trace_suffixes
from tripwire.replay.report import DEFAULT_LIMIT, render, write_json
from tripwire.replay.simulate import STDIN, CallRow, Settings, replay

EXIT_OK: Final = 0
EXIT_LOOP: Final = 1
EXIT_USAGE: Final = 2
EXIT_BAD_INPUT: Final = 4
# Problems printed on stderr as they are found; the rest are counted (and kept in --json).
PRINTED_PROBLEMS: Final = 20

_EPILOG = """\
exit status:
  0  done; input without tool calls (empty files, sessions of messages only,
     directories with no trace files) is counted in the report, not an error
  1  --fail-on-loop was given and the guard stopped a run (loop_detected, no_progress)
  2  bad usage: an unknown option, bad guard settings, a bad --tools file
  4  some input could not be read (unreadable, not JSON, of no known shape): each
     problem is on stderr with file and line, skipped; the report covers the rest
  5  both 1 and 4
"""
_TOP_EPILOG = (
    _EPILOG
    + """
coding agents (Claude Code): tripwire install claude-code, tripwire sessions,
tripwire serve, tripwire uninstall claude-code (each with --help); the hook itself:
tripwire hook claude-code.
"""
)

_REPLAY_HELP = """\
Replays recorded agent runs through the loop guard: where it would have nudged and
stopped each run, and the steps, tokens and money that stopping would have saved.

Input formats, detected per file (JSON or JSONL, .gz too, - for stdin, directories are
searched for {suffixes} and their .gz):
{formats}

Tool results in the traces (chat "tool" messages, Responses *_output items, tool_result
blocks, the events' "result" or {"run", "result_of": CALL_ID, "result"} lines) are given to
the guard with the verdict of their call, so it can tell progress from loops: a repeat whose
result changed is not a loop, and cycles or runs of empty results stop with no_progress.
Tell it which tools write or poll with --tools / --tool; --hash-only replays the guard that
ignores results (and policies), for comparison.

Money: every model call re-sends the transcript, so each call is priced from its own usage
figures where the trace has them, else estimated from the transcript size (marked ~). Prices
follow the model each call names (the common Anthropic and OpenAI models' list prices, cache
reads and writes as each provider bills them); unknown models get $3/$15 per million tokens.
"""


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a price: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a price: {text!r}")
    return value


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _add_volatile(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--volatile-key",
        action="append",
        default=[],
        metavar="K",
        help="an argument name to ignore at every depth, in addition to the defaults "
        f"({', '.join(sorted(tripwire.DEFAULT_VOLATILE_KEYS))}); repeatable",
    )
    parser.add_argument(
        "--no-default-volatile",
        action="store_true",
        help="do not ignore the default volatile keys (only those given with --volatile-key)",
    )


def _volatile(args: argparse.Namespace) -> frozenset[str] | None:
    if not args.volatile_key and not args.no_default_volatile:
        return None
    base: frozenset[str] = (
        frozenset() if args.no_default_volatile else tripwire.DEFAULT_VOLATILE_KEYS
    )
    return base | frozenset(args.volatile_key)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tripwire",
        description="Loop guard for AI agents.",
        epilog=_TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"tripwire {tripwire.__version__} ({tripwire.IMPLEMENTATION} core)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    rp = commands.add_parser(
        "replay",
        help="what the guard would have saved, on your own traces",
        description=_REPLAY_HELP.replace(
            "{suffixes}", ", ".join(f"*{suffix}" for suffix in trace_suffixes())
        ).replace("{formats}", help_text()),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rp.add_argument(
        "paths", nargs="+", metavar="PATH", help="trace files or directories; - is stdin"
    )
    guard = rp.add_argument_group("guard")
    guard.add_argument(
        "--window", type=_count, default=12, metavar="N", help="recent calls remembered (12)"
    )
    guard.add_argument(
        "--nudge-at",
        type=_count,
        default=2,
        metavar="N",
        help="repeats in the window that nudge (2)",
    )
    guard.add_argument(
        "--stop-at", type=_count, default=3, metavar="N", help="repeats in the window that stop (3)"
    )
    _add_volatile(guard)
    guard.add_argument(
        "--tools",
        metavar="FILE",
        help="tool policies: a JSON object of tool name -> policy, as Guard(tools=...) takes "
        'it, e.g. {"build_status": {"policy": "poll", "max_polls": 30}, "deploy": "write"}',
    )
    guard.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME=POLICY",
        help="one tool's policy: read, write, volatile or poll; repeatable, over --tools",
    )
    guard.add_argument(
        "--hash-only",
        action="store_true",
        help="ignore tool results (and tool policies): the guard before results, for comparison",
    )
    money = rp.add_argument_group("money (US dollars per million tokens)")
    money.add_argument(
        "--price-in",
        type=_price,
        default=None,
        metavar="USD",
        help="input tokens, for every model (default: each model's list price, else "
        f"{cost.DEFAULT_PRICE_IN:g})",
    )
    money.add_argument(
        "--price-out",
        type=_price,
        default=None,
        metavar="USD",
        help="output tokens, for every model (default: each model's list price, else "
        f"{cost.DEFAULT_PRICE_OUT:g})",
    )
    money.add_argument(
        "--price-cache-read",
        "--price-cached",
        dest="price_cache_read",
        type=_price,
        default=None,
        metavar="USD",
        help="input tokens read from a prompt cache (default: the model's; "
        f"{cost.CACHE_READ:g}x the input price for unknown models and with --price-in)",
    )
    money.add_argument(
        "--price-cache-write",
        type=_price,
        default=None,
        metavar="USD",
        help="input tokens written to a prompt cache (default: the model's; "
        f"{cost.CACHE_WRITE:g}x the input price for unknown models and with --price-in)",
    )
    inp = rp.add_argument_group("input")
    inp.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME=THEIRS",
        help="a table's column for one of ours (run, step, tool, arguments, result, error, "
        "turn, call_id, model, usage, label), e.g. run=session_id; repeatable",
    )
    inp.add_argument(
        "--jobs",
        "-j",
        type=_count,
        default=None,
        metavar="N",
        help="processes the files are shared among (default: every core); the report is the "
        "same as with --jobs 1",
    )
    out = rp.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="the whole report as JSON on stdout")
    out.add_argument(
        "--html",
        metavar="FILE",
        help="also write the report as one self-contained HTML page (no network needed)",
    )
    out.add_argument(
        "--out", metavar="FILE", help="also write one row a run to FILE, as Parquet (pyarrow)"
    )
    out.add_argument(
        "--calls-out",
        metavar="FILE",
        help="also write one row a call, with the guard's verdict, to FILE, as Parquet",
    )
    out.add_argument(
        "--limit",
        type=_count,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"runs listed in the table ({DEFAULT_LIMIT}; 0: all)",
    )
    out.add_argument(
        "--fail-on-loop",
        action="store_true",
        help="exit 1 if the guard stopped any run (loop_detected or no_progress)",
    )

    kp = commands.add_parser(
        "key",
        help="print the key of one call",
        description="Prints the canonical key of a call: the first 16 hex digits of SHA-256 "
        "over its canonical JSON. Calls with equal keys are the same action to the guard.",
    )
    kp.add_argument("name", metavar="NAME", help="the tool name")
    kp.add_argument("arguments", metavar="ARGS_JSON", help="the arguments as JSON; - reads stdin")
    kp.add_argument(
        "--canonical", action="store_true", help="also print the canonical JSON that is hashed"
    )
    _add_volatile(kp)
    # Imported here, not at the top: `fuzz` needs hypothesis and mcp, and only when it runs.
    from tripwire import fuzz_mcp

    fuzz_mcp.add_parser(commands)
    return parser


class _Problems:
    """Prints problems on stderr as they are found, the first ``PRINTED_PROBLEMS`` of them."""

    def __init__(self, stream: TextIO, bar: progress.Progress | None) -> None:
        self._stream = stream
        self._bar = bar
        self.count = 0

    def __call__(self, problem: Problem) -> None:
        self.count += 1
        if self.count > PRINTED_PROBLEMS + 1:
            return
        if self._bar is not None:
            self._bar.clear()
        if self.count <= PRINTED_PROBLEMS:
            self._stream.write(f"tripwire: {problem}\n")
        else:
            self._stream.write("tripwire: further problems are counted, not listed here\n")
        self._stream.flush()


def _input_size(paths: Sequence[str]) -> int | None:
    """Bytes on disk to read (``None`` with stdin: unknown), for the progress bar."""
    if STDIN in paths:
        return None
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files += [os.path.join(root, n) for root, _, names in os.walk(path) for n in names]
        else:
            files.append(path)
    total = 0
    for path in files:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total


class _UsageError(Exception):
    """Bad usage, with the message to show."""


def _tools(args: argparse.Namespace) -> dict[str, Any] | None:
    """The tool policies of ``--tools FILE`` and ``--tool NAME=POLICY`` (which win)."""
    tools: dict[str, Any] = {}
    if args.tools is not None:
        try:
            with open(args.tools, "rb") as file:
                data = json.loads(file.read())
        except OSError as exc:
            raise _UsageError(f"--tools {args.tools}: cannot read: {exc.strerror or exc}") from None
        except (ValueError, RecursionError) as exc:
            raise _UsageError(f"--tools {args.tools}: not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _UsageError(
                f"--tools {args.tools}: expected a JSON object of tool name -> policy, "
                f"not a JSON {type(data).__name__}"
            )
        tools.update(data)
    for item in args.tool:
        name, equals, policy = item.rpartition("=")
        if not equals or not name or not policy:
            raise _UsageError(f"--tool {item!r}: expected NAME=POLICY, e.g. deploy=write")
        tools[name] = policy
    if not tools:
        return None
    try:
        tripwire.Guard(tools=tools)
    except (TypeError, ValueError, OverflowError) as exc:
        given = (
            "--tools/--tool"
            if args.tools is not None and args.tool
            else ("--tool" if args.tool else f"--tools {args.tools}")
        )
        raise _UsageError(f"{given}: {exc}") from None
    return tools


def _replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    prices = cost.Prices(
        args.price_in, args.price_out, args.price_cache_read, args.price_cache_write
    )
    try:
        tools = _tools(args)
    except _UsageError as exc:
        parser.error(str(exc))
    settings = Settings(
        args.window,
        args.nudge_at,
        args.stop_at,
        _volatile(args),
        prices,
        observe=not args.hash_only,
        tools=tools,
    )
    try:
        settings.check()
    except (TypeError, ValueError, OverflowError) as exc:
        parser.error(str(exc))
    if args.limit < 0:
        parser.error("--limit must be 0 or more")
    columns: dict[str, str] = {}
    for item in args.column:
        ours, equals, theirs = item.partition("=")
        if not equals or not theirs or ours not in table.COLUMNS:
            parser.error(
                f"--column {item!r}: expected NAME=THEIRS, NAME one of {', '.join(table.COLUMNS)}"
            )
        columns[ours] = theirs
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be 1 or more")
    stderr = sys.stderr
    bar: progress.Progress | None = None
    if stderr.isatty():
        size = _input_size(args.paths)
        if size is None or size >= progress.MIN_BYTES:
            bar = progress.Progress(stderr, size)
    problems = _Problems(stderr, bar)
    calls: export.CallsWriter | None = None
    try:
        if args.calls_out is not None:
            calls = export.CallsWriter(args.calls_out)
    except export.ExportError as exc:
        sys.stderr.write(f"tripwire: --calls-out {exc}\n")
        return EXIT_USAGE
    # The page names each step's tool on hover: it hears the calls too.
    steps = html.StepTools() if args.html is not None else None
    on_call: Callable[[CallRow], None] | None = calls
    if steps is not None:
        on_call = steps if calls is None else _both(calls, steps)
    try:
        report = replay(
            args.paths,
            settings,
            stdin=sys.stdin.buffer if STDIN in args.paths else None,
            on_problem=problems,
            tick=None if bar is None else bar.tick,
            columns=columns,
            jobs=(os.cpu_count() or 1) if args.jobs is None else args.jobs,
            on_call=on_call,
            limit=0 if args.json else args.limit,
            # The terminal table needs its listed runs only, chosen as runs finish.
            keep_runs=bool(args.json or args.html or args.out or not args.limit),
        )
    except BaseException:
        if calls is not None:
            calls.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    try:
        if calls is not None:
            calls.commit()
        if args.out is not None:
            export.write_runs(report, args.out)
    except export.ExportError as exc:
        report.runs.close()
        sys.stderr.write(f"tripwire: {exc}\n")
        return EXIT_USAGE
    try:
        if args.html is not None:
            try:
                with open(args.html, "w", encoding="utf-8", errors="backslashreplace") as page:
                    html.write(report, page, tools=steps)
            except OSError as exc:
                sys.stderr.write(f"tripwire: --html {args.html}: {exc.strerror or exc}\n")
                return EXIT_USAGE
        if args.json:
            write_json(report, sys.stdout)
        else:
            sys.stdout.write(render(report, limit=args.limit))
        sys.stdout.flush()
    finally:
        report.runs.close()
    code = EXIT_OK
    if args.fail_on_loop and report.totals.stopped:
        code |= EXIT_LOOP
    if report.bad_input:
        code |= EXIT_BAD_INPUT
    return code


def _both(
    first: Callable[[CallRow], None], second: Callable[[CallRow], None]
) -> Callable[[CallRow], None]:
    def both(row: CallRow) -> None:
        first(row)
        second(row)

    return both


def _key(args: argparse.Namespace) -> int:
    text = sys.stdin.buffer.read() if args.arguments == STDIN else args.arguments
    volatile = _volatile(args)
    try:
        key = tripwire.call_key_json(args.name, text, volatile_keys=volatile)
        canonical = (
            tripwire.canonical_json(args.name, json.loads(text), volatile_keys=volatile)
            if args.canonical
            else None
        )
    except ValueError as exc:
        sys.stderr.write(f"tripwire key: ARGS_JSON is not JSON: {exc}\n")
        return EXIT_USAGE
    except RecursionError as exc:
        sys.stderr.write(f"tripwire key: {exc}\n")
        return EXIT_USAGE
    sys.stdout.write(key + "\n")
    if canonical is not None:
        sys.stdout.write(canonical.decode("utf-8", "replace") + "\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (never raises for bad input)."""
    parser = _parser()
    # Run labels, tool names and arguments come from the traces, and a Python str may hold
    # lone surrogates ("\ud800" in JSON) that no encoding writes: escape them rather than
    # lose the whole report to a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        args = parser.parse_args(argv)
        if args.command == "key":
            return _key(args)
        if args.command == "fuzz":
            from tripwire import fuzz_mcp

            return fuzz_mcp.main(args)
        return _replay(args, parser)
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("tripwire: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader of our output went away (| head): not an error worth a traceback.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
