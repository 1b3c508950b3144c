"""What every trace reader produces (``Event``s), what it is given (``Source``: the file
being read), and the registry that makes a new format one new module (``Format``,
``register``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tripwire._results import content_value
from tripwire.replay.cost import Usage

# (tool name, arguments, arguments are JSON text to be parsed as the harness would)
Call = tuple[str, Any, bool]


@dataclass(slots=True)
class Turn:
    """One model call of a run."""

    run: str
    calls: list[Call]
    usage: Usage | None
    # Bytes the model produced in this turn (its message or items, as logged).
    produced: int
    # Bytes of transcript sent with this call; ``None``: the run's own running total of
    # ``produced`` (the events format, whose runs interleave and carry no transcript).
    sent: int | None
    line: int | None
    format: str
    where: str | None = None
    # Each call's id in the trace (``None``: it has none), for linking results to calls;
    # ``None``: no call has one.
    call_ids: list[str | None] | None = None
    # The model that answered, where the trace says (prices are per model).
    model: str | None = None


@dataclass(slots=True)
class Result:
    """What a tool call returned: ``value`` is the result of the call ``call_id`` of ``run``
    (see ``result_value`` for what is made of the logged form)."""

    run: str
    call_id: str
    value: Any
    line: int | None
    where: str | None = None
    # Whether the call failed, where the trace says (an Anthropic / Claude Code
    # ``is_error``); ``None``: it does not, and the guard reads the result.
    error: bool | None = None


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A human message in the run's conversation (not a tool result): the guard is told,
    as a live harness tells it (``Guard.user_message``)."""

    run: str


@dataclass(frozen=True, slots=True)
class Problem:
    """Bad input, skipped: where it is and what is wrong with it."""

    path: str
    line: int | None
    message: str
    where: str | None = None

    def location(self) -> str:
        return location(self.path, self.line, self.where)

    def __str__(self) -> str:
        return f"{self.location()}: {self.message}"


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The run has no more turns (a whole conversation was read); ``reward``: the outcome
    the trace gives it (tau-bench's reward, a resolved flag as 1.0 / 0.0), if any."""

    run: str
    reward: float | None = None


Event = Turn | Result | UserMessage | Problem | RunEnd


class TraceShapeError(ValueError):
    """Input of a shape its reader cannot read: a line that is not JSON, or a record or
    document of a known format whose fields are not what the format puts there. The one
    error a reader raises on purpose, from explicit checks (``expect_object``,
    ``unexpected``): the file reader catches it alone, reports a ``Problem`` and skips what
    it was reading, so that any other exception raised while reading (a ``TypeError`` or
    ``AttributeError`` of our own) is a bug, and propagates.

    ``str()`` says what is wrong (``"unexpected shape: data is a list, not an object"``);
    ``expected``: what the reader wanted there, where it says; ``path``, ``line`` and
    ``where``: where it is, where the raiser knows (the file reader fills in the rest)."""

    def __init__(
        self,
        message: str,
        *,
        expected: str | None = None,
        path: str | None = None,
        line: int | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.expected = expected
        self.path = path
        self.line = line
        self.where = where

    def problem(self, path: str, line: int | None, skipped: str, where: str | None) -> Problem:
        """The ``Problem`` reported for it: its own location where it has one, else the
        one given (the line being read); ``skipped`` says what was skipped."""
        return Problem(
            self.path or path,
            self.line if self.line is not None else line,
            f"{self.message}; {skipped}",
            self.where if self.where is not None else where,
        )


class _Missing:
    """Stands for a field a record does not have (``record.get(field, MISSING)``)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message: ``an object``, ``a list``, ``text``..."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def unexpected(
    field: str, value: Any, expected: str, *, line: int | None = None, where: str | None = None
) -> TraceShapeError:
    """The shape error for a field that holds ``value`` where the format puts ``expected``
    (``unexpected("data", [], "an object")``)."""
    return TraceShapeError(
        f"unexpected shape: {field} is {json_kind(value)}, not {expected}",
        expected=expected,
        line=line,
        where=where,
    )


def expect_object(
    value: Any, field: str, *, line: int | None = None, where: str | None = None
) -> dict[str, Any]:
    """``value``, which the format says is an object: else a ``TraceShapeError``."""
    if type(value) is not dict:
        raise unexpected(field, value, "an object", line=line, where=where)
    return value


def location(path: str, line: int | None, where: str | None) -> str:
    """``file:line``, ``file (messages[4])`` or both: where something is in a trace."""
    text = path if line is None else f"{path}:{line}"
    return text if where is None else f"{text} ({where})"


@dataclass(slots=True)
class FileStats:
    """What reading one file found. ``unknown``: records of a known format whose type the
    reader does not know (formats grow), skipped, by ``format:type``."""

    path: str
    size: int | None = None
    lines: int = 0
    position: int = 0
    formats: set[str] = field(default_factory=set)
    ignored: int = 0
    problems: int = 0
    unreadable: bool = False
    runs: int = 0
    turns: int = 0
    unknown: dict[str, int] = field(default_factory=dict)


def text_size(value: Any) -> int:
    """Bytes of a value as JSON, for token estimates."""
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        return 0


def run_name(obj: dict[str, Any], default: str) -> str:
    for name in ("run", "run_id", "session_id", "conversation_id", "instance_id", "id"):
        value = obj.get(name)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return default


def call_id(value: Any) -> str | None:
    """A call id as logged (a string, or a number), or ``None``."""
    if type(value) is str:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def kind(obj: dict[str, Any]) -> str | None:
    """An object's ``type``, if it is a string (other values, such as lists, are no type)."""
    value = obj.get("type")
    return value if type(value) is str else None


def reward(value: Any) -> float | None:
    """An outcome label as a number: a reward, or a resolved/success flag as 1.0 or 0.0."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


# What the guard makes of a logged result's content: the one source, shared with
# ``Guard.observe`` (so the live guard and replay agree).
result_value = content_value


# -- the registry ------------------------------------------------------------------------------


class Source(Protocol):
    """The file a format reads from: its name, its figures, and how to report bad input."""

    path: str
    stats: FileStats
    # The run a record without a run name belongs to (the file, unless the format names it).
    default_run: str
    # Whether the events format's results are wanted.
    results: bool
    # A table's column names for ours (``table``), where they differ.
    columns: Mapping[str, str] | None

    def problem(self, line: int | None, message: str, where: str | None = None) -> Problem: ...

    def line_run(self, line: int | None) -> str: ...


class Lines(Protocol):
    """A format's reader of JSONL records, one per file (records of one run may span lines,
    so it keeps state): ``feed`` one record, ``finish`` at the end of the file."""

    def feed(
        self, value: dict[str, Any], line: int | None, size: int, where: str | None
    ) -> Iterable[Event]: ...

    def finish(self) -> Iterable[Event]: ...


# Reads one document (or one JSONL line holding a whole run) of the format: the source, the
# value, the run name it gets unless it names itself, the line (JSONL) and where in the file.
ReadDocument = Callable[[Source, Any, str, "int | None", str], Iterator[Event]]


@dataclass(frozen=True, slots=True)
class Format:
    """One trace format. ``help`` is its line in ``tripwire replay --help``.

    A format reads JSONL records (``is_record`` says whether a JSON object is one of its
    records, ``lines`` makes the file's reader of them), whole documents (``document`` says
    whether a JSON value is one of its runs; a list of such values is a list
    of runs; ``read`` reads one), or both. Detection tries formats by ``order``, the more
    specific shapes first. ``suffixes``: file names, besides the JSON ones, that a directory
    search picks up. ``record_type``: once a file is known to hold this format's records, an
    object with a string ``type`` that no format claims is a record of a type this reader
    does not know yet (formats grow): skipped and counted, not bad input."""

    name: str
    # (name, what it reads) for each format name its turns carry
    help: tuple[tuple[str, str], ...]
    order: int
    is_record: Callable[[dict[str, Any]], bool] | None = None
    lines: Callable[[Source], Lines] | None = None
    document: Callable[[Any], bool] | None = None
    read: ReadDocument | None = None
    suffixes: tuple[str, ...] = ()
    record_type: bool = False
    # A binary format: the bytes its files start with, and its reader of such a file (given
    # the source and the file's path: columnar files are read by seeking, not as a stream).
    magic: bytes | None = None
    open: Callable[[Source, str], Iterator[Event]] | None = None


FORMATS: list[Format] = []


def register(fmt: Format) -> Format:
    """Adds a format to the registry (kept in detection order)."""
    FORMATS.append(fmt)
    FORMATS.sort(key=lambda f: f.order)
    return fmt
