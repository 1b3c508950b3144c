"""The pieces of a run's state that the engine (``tripwire._guard``) and the snapshot codec
(``tripwire._snapshot``) share: a call in the window, and the bounds of what a run keeps
(the native ones: ``rust/guard.rs``)."""

from __future__ import annotations

from typing import Any, Final

from tripwire._policy import Policy
from tripwire._question import Question

# How many read results a guard keeps for ``Verdict.cached``; the oldest go first.
CACHE_ENTRIES: Final = 1024
# How many transient failures of one call a run may retry before they count as repeats.
TRANSIENT_RETRIES: Final = 3
# How many distinct calls' poll counts, and how many distinct calls' transient-retry counts,
# a guard remembers (each). Arguments come from the model, so a run can make up a new poll
# call each check: past this, the least recently counted call is forgotten (its count starts
# again from 0), so memory and snapshots stay bounded (issue 26). A loop is always the most
# recently counted call, so it is never the one forgotten.
COUNTED_CALLS: Final = 256


class Entry:
    """One call in the window: its key and tool, the step it was checked at, whether it was
    nudged (so never ran), whether it was an allowed call to a ``write`` tool (``writes``) or
    to one that may change the world (``changes``: a write, a shell, or a tool with no
    policy), and the user turn it was made in; once observed, its result's digest, whether it
    came back empty, whether it failed (then ``error`` is the text), and whether the failure
    was a transient one that a retry need not answer for (``retry``). ``question``: what it
    asks (``tripwire._question``), known once it came back empty or failed, or when it was
    checked while such a result was in the window; ``args``: its arguments (``text``: as JSON
    text), held (``held``) until its result is observed, so that the question can be told
    then, or until a snapshot is taken, which tells it."""

    __slots__ = (
        "args",
        "changes",
        "empty",
        "error",
        "failed",
        "held",
        "key",
        "nudged",
        "question",
        "result",
        "retry",
        "step",
        "text",
        "tool",
        "turn",
        "writes",
    )

    def __init__(
        self, key: str, tool: str, step: int, nudged: bool, kind: Policy | None, turn: int
    ) -> None:
        self.key = key
        self.tool = tool
        self.step = step
        self.nudged = nudged
        self.writes = not nudged and kind == "write"
        self.changes = not nudged and kind in (None, "write", "shell")
        self.turn = turn
        self.result: str | None = None
        self.empty = False
        self.failed = False
        self.error: str | None = None
        self.retry = False
        self.question: Question | None = None
        self.held = False
        self.args: Any = None
        self.text = False

    @property
    def changed(self) -> bool:
        """May have changed the world: a write that did not fail, or a shell or tool of
        unknown kind (a command that fails may still have written files: a pre-commit hook
        that reformats them and fails the commit)."""
        return self.changes and not (self.writes and self.failed)

    @property
    def marked(self) -> bool:
        """Came back empty, or failed for good: what the rules over varied arguments read,
        and why later calls' questions are told while it is in the window."""
        return self.empty or (self.failed and not self.retry)
