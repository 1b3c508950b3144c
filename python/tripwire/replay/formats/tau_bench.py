"""tau-bench results (``sierra-research/tau-bench``, ``historical_trajectories/*.json`` and the
``results/*.json`` its runs write): a JSON list of ``{"task_id", "reward", "info", "traj",
"trial"}``, ``traj`` an OpenAI chat list (``tool_calls`` with string ``arguments``, ``role:
"tool"`` results). Each element is a run, named ``task <task_id> trial <trial>``, and keeps its
reward (1.0: the task was done)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from tripwire.replay.formats._base import Event, Format, RunEnd, Source, register, reward
from tripwire.replay.formats.messages import conversation

NAME: Final = "tau-bench"


def _is_run(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("traj"), list)
        and ("reward" in value or "task_id" in value)
    )


def read(source: Source, value: Any, run: str, line: int | None, prefix: str) -> Iterator[Event]:
    source.stats.formats.add(NAME)
    task = value.get("task_id")
    if isinstance(task, (str, int)) and not isinstance(task, bool):
        run = f"task {task}"
        trial = value.get("trial")
        if isinstance(trial, int) and not isinstance(trial, bool):
            run += f" trial {trial}"
    yield from conversation(value["traj"], run, source.path, line, 0, f"{prefix}traj")
    yield RunEnd(run, reward(value.get("reward")))


FORMAT = register(
    Format(
        name=NAME,
        help=((NAME, "tau-bench results: a list of {task_id, reward, info, traj, trial}"),),
        order=40,
        document=_is_run,
        read=read,
    )
)
