"""``tripwire replay``: what the guard would have saved, on traces you already have.

Each run in the traces is put through a fresh ``tripwire.Guard``, step by step, as the
harness would have done before dispatching each call; the report says where the guard would
have nudged and stopped, and what the rest of the run cost. ``replay(paths)`` is the API the
command line uses; ``formats`` reads traces, ``simulate`` replays them, ``cost`` prices model
calls, ``report`` renders the result and ``html`` draws it as one self-contained page.
``replay_calls`` is the replay as a function over runs' calls, for an engine such as Ray to map
over a dataset partitioned by run (``cluster``).
"""

from __future__ import annotations

from tripwire.replay.cluster import replay_calls
from tripwire.replay.cost import DEFAULT_PRICE_IN, DEFAULT_PRICE_OUT, Prices, Usage
from tripwire.replay.formats import FileStats, Problem, Result, Turn
from tripwire.replay.report import SCHEMA, render, to_json, write_json
from tripwire.replay.simulate import (
    Counts,
    Report,
    RunResult,
    RunStore,
    Settings,
    ToolStats,
    Totals,
    replay,
)

__all__ = (
    "DEFAULT_PRICE_IN",
    "DEFAULT_PRICE_OUT",
    "SCHEMA",
    "Counts",
    "FileStats",
    "Prices",
    "Problem",
    "Report",
    "Result",
    "RunResult",
    "RunStore",
    "Settings",
    "ToolStats",
    "Totals",
    "Turn",
    "Usage",
    "render",
    "replay",
    "replay_calls",
    "to_json",
    "write_json",
)
