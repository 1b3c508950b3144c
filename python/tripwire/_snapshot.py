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
from collections.abc import Mapping
from typing import Any, Final

from tripwire import _keys
from tripwire._keys import DEFAULT_VOLATILE_KEYS
from tripwire._policy import POLICIES, Policy, ToolPolicy, check_int

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
    from tripwire._guard import check_limits

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
