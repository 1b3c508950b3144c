"""tripwire in coding-agent CLIs that ask a hook before each tool call (DESIGN.md §6).

One module per harness protocol (``tripwire.hooks.<harness>``, registered in ``HARNESSES``;
what it defines: ``tripwire.hooks._protocol``), over shared machinery: the session and its
guard (``_session``), where sessions live (``_store``: files, or memory for ``serve``), the
settings (``_config``), the HTTP server (``serve``), and the commands (``commands``).

This package is imported by every hook process: it imports only what a hook needs (no
replay, adapters, SDKs or ``importlib.metadata``). ``handle`` is the one path from an event
to an answer, for ``tripwire hook`` and ``tripwire serve`` alike.
"""

from __future__ import annotations

import copy
import importlib
import time
from types import ModuleType
from typing import Any, Final, Protocol

from tripwire.hooks._protocol import Request
from tripwire.hooks._session import Outcome, Session

# Harness name -> its module. A new harness is one module and one line here.
HARNESSES: Final = {
    "claude-code": "tripwire.hooks.claude_code",
    "gemini": "tripwire.hooks.gemini",
    "codex": "tripwire.hooks.codex",
    "copilot": "tripwire.hooks.copilot",
    "cursor": "tripwire.hooks.cursor",
    "cline": "tripwire.hooks.cline",
}


class Store(Protocol):
    def session(self, harness: str, session_id: str) -> Any: ...


def harness(name: str) -> ModuleType:
    module = HARNESSES.get(name)
    if module is None:
        known = ", ".join(sorted(HARNESSES))
        raise ValueError(f"unknown harness {name!r} (known: {known})")
    return importlib.import_module(module)


def apply(session: Session, request: Request) -> Outcome | None:
    """One operation on a session."""
    if request.cwd is not None:
        session.record["cwd"] = request.cwd[:512]
    if request.call_id is None and request.kind in ("check", "observe"):
        # The harness gives no call id: one from the call's content (and the time).
        request.call_id = session.content_call_id(
            request.tool, request.args, before=request.kind == "check"
        )
    if request.kind == "check":
        response = request.response() if request.response is not None else None
        # Where the harness could not yet tell which calls came with this one, a refusal may
        # be of a copy of a call of the same response (the harness writes the response while
        # the hooks of its parallel calls run): kept able to be undone, until looked again.
        undo = None
        if response is None and request.response is not None:
            undo = (session.guard.snapshot(state_only=True), copy.deepcopy(session.record))
        outcome = session.check(request.tool, request.args, request.call_id, response)
        if outcome.action != "allow" and undo is not None:
            outcome = _checked_again(session, request, outcome, undo)
        if outcome.action != "allow":
            session.settled(request.call_id)  # refused: no result will come
        return outcome
    if request.kind == "status":
        return session.status()
    if request.kind == "observe":
        session.observe(request.tool, request.args, request.call_id, request.result, request.error)
    elif request.kind == "user":
        session.user_message()
    elif request.kind == "end":
        session.end()
    return None


# How long a call about to be refused waits, in turn, for the harness to name its response.
RESPONSE_WAITS: Final = (0.02, 0.04, 0.08)


def _checked_again(
    session: Session, request: Request, refused: Outcome, undo: tuple[bytes, dict[str, Any]]
) -> Outcome:
    """The check of a call about to be refused, made again once the harness names the calls
    of its response (if it does within ``RESPONSE_WAITS``): a copy of one of them is one
    action with it, as in ``check_turn``. Only a refusal waits: an allowed call is the
    common case, and grouping never refuses."""
    assert request.response is not None
    response = None
    for delay in RESPONSE_WAITS:
        time.sleep(delay)
        response = request.response()
        if response is not None:
            break
    if response is None or len(response[1]) < 2:
        return refused
    state, record = undo
    session.guard.load(state)
    session.record.clear()
    session.record.update(record)
    return session.check(request.tool, request.args, request.call_id, response)


def handle(
    protocol: ModuleType, event: Any, store: Store
) -> tuple[dict[str, Any] | None, list[str]]:
    """The answer to one event (``None``: nothing to say), and the warnings to report."""
    if not isinstance(event, dict):
        raise ValueError(f"the event is a JSON {type(event).__name__}, not an object")
    request: Request = protocol.parse(event)
    if request.kind == "ignore":
        return None, []
    with store.session(protocol.NAME, request.session) as session:
        outcome = apply(session, request)
        warnings = list(session.warnings)
        session.warnings.clear()
    return protocol.answer(request, outcome), warnings
