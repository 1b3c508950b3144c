"""Coverage-guided differential fuzzing of ``call_key`` and ``canonical_json`` (and
``Guard.check`` + ``observe``, ``call_keys``): the native core (``tripwire._core``) against
the reference (``tripwire.reference``).

The fuzz bytes are decoded by ``atheris.FuzzedDataProvider`` into a Python value: dicts,
lists, tuples; strs with whitespace (all 29 code points ``str.split`` splits on, and
look-alikes it does not), lone surrogates and astral characters; floats from raw bits (NaN
payloads, -0.0, subnormals, infinities), integral floats, ints of any size (past 64 bits
and near the 4300-digit limit), bools, None; non-``str`` keys of every kind; subclasses
(IntEnum, StrEnum, OrderedDict, str/dict/float/int subclasses), Decimal, bytes, sets;
nesting around the 256-level limit; cycles; and hostile objects whose ``split``,
``items``, ``__eq__``, ``__hash__``, ``__lt__``, ``__repr__`` raise, lie or change the
container being walked. The value is built twice from the same bytes, once per backend, so
side effects on one cannot leak into the other.

Both must give the same key and canonical bytes, or raise the same exception type.

    .venv/bin/python fuzz/fuzz_call_key.py fuzz/corpus/call_key \\
        -max_len=2048 -timeout=20 -max_total_time=60

See fuzz/README.md.
"""

from __future__ import annotations

import decimal
import enum
import os
import struct
import sys
from collections import OrderedDict
from typing import Any

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports(include=["tripwire", "json"]):
    import json  # noqa: F401  (instrumented: json.encoder's Python parts)

    import tripwire._guard
    import tripwire._keys  # noqa: F401
    import tripwire.reference as reference

import tripwire._core as native
from _differential import Mismatch, describe_exception, outcome, play_guard, safe_repr, same

# str.split()'s 29 whitespace code points, then look-alikes it does not split on.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
NOT_WHITESPACE = "\u200b\u180e\ufeff\x00\x7f\u2060"
SPECIAL_TEXTS = (
    "request_id",
    "trace_id",
    "timestamp",
    "now",
    "nonce",
    "idempotency_key",
    "",
    "a",
    "service",
    "\ud800",
    "\udfff",
    "\ud83d\ude00",
    "\U0001f600",
    "é",
    "\x7f",
    '"\\/\b\f\n\r\t',
    "\u2028",
)
NAMES = ("get_logs", "issue_refund", "poll", "", "\ud800", "t\x1c", "\U0001f600")
TOOLS = {"get_logs": "read", "issue_refund": "write", "poll": {"policy": "poll", "max_polls": 2}}
MAX_DEPTH = 256


class Boom(Exception):
    """What the hostile objects raise."""


class Color(enum.IntEnum):
    RED = 1
    BLUE = 2


class Mood(enum.StrEnum):
    CALM = "calm"
    SPACED = " spaced  out "


class StrSub(str):
    pass


class FloatSub(float):
    pass


class IntSub(int):
    pass


class DictSub(dict):  # type: ignore[type-arg]
    pass


class ListSub(list):  # type: ignore[type-arg]
    pass


class Hostile:
    """Behaviour switches for the hostile classes, set per build."""

    mode = 0


class SplitStr(str):
    """A str whose ``split`` raises, lies, or changes the container it sits in."""

    __slots__ = ("mode", "parent")

    def split(self, *args: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
        mode = getattr(self, "mode", 0)
        parent = getattr(self, "parent", None)
        if mode == 0:
            raise Boom("split")
        if mode == 1:
            return ["lied", "about", "words"]
        if mode == 2 and isinstance(parent, list):
            parent.append("appended by split")
        elif mode == 2 and isinstance(parent, dict):
            parent["zz_added_by_split"] = 1
        elif mode == 3 and isinstance(parent, (list, dict)):
            parent.clear()
        elif mode == 4 and isinstance(parent, list) and parent:
            parent.pop(0)
        elif mode == 4 and isinstance(parent, dict) and parent:
            parent.pop(next(iter(parent)))
        return str.split(self, *args, **kwargs)


class ItemsDict(dict):  # type: ignore[type-arg]
    """A dict whose ``items`` (or iteration) raises or lies."""

    mode = 0

    def items(self) -> Any:
        if self.mode == 0:
            raise Boom("items")
        if self.mode == 1:
            return [("lied", 1)]
        return dict.items(self)

    def __iter__(self) -> Any:
        if self.mode == 2:
            raise Boom("__iter__")
        return dict.__iter__(self)


class Key:
    """A dict key whose ``__hash__``, ``__eq__``, ``__lt__`` or ``__repr__`` misbehave once
    armed (after the value holding it is built, so building it works)."""

    def __init__(self, value: int, mode: int) -> None:
        self.value = value
        self.mode = mode
        self.armed = False

    def __hash__(self) -> int:
        if self.armed and self.mode == 0:
            raise Boom("__hash__")
        return self.value if self.mode != 1 else 7

    def __eq__(self, other: object) -> bool:
        if self.armed and self.mode == 2:
            raise Boom("__eq__")
        if self.armed and self.mode == 3:
            return True
        return isinstance(other, Key) and other.value == self.value

    def __lt__(self, other: object) -> bool:
        if self.armed and self.mode == 4:
            raise Boom("__lt__")
        if isinstance(other, Key):
            return self.value < other.value
        return NotImplemented

    def __repr__(self) -> str:
        if self.armed and self.mode == 5:
            raise Boom("__repr__")
        return f"Key({self.value})"


class BadRepr:
    """An unserialisable value whose ``__repr__`` raises (``observe`` keys results that
    cannot be keyed by their repr)."""

    def __repr__(self) -> str:
        raise Boom("__repr__")


class Model:
    """A pydantic-style result: ``model_dump`` raises, lies or works."""

    def __init__(self, mode: int, payload: Any) -> None:
        self.mode = mode
        self.payload = payload

    def model_dump(self, mode: str = "python") -> Any:
        if self.mode == 0:
            raise Boom("model_dump")
        if self.mode == 1:
            raise TypeError("cannot dump")
        return self.payload

    def __str__(self) -> str:
        return "Model()"


class Builder:
    def __init__(self, data: bytes) -> None:
        self.fdp = atheris.FuzzedDataProvider(data)
        self.budget = 400  # nodes, so an input cannot ask for a huge value
        self.keys: list[Key] = []
        self.sharing = False

    def pick(self, n: int) -> int:
        return self.fdp.ConsumeIntInRange(0, n - 1)

    def text(self) -> str:
        fdp = self.fdp
        kind = self.pick(6)
        if kind == 0:
            return SPECIAL_TEXTS[self.pick(len(SPECIAL_TEXTS))]
        if kind == 1:
            return fdp.ConsumeUnicode(self.pick(12))
        if kind == 2:
            return fdp.ConsumeUnicodeNoSurrogates(self.pick(12))
        # Words and whitespace, mixed.
        parts = []
        for _ in range(self.pick(6)):
            choice = self.pick(4)
            if choice == 0:
                parts.append(WHITESPACE[self.pick(len(WHITESPACE))] * (1 + self.pick(3)))
            elif choice == 1:
                parts.append(NOT_WHITESPACE[self.pick(len(NOT_WHITESPACE))])
            else:
                parts.append(fdp.ConsumeUnicode(self.pick(5)))
        return "".join(parts)

    def float_(self) -> float:
        kind = self.pick(5)
        if kind == 0:
            raw = self.fdp.ConsumeBytes(8).ljust(8, b"\0")
            return struct.unpack("<d", raw)[0]  # any bits: NaN payloads, subnormals, ...
        if kind == 1:
            # NaN with a payload and either sign.
            payload = self.fdp.ConsumeIntInRange(1, (1 << 51) - 1)
            sign = self.pick(2) << 63
            return struct.unpack("<d", struct.pack("<Q", sign | 0x7FF8000000000000 | payload))[0]
        if kind == 2:
            return float(self.fdp.ConsumeIntInRange(-(2**60), 2**60)) * 10.0 ** self.pick(30)
        if kind == 3:
            return (1e23, -0.0, 0.0, 5e-324, 1e16, 1e-5, 2.5e-05, 0.1, 1e308)[self.pick(9)]
        return self.fdp.ConsumeRegularFloat()

    def int_(self) -> int:
        kind = self.pick(4)
        if kind == 0:
            return self.fdp.ConsumeIntInRange(-1000, 1000)
        if kind == 1:
            edge = (2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 2**53 + 1)
            return edge[self.pick(len(edge))]
        if kind == 2:
            return self.fdp.ConsumeInt(1 + self.pick(40))
        # Near Python's 4300-digit int/str limit.
        return 10 ** (4290 + self.pick(20)) * (1 if self.pick(2) else -1)

    def key(self, depth: int) -> Any:
        kind = self.pick(16)
        if kind < 9:
            return self.text()
        if kind == 9:
            return self.fdp.ConsumeIntInRange(-5, 5)
        if kind == 10:
            return self.float_()
        if kind == 11:
            return (True, False, None)[self.pick(3)]
        if kind == 12:
            return StrSub(self.text())
        if kind == 13:
            return (Color.RED, Mood.SPACED, decimal.Decimal("1.5"), b"bytes", (1, 2))[self.pick(5)]
        return self.new_key()

    def new_key(self) -> Key:
        key = Key(self.pick(4), self.pick(7))
        self.keys.append(key)
        return key

    def hostile(self, depth: int, parent: Any) -> Any:
        kind = self.pick(6)
        if kind == 0:
            s = SplitStr(self.text())
            s.mode, s.parent = self.pick(5), parent  # type: ignore[attr-defined]
            return s
        if kind == 1:
            d = ItemsDict(self.dict_items(depth))
            d.mode = self.pick(4)
            return d
        if kind == 2:
            return BadRepr()
        if kind == 3:
            return self.new_key()
        if kind == 4:
            return Model(self.pick(3), self.value(depth + 1, None))
        return (bytearray(b"x"), memoryview(b"mv"), {1, 2}, frozenset(), 1j, object())[self.pick(6)]

    def dict_items(self, depth: int, hostile_keys: bool = True) -> list[tuple[Any, Any]]:
        items = []
        for _ in range(self.pick(5)):
            key = self.key(depth)
            if isinstance(key, Key) and not hostile_keys:
                key = key.value
            items.append((key, self.value(depth + 1, None)))
        return items

    def value(self, depth: int, parent: Any) -> Any:
        self.budget -= 1
        if self.budget <= 0 or self.fdp.remaining_bytes() == 0:
            return None
        kind = self.pick(24)
        if kind <= 2:
            return self.text()
        if kind == 3:
            return self.float_()
        if kind == 4:
            return self.int_()
        if kind == 5:
            return (True, False, None)[self.pick(3)]
        if kind in (6, 7, 8):
            d: dict[Any, Any] = {}
            for _ in range(self.pick(6)):
                d[self.key(depth) if self.pick(4) == 0 else self.text()] = self.value(depth + 1, d)
            return d
        if kind in (9, 10):
            items: list[Any] = []
            for _ in range(self.pick(6)):
                items.append(self.value(depth + 1, items))
            return items
        if kind == 11:
            return tuple(self.value(depth + 1, None) for _ in range(self.pick(4)))
        if kind == 12:
            # Nesting around the 256-level limit (counted from here).
            levels = MAX_DEPTH - 4 + self.pick(9) - min(depth, MAX_DEPTH - 4)
            inner = self.value(depth + levels, None)
            wrap = self.pick(3)
            for _ in range(levels):
                inner = [inner] if wrap == 0 else {"k": inner} if wrap == 1 else (inner,)
            return inner
        if kind == 13:
            # A cycle.
            if self.pick(2):
                cyclic: list[Any] = [1]
                cyclic.append(cyclic)
                return cyclic
            cyclic_dict: dict[str, Any] = {"a": 1}
            cyclic_dict["self"] = cyclic_dict
            return cyclic_dict
        if kind == 14:
            choice = self.pick(6)
            if choice == 0:
                # No lying keys: an OrderedDict whose keys' __eq__ lies can iterate forever
                # (its linked list and its dict disagree), in plain Python too.
                return OrderedDict(self.dict_items(depth, hostile_keys=False))
            if choice == 1:
                return DictSub(self.dict_items(depth))
            if choice == 2:
                return ListSub(self.value(depth + 1, None) for _ in range(self.pick(4)))
            if choice == 3:
                return StrSub(self.text())
            if choice == 4:
                return FloatSub(self.float_())
            return IntSub(self.int_())
        if kind == 15:
            return (Color.BLUE, Mood.CALM, Mood.SPACED, decimal.Decimal("NaN"), b"raw")[
                self.pick(5)
            ]
        if kind == 16:
            return self.hostile(depth, parent)
        if kind == 17:
            # Volatile keys and None values at this depth.
            return {
                SPECIAL_TEXTS[self.pick(6)]: self.value(depth + 1, None),
                "kept": self.value(depth + 1, None),
                "gone": None,
            }
        if kind == 18 and not self.sharing:
            # One object twice (not nested: doubling at every level would be exponential).
            self.sharing = True
            shared = self.value(depth + 1, None)
            self.sharing = False
            return [shared, shared]
        return self.text() if kind < 22 else self.float_() if kind == 22 else self.int_()

    def build(self) -> tuple[str, Any, Any, list[Any]]:
        name = NAMES[self.pick(len(NAMES))] if self.pick(4) else self.text()
        volatile: Any = None
        choice = self.pick(8)
        if choice == 1:
            volatile = {self.text() for _ in range(self.pick(4))}
        elif choice == 2:
            volatile = [self.key(0) for _ in range(self.pick(3))]
        args = self.value(0, None)
        results = [self.value(1, None) for _ in range(2)]
        if self.pick(4) == 0:
            results.append(Model(self.pick(3), args))
        for key in self.keys:
            key.armed = True
        return name, args, volatile, results


def build(data: bytes) -> tuple[str, Any, Any, list[Any]]:
    return Builder(data).build()


def keyed(module: Any, data: bytes) -> list[tuple[Any, ...]]:
    """What ``module`` says about the value the input describes."""
    name, args, volatile, _ = build(data)
    kwargs = {} if volatile is None else {"volatile_keys": volatile}
    out = [
        outcome(module.call_key, name, args, **kwargs),
        outcome(module.canonical_json, name, args, **kwargs),
    ]
    name, args, volatile, _ = build(data)
    kwargs = {} if volatile is None else {"volatile_keys": volatile}
    out.append(outcome(module.call_keys, [(name, args), ("other", {"x": 1})], **kwargs))
    return out


def guarded(module: Any, data: bytes) -> list[tuple[Any, ...]]:
    name, args, volatile, results = build(data)
    _, args_again, _, _ = build(data)
    steps = [
        ("check", name, args, results[0]),
        ("check", name, args_again, results[1]),
        ("check", name, {"page": 2}, None),
        ("check", name, args, results[-1]),
        ("check", name, args, None),
    ]
    try:
        return play_guard(module, steps, tools=TOOLS, volatile_keys=volatile)
    except Exception as exc:  # an unusable volatile_keys: the constructor's error
        return [("Guard() raised", describe_exception(exc))]


class Described:
    """The input, shown as the value it decodes to."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"{self.data!r} -> {safe_repr(build(self.data))}"


# Findings fixed since (regression tests in tests/test_hostile.py) are reported like any
# other; TRIPWIRE_FUZZ_KNOWN=skip skips them, for fuzzing a build from before the fix.
SKIP_KNOWN = os.environ.get("TRIPWIRE_FUZZ_KNOWN", "report") == "skip"


def has_mutating_callbacks(value: Any) -> bool:
    """Whether ``value`` holds a str whose ``split`` changes its container."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen or len(seen) > 10_000:
            continue
        seen.add(id(item))
        if isinstance(item, SplitStr) and getattr(item, "mode", 0) in (2, 3, 4):
            return True
        if isinstance(item, Model):
            stack.append(item.payload)
        elif type(item) in (list, tuple, dict, OrderedDict, DictSub, ListSub, ItemsDict):
            stack.extend(dict.values(item) if isinstance(item, dict) else item)
    return False


def known(data: bytes) -> bool:
    """Finding 7 (fixed): ``observe`` of a result that could not be keyed keyed it again in
    Python (its callbacks ran twice), so a result whose callbacks change it diverged."""
    return SKIP_KNOWN and has_mutating_callbacks(build(data)[3])


def TestOneInput(data: bytes) -> None:
    same(
        "call_key/canonical_json/call_keys",
        keyed(native, data),
        keyed(reference, data),
        Described(data),
    )
    try:
        same(
            "Guard.check/observe/keep",
            guarded(native, data),
            guarded(reference, data),
            Described(data),
        )
    except Mismatch:
        if not known(data):
            raise


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
