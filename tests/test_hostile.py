"""Hostile input: nothing crashes, nothing is lost, a failed call changes nothing.

A guard runs inside other people's production loops. For every hostile input here, on both
backends: the call raises a clear exception of the right type (the user's own exception
when a user callback raised it; ``KeyboardInterrupt`` as itself), native and reference
agree, and a guard given the input is left exactly as it was: same steps, window and
length, and the next checks (a cached read, a repeat) give the verdicts a guard that never
saw the input gives.

Findings of the fuzzers (fuzz/) and of this suite are regression tests here, each under the
behaviour it checks; its docstring ends with the finding's number in fuzz/README.md.
"""

from __future__ import annotations

import contextlib
import decimal
import enum
import gc
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import textwrap
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import (
    BACKEND_NAMES,
    BACKENDS,
    NATIVE,
    REFERENCE,
    raw_text_key_written_out,
    requires_native,
    state,
)

MAX_DEPTH = 256
DEEP = 1_000_000  # "a million levels"


# -- hostile objects -------------------------------------------------------------------------------


class Boom(Exception):
    """A user callback's own exception: it must come out as itself."""


class SplitStr(str):
    """A str whose ``split`` (what the key contract calls on every str) runs ``action``."""

    action: Callable[[], Any] = staticmethod(lambda: None)

    def split(self, *args: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
        result = type(self).action()
        return result if isinstance(result, list) else str.split(self, *args, **kwargs)


def split_str(text: str, action: Callable[[], Any]) -> SplitStr:
    cls = type("SplitStr", (SplitStr,), {"action": staticmethod(action)})
    return cls(text)


def raising(exc: BaseException) -> Callable[[], Any]:
    def action() -> Any:
        raise exc

    return action


class ItemsDict(dict):  # type: ignore[type-arg]
    """A dict whose ``items`` raises or lies."""

    def __init__(self, *args: Any, items: Callable[[], Any] | None = None) -> None:
        super().__init__(*args)
        self._items = items

    def items(self) -> Any:
        return self._items() if self._items is not None else dict.items(self)


class IterRaises(dict):  # type: ignore[type-arg]
    """A dict whose ``__iter__`` and ``keys`` raise: the contract walks ``items()`` only."""

    def __iter__(self) -> Iterator[Any]:
        raise Boom("__iter__")

    def keys(self) -> Any:
        raise Boom("keys")


class Key:
    """A dict key whose ``__hash__``/``__eq__``/``__lt__``/``__repr__`` misbehave once
    ``armed`` (so the dict holding it can be built first)."""

    def __init__(self, value: int, **behaviour: Any) -> None:
        self.value = value
        self.behaviour = behaviour
        self.armed = False

    def _act(self, name: str, default: Any) -> Any:
        if not self.armed or name not in self.behaviour:
            return default
        act = self.behaviour[name]
        if isinstance(act, BaseException):
            raise act
        return act

    def __hash__(self) -> int:
        return self._act("hash", hash(self.value))  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return self._act(  # type: ignore[no-any-return]
            "eq", isinstance(other, Key) and other.value == self.value
        )

    def __lt__(self, other: object) -> bool:
        return self._act(  # type: ignore[no-any-return]
            "lt", isinstance(other, Key) and self.value < other.value
        )

    def __repr__(self) -> str:
        return self._act("repr", f"Key({self.value})")  # type: ignore[no-any-return]


def armed(mapping: dict[Any, Any]) -> dict[Any, Any]:
    for key in mapping:
        if isinstance(key, Key):
            key.armed = True
    return mapping


class LyingInt(int):
    """An int dict key (json.dumps writes it as the int it is) whose ``__hash__`` and
    ``__eq__`` lie: every instance claims to equal everything."""

    def __new__(cls, value: int, hash: int | None = None) -> LyingInt:
        self = super().__new__(cls, value)
        self._hash = hash
        return self

    def __hash__(self) -> int:
        return int(self) if self._hash is None else self._hash

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


class BadRepr:
    def __repr__(self) -> str:
        raise Boom("__repr__")


class Color(enum.IntEnum):
    RED = 1


class Mood(enum.StrEnum):
    SPACED = "  spaced   out "


class Model:
    """A pydantic-style tool result."""

    def __init__(self, dump: Callable[[], Any]) -> None:
        self._dump = dump

    def model_dump(self, mode: str = "python") -> Any:
        return self._dump()


def nested_lists(depth: int, inner: Any = None) -> Any:
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def nested_dicts(depth: int, inner: Any = 1) -> Any:
    value = inner
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_tuples(depth: int, inner: Any = 1) -> Any:
    value = inner
    for _ in range(depth):
        value = (value,)
    return value


def cyclic_list() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def cyclic_dict() -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    return value


def mutual_cycle() -> dict[str, Any]:
    items: list[Any] = []
    value = {"items": items}
    items.append(value)
    return value


def cycle_through_tuple() -> list[Any]:
    value: list[Any] = []
    value.append((value,))
    return value


def nan_with_payload(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]  # type: ignore[no-any-return]


NAN_PAYLOADS = [
    nan_with_payload(0x7FF8000000000001),  # quiet NaN, payload 1
    nan_with_payload(0xFFF8000000000000),  # negative quiet NaN
    nan_with_payload(0x7FF0000000000001),  # signalling NaN
    nan_with_payload(0xFFFFFFFFFFFFFFFF),  # every bit set
]


# -- helpers ---------------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def module(request: pytest.FixtureRequest) -> ModuleType:
    """A whole backend module: ``tripwire._core`` or ``tripwire.reference``."""
    return request.param  # type: ignore[no-any-return]


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``("ok", result)`` or ``(exception type, message, notes)``; BaseExceptions too."""
    try:
        return ("ok", fn(*args, **kwargs))
    except BaseException as exc:
        return (type(exc), str(exc), getattr(exc, "__notes__", None))


TOOLS = {"get_logs": "read", "deploy": "write"}
PAGE_1 = {"service": "checkout", "page": 1}
PAGE_2 = {"service": "checkout", "page": 2}
PAGE_3 = {"service": "checkout", "page": 3}


class Primed:
    """A guard with some history (two reads, their results recorded and observed), and a
    twin with the same history that never sees the hostile call."""

    def __init__(self, module: ModuleType) -> None:
        self.results = [["line 1", "line 2"], ["line 3"]]
        self.guard = self._build(module)
        self.control = self._build(module)

    def _build(self, module: ModuleType) -> Any:
        guard = module.Guard(nudge_at=3, stop_at=4, tools=TOOLS)
        for args, result in zip((PAGE_1, PAGE_2), self.results, strict=True):
            verdict = guard.check("get_logs", args)
            guard.keep(verdict, result)
            guard.observe(verdict, result)
        return guard

    def assert_unchanged(self) -> None:
        """The guard is as if the hostile call never happened: same state, and the next
        checks (reads served from the cache, repeats) give the twin's verdicts."""
        assert state(self.guard) == state(self.control)
        cached = self.guard.check("get_logs", PAGE_2)
        assert fields(cached) == fields(self.control.check("get_logs", PAGE_2))
        assert cached.action == "allow" and cached.cached is self.results[1], "the cache is kept"
        for args in (PAGE_1, PAGE_1, PAGE_2, PAGE_1):
            got, expected = self.guard.check("get_logs", args), self.control.check("get_logs", args)
            assert fields(got) == fields(expected)
        assert state(self.guard) == state(self.control)


def fields(verdict: Any) -> dict[str, Any]:
    names = ("action", "reason", "tool", "key", "repeats", "step", "message", "call_id")
    got = {name: getattr(verdict, name) for name in names}
    got["cached"] = None if verdict.cached is None else id(verdict.cached)
    return got


# -- hostile arguments to call_key / Guard.check ---------------------------------------------------

# (id, factory of a fresh hostile value, the exception it must raise or None for a key,
#  a regex its message must match)
ARG_CASES: list[tuple[str, Callable[[], Any], type[BaseException] | None, str]] = [
    # The walk stops at level 257 whatever lies below (a million levels: further down).
    ("list-300-deep", lambda: nested_lists(300), RecursionError, "deeper than 256"),
    ("dict-300-deep", lambda: nested_dicts(300), RecursionError, "deeper than 256"),
    ("ordered-dict-257-deep", lambda: OrderedDict(a=nested_dicts(256)), RecursionError, "256"),
    ("tuple-100k-deep", lambda: nested_tuples(100_000), RecursionError, "deeper than 256"),
    ("self-referential-list", cyclic_list, RecursionError, "deeper than 256"),
    ("self-referential-dict", cyclic_dict, RecursionError, "deeper than 256"),
    ("list-dict-cycle", mutual_cycle, RecursionError, "deeper than 256"),
    # A tuple is checked for depth before json.dumps sees it: its cycle ends as others do.
    ("cycle-through-a-tuple", cycle_through_tuple, RecursionError, "deeper than 256"),
    ("split-raises", lambda: {"q": split_str("x y", raising(Boom("split")))}, Boom, "split"),
    (
        "split-raises-type-error",
        lambda: [split_str("x", raising(TypeError("no")))],
        TypeError,
        "no",
    ),
    (
        "items-raises",
        lambda: {"a": ItemsDict({"k": 1}, items=raising(Boom("items")))},
        Boom,
        "items",
    ),
    ("items-returns-junk", lambda: ItemsDict({"k": 1}, items=lambda: 42), TypeError, "int"),
    ("key-hash-raises", lambda: armed({Key(1, hash=Boom("hash")): 1}), Boom, "hash"),
    (
        "key-eq-raises",
        lambda: armed({Key(1, hash=7, eq=Boom("eq")): 1, Key(2, hash=7, eq=Boom("eq")): 2}),
        Boom,
        "eq",
    ),
    (
        "key-lt-raises",
        lambda: armed({Key(1, lt=Boom("lt")): 1, Key(2, lt=Boom("lt")): 2}),
        Boom,
        "lt",
    ),
    ("key-repr-raises", lambda: armed({Key(1, repr=Boom("repr")): 1}), TypeError, "keys must"),
    ("unsortable-keys", lambda: {1: "a", "b": 2}, TypeError, "not supported"),
    ("bytes-key", lambda: {b"k": 1}, TypeError, "keys must be str"),
    ("tuple-key", lambda: {(1, 2): 1}, TypeError, "keys must be str"),
    ("decimal-key", lambda: {decimal.Decimal(1): 1}, TypeError, "keys must be str"),
    ("frozenset-key", lambda: {frozenset(): 1}, TypeError, "keys must be str"),
    ("memoryview", lambda: {"data": memoryview(b"abc")}, TypeError, "memoryview"),
    ("bytearray", lambda: [bytearray(b"abc")], TypeError, "bytearray"),
    ("bytes", lambda: b"abc", TypeError, "bytes"),
    ("set", lambda: {"s": {1, 2}}, TypeError, "set"),
    ("complex", lambda: 1j, TypeError, "complex"),
    ("object-with-bad-repr", lambda: {"x": BadRepr()}, TypeError, "BadRepr"),
    ("int-past-the-digit-limit", lambda: [10**5000], ValueError, "4300"),
    ("bad-repr-under-257-levels", lambda: nested_lists(257, BadRepr()), RecursionError, "256"),
]

# Hostile, yet keyable: both backends must give the same key.
KEYED_CASES: list[tuple[str, Callable[[], Any]]] = [
    ("split-lies", lambda: {"q": split_str("a b", lambda: ["lied", "about", "it"])}),
    ("items-lie", lambda: ItemsDict({"k": 1}, items=lambda: [("lied", 2)])),
    ("iter-and-keys-raise", lambda: IterRaises({"k": 1})),
    ("int-key-hash-lies", lambda: {LyingInt(1, hash=7): "a", LyingInt(2, hash=7): "b"}),
    ("int-key-eq-lies", lambda: {LyingInt(1): "a", LyingInt(2): "b", 3: "c"}),
    ("int-key-eq-raises-when-sorted", lambda: {LyingInt(1): "a"}),
    ("nan-key", lambda: {math.nan: 1}),
    ("two-nan-keys", lambda: {float("nan"): 1, float("nan"): 2}),
    ("inf-and-minus-zero-keys", lambda: {math.inf: 1, -0.0: 2, 1.5: 3}),
    ("bool-int-float-keys", lambda: {True: "t", 2: "i", 1.5: "f", -7: None}),
    ("none-key", lambda: {None: 1}),
    ("int-enum-key", lambda: {Color.RED: "r"}),
    ("str-enum-key-and-value", lambda: {Mood.SPACED: Mood.SPACED}),
    ("str-subclass-keys", lambda: {split_str("b", lambda: None): 1, "a": 2}),
    ("nan-payloads", lambda: {"v": NAN_PAYLOADS, "t": tuple(NAN_PAYLOADS)}),
    ("nan-payload-keys", lambda: {NAN_PAYLOADS[1]: 1}),
    ("lone-surrogates", lambda: {"\ud800": "\udfff x\ud83d", "k\udc00": ["\ud800\udc00"]}),
    ("astral", lambda: {"\U0001f600": "\U0010ffff  \U0001f600"}),
    ("tuple-cycle-free-deep", lambda: nested_tuples(200, [1, 2])),
    ("256-levels", lambda: nested_lists(256)),
    ("deep-under-a-volatile-key", lambda: {"request_id": cyclic_list(), "a": 1}),
    (
        "split-appends-to-the-list-walked",
        lambda: (lambda items: items.append(split_str("x", lambda: items.append("more"))) or items)(
            ["first"]
        ),
    ),
    (
        "split-clears-the-list-walked",
        lambda: (lambda items: items.extend([split_str("x", items.clear), "gone"]) or items)([0]),
    ),
    (
        "split-adds-to-the-dict-walked",
        lambda: (lambda d: d.update(m=split_str("x", lambda: d.update(zz=1))) or d)({"a": 1}),
    ),
    (
        "split-empties-the-dict-walked",
        lambda: (lambda d: d.update(m=split_str("x", d.clear), z="after") or d)({"a": 1}),
    ),
    ("shared-subtree", lambda: (lambda s: {"a": s, "b": [s, s]})({"k": [1, "x  y"]})),
]


def arg_case_ids(cases: list[Any]) -> list[str]:
    return [case[0] for case in cases]


@pytest.mark.parametrize(
    ("case", "make", "error", "message"), ARG_CASES, ids=arg_case_ids(ARG_CASES)
)
def test_hostile_arguments_raise(
    impl: Any, case: str, make: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    with pytest.raises(error, match=message):
        impl.call_key("t", make())
    with pytest.raises(error, match=message):
        impl.canonical_json("t", make())


@requires_native
@pytest.mark.parametrize(
    ("case", "make", "error", "message"), ARG_CASES, ids=arg_case_ids(ARG_CASES)
)
def test_hostile_arguments_backends_agree(
    case: str, make: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    native, reference = (
        outcome(NATIVE.call_key, "t", make()),
        outcome(REFERENCE.call_key, "t", make()),
    )
    assert native[0] is reference[0] is error
    assert native[1] == reference[1]


@pytest.mark.parametrize(
    ("case", "make", "error", "message"), ARG_CASES, ids=arg_case_ids(ARG_CASES)
)
def test_hostile_arguments_leave_the_guard_unchanged(
    module: ModuleType, case: str, make: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    primed = Primed(module)
    with pytest.raises(error):
        primed.guard.check("deploy", make())
    with pytest.raises(error):
        primed.guard.check("get_logs", {"wrapped": make()}, call_id="c1")
    if not isinstance(make(), (str, bytes, bytearray)):  # text is JSON text in a turn
        with pytest.raises(error):
            primed.guard.check_turn([("deploy", {"ok": 1}), ("get_logs", make())])
    primed.assert_unchanged()


@requires_native
@pytest.mark.parametrize(("case", "make"), KEYED_CASES, ids=arg_case_ids(KEYED_CASES))
def test_hostile_but_keyable_arguments_backends_agree(case: str, make: Callable[[], Any]) -> None:
    native = outcome(NATIVE.canonical_json, "t", make())
    reference = outcome(REFERENCE.canonical_json, "t", make())
    assert native == reference
    assert native[0] == "ok"


@pytest.mark.parametrize(("case", "make"), KEYED_CASES, ids=arg_case_ids(KEYED_CASES))
def test_hostile_but_keyable_arguments_are_counted(
    module: ModuleType, case: str, make: Callable[[], Any]
) -> None:
    guard = module.Guard()
    first, second = guard.check("t", make()), guard.check("t", make())
    assert (first.action, second.action) == ("allow", "nudge")
    assert first.key == second.key == module.call_key("t", make())


def test_nan_payloads_key_as_nan(impl: Any) -> None:
    plain = impl.canonical_json("t", [math.nan])
    for value in NAN_PAYLOADS:
        assert math.isnan(value)
        assert impl.canonical_json("t", [value]) == plain == b'{"args":[NaN],"tool":"t"}'


def test_a_million_levels_do_not_crash_either_backend(module: ModuleType) -> None:
    primed = Primed(module)

    def hostile_calls(deep: Any) -> None:
        for call, args in (
            (module.call_key, ("t", deep)),
            (module.canonical_json, ("t", {"ok": 1, "deep": [deep]})),
            (primed.guard.check, ("deploy", deep)),
            (primed.guard.check_turn, ([("deploy", {}), ("deploy", {"a": deep})],)),
        ):
            with pytest.raises(RecursionError, match=r"arguments nested deeper than 256 levels"):
                call(*args)
        # A result cannot stop the harness (issue 17): one too deep to key is taken as
        # unknown, as if not observed.
        primed.guard.observe(primed.guard.check("get_logs", PAGE_3), deep)
        primed.control.check("get_logs", PAGE_3)

    hostile_calls(nested_lists(DEEP))
    hostile_calls(nested_dicts(DEEP))
    primed.assert_unchanged()


# -- hostile JSON text: call_key_json / Guard.check_json -------------------------------------------

# Text nested past 256 levels, valid or not, under a volatile key or not: call_key_json
# raises the depth limit's RecursionError (never Python's own, whose depth depends on the
# caller's stack); check_json does not raise but keys the raw text (issue 17).
DEEP_JSON: list[tuple[str, Callable[[], Any]]] = [
    ("array-a-million-deep", lambda: "[" * DEEP + "]" * DEEP),
    ("object-a-million-deep", lambda: '{"a":' * DEEP + "1" + "}" * DEEP),
    ("unterminated-a-million-deep", lambda: "[" * DEEP),
    ("bytes-a-million-deep", lambda: b"[" * DEEP + b"]" * DEEP),
    ("bytearray-utf-16-deep", lambda: bytearray(("[" * 300 + "]" * 300).encode("utf-16"))),
    ("257-levels", lambda: "[" * 257 + "]" * 257),
    ("500-arrays", lambda: "[" * 500 + "]" * 500),
    ("100k-open-brackets", lambda: "[" * 100_000),
    ("arrays-and-objects-a-million-deep", lambda: '[{"a":' * DEEP),
    ("under-a-volatile-key", lambda: '{"request_id":' + "[" * 300 + "]" * 300 + ',"a":1}'),
    ("overwritten-duplicate-key", lambda: '{"a":' + "[" * 300 + "]" * 300 + ',"a":1}'),
    ("deep-then-an-error", lambda: "[" * 300 + "F"),
    ("brackets-in-strings-then-deep", lambda: '["' + "[{" * 500 + '\\\\", ' + "[" * 300),
]

# Not text at all: a TypeError from both, and from check_json too.
NOT_TEXT: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
    ("memoryview", lambda: memoryview(b"{}"), TypeError, "must be str, bytes or bytearray"),
    ("dict", lambda: {"a": 1}, TypeError, "must be str, bytes or bytearray, not dict"),
    ("none", lambda: None, TypeError, "not NoneType"),
    ("int", lambda: 12, TypeError, "not int"),
]


@pytest.mark.parametrize(("case", "make"), DEEP_JSON, ids=[c for c, _ in DEEP_JSON])
def test_deep_json_raises_the_depth_limit(
    module: ModuleType, case: str, make: Callable[[], Any]
) -> None:
    with pytest.raises(RecursionError, match="arguments nested deeper than 256 levels"):
        module.call_key_json("t", make())


@pytest.mark.parametrize(("case", "make"), DEEP_JSON, ids=[c for c, _ in DEEP_JSON])
def test_deep_json_is_checked_not_raised(
    module: ModuleType, case: str, make: Callable[[], Any]
) -> None:
    """Issue 17: a model that sends deep text gets verdicts, not a crashed harness loop."""
    guard = module.Guard()
    verdicts = [guard.check_json("t", make()) for _ in range(3)]
    assert [v.action for v in verdicts] == ["allow", "nudge", "stop"]
    assert verdicts[0].invalid_arguments == "arguments nested deeper than 256 levels"
    assert verdicts[0].key == raw_text_key_written_out("t", make())


@requires_native
@pytest.mark.parametrize(("case", "make"), DEEP_JSON, ids=[c for c, _ in DEEP_JSON])
def test_deep_json_backends_agree(case: str, make: Callable[[], Any]) -> None:
    assert outcome(NATIVE.call_key_json, "t", make()) == outcome(
        REFERENCE.call_key_json, "t", make()
    )
    native, reference = NATIVE.Guard(), REFERENCE.Guard()
    for _ in range(3):
        ours, theirs = native.check_json("t", make()), reference.check_json("t", make())
        assert fields(ours) == fields(theirs)
        assert ours.invalid_arguments == theirs.invalid_arguments


@pytest.mark.parametrize(("case", "make", "error", "message"), NOT_TEXT, ids=arg_case_ids(NOT_TEXT))
def test_hostile_json_raises(
    module: ModuleType, case: str, make: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    with pytest.raises(error, match=message):
        module.call_key_json("t", make())
    primed = Primed(module)
    with pytest.raises(error, match=message):
        primed.guard.check_json("deploy", make())
    with pytest.raises(error, match=message):
        primed.guard.check_json("get_logs", make(), call_id="c1")
    primed.assert_unchanged()


@requires_native
@pytest.mark.parametrize(("case", "make", "error", "message"), NOT_TEXT, ids=arg_case_ids(NOT_TEXT))
def test_hostile_json_backends_agree(
    case: str, make: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    native = outcome(NATIVE.call_key_json, "t", make())
    reference = outcome(REFERENCE.call_key_json, "t", make())
    assert native[0] is reference[0] is error
    assert native[1] == reference[1]


def test_mixed_key_types_leave_the_guard_unchanged(module: ModuleType) -> None:
    """Issue 17: the TypeError says it is about the dict's keys; nothing is counted."""
    primed = Primed(module)
    for args in ({None: 1, "a": 2}, {"a": [{"b": 1, 2: 2}]}):
        with pytest.raises(TypeError, match=r"^dict keys cannot be sorted: keys of types "):
            primed.guard.check("deploy", args)
        with pytest.raises(TypeError, match=r"^dict keys cannot be sorted"):
            primed.guard.check_turn([("deploy", {}), ("deploy", args)])
    primed.assert_unchanged()


class ParseRaises(str):
    """JSON text whose ``startswith`` (which json.loads calls) raises: how a parse that runs
    out of memory or stack looks to check_json, in either backend (both hand a str subclass
    to the reference)."""

    error: BaseException = MemoryError()

    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        raise self.error


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (MemoryError(), "the arguments could not be parsed (MemoryError)"),
        (RecursionError("maximum recursion depth exceeded"), "maximum recursion depth exceeded"),
    ],
)
def test_check_json_turns_memory_and_recursion_errors_into_verdicts(
    module: ModuleType, error: BaseException, why: str
) -> None:
    text = ParseRaises('{"a": 1}')
    text.error = error
    with pytest.raises(type(error)):
        module.call_key_json("t", text)
    guard = module.Guard()
    verdicts = [guard.check_json("t", text) for _ in range(3)]
    assert [v.action for v in verdicts] == ["allow", "nudge", "stop"]
    assert verdicts[0].invalid_arguments == why


def test_check_json_lets_other_exceptions_through(module: ModuleType) -> None:
    """Only what bad text raises becomes a verdict: an interrupt, or the user's own
    exception from a str subclass, still raises, and the guard is unchanged."""
    primed = Primed(module)
    for error in (KeyboardInterrupt(), Boom("mine")):
        text = ParseRaises("[1]")
        text.error = error
        with pytest.raises(type(error)):
            primed.guard.check_json("deploy", text)
    primed.assert_unchanged()


# Hostile JSON texts of our own (always run; JSONTestSuite, when present, is run further
# down): each must give every backend's check_json a verdict, and the backends the same one.
OUR_HOSTILE_TEXTS: list[tuple[str, Any]] = [
    ("open-brackets", "[" * 100_000),
    ("array-object-pairs", "[{" * 50_000),
    ("closing-brackets", "]" * 100_000),
    ("colons", ":" * 100_000),
    ("a-string-of-brackets", '"' + "[{" * 50_000 + '"'),
    ("unterminated-string-of-brackets", '"' + "[" * 1_000),
    ("escaped-quote-then-brackets", '["\\"' + "[" * 1_000),
    ("backslash-at-the-end", '["' + "\\" * 500 + "\\"),
    ("lone-surrogates", '{"\\ud800": "\\udfff", "\\udc00\\ud800": ["\\ud800"]}'),
    ("raw-lone-surrogate", '{"a": "\ud800"}'),
    ("nul-bytes", b"\x00" * 1_000),
    ("utf-32-deep", ("[" * 400).encode("utf-32")),
    ("bom-and-deep", "\ufeff" + "[" * 400),
    ("nan-infinity", "[NaN, Infinity, -Infinity, -0, 1e999, -1e999]"),
    ("huge-exponent", "1e" + "9" * 5_000),
    ("int-at-the-digit-limit", "[" + "9" * 4300 + "]"),
    ("int-past-the-digit-limit", "[" + "9" * 4301 + "]"),
    ("a-million-commas", "[" + "1," * 1_000_000 + "1]"),
    ("a-million-members", "{" + ",".join(f'"k{i}":{i}' for i in range(100_000)) + "}"),
    ("duplicate-keys-deep", '{"a":' + "[" * 255 + "]" * 255 + ',"a":' + "[" * 300),
    ("every-control-character", '"' + "".join(map(chr, range(32))) + '"'),
    ("invalid-utf-8-deep", b"[" * 300 + b"\xff"),
    ("bad-escape-deep", "[" * 256 + '"\\x"'),
    ("depth-exactly-256", "[" * 256 + "]" * 256),
]


@pytest.mark.parametrize(("case", "text"), OUR_HOSTILE_TEXTS, ids=[c for c, _ in OUR_HOSTILE_TEXTS])
def test_our_hostile_texts_get_verdicts(case: str, text: Any) -> None:
    verdicts = []
    for module in (m for m in (NATIVE, REFERENCE) if m is not None):
        guard = module.Guard()
        verdicts.append([fields(guard.check_json("t", text)) for _ in range(3)])
        assert [v["action"] for v in verdicts[-1]] == ["allow", "nudge", "stop"]
    assert all(v == verdicts[0] for v in verdicts)


# Text that is not JSON: call_key_json raises the ValueError json.loads raises; check_json
# does not raise but keys the raw text and says what is wrong.
INVALID_TEXTS: list[tuple[str, Any, type[ValueError], str]] = [
    ("invalid-utf-8", b'{"a":"\xff"}', UnicodeDecodeError, "utf-8"),
    ("overlong-utf-8", b'{"a":"\xc0\x80"}', UnicodeDecodeError, "utf-8"),
    ("truncated-utf-8", b'{"a":"\xe2\x82"}', UnicodeDecodeError, "utf-8"),
    ("invalid-utf-8-bytearray", bytearray(b'["\xed\xa0"]'), UnicodeDecodeError, "utf-8"),
    ("bad-utf-16", "[1]".encode("utf-16-le")[:-1] + b"\x00\xd8", UnicodeDecodeError, "utf-16"),
    ("bom-in-str", '\ufeff{"a":1}', json.JSONDecodeError, "BOM"),
    ("control-character", '{"a":"x\x01"}', json.JSONDecodeError, "control character"),
    ("bad-escape", '{"a":"\\x"}', json.JSONDecodeError, "escape"),
    ("lone-surrogate-escape-broken", '"\\ud800\\u12"', json.JSONDecodeError, "uXXXX"),
    ("int-past-the-digit-limit", "1" * 4301, ValueError, "4300"),
    ("syntax-error-before-deep", "[1 " + "[" * DEEP, json.JSONDecodeError, "delimiter"),
    ("array-object-repeated", "[{" * 100_000, json.JSONDecodeError, "property name"),
    ("syntax-error-at-256", "[" * 256 + "1 [", json.JSONDecodeError, "delimiter"),
    ("nul", "\x00", json.JSONDecodeError, "Expecting value"),
    ("empty", "", json.JSONDecodeError, "Expecting value"),
]


@pytest.mark.parametrize(
    ("case", "text", "error", "message"), INVALID_TEXTS, ids=arg_case_ids(INVALID_TEXTS)
)
def test_invalid_text_raises_value_error(
    module: ModuleType, case: str, text: Any, error: type[ValueError], message: str
) -> None:
    with pytest.raises(error, match=message):
        module.call_key_json("t", text)


@pytest.mark.parametrize(
    ("case", "text", "error", "message"), INVALID_TEXTS, ids=arg_case_ids(INVALID_TEXTS)
)
def test_invalid_text_is_checked_not_raised(
    module: ModuleType, case: str, text: Any, error: type[ValueError], message: str
) -> None:
    guard = module.Guard()
    verdicts = [guard.check_json("t", text) for _ in range(3)]
    assert [v.action for v in verdicts] == ["allow", "nudge", "stop"]
    assert all(v.invalid_arguments for v in verdicts)
    assert message.lower() in verdicts[0].invalid_arguments.lower()


@requires_native
@pytest.mark.parametrize(
    ("case", "text", "error", "message"), INVALID_TEXTS, ids=arg_case_ids(INVALID_TEXTS)
)
def test_invalid_text_backends_agree(
    case: str, text: Any, error: type[ValueError], message: str
) -> None:
    native = outcome(NATIVE.call_key_json, "t", text)
    reference = outcome(REFERENCE.call_key_json, "t", text)
    assert native[0] is reference[0] is error
    assert native[1] == reference[1]
    assert fields(NATIVE.Guard().check_json("t", text)) == fields(
        REFERENCE.Guard().check_json("t", text)
    )
    assert NATIVE.Guard().check_json("t", text).invalid_arguments == native[1]


@pytest.mark.parametrize(
    "text",
    [
        b'{"s":"\xed\xa0\x80"}',  # a surrogate encoded in UTF-8: json.loads passes it through
        '{"s":"\ud800"}',
        '{"s":"\\ud800","\\udfff":1}',
        "[" + ",".join(str(v) for v in ("NaN", "Infinity", "-0", "1e400", "5e-324")) + "]",
    ],
)
def test_odd_but_valid_json(module: ModuleType, text: Any) -> None:
    expected = REFERENCE.call_key("t", json.loads(text))
    assert module.call_key_json("t", text) == expected
    if isinstance(text, bytes):
        assert module.call_key_json("t", bytearray(text)) == expected


# -- lying str and bytes subclasses as JSON text ---------------------------------------------------


class LenLies(str):
    def __len__(self) -> int:
        return 0


class StartswithRaises(str):
    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        raise KeyboardInterrupt


class StartswithLies(str):
    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        return False


class DecodeLies(bytes):
    def decode(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return '{"lied": true}'


class BytesStartswithRaises(bytes):
    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        raise KeyboardInterrupt


TEXT_SUBCLASSES = [
    ("str-len-lies", lambda: LenLies('{"a": 1}')),
    ("str-startswith-raises", lambda: StartswithRaises('{"a": 1}')),
    ("str-startswith-lies", lambda: StartswithLies('\ufeff{"a": 1}')),
    ("bytes-decode-lies", lambda: DecodeLies(b'{"a": 1}')),
    ("bytes-startswith-raises", lambda: BytesStartswithRaises(b'{"a": 1}')),
]


# What json.loads makes of each (it calls the subclass's methods), written out: the key of
# call_key_json or its error, and check_json's key and invalid_arguments (text that does not
# parse is keyed by its raw text, and the check counts). A KeyboardInterrupt from a method
# goes through, and the guard counts nothing.
_LIED = hashlib.sha256(b'{"args":{"lied":true},"tool":"t"}').hexdigest()[:16]
TEXT_SUBCLASS_OUTCOMES: dict[str, tuple[Any, ...]] = {
    "str-len-lies": (
        json.JSONDecodeError,
        "Extra data: line 1 column 9 (char 8)",
        ("50f4fe90a3906928", "Extra data: line 1 column 9 (char 8)"),
    ),
    "str-startswith-raises": (KeyboardInterrupt, "", KeyboardInterrupt),
    "str-startswith-lies": (
        json.JSONDecodeError,
        "Expecting value: line 1 column 1 (char 0)",
        ("1040dc8528bf61e5", "Expecting value: line 1 column 1 (char 0)"),
    ),
    "bytes-decode-lies": ("ok", _LIED, (_LIED, None)),
    "bytes-startswith-raises": (KeyboardInterrupt, "", KeyboardInterrupt),
}


@pytest.mark.parametrize(("case", "make"), TEXT_SUBCLASSES, ids=arg_case_ids(TEXT_SUBCLASSES))
def test_text_subclasses_are_read_as_json_loads_reads_them(
    tw: ModuleType, case: str, make: Callable[[], Any]
) -> None:
    """Contract test of the Python cold path. ``json.loads`` calls methods of a str or
    bytes subclass (``startswith``, ``__len__``, ``decode``); the native core once read the
    characters and called none of them, so a subclass that lied or raised got another key,
    or no KeyboardInterrupt. It now hands such text to the reference's ``call_key_json``,
    so both backends run that code here, checked against the literal outcomes above.
    (fuzz/README.md: finding 1.)"""
    key_outcome, message, checked = TEXT_SUBCLASS_OUTCOMES[case]
    assert outcome(tw.call_key_json, "t", make())[:2] == (key_outcome, message)
    guard = tw.Guard()
    verdict = outcome(guard.check_json, "t", make())
    if checked is KeyboardInterrupt:
        assert verdict[0] is KeyboardInterrupt
        assert guard.steps == 0
    else:
        assert verdict[0] == "ok"
        assert (verdict[1].key, verdict[1].invalid_arguments) == checked
        assert guard.steps == 1


# -- KeyboardInterrupt from inside a user callback -------------------------------------------------


def interrupt() -> Any:
    raise KeyboardInterrupt("from a user callback")


KI_CHECKS: list[tuple[str, Callable[[Any], Any]]] = [
    ("str-split", lambda g: g.check("deploy", {"q": split_str("x", interrupt)})),
    ("str-split-in-a-list", lambda g: g.check("deploy", [1, [2, split_str("x", interrupt)]])),
    ("dict-items", lambda g: g.check("deploy", {"a": ItemsDict({"k": 1}, items=interrupt)})),
    ("key-hash", lambda g: g.check("deploy", armed({Key(1, hash=KeyboardInterrupt()): 1}))),
    (
        "key-eq",
        lambda g: g.check(
            "deploy",
            armed(
                {
                    Key(1, hash=7, eq=KeyboardInterrupt()): 1,
                    Key(2, hash=7, eq=KeyboardInterrupt()): 2,
                }
            ),
        ),
    ),
    (
        "key-lt",
        lambda g: g.check(
            "deploy", armed({Key(1, lt=KeyboardInterrupt()): 1, Key(2, lt=KeyboardInterrupt()): 2})
        ),
    ),
    ("call-id", lambda g: g.check("deploy", {"q": split_str("x", interrupt)}, call_id="c9")),
    ("turn", lambda g: g.check_turn([("deploy", {}), ("deploy", [split_str("x", interrupt)])])),
    ("invalid-json-text-split", lambda g: g.check_json("deploy", split_str("{bad", interrupt))),
]


@pytest.mark.parametrize(("case", "call"), KI_CHECKS, ids=arg_case_ids(KI_CHECKS))
def test_keyboard_interrupt_in_a_callback_propagates(
    module: ModuleType, case: str, call: Callable[[Any], Any]
) -> None:
    primed = Primed(module)
    with pytest.raises(KeyboardInterrupt):
        call(primed.guard)
    primed.assert_unchanged()


def test_keyboard_interrupt_in_model_dump_during_observe(module: ModuleType) -> None:
    primed = Primed(module)
    verdict = primed.guard.check("get_logs", PAGE_3)
    primed.control.check("get_logs", PAGE_3)
    with pytest.raises(KeyboardInterrupt):
        primed.guard.observe(verdict, Model(interrupt))
    with pytest.raises(KeyboardInterrupt):
        primed.guard.observe(verdict, [split_str("x", interrupt)])
    with pytest.raises(KeyboardInterrupt):
        primed.guard.observe(verdict, split_str("x", interrupt))
    # Nothing was observed: a repeat is counted as on a guard that saw no result.
    primed.assert_unchanged()
    again = primed.guard.check("get_logs", PAGE_3), primed.control.check("get_logs", PAGE_3)
    assert fields(again[0]) == fields(again[1])


def test_keyboard_interrupt_in_volatile_keys(module: ModuleType) -> None:
    key = Key(1, hash=KeyboardInterrupt())
    key.armed = True
    for volatile in (_ki_iter, lambda: [key]):
        with pytest.raises(KeyboardInterrupt):
            module.Guard(volatile_keys=volatile())
        with pytest.raises(KeyboardInterrupt):
            module.call_key("t", {}, volatile_keys=volatile())
        with pytest.raises(KeyboardInterrupt):
            module.call_key_json("t", "{}", volatile_keys=volatile())


def _ki_iter() -> Iterator[str]:
    yield "request_id"
    raise KeyboardInterrupt


def test_results_that_cannot_be_keyed_do_not_raise(module: ModuleType) -> None:
    """A tool's result never stops the harness (issue 17): a value that cannot be keyed (a
    repr that raises, too deep, a cycle) is taken as unknown, as if not observed; an SDK
    object whose model_dump raises is compared by its str."""
    primed = Primed(module)
    verdict = primed.guard.check("get_logs", PAGE_3)
    primed.control.check("get_logs", PAGE_3)
    for result in ({"x": BadRepr()}, nested_lists(5_000), cyclic_list(), 10**100_000):
        primed.guard.observe(verdict, result)
    primed.assert_unchanged()
    # Both backends make the same of them.
    for result in ({"x": BadRepr()}, Model(raising(Boom("dump"))), nested_lists(5_000)):
        verdicts = []
        for backend in [m for m in (NATIVE, REFERENCE) if m is not None]:
            guard = backend.Guard(tools={"get_logs": "read"})
            first = guard.check("get_logs", PAGE_3)
            guard.observe(first, result)
            verdicts.append(fields(guard.check("get_logs", PAGE_3)))
        assert verdicts[0] == verdicts[-1]


@requires_native
def test_keyboard_interrupt_in_call_keys_has_no_note() -> None:
    """The reference notes ``in call N of call_keys()`` on ``Exception``s only;
    the native core also adds the note to a KeyboardInterrupt. (fuzz/README.md: finding 3.)"""
    calls = [("t", "{}"), ("t", {"q": split_str("x", interrupt)})]
    native, reference = outcome(NATIVE.call_keys, calls), outcome(REFERENCE.call_keys, calls)
    assert native[0] is reference[0] is KeyboardInterrupt
    assert native[2] == reference[2]


# -- str subclasses as tool names and call ids -----------------------------------------------------


class NameHashRaises(str):
    def __hash__(self) -> int:
        raise KeyboardInterrupt("tool name __hash__")


class NameEqRaises(str):
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        raise KeyboardInterrupt("tool name __eq__")

    def __ne__(self, other: object) -> bool:
        raise KeyboardInterrupt("tool name __ne__")


class NameLies(str):
    """Claims to be ``get_logs`` (a read tool) while spelling something else."""

    def __hash__(self) -> int:
        return hash("get_logs")

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


@requires_native
@pytest.mark.parametrize(
    ("name", "call_id"),
    [
        (NameHashRaises("get_logs"), None),
        (NameEqRaises("get_logs"), None),
        (NameLies("other_tool"), None),
        ("get_logs", NameHashRaises("c1")),
        ("get_logs", NameEqRaises("c1")),
    ],
    ids=[
        "name-hash-raises",
        "name-eq-raises",
        "name-lies",
        "call-id-hash-raises",
        "call-id-eq-raises",
    ],
)
def test_str_subclass_names_and_call_ids_backends_agree(name: str, call_id: str | None) -> None:
    """The reference looks a tool name up in its policies and compares it (and
    call ids) with ``==``, so a str subclass's ``__hash__``/``__eq__`` run, and may raise
    (KeyboardInterrupt, guard unchanged) or lie; the native core compares the characters and
    runs neither. (fuzz/README.md: finding 2.)"""
    outcomes = []
    result = ["a cached read"]
    for module in (NATIVE, REFERENCE):
        guard = module.Guard(nudge_at=3, stop_at=4, tools=TOOLS)
        guard.keep(guard.check("get_logs", PAGE_1, call_id="c1"), result)
        got = outcome(guard.check, name, PAGE_2, call_id=call_id)
        # A read of get_logs again: served from the cache unless the call above was taken
        # for a call to a tool that may change the world.
        after = guard.check("get_logs", PAGE_1)
        outcomes.append((got[0] if got[0] != "ok" else fields(got[1]), fields(after), state(guard)))
    assert outcomes[0] == outcomes[1]


class NameFormatLies(str):
    def __format__(self, spec: str) -> str:
        return "not the tool's name"

    def __str__(self) -> str:
        return "not the tool's name either"


@requires_native
def test_str_subclass_names_in_messages_backends_agree() -> None:
    """In messages: the reference writes the tool name into a message with an
    f-string, which calls a str subclass's ``__format__``; the native core joins the
    characters. (Either may be the fix; they must agree.) (fuzz/README.md: finding 2.)"""
    messages = []
    for module in (NATIVE, REFERENCE):
        guard = module.Guard()
        name = NameFormatLies("get_logs")
        messages.append([guard.check(name, PAGE_1).message for _ in range(3)])
    assert messages[0] == messages[1]


# -- results whose callbacks have side effects -----------------------------------------------------


def popping_result() -> list[Any]:
    """A result list holding an int past the
    digit limit (so its key fails and it is keyed by its repr), and a str whose ``split``
    pops the list's first item each time it runs. (fuzz/README.md: finding 7's input,
    fuzz_call_key, minimised.)"""
    result: list[Any] = [-314, 10**4300, decimal.Decimal("NaN")]
    result += [split_str("", lambda: result.pop(0) and None), -1910717602451869]
    return result


@requires_native
def test_observe_of_a_result_whose_callbacks_mutate_it_backends_agree() -> None:
    """``observe`` keys a result; when that
    fails, the native core hands the result to the reference's ``result_digest``, which keys
    it again from the start: the result's callbacks run twice. Here the second run has
    popped the big int, so the repr the reference cannot write (ValueError) becomes one the
    native core can: it observes a result where the reference raises. (fuzz/README.md:
    finding 7, fuzz_call_key, after 28 minutes.)"""
    outcomes = []
    for module in (NATIVE, REFERENCE):
        guard = module.Guard()
        verdict = guard.check("issue_refund", True)
        outcomes.append((outcome(guard.observe, verdict, popping_result())[0], state(guard)))
    assert outcomes[0] == outcomes[1]


def test_observe_runs_a_results_callbacks_once(module: ModuleType) -> None:
    """Directly: a result that cannot be keyed (it holds a set) is keyed by its
    repr; its str subclass's ``split`` runs once, as in the reference, not once per
    attempt. (fuzz/README.md: finding 7.)"""
    calls: list[int] = []
    guard = module.Guard()
    verdict = guard.check("t", 1)
    guard.observe(verdict, [split_str("x", lambda: calls.append(1)), {1, 2}])
    assert len(calls) == 1


# -- absurd guard settings -------------------------------------------------------------------------


@requires_native
@pytest.mark.parametrize("window", [2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30])
def test_absurd_windows_agree(window: int) -> None:
    """A window that does not fit a C ``ssize_t`` (2**63 up to 2**64 - 1) is an
    OverflowError for the reference (its deque's maxlen) but accepted by the native core
    (a usize). Nothing is allocated up front by either. (fuzz/README.md: finding 6.)"""
    native = outcome(NATIVE.Guard, window=window)
    reference = outcome(REFERENCE.Guard, window=window)
    assert native[0] == reference[0]


# -- the depth limit is ours, not the Python stack's ---------------------------------------------


def agree_at_the_edge(native: Callable[[int], Any], reference: Callable[[int], Any]) -> int:
    """Finds the least ``n`` for which ``reference(n)`` raises RecursionError (a binary
    search; ``reference`` must be monotonic), then asserts that ``native(n)`` gives the same
    outcome (type and message) around it. Every call is made from this one frame, so the
    Python stack is as deep for each. Returns the edge."""
    low, high = 1, 4 * sys.getrecursionlimit()
    while low <= high:
        mid = (low + high) // 2
        if outcome(reference, mid)[0] is RecursionError:
            high = mid - 1
        else:
            low = mid + 1
    edge = low
    assert edge <= 4 * sys.getrecursionlimit(), "the reference never hit the limit"
    for n in range(edge - 3, edge + 3):
        assert outcome(native, n)[:2] == outcome(reference, n)[:2], f"{n} levels (edge {edge})"
    return edge


DEEP_TEXTS: dict[str, Callable[[int], str]] = {
    "arrays": lambda n: "[" * n + "]" * n,
    "arrays-then-an-error": lambda n: "[" * n + "F",
    "under-a-volatile-key": lambda n: '{"request_id":' + "[" * n + "]" * n + ',"a":1}',
    "objects": lambda n: '{"a":' * n + "1" + "}" * n,
    "bytes-then-an-error": lambda n: "[" * n + "F",  # as bytes, below
}


def at_stack_depth(frames: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` called ``frames`` Python frames deeper than here."""
    return fn() if frames == 0 else at_stack_depth(frames - 1, fn)


def scenario_deep_json_edge(case: str) -> None:
    """Run in a fresh interpreter, at a shallow stack as in a harness's loop, and deeper."""
    make = DEEP_TEXTS[case]
    encode = case.startswith("bytes")

    def text(n: int) -> Any:
        return make(n).encode() if encode else make(n)

    # The first level too deep: the 257th container, one level less under the object.
    expected = 256 if case == "under-a-volatile-key" else 257
    for frames in (0, 5, 20, 500):
        edge = at_stack_depth(
            frames,
            lambda: agree_at_the_edge(
                lambda n: NATIVE.call_key_json("t", text(n)),
                lambda n: REFERENCE.call_key_json("t", text(n)),
            ),
        )
        assert edge == expected, f"edge {edge} at {frames} frames deep"


@requires_native
@pytest.mark.parametrize("case", sorted(DEEP_TEXTS))
def test_deep_json_agrees_at_the_depth_limit(case: str) -> None:
    """Removed by design (issue 17). Text nested past the
    native parser's 256 levels was handed to json.loads, whose own limit is Python's
    recursion limit, reached one level earlier from Rust than from the reference: at that
    edge the two disagreed. Now opening a container 256 deep raises RecursionError in both,
    under a volatile key too, so json.loads never goes near Python's limit: the edge is
    ours, the same at every stack depth. In a fresh interpreter, whose stack is as shallow
    as a harness's loop. (fuzz/README.md: finding 5, fuzz_call_key_json.)"""
    isolated("scenario_deep_json_edge", case)


def scenario_deep_tuples_edge(lists: str) -> None:
    depth = int(lists)
    for frames in (0, 5, 20, 500):
        edge = at_stack_depth(
            frames,
            lambda: agree_at_the_edge(
                lambda n: NATIVE.call_key("t", nested_lists(depth, nested_tuples(n))),
                lambda n: REFERENCE.call_key("t", nested_lists(depth, nested_tuples(n))),
            ),
        )
        # Tuples count as containers: the 257th level is too deep, wherever the stack is.
        assert edge == 257 - depth, f"edge {edge} at {frames} frames deep"


@requires_native
@pytest.mark.parametrize("lists", ["0", "1", "100", "250"])
def test_deep_tuples_agree_at_the_depth_limit(lists: str) -> None:
    """Removed by design (issue 17). Tuples are not normalised, so a deep tuple was
    written by json.dumps, whose limit is Python's recursion limit, one level apart between
    the backends. Now tuples count towards the 256 levels (checked without recursion before
    json.dumps runs), so the edge is the same in both, and where the lists leave it.
    (fuzz/README.md: finding 4.)"""
    isolated("scenario_deep_tuples_edge", lists)


# -- nst/JSONTestSuite -----------------------------------------------------------------------------


# A JSON parser test suite no one here wrote (318 parsing cases, 22 transform cases). It is
# not vendored (data fetched from elsewhere is not committed here): point
# TRIPWIRE_JSONTESTSUITE at a checkout, or put one beside the repository as
# ../shared/JSONTestSuite. Our own hostile texts above always run.
def jsontestsuite() -> Path | None:
    given = os.environ.get("TRIPWIRE_JSONTESTSUITE")
    beside = Path(__file__).resolve().parent.parent.parent / "shared" / "JSONTestSuite"
    for root in ([Path(given)] if given else []) + [beside]:
        if (root / "test_parsing").is_dir():
            return root
    return None


@pytest.mark.skipif(
    jsontestsuite() is None,
    reason="JSONTestSuite not found: set TRIPWIRE_JSONTESTSUITE to a checkout of "
    "nst/JSONTestSuite, or put it at ../shared/JSONTestSuite beside the repository",
)
def test_check_json_gives_every_jsontestsuite_file_a_verdict() -> None:
    """Issue 17: every file, valid, invalid or implementation-defined, as bytes and (where
    it decodes) as str: a verdict from each backend, the same one, keyed by the value where
    the text is JSON (every y_ file is) and by the raw text where it is not."""
    root = jsontestsuite()
    assert root is not None
    paths = sorted((root / "test_parsing").iterdir()) + sorted((root / "test_transform").iterdir())
    assert len(paths) >= 318
    backends = [m for m in (NATIVE, REFERENCE) if m is not None]
    failures: list[str] = []
    for path in paths:
        data = path.read_bytes()
        texts: list[Any] = [data]
        with contextlib.suppress(UnicodeDecodeError):
            texts.append(data.decode("utf-8"))
        for text in texts:
            verdicts = []
            for module in backends:
                try:
                    verdicts.append(module.Guard().check_json("t", text))
                except BaseException as exc:  # reported below, with the file's name
                    failures.append(f"{path.name} ({module.__name__}): {exc!r:.200}")
            if len(verdicts) != len(backends):
                continue
            if len({(v.key, v.invalid_arguments) for v in verdicts}) != 1:
                failures.append(f"{path.name}: backends disagree")
            verdict = verdicts[-1]
            if path.name.startswith("y_") and verdict.invalid_arguments is not None:
                failures.append(f"{path.name}: valid JSON called invalid")
            if verdict.invalid_arguments is None:
                assert verdict.key == REFERENCE.call_key("t", json.loads(text)), path.name
            else:
                assert verdict.key == raw_text_key_written_out("t", text), path.name
    assert not failures, "\n".join(failures)


# -- big input -------------------------------------------------------------------------------------


@requires_native
def test_a_100_mb_string() -> None:
    """One check of a 100 MB argument, and its JSON text: right key, no copy kept. Native
    only: the reference takes ~5 s and 1.6 GB on it (measured); its key is computed here
    from the contract directly."""
    import hashlib

    unit, chunk, chunks = "word\t\n ", 1_000_000, 14  # 14 M words, 98 MB
    # The canonical bytes, hashed a chunk at a time: the words, whitespace collapsed.
    digest = hashlib.sha256(b'{"args":{"log":"')
    for _ in range(chunks - 1):
        digest.update(b"word " * chunk)
    digest.update((b"word " * chunk)[:-1] + b'"},"tool":"t"}')
    expected = digest.hexdigest()[:16]

    guard = NATIVE.Guard()
    words = unit * (chunk * chunks)
    assert len(words) > 95_000_000
    assert guard.check("t", {"log": words}).key == expected
    del words
    text = '{"log": "' + "word\\t\\n " * (chunk * chunks) + '"}'
    second, third = guard.check_json("t", text), guard.check_json("t", text)
    assert (second.key, second.action, third.action) == (expected, "nudge", "stop")


# -- leaks on the error paths ----------------------------------------------------------------------


class Tracked:
    """An unserialisable value: every check of it fails with TypeError."""


@requires_native
def test_failed_checks_release_their_arguments() -> None:
    """Arguments of failed native checks (each error path) are released: no reference is
    leaked by an exception."""
    guard = NATIVE.Guard(tools=TOOLS)
    probes: list[tuple[str, Callable[[Any], Any]]] = [
        ("unserialisable", lambda obj: guard.check("t", {"k": [obj]})),
        ("too deep", lambda obj: guard.check("t", nested_lists(300, obj))),
        ("split raises", lambda obj: guard.check("t", {"k": obj, "s": split_str("x", interrupt)})),
        ("bad key", lambda obj: guard.check("t", {1: obj, "a": 2})),
        ("bad text", lambda obj: guard.check_json("t", memoryview(b"[]"))),
        ("turn", lambda obj: guard.check_turn([("t", {"ok": 1}), ("t", {"k": obj})])),
        ("call_keys", lambda obj: NATIVE.call_keys([("t", "[1]"), ("t", {"k": obj})])),
    ]
    for label, probe in probes:
        obj = Tracked()
        ref = weakref.ref(obj)
        gc.collect()
        before = sys.getrefcount(obj)
        for _ in range(200):
            with pytest.raises((TypeError, RecursionError, ValueError, KeyboardInterrupt)):
                probe(obj)
        gc.collect()
        assert sys.getrefcount(obj) == before, label
        del obj
        gc.collect()
        assert ref() is None, label
    assert guard.steps == 0


# -- re-entrant callbacks, with threads ------------------------------------------------------------

TESTS = str(Path(__file__).resolve().parent)


def isolated(scenario: str, name: str, timeout: float = 60.0) -> None:
    """Runs ``scenario(name)`` from this module in a fresh interpreter, so that a deadlock
    (which would hold the GIL and freeze pytest) is reported as a failure."""
    code = textwrap.dedent(
        f"""
        import faulthandler, sys
        faulthandler.dump_traceback_later({timeout - 5.0}, exit=True)
        sys.path.insert(0, {TESTS!r})
        import test_hostile
        test_hostile.{scenario}({name!r})
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert child.returncode == 0, f"{scenario}({name!r}) failed:\n{child.stderr[-6000:]}"


def _backend(name: str) -> ModuleType:
    return NATIVE if name == "native" else REFERENCE  # type: ignore[return-value]


def run_threads(count: int, work: Callable[[int], Any], timeout: float = 30.0) -> list[Any]:
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "threads still running (deadlock?)"
    if errors:
        raise errors[0]
    return results


def scenario_callbacks_reenter_with_failures(name: str) -> None:
    """Threads share a guard. Their arguments hold str subclasses whose ``split`` (run while
    the key is computed) checks calls on the same guard and keys calls with
    ``call_key``/``call_key_json``; every third call's ``split`` raises KeyboardInterrupt
    instead. No deadlock, and every count adds up: each successful check, inner or outer,
    got its own step, and no failed one was counted."""
    sys.setswitchinterval(1e-5)
    module = _backend(name)
    guard = module.Guard(window=12, nudge_at=12, stop_at=13)
    rounds = 600 if name == "native" else 200

    def work(index: int) -> tuple[list[int], int]:
        steps: list[int] = []
        failed = 0
        for i in range(rounds):

            def inner(i: int = i) -> None:
                steps.append(guard.check(f"inner-{index}", {"i": i}).step)
                assert module.call_key("k", {"i": i}) == module.call_key_json("k", f'{{"i":{i}}}')

            action = interrupt if i % 3 == 2 else inner
            try:
                steps.append(
                    guard.check(f"outer-{index}", {"i": i, "s": split_str("x", action)}).step
                )
            except KeyboardInterrupt:
                failed += 1
        return steps, failed

    results = run_threads(6, work)
    steps = sorted(s for thread_steps, _ in results for s in thread_steps)
    assert steps == list(range(1, guard.steps + 1))
    assert sum(failed for _, failed in results) == 6 * (rounds // 3)
    assert guard.steps == 6 * (rounds - rounds // 3) * 2


def scenario_many_guards_with_failures(name: str) -> None:
    """Many guards across threads, each fed a run with hostile calls mixed in: each guard's
    verdicts are those of a guard that never saw the hostile calls."""
    sys.setswitchinterval(1e-5)
    module = _backend(name)
    run = [("list", {}), ("get_logs", {"p": 1})] + [("get_logs", {"i": i % 3}) for i in range(30)]
    hostile: list[Callable[[], Any]] = [
        lambda: {"x": split_str("y", raising(Boom("split")))},
        cyclic_list,
        lambda: {1: 1, "a": 2},
        lambda: [memoryview(b"")],
    ]

    def play(guard: Any, with_hostile: bool) -> list[Any]:
        out = []
        for i, (tool, args) in enumerate(run):
            if with_hostile:
                try:
                    guard.check(tool, hostile[i % len(hostile)]())
                except (Boom, RecursionError, TypeError):
                    pass
                else:
                    raise AssertionError("hostile call accepted")
            v = guard.check(tool, args)
            out.append((v.action, v.reason, v.repeats, v.step, v.key))
        return out

    expected = play(module.Guard(window=6, max_steps=25), False)

    def work(index: int) -> int:
        for _ in range(20):
            assert play(module.Guard(window=6, max_steps=25), True) == expected
        return index

    assert run_threads(6, work) == list(range(6))


@pytest.mark.parametrize("name", BACKEND_NAMES)
@pytest.mark.parametrize(
    "scenario", ["scenario_callbacks_reenter_with_failures", "scenario_many_guards_with_failures"]
)
def test_threads_with_hostile_callbacks(scenario: str, name: str) -> None:
    isolated(scenario, name)


# -- results that fight back (issue 26) ---------------------------------------------------------


class LenRaisesList(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise Boom("len")


class LenRaisesDict(dict):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise Boom("len")


class EqRaises:
    """A value whose comparisons raise (and so, having ``__eq__``, is unhashable)."""

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")


class HashableEqRaises(EqRaises):
    def __hash__(self) -> int:
        return hash("text")


class LooksLikeText:
    """Not a str, but equal to ``"text"`` and hashed as it: a content block's type that a
    set lookup would take for a text block."""

    def __eq__(self, other: object) -> bool:
        return other == "text"

    def __hash__(self) -> int:
        return hash("text")


class TextLies(str):
    """A str of other characters that says it equals anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("text")


class StrRaises(Exception):
    def __str__(self) -> str:
        raise Boom("str")


# (id, a fresh result, the ``error=`` given with it)
FIGHTING_RESULTS: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    # JSON Schema and GraphQL fields: valid JSON, and their "type" is no block's type.
    ("type-list", lambda: [{"type": ["string", "null"], "text": "x"}], lambda: None),
    ("type-dict", lambda: [{"type": {"kind": "OBJECT"}, "text": "x"}], lambda: None),
    ("type-empty-list", lambda: [{"type": []}], lambda: None),
    ("envelope-type-list", lambda: {"type": [], "content": "x"}, lambda: None),
    ("envelope-role-dict", lambda: {"role": {}, "content": "x"}, lambda: None),
    ("type-eq-raises", lambda: [{"type": EqRaises(), "text": "x"}], lambda: None),
    ("type-hashable-eq-raises", lambda: [{"type": HashableEqRaises(), "text": "x"}], lambda: None),
    ("envelope-type-eq-raises", lambda: {"type": EqRaises(), "content": "x"}, lambda: None),
    ("type-looks-like-text", lambda: [{"type": LooksLikeText(), "text": "x"}], lambda: None),
    ("type-str-lies", lambda: [{"type": TextLies("image"), "text": "x"}], lambda: None),
    ("type-str-subclass-text", lambda: [{"type": TextLies("text"), "text": "x"}], lambda: None),
    ("list-len-raises", lambda: LenRaisesList([1, 2]), lambda: None),
    ("empty-list-len-raises", lambda: LenRaisesList(), lambda: None),
    ("dict-len-raises", lambda: LenRaisesDict({"a": 1}), lambda: None),
    ("list-of-len-raises", lambda: [LenRaisesList()], lambda: None),
    ("error-str-raises", lambda: "x", lambda: StrRaises()),
    ("error-str-raises-with-result", lambda: None, lambda: StrRaises("boom")),
    ("error-repr-raises", lambda: "x", lambda: BadRepr()),
]
FIGHTING_IDS = [case for case, _, _ in FIGHTING_RESULTS]


@pytest.mark.parametrize(("case", "result", "error"), FIGHTING_RESULTS, ids=FIGHTING_IDS)
def test_observe_never_raises_a_results_own_exception(
    module: ModuleType, case: str, result: Callable[[], Any], error: Callable[[], Any]
) -> None:
    """The README: a result is never raised. A list or dict subclass whose ``__len__``
    raises, a block ``type`` whose ``__eq__`` raises or that is a list (JSON Schema), an
    exception whose ``__str__`` raises: observe takes each as what it can read of it."""
    guard = module.Guard(tools={"t": "read"})
    verdict = guard.check("t", 1)
    guard.observe(verdict, result(), error=error())
    # The guard goes on: a repeat is judged (and nothing raised on reading the state).
    assert guard.check("t", 1).action in ("allow", "nudge")
    guard.snapshot()


@requires_native
@pytest.mark.parametrize(("case", "result", "error"), FIGHTING_RESULTS, ids=FIGHTING_IDS)
def test_results_are_read_alike_by_both_backends(
    case: str, result: Callable[[], Any], error: Callable[[], Any]
) -> None:
    """One result reader (issue 26): the native fast path and the reference read every
    result alike, so the two guards' states (their snapshots, byte for byte) are equal after
    observing it, then after each result again and a repeat."""
    assert NATIVE is not None
    snapshots = []
    for backend in (NATIVE, REFERENCE):
        guard = backend.Guard(tools={"t": "read"})
        for _ in range(3):
            verdict = guard.check("t", 1)
            guard.observe(verdict, result(), error=error())
        snapshots.append(guard.snapshot())
    assert snapshots[0] == snapshots[1]


# Results whose reading runs out of memory: on the fast path (a list's element keyed), on the
# full rules (an object in a dict), and in an SDK object's model_dump.
OUT_OF_MEMORY_RESULTS: list[tuple[str, Callable[[], Any]]] = [
    ("plain-list", lambda: [ItemsDict({"a": 1}, items=raising(MemoryError()))]),
    ("dict", lambda: {"x": ItemsDict({"a": 1}, items=raising(MemoryError()))}),
    ("model-dump", lambda: Model(raising(MemoryError()))),
]


@pytest.mark.parametrize(
    "result", [make for _, make in OUT_OF_MEMORY_RESULTS], ids=[c for c, _ in OUT_OF_MEMORY_RESULTS]
)
def test_a_memory_error_reading_a_result_is_raised_not_unknown(
    module: ModuleType, result: Callable[[], Any]
) -> None:
    """A result is never raised, but running out of memory is not the result's doing: a
    ``MemoryError`` while it is read goes through, in both backends, rather than being read
    as "result unknown" (which would hide it). The same results raising their own
    exception are unknown (``test_observe_never_raises_a_results_own_exception``)."""
    guard = module.Guard(tools={"t": "read"})
    verdict = guard.check("t", 1)
    with pytest.raises(MemoryError):
        guard.observe(verdict, result())
    own = [ItemsDict({"a": 1}, items=raising(Boom("items")))]
    guard.observe(guard.check("t", 2), own)  # its own exception: unknown, not raised


@pytest.mark.parametrize(
    "kind",
    [LooksLikeText(), TextLies("image"), ["text"], {"text": 1}],
    ids=["looks-like-text", "str-lies", "list", "dict"],
)
def test_a_type_that_is_no_str_names_no_text_block(module: ModuleType, kind: Any) -> None:
    """A content block is a text block when its ``type`` is the str "text" (or
    "input_text", "output_text") by its characters: an object that says it equals "text"
    is no text block, and the list is compared as it is, not as the text it holds."""

    def observed(result: Any) -> bytes:
        guard = module.Guard(tools={"t": "read"})
        guard.observe(guard.check("t", 1), result)
        return guard.snapshot()  # type: ignore[no-any-return]

    as_text = observed("hello")
    assert observed([{"type": "text", "text": "hello"}]) == as_text
    assert observed([{"type": TextLies("text"), "text": "hello"}]) == as_text
    assert observed([{"type": kind, "text": "hello"}]) != as_text


# -- unbounded growth (issue 26) ---------------------------------------------------------------

_NAMES_RSS = """
import gc, sys
sys.path.insert(0, {tests!r})
from _guards import backend

def rss():
    gc.collect()
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmRSS:"))

guard = backend({name!r}).Guard()
for i in range(10_000):
    guard.check(f"warm_{{i}}", {{}})
warm = rss()
for i in range({names}):
    guard.check(f"made_up_tool_{{i}}", {{}})
print(rss() - warm)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_distinct_tool_names_do_not_grow_the_guard(name: str) -> None:
    """Issue 26, finding 6: a model that makes up a new tool name each call. The native
    guard kept every name until ``reset()`` (200 bytes a name: a million took RSS from 21 to
    216 MB); both keep a name only while the window holds a call to it. 200,000 names, in a
    fresh interpreter: RSS grows by under 4 MB (it grew by 40 MB natively before)."""
    code = _NAMES_RSS.format(tests=str(Path(__file__).parent), name=name, names=200_000)
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    grown = int(child.stdout.strip())
    assert grown < 4 * 2**20, f"{grown / 2**20:.1f} MB"


@requires_native
def test_messages_name_the_right_tools_after_many_names() -> None:
    """The native guard forgets names no entry of the window holds, and numbers the rest
    afresh: messages that name tools (runs of empty results, cycles) still name the right
    ones, as the reference's do."""
    runs = []
    for module in (NATIVE, REFERENCE):
        guard = module.Guard()
        seen = []
        for i in range(700):
            verdict = guard.check(f"made_up_{i}", {"i": i})
            guard.observe(verdict, [] if i % 2 else "ok")
            seen.append(fields(verdict))
        for i in range(12):
            # One question reworded (issue 25: free text; a number would be another one).
            query = {"q": f"refund policy, wording {i}"}
            verdict = guard.check(("search_docs", "search_web")[i % 2], query)
            guard.observe(verdict, [])
            seen.append(fields(verdict))
        for i in range(8):
            verdict = guard.check(("edit_file", "run_tests")[i % 2], {"v": i % 2})
            guard.observe(verdict, "same")
            seen.append(fields(verdict))
        runs.append((seen, guard.snapshot()))
    assert runs[0] == runs[1]
    messages = " ".join(f["message"] or "" for f in runs[0][0])
    assert "search_docs" in messages and "search_web" in messages
