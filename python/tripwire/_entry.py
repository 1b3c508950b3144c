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
        # pyarrow imports numpy, whose OpenBLAS starts a thread per core that spins while
        # it waits for work no command of ours gives it: measured 6% of a Parquet replay's
        # CPU, and with --jobs each worker's spinning thread takes a share of the cores the
        # workers need. Read when OpenBLAS loads, so set before anything imports numpy;
        # a value the user set is kept. Only for the command's own process (``argv`` None):
        # a program calling ``main`` keeps its environment.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from tripwire.cli import main as cli_main

    return cli_main(args)
