"""A guard's state as bytes: ``Guard.snapshot()``, ``Guard.from_snapshot(data)``,
``Guard.load(data)`` and pickling, for both backends (issue 18).

The format is defined here, once; ``rust/snapshot.rs`` implements the same bytes, and a guard
of either backend restores the other's snapshots. Identical state gives identical bytes.

Version 1, field by field::

    snapshot = magic "TWGS" | version u8 (1) | kind u8 | body | crc u32
        kind 0 (full):       config bytes | state
        kind 1 (state only): config digest (8 bytes) | state
        crc: CRC-32 (zlib's) of everything before it, little-endian
    config  = bytes: compact JSON, keys sorted, ASCII only (read_config has the fields):
              window, nudge_at, stop_at, max_steps, volatile_keys (null: the default; else
              the sorted names), tools ({name: [policy, max_polls, empty_answers, sorted
              empty digests, whitespace, and where there are any the sorted
              volatile_result_keys]}), tools_repr, infer, definitions ({name: policy})
    digest  = the first 8 bytes of SHA-256 over the config bytes
    state   = steps varint | turn varint | window | stop | call ids | polls | retries | cache
    window  = count varint (at most the window size) | entry * count, oldest first
    entry   = key | tool str | step varint | turn varint | flags u8
              | [result key, if flags & 8] | [error str, if flags & 32]
              | [question, if flags & 128]
              flags: 1 nudged, 2 writes, 4 changes, 8 has a result, 16 empty, 32 failed,
              64 retry, 128 question (a failed entry has a result: its error text's digest)
    question= raw key | shape key (tripwire._question)
    stop    = 0 | 1 verdict (the stop latch: the stop every later check answers with)
    call ids= count varint (at most 128) | (id str | key | answered u8 | verdict) * count,
              oldest first
    polls   = count varint (at most 256) | (key | count varint) * count, the least
              recently counted first
    retries = the same, for transient retries (each count at most 3)
    cache   = count varint (at most 1024) | (key | JSON text str) * count, oldest first;
              only results that are JSON values (exact dict with str keys, list, str, int,
              float, bool, None) are kept: a guard restored without another's objects
    verdict = head u8 | tool str | key | repeats varint | step varint | [cached JSON str]
              | [call id str] | [duplicate_of varint] | [invalid_arguments str] | detail
              head: bits 0-1 action (0 allow, 1 nudge, 2 stop), bits 2-3 reason (0 none,
              1 loop_detected, 2 budget_exhausted, 3 no_progress), 16 cached, 32 call id,
              64 duplicate_of, 128 invalid_arguments
    detail  = tag u8 | ...: 0 none | 1 unchanged | 2 failed: text str, times varint
              | 3 errors: count varint, text str | 4 empty: count varint, n varint, n tool strs
              | 5 cycle: n varint, n tool strs, writes u8 | 6 poll: limit varint (< 2**32)
              | 7 after: tool str, repeats varint, detail (not another "after")
    key     = 8 bytes, big-endian (a key's 16 hex digits)
    str     = varint length | the code points in UTF-8, lone surrogates in their 3-byte form
              (Python's "surrogatepass", WTF-8's encoding of a lone surrogate)
    varint  = unsigned LEB128, minimal, at most 10 bytes; turns, repeats and counts below
              2**32, steps below 2**64

The state is consistent, as the guard makes it; the reader refuses any other (a state no run
reaches would make the two backends, or a guard and its restored copy, decide differently):

- Entries: steps from 1, oldest first increasing, none past ``steps``; turns oldest
  first never decreasing, none past ``turn``. A nudged entry never ran: no result, none of
  the flags 2, 4, 8, 16, 32, 64. A write changes (2 implies 4). Empty or failed has a result
  (16 or 32 implies 8), never both; a retry failed (64 implies 32). A failure's digest is
  its error text's (``_results.digest("error", text)``), so one digest has one text. A
  question is kept only where a rule may read it (128): no result yet, or a result that came
  back empty or failed for good (not a retry); ``observe`` drops the question of any other.
- The stop latch is a stop, at a step not past ``steps``; every call id's verdict is at a
  step from 1 to ``steps``, and no id comes twice.
- Counts are from 1 (a call not counted is not written), at most ``COUNTED_CALLS`` (256)
  calls each, none twice; transient retries at most ``TRANSIENT_RETRIES`` (3). They are
  kept in the order they were last counted, because the least recently counted call is the
  one forgotten past 256 (``_guard.COUNTED_CALLS``); a restored guard forgets the same one.

Counts saturate, identically in both backends, so the guard never writes a state it then
refuses: ``steps`` stops at 2**64 - 1, and past it every check stops (``budget_exhausted``,
as past a budget: no two calls share a step); ``turn`` stops at 2**32 - 1, a poll count (and
a poll verdict's repeats) at 2**32 - 1.

What is derived is not stored: inferred policies (inferred again), each verdict's window and
budget (the configuration's), the native core's interned tool ids and its "a result was
observed" shortcut. Anything that does not parse, or breaks one of the bounds above, is a
``ValueError`` saying so, and the guard being loaded stays as it was.
"""

from __future__ import annotations

import json
import zlib
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from tripwire import _keys
from tripwire._call_ids import CALL_ID_MEMORY, CallIds, Remembered
from tripwire._checks import check_limits
from tripwire._keys import DEFAULT_VOLATILE_KEYS
from tripwire._messages import Action, Detail, Reason
from tripwire._policy import POLICIES, Policy, ToolPolicy, check_int
from tripwire._results import digest
from tripwire._state import CACHE_ENTRIES, COUNTED_CALLS, TRANSIENT_RETRIES, Entry
from tripwire._verdict import Verdict, _verdict

MAGIC: Final = b"TWGS"
VERSION: Final = 1
FULL: Final = 0
STATE_ONLY: Final = 1

MAX_U32: Final = (1 << 32) - 1
MAX_U64: Final = (1 << 64) - 1
# How deep a cached JSON value may nest to be kept (the keys' own depth limit).
JSON_DEPTH: Final = 256

ACTIONS: Final = ("allow", "nudge", "stop")
REASONS: Final = (None, "loop_detected", "budget_exhausted", "no_progress")

# Entry flags.
NUDGED, WRITES, CHANGES, HAS_RESULT, EMPTY, FAILED, RETRY = 1, 2, 4, 8, 16, 32, 64
QUESTION = 128
# Verdict head bits, above the action (bits 0-1) and reason (bits 2-3).
H_CACHED, H_CALL_ID, H_DUPLICATE, H_INVALID = 16, 32, 64, 128


class SnapshotError(ValueError):
    """A snapshot that cannot be restored: corrupt, truncated, foreign, or of another
    configuration."""


def _fail(why: str) -> SnapshotError:
    return SnapshotError(f"not a tripwire guard snapshot: {why}")


# -- configuration ------------------------------------------------------------------------


def config_bytes(
    window: int,
    nudge_at: int,
    stop_at: int,
    max_steps: Any,
    volatile: frozenset[Any],
    tools: Mapping[str, ToolPolicy],
    tools_repr: str,
    infer: bool,
    definitions: Mapping[str, str],
) -> bytes:
    """The configuration part of a snapshot: the one source for both backends."""
    if volatile == DEFAULT_VOLATILE_KEYS:
        volatile_names: list[str] | None = None
    else:
        if not all(type(name) is str for name in volatile):
            raise TypeError("a guard whose volatile_keys are not all str cannot be snapshotted")
        volatile_names = sorted(volatile)
    config = {
        "window": window,
        "nudge_at": nudge_at,
        "stop_at": stop_at,
        "max_steps": None if max_steps is None else int(max_steps),
        "volatile_keys": volatile_names,
        "tools": {name: _written_policy(policy) for name, policy in tools.items()},
        "tools_repr": tools_repr,
        "infer": infer,
        "definitions": dict(definitions),
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode("ascii")


def _written_policy(policy: ToolPolicy) -> list[Any]:
    written: list[Any] = [
        policy.kind,
        policy.max_polls,
        policy.empty_answers,
        sorted(policy.empty_digests),
        policy.whitespace,
    ]
    # Only where there are any: a configuration without them is written as before this
    # setting existed, so its snapshots (and their digests) stay the same bytes.
    if policy.volatile_result_keys:
        written.append(sorted(policy.volatile_result_keys))
    return written


def config_digest(config: bytes) -> bytes:
    return _keys.sha256(config).digest()[:8]


# The configuration's fields, as written and read back (one list: the slots are these too).
_CONFIG_FIELDS: Final = (
    "definitions",
    "infer",
    "max_steps",
    "nudge_at",
    "stop_at",
    "tools",
    "tools_repr",
    "volatile_keys",
    "window",
)


class Config:
    """A configuration read back from a snapshot, as both backends build a guard from it."""

    __slots__ = _CONFIG_FIELDS

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)

    window: int
    nudge_at: int
    stop_at: int
    max_steps: int | None
    volatile_keys: frozenset[str] | None
    tools: dict[str, ToolPolicy]
    tools_repr: str
    infer: bool
    definitions: dict[str, Policy]


def read_config(data: bytes) -> Config:
    """Parses and validates a snapshot's configuration; ``SnapshotError`` where it is not
    one that ``config_bytes`` could have written."""
    try:
        config = json.loads(bytes(data).decode("ascii"))
        if type(config) is not dict or sorted(config) != sorted(_CONFIG_FIELDS):
            raise ValueError("unexpected fields")
        check_limits(config["window"], config["nudge_at"], config["stop_at"], config["max_steps"])
        volatile = config["volatile_keys"]
        if volatile is not None and (
            type(volatile) is not list or not all(type(v) is str for v in volatile)
        ):
            raise ValueError("bad volatile_keys")
        tools: dict[str, ToolPolicy] = {}
        if type(config["tools"]) is not dict:
            raise ValueError("bad tools")
        for name, spec in config["tools"].items():
            tools[name] = _read_policy(spec)
        definitions = config["definitions"]
        if type(definitions) is not dict or not all(p in POLICIES for p in definitions.values()):
            raise ValueError("bad definitions")
        if type(config["tools_repr"]) is not str or type(config["infer"]) is not bool:
            raise ValueError("bad tools_repr or infer")
    except SnapshotError:
        raise
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise _fail(f"its configuration does not parse ({exc})") from None
    return Config(
        window=config["window"],
        nudge_at=config["nudge_at"],
        stop_at=config["stop_at"],
        max_steps=config["max_steps"],
        volatile_keys=None if volatile is None else frozenset(volatile),
        tools=tools,
        tools_repr=config["tools_repr"],
        infer=config["infer"],
        definitions=definitions,
    )


def _read_policy(spec: Any) -> ToolPolicy:
    if type(spec) is not list or len(spec) not in (5, 6):
        raise ValueError("bad tool policy")
    kind, max_polls, empty_answers, digests, whitespace = spec[:5]
    result_keys = spec[5] if len(spec) == 6 else []
    if (
        type(result_keys) is not list
        or not all(type(k) is str for k in result_keys)
        or (len(spec) == 6 and not result_keys)
    ):
        raise ValueError("bad volatile_result_keys")
    if kind not in POLICIES or type(empty_answers) is not bool:
        raise ValueError("bad tool policy")
    check_int("max_polls", max_polls, 1)
    if type(digests) is not list or not all(type(d) is str and len(d) == 16 for d in digests):
        raise ValueError("bad empty digests")
    if whitespace not in ("keep", "collapse"):
        raise ValueError("bad whitespace")
    policy = ToolPolicy(kind, max_polls, frozenset(digests), empty_answers, whitespace)
    policy.ignore_in_results(frozenset(result_keys))
    return policy


# -- JSON values (the read cache) ----------------------------------------------------------


def json_text(value: Any) -> bytes | None:
    """A cached result as JSON text, if it is a JSON value that comes back as itself (exact
    types, str keys, not nested too deep); else ``None``: not kept in a snapshot."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict:
            if depth >= JSON_DEPTH or not all(type(k) is str for k in item):
                return None
            stack.extend((v, depth + 1) for v in item.values())
        elif kind is list:
            if depth >= JSON_DEPTH:
                return None
            stack.extend((v, depth + 1) for v in item)
        elif kind not in (str, int, float, bool) and item is not None:
            return None
    try:
        return json.dumps(value, separators=(",", ":")).encode("ascii")
    except (ValueError, RecursionError):
        return None


def json_value(text: bytes) -> Any:
    try:
        return json.loads(text.decode("ascii"))
    except (ValueError, RecursionError) as exc:
        raise _fail(f"a cached result is not JSON ({exc})") from None


# -- writing ------------------------------------------------------------------------------


class Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, value: int) -> None:
        if value < 0 or value > MAX_U64:
            raise OverflowError(f"{value} does not fit a snapshot's 64-bit number")
        out = self.out
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)

    def u8(self, value: int) -> None:
        self.out.append(value)

    def key(self, hex_key: str) -> None:
        self.out += bytes.fromhex(hex_key)

    def raw(self, data: bytes) -> None:
        self.varint(len(data))
        self.out += data

    def text(self, value: str) -> None:
        self.raw(value.encode("utf-8", "surrogatepass"))


def frame(kind: int, head: bytes, state: bytes) -> bytes:
    """The whole snapshot around a state: header, configuration or its digest, checksum."""
    out = bytearray(MAGIC)
    out.append(VERSION)
    out.append(kind)
    if kind == FULL:
        writer = Writer()
        writer.raw(head)
        out += writer.out
    else:
        out += head
    out += state
    out += zlib.crc32(out).to_bytes(4, "little")
    return bytes(out)


# -- reading ------------------------------------------------------------------------------


class Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise _fail("truncated")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def u8(self) -> int:
        if self.pos >= len(self.data):
            raise _fail("truncated")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def flag(self) -> bool:
        value = self.u8()
        if value > 1:
            raise _fail(f"a flag byte is {value}")
        return value == 1

    def varint(self, limit: int = MAX_U64) -> int:
        value = shift = 0
        for _ in range(10):
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                if byte == 0 and shift:
                    raise _fail("a number is not written minimally")
                if value > limit:
                    raise _fail(f"a number ({value}) is out of range")
                return value
            shift += 7
        raise _fail("a number is longer than 10 bytes")

    def count(self, limit: int) -> int:
        return self.varint(limit)

    def key(self) -> str:
        return self.take(8).hex()

    def raw(self) -> bytes:
        return self.take(self.varint(len(self.data)))

    def text(self) -> str:
        try:
            return self.raw().decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise _fail("a text is not UTF-8") from None


def unframe(data: object) -> tuple[int, bytes, Reader]:
    """``(kind, config bytes or digest, reader at the state)``, the checksum checked."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a snapshot is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) < 10 or data[:4] != MAGIC:
        raise _fail("no tripwire snapshot header")
    if data[4] != VERSION:
        raise _fail(f"version {data[4]}, and this tripwire reads version {VERSION}")
    if zlib.crc32(data[:-4]).to_bytes(4, "little") != data[-4:]:
        raise _fail("its checksum does not match (corrupt or truncated)")
    kind = data[5]
    reader = Reader(data[:-4])
    reader.pos = 6
    if kind == FULL:
        head = reader.raw()
    elif kind == STATE_ONLY:
        head = reader.take(8)
    else:
        raise _fail(f"unknown kind {kind}")
    return kind, head, reader


# -- the run state ------------------------------------------------------------------------


class RunState(NamedTuple):
    """A guard's run state, as a snapshot holds it (the guard's attributes of these names)."""

    window: deque[Entry]
    polls: OrderedDict[str, int]
    retries: OrderedDict[str, int]
    steps: int
    turn: int
    stopped: Verdict | None
    call_ids: CallIds
    cache: OrderedDict[str, Any]


def write_state(state: RunState) -> bytes:
    """A run state's bytes (``state`` in the format above)."""
    out = Writer()
    out.varint(state.steps)
    out.varint(state.turn)
    out.varint(len(state.window))
    for entry in state.window:
        out.key(entry.key)
        out.text(entry.tool)
        out.varint(entry.step)
        out.varint(entry.turn)
        flags = (
            NUDGED * entry.nudged
            | WRITES * entry.writes
            | CHANGES * entry.changes
            | HAS_RESULT * (entry.result is not None)
            | EMPTY * entry.empty
            | FAILED * entry.failed
            | RETRY * entry.retry
            | QUESTION * (entry.question is not None)
        )
        out.u8(flags)
        if entry.result is not None:
            out.key(entry.result)
        if entry.failed:
            out.text(entry.error or "")
        if entry.question is not None:
            for part in entry.question:
                out.key(part)
    out.u8(state.stopped is not None)
    if state.stopped is not None:
        _write_verdict(out, state.stopped)
    out.varint(len(state.call_ids))
    for call_id, remembered in state.call_ids.items():
        out.text(call_id)
        out.key(remembered.key)
        out.u8(remembered.answered)
        _write_verdict(out, remembered.verdict)
    for counts in (state.polls, state.retries):
        out.varint(len(counts))
        for key, count in counts.items():
            out.key(key)
            out.varint(count)
    cached = [(key, json_text(value)) for key, value in state.cache.items()]
    kept = [(key, text) for key, text in cached if text is not None]
    out.varint(len(kept))
    for key, text in kept:
        out.key(key)
        out.raw(text)
    return bytes(out.out)


def read_state(reader: Reader, window_size: int, budget: int | None) -> RunState:
    """A snapshot's run state, validated (its bounds and its consistency: the invariants
    above), without changing anything. ``window_size`` and ``budget``: the guard's, which its
    verdicts carry for their messages."""
    steps = reader.varint()
    turn = reader.varint(MAX_U32)
    window: deque[Entry] = deque(maxlen=window_size)
    errors: dict[str, str] = {}
    previous_step, previous_turn = 0, 0
    for _ in range(reader.count(window_size)):
        entry = Entry(reader.key(), reader.text(), reader.varint(), False, "read", 0)
        entry.turn = reader.varint(MAX_U32)
        if not previous_step < entry.step <= steps:
            raise _inconsistent("an entry's step is out of order or past the steps")
        if not previous_turn <= entry.turn <= turn:
            raise _inconsistent("an entry's turn is out of order or past the turn")
        previous_step, previous_turn = entry.step, entry.turn
        flags = reader.u8()
        _check_flags(flags)
        entry.nudged = bool(flags & NUDGED)
        entry.writes = bool(flags & WRITES)
        entry.changes = bool(flags & CHANGES)
        entry.empty = bool(flags & EMPTY)
        entry.failed = bool(flags & FAILED)
        entry.retry = bool(flags & RETRY)
        if flags & HAS_RESULT:
            entry.result = reader.key()
        if entry.failed:
            assert entry.result is not None  # _check_flags
            entry.error = reader.text()
            if errors.setdefault(entry.result, entry.error) != entry.error:
                raise _inconsistent("one digest, two errors")
            if entry.result != digest("error", entry.error):
                raise _inconsistent("an error text is not its digest's")
        if flags & QUESTION:
            entry.question = (reader.key(), reader.key())
        window.append(entry)
    stopped = _read_verdict(reader, window_size, budget) if reader.flag() else None
    if stopped is not None and (stopped.action != "stop" or stopped.step > steps):
        raise _inconsistent("the stop is not a stop of this run")
    call_ids = CallIds()
    for _ in range(reader.count(CALL_ID_MEMORY)):
        call_id = reader.text()
        key = reader.key()
        answered = reader.flag()
        remembered = Remembered(key, _read_verdict(reader, window_size, budget), answered)
        if not call_ids.push_read(call_id, remembered):
            raise _inconsistent("a call id twice")
        if not 1 <= remembered.verdict.step <= steps:
            raise _inconsistent("a call id's verdict is past the steps")
    polls = _read_counts(reader, MAX_U32)
    retries = _read_counts(reader, TRANSIENT_RETRIES)
    cache: OrderedDict[str, Any] = OrderedDict()
    for _ in range(reader.count(CACHE_ENTRIES)):
        key = reader.key()
        if key in cache:
            raise _inconsistent("a cached key twice")
        cache[key] = json_value(reader.raw())
    if reader.pos != len(reader.data):
        raise _inconsistent("bytes after the state")
    return RunState(window, polls, retries, steps, turn, stopped, call_ids, cache)


def _read_verdict(reader: Reader, window_size: int, budget: int | None) -> Verdict:
    head = reader.u8()
    if head & 3 == 3:
        raise _fail("an unknown action")
    action: Action = ACTIONS[head & 3]
    reason: Reason | None = REASONS[head >> 2 & 3]
    tool, key = reader.text(), reader.key()
    repeats, step = reader.varint(MAX_U32), reader.varint()
    cached = json_value(reader.raw()) if head & H_CACHED else None
    call_id = reader.text() if head & H_CALL_ID else None
    duplicate_of = reader.varint(MAX_U32) if head & H_DUPLICATE else None
    invalid = reader.text() if head & H_INVALID else None
    detail = _read_detail(reader, nested=False)
    return _verdict(
        action, reason, tool, key, repeats, step, cached, call_id, duplicate_of, invalid,
        window_size, budget, detail,
    )  # fmt: skip


def _write_verdict(out: Writer, verdict: Verdict) -> None:
    cached = None if verdict.cached is None else json_text(verdict.cached)
    head = (
        ACTIONS.index(verdict.action)
        | REASONS.index(verdict.reason) << 2
        | H_CACHED * (cached is not None)
        | H_CALL_ID * (verdict.call_id is not None)
        | H_DUPLICATE * (verdict.duplicate_of is not None)
        | H_INVALID * (verdict.invalid_arguments is not None)
    )
    out.u8(head)
    out.text(verdict.tool)
    out.key(verdict.key)
    out.varint(verdict.repeats)
    out.varint(verdict.step)
    if cached is not None:
        out.raw(cached)
    if verdict.call_id is not None:
        out.text(verdict.call_id)
    if verdict.duplicate_of is not None:
        out.varint(verdict.duplicate_of)
    if verdict.invalid_arguments is not None:
        out.text(verdict.invalid_arguments)
    _write_detail(out, verdict._detail)


# Detail tags, by the first item of a Detail tuple (None: 0).
_DETAIL_TAGS: Final = {"unchanged": 1, "failed": 2, "errors": 3, "empty": 4, "cycle": 5}


def _write_detail(out: Writer, detail: Detail) -> None:
    if detail is None:
        out.u8(0)
        return
    kind = detail[0]
    if kind == "poll":
        out.u8(6)
        out.varint(detail[1])
    elif kind == "after":
        out.u8(7)
        out.text(detail[1])
        out.varint(detail[2])
        _write_detail(out, detail[3])
    else:
        out.u8(_DETAIL_TAGS[kind])
        if kind == "failed":
            out.text(detail[1])
            out.varint(detail[2])
        elif kind == "errors":
            out.varint(detail[1])
            out.text(detail[2])
        elif kind == "empty":
            out.varint(detail[1])
            _write_names(out, detail[2])
        elif kind == "cycle":
            _write_names(out, detail[1])
            out.u8(detail[2])


def _write_names(out: Writer, names: tuple[str, ...]) -> None:
    out.varint(len(names))
    for name in names:
        out.text(name)


def _read_names(reader: Reader) -> tuple[str, ...]:
    # Each name takes at least a byte: a count beyond what is left is corrupt.
    return tuple(reader.text() for _ in range(reader.count(len(reader.data) - reader.pos)))


def _read_detail(reader: Reader, nested: bool) -> Detail:
    tag = reader.u8()
    if tag == 0:
        return None
    if tag == 1:
        return ("unchanged",)
    if tag == 2:
        return ("failed", reader.text(), reader.varint(MAX_U32))
    if tag == 3:
        return ("errors", reader.varint(MAX_U32), reader.text())
    if tag == 4:
        return ("empty", reader.varint(MAX_U32), _read_names(reader))
    if tag == 5:
        return ("cycle", _read_names(reader), reader.flag())
    if tag == 6:
        return ("poll", reader.varint(MAX_U32))
    if tag == 7 and not nested:
        return ("after", reader.text(), reader.varint(MAX_U32), _read_detail(reader, True))
    raise _fail(f"detail tag {tag}")


def _read_counts(reader: Reader, limit: int) -> OrderedDict[str, int]:
    counts: OrderedDict[str, int] = OrderedDict()
    for _ in range(reader.count(COUNTED_CALLS)):
        key = reader.key()
        if key in counts:
            raise _inconsistent("a call counted twice")
        count = reader.varint(limit)
        if count == 0:
            raise _inconsistent("a call counted 0 times")
        counts[key] = count
    return counts


def _inconsistent(why: str) -> SnapshotError:
    return _fail(why)


def _check_flags(flags: int) -> None:
    """An entry's flags, as the guard sets them (the invariants in the module docstring)."""
    if flags & ~(NUDGED | WRITES | CHANGES | HAS_RESULT | EMPTY | FAILED | RETRY | QUESTION):
        raise _inconsistent(f"entry flags {flags:#x}")
    observed = EMPTY | FAILED | RETRY | HAS_RESULT
    if flags & NUDGED and flags & (WRITES | CHANGES | observed):
        raise _inconsistent(f"a nudged call that ran (entry flags {flags:#x})")
    if flags & WRITES and not flags & CHANGES:
        raise _inconsistent(f"a write that changes nothing (entry flags {flags:#x})")
    if flags & (EMPTY | FAILED) and not flags & HAS_RESULT:
        raise _inconsistent(f"a result without digest (entry flags {flags:#x})")
    if flags & EMPTY and flags & FAILED:
        raise _inconsistent(f"a failure that came back empty (entry flags {flags:#x})")
    if flags & RETRY and not flags & FAILED:
        raise _inconsistent(f"a retry of a call that did not fail (entry flags {flags:#x})")
    marked = flags & EMPTY or flags & (FAILED | RETRY) == FAILED
    if flags & QUESTION and flags & HAS_RESULT and not marked:
        raise _inconsistent(f"a question kept for a plain result (entry flags {flags:#x})")
