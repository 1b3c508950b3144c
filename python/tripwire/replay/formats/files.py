"""Trace files: opening them (gzip too, by its magic bytes), telling JSONL from one JSON
document, reading in bounded memory, and handing each record or document to the format that
claims it (``FORMATS``, in detection order).

Decisions:

* Whole-document JSON is read whole (such files are small by nature); JSONL is streamed line
  by line in bounded memory. A file is JSONL when its first non-blank line is a JSON value
  on its own, or, failing that, when its second one is an object or list (the first is then
  reported as bad) and the first is not a lone ``[`` or ``{``; otherwise it is one JSON
  document. ``.gz`` is recognised by its magic bytes, on stdin too, not by its name.
* Bad data never raises: a line that is not JSON, or JSON of no recognised shape, is a
  ``Problem`` naming file and line and is skipped; an unreadable or corrupt file is a
  ``Problem`` too, and whatever was read before the damage still counts. A file from which
  no run could be read says so (``Problem``), rather than adding nothing in silence.
* One error means bad data: ``TraceShapeError``, raised where a line is decoded
  (``decode_line``, ``decode_document``) and by the formats' explicit checks of their
  fields. It alone is caught and skipped; any other exception raised while reading (a
  ``TypeError`` or ``AttributeError`` of a reader's own) is a bug, and ends the replay
  loudly rather than reading as a skipped line.
* A record of a known format whose type its reader does not know (formats grow) is skipped
  and counted (``FileStats.unknown``), not bad input.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, Final, cast

from tripwire.replay.formats import events, messages
from tripwire.replay.formats._base import (
    FORMATS,
    Event,
    FileStats,
    Format,
    Lines,
    Problem,
    TraceShapeError,
    kind,
    run_name,
    text_size,
)

GZIP_MAGIC: Final = b"\x1f\x8b"
# UTF-8's byte-order mark, which some editors write at the start of a text file.
_BOM: Final = b"\xef\xbb\xbf"
# How often (in lines) a reader reports its position for the progress bar.
TICK_LINES: Final = 4096

# Longest line (or whole JSON document) read: parsing one costs several times its size in
# memory, and /dev/zero or a multi-GB line must end in a clear message, not a MemoryError.
# A longer line is read through without being kept, for at most MAX_SKIP_BYTES (an endless
# line, as /dev/zero's, then ends the file).
MAX_LINE_BYTES = 64 << 20
MAX_SKIP_BYTES = 4 << 30
_SKIP_CHUNK: Final = 1 << 20


class TooLong(bytes):
    """Stands, empty, for a line longer than ``MAX_LINE_BYTES``: ``size`` bytes were read
    through and not kept; ``ended``: whether its end was found."""

    size: int
    ended: bool

    def problem(self, skipped: str = "line skipped") -> str:
        if self.ended:
            return f"line longer than {_limit()} ({self.size:,} bytes); {skipped}"
        return f"line longer than {_limit()}, no end in {self.size:,} bytes; file not read further"


def _limit() -> str:
    mib, rest = divmod(MAX_LINE_BYTES, 1 << 20)
    return f"{mib} MiB" if mib and not rest else f"{MAX_LINE_BYTES:,} bytes"


def bounded_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The stream's lines, each at most ``MAX_LINE_BYTES`` long; a longer one is a
    ``TooLong``, and if its end is not found the lines end there."""
    cap = MAX_LINE_BYTES
    while line := stream.readline(cap + 1):
        if len(line) <= cap or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        del line
        ended = False
        while size < MAX_SKIP_BYTES:
            chunk = stream.readline(_SKIP_CHUNK)
            size += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                ended = True
                break
        too_long = TooLong()
        too_long.size, too_long.ended = size, ended
        yield too_long
        if not ended:
            return


_decode = json.JSONDecoder().raw_decode


def _long_int(digits: str) -> int | str:
    """A JSON integer: an int, or (longer than Python converts, 4,300 digits by default:
    ``sys.get_int_max_str_digits``) its digits as text. A trace holding one is still valid
    JSON and is read: such a number cannot be keyed as an int by any guard (JSON cannot
    write it back), while as text equal numbers are equal and different ones differ. Never
    converted at length: the limit is there because that conversion is quadratic."""
    try:
        return int(digits)
    except ValueError:
        return digits


# The slow path, for the rare text that holds such a number (a hook on every int would slow
# the common lines).
_decode_long = json.JSONDecoder(parse_int=_long_int).raw_decode


def _raw_decode(text: str) -> tuple[Any, int]:
    """``raw_decode``, integers too long to convert kept as their digits."""
    try:
        return _decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer over Python's limit, not bad JSON
        return _decode_long(text)


def _loads(text: str) -> Any:
    """``json.loads``, integers too long to convert kept as their digits."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer over Python's limit, not bad JSON
        return json.loads(text, parse_int=_long_int)


class Reader:
    """Reads one file (or stdin) into events. ``tick(position)`` is called every
    ``TICK_LINES`` lines with how far into the file (on disk) reading has got; ``results``:
    whether the events format's results are wanted (the other formats' are read
    regardless)."""

    def __init__(
        self,
        path: str,
        stats: FileStats,
        *,
        stdin: IO[bytes] | None = None,
        tick: Callable[[int], None] | None = None,
        results: bool = True,
        columns: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.columns = columns
        self.stats = stats
        self.default_run = path
        self.results = results
        self._stdin = stdin
        self._tick = tick
        self._document_name = path.removesuffix(".gz").endswith((".json", *_suffixes()))
        # Each JSONL format's reader of this file, made when its first record comes.
        self._readers: dict[str, Lines] = {}
        # A format whose records this file holds and whose unknown record types are skipped.
        self._records: Format | None = None

    def problem(self, line: int | None, message: str, where: str | None = None) -> Problem:
        return Problem(self.path, line, message, where)

    def line_run(self, line: int | None) -> str:
        """The name of a run that is one whole line: ``file:line``, or the file's name for
        the first line of a ``.json`` file (a document that happens to fit on one line)."""
        if line is None or (line == 1 and self._document_name):
            return self.default_run
        return f"{self.path}:{line}"

    def _reader(self, fmt: Format) -> Lines:
        reader = self._readers.get(fmt.name)
        if reader is None:
            assert fmt.lines is not None
            reader = self._readers[fmt.name] = fmt.lines(self)
        return reader

    def __iter__(self) -> Iterator[Event]:
        try:
            raw: IO[bytes] = self._stdin if self._stdin is not None else open(self.path, "rb")  # noqa: SIM115
        except OSError as exc:
            self.stats.unreadable = True
            yield self.problem(None, f"cannot open: {exc.strerror or exc}")
            return
        try:
            if self._stdin is None:
                try:
                    self.stats.size = os.fstat(raw.fileno()).st_size
                except OSError:
                    self.stats.size = None
            yield from self._read(raw)
        finally:
            if self._stdin is None:
                raw.close()

    def _read(self, raw: IO[bytes]) -> Iterator[Event]:
        if not hasattr(raw, "peek"):
            raw = cast(IO[bytes], io.BufferedReader(cast(io.RawIOBase, raw)))
        if self._stdin is None:
            head = _peek(raw, 8)
            for fmt in FORMATS:
                if fmt.magic is not None and fmt.open is not None and head.startswith(fmt.magic):
                    yield from fmt.open(self, self.path)
                    return
        compressed = _peek(raw, 2) == GZIP_MAGIC
        stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if compressed else raw
        stats = self.stats

        def position() -> int:
            return _tell(raw) if compressed else stats.position

        tick = self._tick
        # The events format is the hot path of big fleet logs: its lines skip detection.
        events_feed = self._reader(events.FORMAT).feed
        lineno = 0
        try:
            lines = bounded_lines(stream)
            first, lineno = self._next_nonblank(lines, lineno)
            if lineno == 1 and first is not None and first.startswith(_BOM):
                first = first[len(_BOM) :]
                if not first.strip():  # a byte-order mark alone on the first line
                    first, lineno = self._next_nonblank(lines, lineno)
            if first is None:
                return
            if isinstance(first, TooLong):
                # Too long for a JSONL line or a JSON document: the file cannot be read.
                yield self.problem(lineno, first.problem("file skipped"))
                return
            value, error = _parse_line(first)
            if error is not None:
                # Either a JSONL file with a bad first line, or one JSON document (which a
                # line holding only an opening bracket always is).
                start = lineno
                second, lineno = self._next_nonblank(lines, lineno)
                if isinstance(second, TooLong):
                    # No document has a line that long: two bad lines of a JSONL file.
                    yield self._skipped(error, start)
                    yield self.problem(lineno, second.problem())
                    value = first = None
                else:
                    second_value, second_error = _parse_line(second) if second else (None, None)
                    if (
                        first.strip() in (b"[", b"{")
                        or second is None
                        or second_error is not None
                        or not isinstance(second_value, (dict, list))
                    ):
                        rest, lineno = self._rest(first + (second or b""), lines, lineno)
                        if rest is None:
                            yield self.problem(
                                start, f"JSON document over {_limit()}; file skipped"
                            )
                            return
                        yield from self._document(rest, start)
                        return
                    yield self._skipped(error, start)
                    value, first = second_value, second
            if first is not None:
                try:
                    yield from self._line_value(value, lineno, len(first))
                except TraceShapeError as exc:
                    yield self._skipped(exc, lineno)
            for line in lines:
                lineno += 1
                stats.position += len(line)
                if tick is not None and not lineno % TICK_LINES:
                    tick(position())
                if isinstance(line, TooLong):
                    stats.position += line.size
                    yield self.problem(lineno, line.problem())
                    continue
                # Bad data never ends the replay: a line that is not JSON, or whose shape
                # its reader cannot read, is reported and skipped. Only that error is
                # caught: anything else raised here is a bug, and propagates.
                try:
                    value = decode_line(line)
                    if value is BLANK:
                        continue
                    if type(value) is dict and "tool" in value:
                        yield from events_feed(value, lineno, len(line), None)
                    else:
                        yield from self._line_value(value, lineno, len(line))
                except TraceShapeError as exc:
                    yield self._skipped(exc, lineno)
        except (OSError, EOFError, zlib.error) as exc:
            stats.unreadable = True
            what = "corrupt or truncated" if compressed else "read error"
            yield self.problem(lineno + 1, f"{what}; not read past line {lineno}: {exc}")
        finally:
            stats.lines = lineno
            if tick is not None:
                tick(position())
        yield from self._finish()

    def _skipped(self, exc: TraceShapeError, line: int, skipped: str = "line skipped") -> Problem:
        """The problem reported for a line (or a file) skipped for its shape."""
        return exc.problem(self.path, line, skipped, None)

    def _next_nonblank(self, lines: Iterator[bytes], lineno: int) -> tuple[bytes | None, int]:
        for line in lines:
            lineno += 1
            self.stats.position += len(line)
            if isinstance(line, TooLong):
                self.stats.position += line.size
                return line, lineno
            if line.strip():
                return line, lineno
        return None, lineno

    def _rest(self, start: bytes, lines: Iterator[bytes], lineno: int) -> tuple[bytes | None, int]:
        """A whole JSON document: ``start`` and the rest of the lines, or ``None`` if it is
        longer than ``MAX_LINE_BYTES``; and the number of the last line read."""
        parts, size = [start], len(start)
        for line in lines:
            lineno += line.count(b"\n")
            size += len(line) + (line.size if isinstance(line, TooLong) else 0)
            self.stats.position += len(line)
            if size > MAX_LINE_BYTES or isinstance(line, TooLong):
                return None, lineno
            parts.append(line)
        return b"".join(parts), lineno

    def _problem(self, line: int | None, message: str, where: str | None = None) -> Problem:
        return Problem(self.path, line, message, where)

    # -- whole JSON documents ----------------------------------------------------------------

    def _document(self, data: bytes, start: int) -> Iterator[Event]:
        """A whole JSON document, whose first line is line ``start`` of the file."""
        try:
            doc = decode_document(data, start)
        except TraceShapeError as exc:
            yield exc.problem(self.path, None, "file skipped", None)
            return
        try:
            yield from self._document_value(doc)
        except TraceShapeError as exc:
            # What was read before it counts.
            yield exc.problem(self.path, None, "rest of file skipped", None)

    # -- records and documents ---------------------------------------------------------------

    def _line_value(
        self, value: Any, line: int | None, size: int, where: str | None = None
    ) -> Iterable[Event]:
        """One JSONL line (or an element of a document that is a list of records)."""
        if type(value) is dict:
            for fmt in FORMATS:
                if fmt.document is not None and fmt.read is not None and fmt.document(value):
                    run = run_name(value, self.line_run(line))
                    return fmt.read(self, value, run, line, "" if where is None else where)
                if fmt.is_record is not None and fmt.is_record(value):
                    if fmt.record_type:
                        self._records = fmt
                    return self._reader(fmt).feed(value, line, size, where)
            if self._records is not None and kind(value) is not None:
                return self._reader(self._records).feed(value, line, size, where)
            keys = ", ".join(sorted(map(str, value))[:6])
            return (self.problem(line, f"not a recognised trace line (has: {keys})", where),)
        if isinstance(value, list):
            return self._document_value(value, self.line_run(line), line)
        return (self.problem(line, f"not a trace line: a JSON {type(value).__name__}", where),)

    def _document_value(
        self, doc: Any, run: str | None = None, line: int | None = None
    ) -> Iterator[Event]:
        """A whole JSON document, or a JSONL line holding a list (``line``): one run, a list
        of runs, or a list of records. ``run`` names what has no name."""
        run = self.default_run if run is None else run
        if isinstance(doc, dict):
            for fmt in FORMATS:
                if fmt.document is not None and fmt.read is not None and fmt.document(doc):
                    yield from fmt.read(self, doc, run_name(doc, run), line, "")
                    return
            if any(fmt.is_record is not None and fmt.is_record(doc) for fmt in FORMATS):
                yield from self._line_value(doc, line, text_size(doc))
                yield from self._finish()
                return
            keys = ", ".join(sorted(map(str, doc))[:6])
            yield self.problem(line, f"not a recognised trace (has: {keys}); skipped")
            return
        if not isinstance(doc, list):
            yield self.problem(line, f"not a trace: a JSON {type(doc).__name__}; skipped")
            return
        if doc and all(isinstance(x, dict) for x in doc):
            first = doc[0]
            for fmt in FORMATS:
                if fmt is messages.FORMAT:
                    break  # a list of messages is one conversation: below
                if fmt.document is not None and fmt.read is not None:
                    if fmt.document(doc):  # the whole list is one run
                        yield from fmt.read(self, doc, run, line, "")
                        return
                    if fmt.document(first):  # a list of runs
                        for index, item in enumerate(doc):
                            name = run_name(item, f"{run}[{index}]")
                            yield from fmt.read(self, item, name, line, f"[{index}].")
                        return
                if fmt.is_record is not None and _starts_records(fmt, first):
                    for index, item in enumerate(doc):
                        yield from self._line_value(item, line, text_size(item), f"[{index}]")
                    yield from self._finish()
                    return
            if messages.is_conversation(first):
                for index, item in enumerate(doc):
                    name = run_name(item, f"{run}[{index}]")
                    yield from messages.read(self, item, name, line, f"[{index}].")
                return
        if doc and all(isinstance(x, list) for x in doc):
            for index, item in enumerate(doc):  # a list of message lists
                yield from messages.read(self, item, f"{run}[{index}]", line, f"[{index}]")
            return
        yield from messages.read(self, doc, run, line, "")

    def _finish(self) -> Iterator[Event]:
        """End of file: turns still open are complete."""
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            yield from reader.finish()


def trace_suffixes() -> tuple[str, ...]:
    """The file names a directory search picks up (and their ``.gz``)."""
    return (".json", ".jsonl", ".ndjson", *_suffixes())


def _suffixes() -> tuple[str, ...]:
    return tuple(suffix for fmt in FORMATS for suffix in fmt.suffixes)


def _starts_records(fmt: Format, first: dict[str, Any]) -> bool:
    """Whether a list whose first element is ``first`` is a list of ``fmt``'s records. The
    events format asks more of a list than of a line: ``run`` alone is too common a key."""
    if fmt is events.FORMAT:
        return "tool" in first or ("run" in first and ("usage" in first or "event" in first))
    return fmt.is_record is not None and fmt.is_record(first)


# What ``decode_line`` makes of a blank line (skipped, and no problem).
BLANK: Final[Any] = object()


def decode_line(line: bytes) -> Any:
    """A JSONL line's value (``BLANK`` for a blank line). The one place lines are decoded:
    a line that is not one JSON value (not UTF-8, not JSON, nested too deeply) is a
    ``TraceShapeError``, like any other shape a reader cannot read."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise TraceShapeError(f"not UTF-8 text (byte {exc.start})") from None
    if not text:
        return BLANK
    try:
        value, end = _raw_decode(text)
    except json.JSONDecodeError as exc:
        raise TraceShapeError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise TraceShapeError("JSON nested too deeply") from None
    if end != len(text):
        raise TraceShapeError(f"not JSON (extra data at column {end + 1})")
    return value


def decode_document(data: bytes, start: int) -> Any:
    """A whole JSON document's value, whose first line is line ``start`` of the file; one
    that is not JSON is a ``TraceShapeError`` (naming the line, where the decoder does)."""
    try:
        return _loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise TraceShapeError(f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        line = exc.lineno + start - 1
        raise TraceShapeError(f"not JSON or JSONL ({exc.msg})", line=line) from None
    except RecursionError:
        raise TraceShapeError("JSON nested too deeply") from None


def _parse_line(line: bytes) -> tuple[Any, TraceShapeError | None]:
    """A non-blank line's value, or why it is not one: for telling JSONL from a document."""
    try:
        return decode_line(line), None
    except TraceShapeError as exc:
        return None, exc


def _peek(raw: IO[bytes], n: int) -> bytes:
    peek = getattr(raw, "peek", None)
    if peek is not None:
        try:
            return bytes(peek(n)[:n])
        except (OSError, ValueError):
            return b""
    return b""


def _tell(raw: IO[bytes]) -> int:
    try:
        return raw.tell()
    except (OSError, ValueError):
        return 0
