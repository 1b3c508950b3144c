"""``python -m tripwire``: the ``tripwire`` command."""

from __future__ import annotations

from tripwire._entry import main

raise SystemExit(main())
