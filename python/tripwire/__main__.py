"""``python -m tripwire``: the ``tripwire`` command."""

from __future__ import annotations

from tripwire.cli import main

raise SystemExit(main())
