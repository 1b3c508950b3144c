"""The ``tripwire`` command's entry point: dispatches before importing what a command does not
need. ``tripwire hook`` runs once per tool call of a coding agent, so it must not pay for
the replay machinery that ``tripwire.cli`` imports."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

_HOOK_COMMANDS = frozenset({"install", "uninstall", "serve", "sessions"})


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"]:
        from tripwire.hooks.commands import hook

        code = hook(args[1:])
        if argv is None:
            # The process is the hook's own, its answer written and its files closed: end it
            # without the interpreter's teardown (module and GC finalisation, ~3.5 ms of a
            # ~30 ms hook).
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
        return code
    if args[:1] and args[0] in _HOOK_COMMANDS:
        from tripwire.hooks.commands import main as hooks_main

        return hooks_main(args)
    if argv is None:
        # Only for the command's own process: a program calling ``main`` keeps its own.
        no_idle_threads()
    from tripwire.cli import main as cli_main

    return cli_main(args)


def no_idle_threads() -> None:
    """Asks the libraries a replay loads for no threads of their own, where the user has not
    said otherwise; read when each loads, so called before anything imports them.

    * pyarrow imports numpy, whose OpenBLAS starts a thread per core that spins while it
      waits for work no command of ours gives it: 6% of a Parquet replay's CPU, and with
      ``--jobs`` each worker's spinning thread took a share of the cores the workers need.
    * pyarrow starts jemalloc's background thread, though its default allocator is mimalloc:
      a process with a thread of its own is not forked (``replay.parallel``), so ``--jobs``
      after pyarrow was loaded (``--calls-out``) started its workers afresh (0.2 s)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
