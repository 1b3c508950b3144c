"""``tripwire hook``, ``install``, ``uninstall``, ``serve`` and ``sessions``.

``tripwire hook HARNESS`` never fails the agent: whatever goes wrong inside tripwire (a
corrupt state file, an unwritable state directory, an event it cannot read, a bug), the call
is allowed, the exit status is 0 and one line on stderr says why. Exit status 2 would make
Claude Code block the call, so it is never used here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

# Events bigger than this are not read whole (a hostile tool_input): the call is allowed.
MAX_EVENT: Final = 8 * 1024 * 1024


def _warn(text: str) -> None:
    try:
        sys.stderr.write(f"tripwire: {' '.join(text.split())}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _hook_options(argv: Sequence[str]) -> tuple[str, str | None]:
    """``HARNESS [--redis URL]``, parsed without argparse (a hook process stays small)."""
    if not argv or argv[0].startswith("-"):
        raise ValueError("usage: tripwire hook HARNESS [--redis URL]")
    redis_url = None
    rest = list(argv[1:])
    while rest:
        option = rest.pop(0)
        if option == "--redis" and rest:
            redis_url = rest.pop(0)
        elif option.startswith("--redis="):
            redis_url = option.split("=", 1)[1]
        else:
            raise ValueError(f"tripwire hook: unknown option {option!r}")
    return argv[0], redis_url


def hook(argv: Sequence[str]) -> int:
    """Reads one event on stdin, writes the answer on stdout; always exits 0."""
    try:
        from tripwire.hooks import handle, harness
        from tripwire.hooks._config import load_settings, state_dir

        name, redis_url = _hook_options(argv)
        protocol = harness(name)
        raw = sys.stdin.buffer.read(MAX_EVENT + 1)
        if len(raw) > MAX_EVENT:
            _warn(f"the event is over {MAX_EVENT >> 20} MiB: not checked, the call is allowed")
            return 0
        event = json.loads(raw)
        settings = load_settings()
        store: Any
        if redis_url is not None:
            from tripwire.hooks._redis import RedisStore

            store = RedisStore(redis_url, settings.ttl_hours, settings.make_guard)
        else:
            from tripwire.hooks._store import FileStore

            store = FileStore(state_dir(), settings.ttl_hours, settings.make_guard)
        reply, warnings = handle(protocol, event, store)
        warnings = settings.warnings + warnings
        if warnings:
            _warn("; ".join(warnings))
        if reply is not None:
            sys.stdout.write(json.dumps(reply, ensure_ascii=True))
            sys.stdout.flush()
        return 0
    except BaseException as exc:  # a guard never bricks the agent
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        _warn(f"{what[:300]}; the call is allowed")
        return 0


# -- the other commands (argparse is fine here) ------------------------------------------------


def _parser() -> Any:
    import argparse

    from tripwire.hooks import HARNESSES

    parser = argparse.ArgumentParser(prog="tripwire")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    harnesses = sorted(HARNESSES)
    for verb in ("install", "uninstall"):
        sub = commands.add_parser(
            verb,
            help=f"{verb} tripwire's hooks in a coding agent's settings",
            description=f"{verb.capitalize()}s tripwire's hooks in the harness's settings file, "
            "leaving everything else in it as it was (a backup of the file is kept beside it).",
        )
        sub.add_argument("harness", choices=harnesses)
        sub.add_argument(
            "--scope",
            choices=("user", "project", "local"),
            default=None,
            help="user: the harness's settings in your home (the default; for Claude Code "
            "~/.claude/settings.json); project: the project's (.claude/settings.json, shared "
            "with the repository; Copilot CLI has no other); local: .claude/settings.local.json "
            "(Claude Code only). Each harness's files: docs/hooks/<harness>.md",
        )
        sub.add_argument("--project", default=".", metavar="DIR", help="the project (.)")
        sub.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
        if verb == "install":
            sub.add_argument(
                "--serve",
                metavar="URL",
                help="send the events to `tripwire serve` at URL (http://127.0.0.1:PORT) "
                "instead of running a command per event",
            )
            sub.add_argument(
                "--command",
                dest="hook_command",
                metavar="CMD",
                help="the hook command to write (default: this tripwire, by its full path)",
            )
            sub.add_argument("--redis", metavar="URL", help="keep the sessions in Redis")
    serve = commands.add_parser(
        "serve",
        help="answer hooks over HTTP, guards in memory",
        description="A loopback HTTP server for hooks that POST their events (Claude Code's "
        "http hooks): guards held in memory, one per session. Requests must carry the secret "
        f"header that `tripwire install --serve` configures ({_secret_path()}).",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    sessions = commands.add_parser(
        "sessions",
        help="recently guarded sessions, their nudges and stops",
        description="The sessions in the hooks' state directory, newest first.",
    )
    sessions.add_argument("--json", action="store_true", help="the records as JSON lines")
    sessions.add_argument("--limit", type=int, default=20, metavar="N")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if args.command in ("install", "uninstall"):
        from tripwire.hooks import install

        return install.run(args)
    if args.command == "serve":
        from tripwire.hooks import serve

        return serve.run(args.host, args.port)
    return _sessions(args.json, args.limit)


def _secret_path() -> str:
    from tripwire.hooks._config import state_dir

    return os.path.join(state_dir(), "serve-secret")


def _ago(when: float) -> str:
    seconds = max(0, int(time.time() - when))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def _sessions(as_json: bool, limit: int) -> int:
    from tripwire.hooks._config import load_settings, state_dir
    from tripwire.hooks._store import FileStore

    settings = load_settings()
    store = FileStore(state_dir(), settings.ttl_hours, settings.make_guard)
    records = store.records()[: max(0, limit) or None]
    out = sys.stdout
    if as_json:
        for record in records:
            out.write(json.dumps({k: v for k, v in record.items() if k != "guard"}) + "\n")
        return 0
    if not records:
        out.write(f"no guarded sessions in {store.dir}\n")
        return 0
    for record in records:
        counts = record.get("counts", {})
        state = "ended" if record.get("ended") else "active"
        out.write(
            f"{_ago(record['updated']):>8}  {record.get('harness')}  "
            f"{str(record.get('session'))[:36]}  {state}  calls {counts.get('calls', 0)}  "
            f"nudges {counts.get('nudges', 0)}  stops {counts.get('stops', 0)}  "
            f"{record.get('cwd') or ''}\n"
        )
        for event in record.get("events", [])[-5:]:
            out.write(
                f"          {_ago(event['when'])}: {event['action']} {event['tool']} "
                f"(call {event.get('call')}): {event.get('message') or event.get('reason')}\n"
            )
    return 0
