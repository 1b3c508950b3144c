"""What every harness protocol gives the shared machinery: one event, made harness-neutral.

A harness module (``tripwire.hooks.<harness>``, registered in ``tripwire.hooks``) defines:

- ``NAME``: its name on the command line (``tripwire hook NAME``);
- ``parse(event: dict) -> Request``: the harness's event as one of the guard's operations;
- ``answer(request, outcome) -> dict | None``: the JSON the harness reads on stdout (or as
  the HTTP response), ``None`` for nothing (the call goes ahead as the harness would have it);
- ``settings_file(scope, project)``, ``add_hooks(settings, command, url)`` and
  ``remove_hooks(settings)``: what ``tripwire install`` / ``uninstall`` write (settings as a
  JSON object; a harness whose settings are TOML needs a reader and writer beside them in
  ``tripwire.hooks.install``); optionally ``SECRET_VARIABLE``, the environment variable its
  ``http`` hooks take ``serve``'s secret from.

The session store, ``serve``, ``sessions`` and the fail-open ``hook`` command are shared: a
new harness is its module and one line in ``tripwire.hooks.HARNESSES``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

# "status": whether the session is stopped (a harness that ends a run from another event).
Kind = Literal["check", "observe", "user", "end", "status", "ignore"]


class EventError(ValueError):
    """An event that is not what the harness documents: the call is allowed."""


class Request:
    """One event as an operation on a session (a plain class: no ``dataclasses`` import)."""

    __slots__ = ("args", "call_id", "cwd", "error", "kind", "response", "result", "session", "tool")

    def __init__(
        self,
        kind: Kind,
        session: str = "",
        tool: str = "",
        args: Any = None,
        call_id: str | None = None,
        result: Any = None,
        *,
        error: Any = None,
        cwd: str | None = None,
        response: Callable[[], tuple[str, list[str]] | None] | None = None,
    ) -> None:
        self.kind = kind
        self.session = session
        self.tool = tool
        self.args = args
        self.call_id = call_id
        self.result = result
        self.error = error
        self.cwd = cwd
        # The model response a call came in: its id and its calls' ids, found when asked
        # (``None``: the harness cannot tell).
        self.response = response


def text_field(event: dict[str, Any], name: str, required: bool = True) -> str | None:
    value = event.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise EventError(f"the event's {name!r} is not a non-empty string")
    return value
