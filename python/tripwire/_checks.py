"""What the guard's methods check of their arguments, and the messages they raise: the one
source for both backends. The reference calls these on every call; the native core tests the
same conditions itself and calls these (through ``tripwire._for_native``) only once it has
found an argument wrong, so that the exception and its text come from here (cold)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tripwire._policy import check_int


def check_limits(window: object, nudge_at: object, stop_at: object, max_steps: object) -> None:
    """Validates the guard's numbers (``None`` meaning the default): the one source of these
    checks and their messages, for both backends."""
    window = 12 if window is None else window
    nudge_at = 2 if nudge_at is None else nudge_at
    stop_at = 3 if stop_at is None else stop_at
    window = check_int("window", window, 1)
    nudge_at = check_int("nudge_at", nudge_at, 2)
    stop_at = check_int("stop_at", stop_at, 2)
    if stop_at < nudge_at:
        raise ValueError(f"stop_at ({stop_at}) must not be less than nudge_at ({nudge_at})")
    if stop_at > window + 1:
        raise ValueError(
            f"stop_at ({stop_at}) can never be reached with window={window}: "
            f"a window of {window} holds at most {window + 1} occurrences, this one included"
        )
    if max_steps is not None:
        check_int("max_steps", max_steps, 1)


def check_flag(name: str, value: object, default: bool | None) -> bool | None:
    """A keyword option that is a bool (``None`` meaning ``default``; with no default, a
    ``None`` stays ``None``: "recognise it yourself")."""
    if value is None:
        return default
    if not isinstance(value, bool):
        allowed = "a bool" if default is not None else "a bool or None"
        raise TypeError(f"{name} must be {allowed}, not {type(value).__name__}")
    return value


def check_verdict(method: str, verdict: object, kind: type) -> None:
    """The verdict ``record`` or ``observe`` was given is one of this backend's (``kind``)."""
    if not isinstance(verdict, kind):
        raise TypeError(f"{method}() takes a Verdict, not {type(verdict).__name__}")


def check_call_id(call_id: object) -> str | None:
    if call_id is not None and not isinstance(call_id, str):
        raise TypeError(f"call_id must be a str or None, not {type(call_id).__name__}")
    return None if call_id is None else exact(call_id)


def exact(text: str) -> str:
    """The characters of a str, as an exact str: the guard hashes and compares tool names
    and call ids, and formats them into messages, and a str subclass could override each of
    those (and raise, or lie). ``str.__str__`` copies without calling any override."""
    return text if type(text) is str else str.__str__(text)


def unpack_call(index: int, call: Sequence[Any]) -> tuple[str, Any, str | None]:
    """One call of a turn (``Guard.check_turn``): ``(name, args)`` or ``(name, args,
    call_id)``."""
    if isinstance(call, (str, bytes)) or not isinstance(call, Sequence) or len(call) not in (2, 3):
        raise TypeError(
            f"call {index} of the turn must be (name, args) or (name, args, call_id), "
            f"not {type(call).__name__}"
        )
    call_id = call[2] if len(call) == 3 else None
    return call[0], call[1], call_id
