"""One guarded session of a coding-agent CLI: the guard, and what the hooks remember beside it.

Harness protocols (``tripwire.hooks.<harness>``) turn their events into the four operations
here: ``check`` a call before it runs, ``observe`` its result, a ``user_message``, ``end``.
Every decision is the guard's; this module only keeps, between hook processes, what the guard
cannot be asked again:

- which calls were checked (call id -> key, step, action, model response, message, whether
  observed), so that
  a result reported by a later process reaches ``observe`` with the verdict it belongs to,
  and so that identical calls of one model response are one action, as ``check_turn`` makes
  them (the harness checks them one by one; see ``check``);
- counts and the last nudges and stops, for ``tripwire sessions``.

The record is JSON; the guard inside it is its ``snapshot(state_only=True)`` (base64), loaded
into a guard made from the current settings. A record that cannot be read, of another version,
or whose guard was made with other settings starts a fresh guard, with a warning.
"""

from __future__ import annotations

import binascii
import time
from collections.abc import Callable
from typing import Any, Final

FORMAT: Final = "tripwire-hook-session"
VERSION: Final = 1
# Calls remembered per session: as many as the guard remembers call ids (an older call's
# result could not be observed). Nudges and stops remembered for ``tripwire sessions``.
CALLS_KEPT: Final = 128
EVENTS_KEPT: Final = 20
# Text from the harness kept in a record is cut to this (ids, paths, tool names).
TEXT_KEPT: Final = 512
# Harnesses that give no call id (Gemini CLI, Copilot CLI, Cursor, Cline): a call asked again
# with the same content this soon after, its result not yet reported, is taken for a retried
# delivery of it (``content_call_id``).
RETRY_SECONDS: Final = 2.0


def _cut(value: object) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    return text[:TEXT_KEPT]


def _well_formed(data: dict[str, Any]) -> bool:
    """The fields the operations use, of the types they use (a record edited by hand or
    damaged must not fail every hook of its session)."""
    calls, counts, events = data.get("calls"), data.get("counts"), data.get("events")
    return (
        isinstance(calls, list)
        and all(
            isinstance(c, list) and len(c) == 7 and isinstance(c[2], int) and isinstance(c[1], str)
            for c in calls
        )
        and isinstance(counts, dict)
        and all(isinstance(counts.get(k), int) for k in ("calls", "nudges", "stops"))
        and isinstance(events, list)
        and isinstance(data.get("updated"), (int, float))
    )


class Outcome:
    """The answer to a check, in the guard's words (or ``allow`` with nothing to say)."""

    __slots__ = ("action", "message", "reason", "steps", "tool")

    def __init__(
        self,
        action: str,
        message: str | None = None,
        tool: str = "",
        reason: str | None = None,
        steps: int = 0,
    ) -> None:
        self.action = action
        self.message = message
        self.tool = tool
        self.reason = reason
        self.steps = steps


ALLOW: Final = Outcome("allow")


class Session:
    """A session's guard and record. Not thread-safe: the store serialises its use."""

    def __init__(self, guard: Any, record: dict[str, Any], warnings: list[str]) -> None:
        self.guard = guard
        self.record = record
        self.warnings = warnings

    # -- making and saving ----------------------------------------------------------------

    @classmethod
    def new(cls, make_guard: Callable[[], Any], harness: str, session_id: str) -> Session:
        now = time.time()
        record: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "harness": harness,
            "session": _cut(session_id),
            "cwd": None,
            "created": now,
            "updated": now,
            "ended": None,
            "guard": None,
            "calls": [],
            "counts": {"calls": 0, "nudges": 0, "stops": 0},
            "events": [],
        }
        return cls(make_guard(), record, [])

    @classmethod
    def restore(
        cls,
        data: dict[str, Any] | None,
        make_guard: Callable[[], Any],
        harness: str,
        session_id: str,
        problem: str | None = None,
    ) -> Session:
        """The session a record holds; a fresh one, with a warning, where the record is not a
        usable one (``problem`` says what the store found wrong before parsing it)."""
        fresh = cls.new(make_guard, harness, session_id)
        if problem is not None:
            fresh.warnings.append(f"{problem}; a fresh guard is used")
            return fresh
        if data is None:
            return fresh
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            fresh.warnings.append(
                "the session's state file is of another format or version; a fresh guard is used"
            )
            return fresh
        if data.get("harness") != harness or data.get("session") != _cut(session_id):
            fresh.warnings.append(
                "the session's state file is another session's; a fresh guard is used"
            )
            return fresh
        if not _well_formed(data):
            fresh.warnings.append("the session's state file is damaged; a fresh guard is used")
            return fresh
        session = cls(fresh.guard, data, [])
        snapshot = data.get("guard")
        if snapshot is not None:
            try:
                # binascii, not base64: base64 imports struct and re-checks what this does.
                session.guard.load(binascii.a2b_base64(snapshot, strict_mode=True))
            except MemoryError:
                # Not a damaged state: out of memory, the hook allows the call and leaves the
                # stored state as it is, rather than replacing it with a fresh guard's.
                raise
            except Exception as exc:
                session.warnings.append(
                    f"the session's guard state is unusable ({exc}); a fresh guard is used"
                )
                session.guard = make_guard()
                data["calls"] = []
        return session

    def dump(self) -> dict[str, Any]:
        self.record["updated"] = time.time()
        if self.record.get("ended") is None:
            snapshot = self.guard.snapshot(state_only=True)
            self.record["guard"] = binascii.b2a_base64(snapshot, newline=False).decode("ascii")
        return self.record

    # -- the operations ---------------------------------------------------------------------

    def _calls(self) -> list[list[Any]]:
        calls: list[list[Any]] = self.record["calls"]
        return calls

    def _find(self, call_id: str) -> list[Any] | None:
        call: list[Any]
        for call in reversed(self._calls()):
            if call[0] == call_id:
                return call
        return None

    def _remember(self, call: list[Any]) -> None:
        calls = self._calls()
        calls.append(call)
        if len(calls) > CALLS_KEPT:
            del calls[: len(calls) - CALLS_KEPT]

    def _note(self, outcome: Outcome, stopped_before: bool) -> None:
        counts = self.record["counts"]
        counts["calls"] += 1
        if outcome.action == "allow" or stopped_before:
            return  # a call refused by an earlier stop is not another stop
        counts["nudges" if outcome.action == "nudge" else "stops"] += 1
        events = self.record["events"]
        events.append(
            {
                "when": time.time(),
                "action": outcome.action,
                "tool": _cut(outcome.tool),
                "reason": outcome.reason,
                "message": _cut(outcome.message),
                "call": counts["calls"],
            }
        )
        if len(events) > EVENTS_KEPT:
            del events[: len(events) - EVENTS_KEPT]

    def check(
        self,
        tool: str,
        args: Any,
        call_id: str | None,
        response: tuple[str, list[str]] | None = None,
    ) -> Outcome:
        """The guard's verdict on one call. A call identical (the same key) to another call
        of its model response is one action with it, as in ``check_turn``: it gets that
        call's answer and is not counted again. Which calls came in one response: those the
        harness names in ``response`` (the response's id and its calls' ids), where it can
        tell. (Not guessed from timing or from results still to come: a call that Claude
        Code's own permissions refuse after the hook allowed it never reports a result, so
        "its result is still to come" cannot mean "the same response".)"""
        if self.record.get("ended") is not None:
            self.record["ended"] = None  # a session resumed after its end
        call_id = _cut(call_id)
        siblings = set(response[1]) if response is not None else set()
        siblings.discard(call_id)
        earlier = [call for call in self._calls() if call[0] in siblings]
        before = self.guard.snapshot(state_only=True) if earlier else None
        stopped_before = self.guard.stopped
        delivered = self._find(call_id) if call_id is not None else None
        verdict = self.guard.check(tool, args, call_id=call_id)
        if delivered is not None and delivered[1] == verdict.key and delivered[2] == verdict.step:
            # A retried delivery: the guard answered from its memory; not counted again.
            return Outcome(
                verdict.action, verdict.message, verdict.tool, verdict.reason, self.guard.steps
            )
        response_id = _cut(response[0]) if response is not None else None
        for first in earlier:
            if first[1] == verdict.key:
                assert before is not None
                self.guard.load(before)  # not counted: one action with ``first``
                outcome = Outcome(first[3], first[5], verdict.tool, None, self.guard.steps)
                # A copy: its result is the first's, observed through the first.
                self._remember(
                    [call_id, verdict.key, first[2], first[3], response_id, first[5], True]
                )
                return outcome
        outcome = Outcome(
            verdict.action, verdict.message, verdict.tool, verdict.reason, self.guard.steps
        )
        message = _cut(verdict.message)
        call = [call_id, verdict.key, verdict.step, verdict.action, response_id, message, False]
        self._remember(call)
        self._note(outcome, stopped_before)
        return outcome

    def observe(self, tool: str, args: Any, call_id: str | None, result: Any, error: Any) -> None:
        """Tells the guard what a checked call returned. The verdict is the guard's own: the
        call asked again with its id is a retried delivery, answered from the guard's memory
        without being counted (checked here, and undone if it were not)."""
        call_id = _cut(call_id)
        call = self._find(call_id) if call_id is not None else None
        if call is None or call[3] != "allow" or call[6]:
            return  # not checked here, refused, observed already, or a copy
        before = self.guard.snapshot(state_only=True)
        verdict = self.guard.check(tool, args, call_id=call_id)
        if verdict.step != call[2] or verdict.key != call[1] or verdict.action != "allow":
            self.guard.load(before)  # the guard no longer remembers the call: not counted
            call[6] = True
            return
        self.guard.observe(verdict, result, error=error)
        call[6] = True

    def content_call_id(self, tool: str, args: Any, before: bool) -> str:
        """A call id for a harness that gives none, from the call's content: before the call
        (``before``), a new id, unless the same content was asked less than
        ``RETRY_SECONDS`` ago and its result is not in yet (a retried delivery: the same id,
        so the guard answers it from memory without counting it); after it, the id of the
        latest such call still waiting for its result. Two identical calls asked at once (in
        one model response) are therefore one action, as ``check_turn`` makes them."""
        import json

        # _blake2, not hashlib: hashlib loads OpenSSL's _hashlib, 2 ms a hook process.
        try:
            from _blake2 import blake2b
        except ImportError:  # an interpreter without it
            from hashlib import blake2b

        try:
            text = json.dumps([tool, args], sort_keys=True, ensure_ascii=True, default=repr)
        except (ValueError, RecursionError):
            text = repr((tool, args))
        digest = blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()
        pending: dict[str, list[Any]] = self.record.setdefault("pending", {})
        if not isinstance(pending, dict) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[1], (int, float))
            for v in pending.values()
        ):
            pending = self.record["pending"] = {}  # damaged: forgotten, not fatal
        found = pending.get(digest)
        now = time.time()
        if not before:
            if isinstance(found, list) and len(found) == 2 and isinstance(found[0], str):
                del pending[digest]
                return found[0]
            return f"~{digest}.unchecked"
        if (
            isinstance(found, list)
            and len(found) == 2
            and isinstance(found[0], str)
            and isinstance(found[1], (int, float))
            and 0 <= now - found[1] < RETRY_SECONDS
        ):
            return found[0]
        call_id = f"~{digest}.{self.record['counts']['calls']}"
        pending[digest] = [call_id, now]
        if len(pending) > CALLS_KEPT:
            for key in sorted(pending, key=lambda k: pending[k][1])[: len(pending) - CALLS_KEPT]:
                del pending[key]
        return call_id

    def status(self) -> Outcome | None:
        """The session's stop, while it stands (``None``: not stopped)."""
        if not self.guard.stopped:
            return None
        stops = [e for e in self.record["events"] if e.get("action") == "stop"]
        last = stops[-1] if stops else {}
        return Outcome(
            "stop",
            last.get("message"),
            last.get("tool") or "",
            last.get("reason"),
            self.guard.steps,
        )

    def settled(self, call_id: str | None) -> None:
        """A call whose result will not come (refused): not a retry candidate any more."""
        pending = self.record.get("pending")
        if isinstance(pending, dict):
            for digest in [
                k for k, v in pending.items() if isinstance(v, list) and v[:1] == [call_id]
            ]:
                del pending[digest]

    def user_message(self) -> None:
        """A person wrote: the guard is told. After a stop, a person's new prompt is their
        decision to go on: the run starts afresh (the stop stays in the record)."""
        if self.guard.stopped:
            self.guard.reset()
            self.record["calls"] = []
            self.record.pop("pending", None)
        else:
            self.guard.user_message()

    def end(self) -> None:
        """The session ended: its guard and calls are dropped; its counts and last nudges and
        stops are kept (for ``tripwire sessions``) until they expire."""
        self.record["ended"] = time.time()
        self.record["guard"] = None
        self.record["calls"] = []
        self.record.pop("pending", None)
