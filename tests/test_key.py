"""The key contract (docs/design/key.md) on both backends: known answers, every corner of the
table with its exact bytes, and differential properties against the reference."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any

import pytest
import tripwire
import tripwire._keys
import tripwire.reference
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tripwire.testing import (
    WHITESPACE,
    dict_keys,
    equivalent_variants,
    exotic_values,
    json_values,
    texts,
)

SEED_BYTES = b'{"args":{"level":"error","service":"checkout","since":"15m"},"tool":"get_logs"}'
# hashlib.sha256(SEED_BYTES).hexdigest()[:16], observed once and pinned so a change shows.
SEED_KEY = "20d17ea0860485d4"


def dumped(args: Any, tool: str = "t") -> bytes:
    """The canonical bytes for ``args`` given as the JSON text of the normalised value."""
    return b'{"args":' + args.encode() + b',"tool":' + json.dumps(tool).encode() + b"}"


# --- known answers -------------------------------------------------------------------------

SEED_SPELLINGS = [
    # The seed trace's three spellings, as the model sent them.
    '{"service":"checkout","since":"15m","level":"error"}',
    '{"service": "checkout", "level": "error", "since": "15m"}',
    '{"since":"15m","service":"checkout","level":"error"}',
    # ... and what a model or a wrapper adds on a retry.
    '{"service":"checkout ","since":"15m","level":"error"}',
    '{"service":"checkout","since":"15m","level":"error","limit":null}',
    '{"service":"checkout","since":"15m","level":"error","request_id":"req-8f2a"}',
    '{"request_id":"req-0001","level":"error","service":" checkout\\t","since":"15m",'
    '"page":null,"nonce":17}',
]


@pytest.mark.parametrize("text", SEED_SPELLINGS)
def test_seed_spellings_share_one_key(impl: Any, text: str) -> None:
    args = json.loads(text)
    assert impl.canonical_json("get_logs", args) == SEED_BYTES
    assert impl.call_key("get_logs", args) == SEED_KEY


def test_seed_key_is_the_sha256_prefix(impl: Any) -> None:
    args = {"service": "checkout", "since": "15m", "level": "error"}
    assert impl.canonical_json("get_logs", args) == SEED_BYTES
    assert impl.call_key("get_logs", args) == hashlib.sha256(SEED_BYTES).hexdigest()[:16]
    assert impl.call_key("get_logs", args) == SEED_KEY


def test_pagination_cursors_get_two_keys(impl: Any) -> None:
    p3 = impl.call_key("list_orders", {"cursor": "p3"})
    p4 = impl.call_key("list_orders", {"cursor": "p4"})
    assert p3 != p4
    assert impl.call_key("list_orders", {"cursor": " p3 "}) == p3


def test_tool_name_is_part_of_the_key(impl: Any) -> None:
    args = {"service": "checkout"}
    assert impl.call_key("get_logs", args) != impl.call_key("get_metrics", args)


# --- whitespace ----------------------------------------------------------------------------


def test_whitespace_is_exactly_what_str_split_splits_on() -> None:
    assert len(WHITESPACE) == 29
    assert [c for c in map(chr, range(0x110000)) if c.isspace()] == list(WHITESPACE)
    assert all(len(f"a{c}b".split()) == 2 for c in WHITESPACE)


@pytest.mark.parametrize("space", WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_every_python_whitespace_collapses(impl: Any, space: str) -> None:
    args = {"q": f"{space}a{space}{space}b {space}", "r": [space * 3]}
    assert impl.canonical_json("t", args) == dumped('{"q":"a b","r":[""]}')


def test_information_separators_collapse(impl: Any) -> None:
    # U+001C..U+001F are whitespace to Python and not to Rust's char::is_whitespace.
    args = {"q": "\x1ca\x1db\x1e\x1fc\x1f"}
    assert impl.canonical_json("t", args) == dumped('{"q":"a b c"}')
    assert impl.canonical_json("t", ["\x1c\x1d\x1e\x1f"]) == dumped('[""]')


@pytest.mark.parametrize(
    ("char", "escaped"),
    [("\u200b", "\\u200b"), ("\u180e", "\\u180e"), ("\ufeff", "\\ufeff"), ("\x00", "\\u0000")],
)
def test_lookalikes_are_not_whitespace(impl: Any, char: str, escaped: str) -> None:
    args = {"q": f"a{char}b {char}"}
    assert impl.canonical_json("t", args) == dumped(f'{{"q":"a{escaped}b {escaped}"}}')


def test_keys_are_not_collapsed(impl: Any) -> None:
    args = {" a  b ": 1, "a b": 2, "\u3000c": 3}
    assert impl.canonical_json("t", args) == dumped('{" a  b ":1,"a b":2,"\\u3000c":3}')


def test_tool_name_is_not_collapsed(impl: Any) -> None:
    assert impl.canonical_json(" get  logs\u3000\t", {}) == (
        b'{"args":{},"tool":" get  logs\\u3000\\t"}'
    )
    assert impl.call_key(" get_logs", {}) != impl.call_key("get_logs", {})


# --- escaping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("\x7f", "\\u007f"),
        ("a\bb", "a\\bb"),
        ("\x00\x01\x1b", "\\u0000\\u0001\\u001b"),
        ('say "hi" \\', 'say \\"hi\\" \\\\'),
        ("/<>&'", "/<>&'"),
        ("\u00e9\u00ff\u0abc\uffff", "\\u00e9\\u00ff\\u0abc\\uffff"),
        ("\U0001f600", "\\ud83d\\ude00"),
        ("\U0010ffff", "\\udbff\\udfff"),
        ("\ud800", "\\ud800"),
        ("x\udfffy", "x\\udfffy"),
        # Two lone surrogates are written exactly as the astral character they spell.
        ("\ud83d\ude00", "\\ud83d\\ude00"),
    ],
)
def test_values_are_escaped_like_ensure_ascii(impl: Any, text: str, escaped: str) -> None:
    assert impl.canonical_json("t", [text]) == dumped(f'["{escaped}"]')
    assert impl.canonical_json("t", {text: 1}) == dumped(f'{{"{escaped}":1}}')
    assert impl.canonical_json(text, 0) == b'{"args":0,"tool":"' + escaped.encode() + b'"}'


def test_control_whitespace_is_escaped_in_keys_and_tool_names(impl: Any) -> None:
    assert impl.canonical_json("\b\f\n\r\t", {"\b\f\n\r\t\x0b\x1c": 1}) == (
        b'{"args":{"\\b\\f\\n\\r\\t\\u000b\\u001c":1},"tool":"\\b\\f\\n\\r\\t"}'
    )


# --- key order -----------------------------------------------------------------------------


def test_keys_sort_in_code_point_order(impl: Any) -> None:
    # UTF-16 order (RFC 8785) would put U+1F600 (a surrogate pair, 0xD83D...) before U+FF61.
    args = {"\U0001f600": 1, "\uff61": 2, "é": 3, "a": 4, "B": 5, "": 6, "\ud800": 7}
    assert impl.canonical_json("t", args) == dumped(
        '{"":6,"B":5,"a":4,"\\u00e9":3,"\\ud800":7,"\\uff61":2,"\\ud83d\\ude00":1}'
    )


def test_dict_insertion_order_does_not_matter(impl: Any) -> None:
    forward = {f"k{i}": i for i in range(40)}
    backward = dict(reversed(forward.items()))
    assert impl.canonical_json("t", forward) == impl.canonical_json("t", backward)


def test_repeated_layouts_under_other_keys_orders_and_volatile_sets(impl: Any) -> None:
    # The native core remembers key layouts (by key object, then by content): the same key
    # objects in another order, equal keys in new objects, another volatile set, a layout
    # nested in itself and more layouts than it remembers must each be written afresh.
    keys = ["since", "request_id", "東京", "é", "a"]
    fresh = ["".join(list(k)) for k in keys]
    assert all(a == b and a is not b for a, b in zip(keys[:3], fresh[:3], strict=True))
    layouts = [keys, list(reversed(keys)), fresh, keys[:3], keys[1:]] + [
        [f"k{i}", f"k{i + 1}"] for i in range(40)
    ]
    for _ in range(2):
        for layout in layouts:
            args = {k: {k: [n, None]} for n, k in enumerate(layout)}
            args["nested"] = {k: dict(args) for k in layout}
            for volatile in (None, frozenset(), frozenset({"a", "東京"})):
                expected = reference_json(args, volatile)
                assert impl.canonical_json("t", args, volatile_keys=volatile) == expected


def reference_json(args: Any, volatile: frozenset[str] | None) -> bytes:
    return tripwire.reference.canonical_json("t", args, volatile_keys=volatile)


# --- numbers -------------------------------------------------------------------------------

FLOAT_1E308 = (
    "1000000000000000010979063629440455417404923096773118463368106829031575854049114915371633289784946888990"
    "6124966972117251561159028374314008832830700919814604603127166450293302718569748969958855904333838446616"
    "5001178426897626212945177628091195786707458122783970171784415105291802893207873272974885715430223118336"
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-05, "1e-05"),
        (2.5e-05, "2.5e-05"),
        (9.999999999999999e-05, "9.999999999999999e-05"),
        (0.0001, "0.0001"),
        (0.00015000000000000001, "0.00015000000000000001"),
        (5e-324, "5e-324"),
        (-5e-324, "-5e-324"),
        (2.2250738585072014e-308, "2.2250738585072014e-308"),
        (0.5, "0.5"),
        (2.5, "2.5"),
        (-1.5, "-1.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1 / 3, "0.3333333333333333"),
        (1e15 + 0.5, "1000000000000000.5"),
        (4503599627370495.5, "4503599627370495.5"),
        (3.0, "3"),
        (1e16, "10000000000000000"),
        (2.0**53 + 2, "9007199254740994"),
        (1e22, "10000000000000000000000"),
        (1e23, "99999999999999991611392"),
        (-1e23, "-99999999999999991611392"),
        (2.0**64, "18446744073709551616"),
        (1e308, FLOAT_1E308),
        (0.0, "0"),
        (-0.0, "0"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
    ids=repr,
)
def test_floats(impl: Any, value: float, text: str) -> None:
    assert impl.canonical_json("t", [value]) == dumped(f"[{text}]")
    assert impl.canonical_json("t", {"x": value}) == dumped(f'{{"x":{text}}}')


@pytest.mark.parametrize(
    "value",
    [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, -(2**100), 3**200, 10**4299],
    ids=lambda n: f"{len(str(abs(n)))}-digits" if abs(n) > 2**64 else str(n),
)
def test_ints_are_exact(impl: Any, value: int) -> None:
    assert impl.canonical_json("t", [value, {"n": value}]) == dumped(f'[{value},{{"n":{value}}}]')


def test_int_past_the_digit_limit_raises_value_error(impl: Any) -> None:
    with pytest.raises(ValueError, match="4300"):
        impl.canonical_json("t", {"n": 10**4300})
    with pytest.raises(ValueError, match="4300"):
        impl.call_key("t", [1, -(10**5000)])


def test_bool_is_not_int(impl: Any) -> None:
    assert impl.canonical_json("t", [True, False, 1, 0]) == dumped("[true,false,1,0]")
    assert impl.call_key("t", {"x": True}) != impl.call_key("t", {"x": 1})
    assert impl.call_key("t", {"x": 1.0}) == impl.call_key("t", {"x": 1})


def test_null_entries_are_dropped_but_null_items_are_not(impl: Any) -> None:
    assert impl.canonical_json("t", {"a": None, "b": [None, {"c": None}]}) == dumped(
        '{"b":[null,{}]}'
    )
    assert impl.canonical_json("t", None) == dumped("null")


# --- other types ---------------------------------------------------------------------------


class Colour(IntEnum):
    RED = 1
    HUGE = 2**70


class Mode(StrEnum):
    SPACED = "  two \u3000 words "


class Label(str):
    pass


class Ratio(float):
    pass


def test_tuples_are_not_normalised_inside(impl: Any) -> None:
    # normalise leaves tuples as they are, so json.dumps writes their insides unchanged:
    # whitespace kept, None values and volatile keys kept, floats as floats (keys sorted).
    args = {"t": ("a  b", {"z": None, "request_id": 1, "a": 1.0}, [2.0])}
    assert impl.canonical_json("t", args) == dumped(
        '{"t":["a  b",{"a":1.0,"request_id":1,"z":null},[2.0]]}'
    )
    assert impl.canonical_json("t", ()) == dumped("[]")


def test_long_calls_with_corners_anywhere(impl: Any) -> None:
    # The native core hashes a long call's canonical text block by block while it writes it,
    # and stops where a corner (written by Python and spliced in) first appears; long strings
    # of code are collapsed 64 bytes at a time where the processor can. Corners before,
    # between and after many blocks; strings of every length across those chunks.
    code = 'if x:\n    say("hi \\"there\\"")\t\t# ok  \n'
    corners: list[Any] = [2**70, ("a  b", 1.0), Label(" x  y "), {1: "non-str key"}, Ratio(2.5)]
    for before in (0, 1, 5, 40):
        for corner in corners:
            args = {f"k{i:02}": (code * 4)[: i * 11] for i in range(before)}
            args["m"] = corner
            args["z"] = [code * n for n in range(6)]
            expected = tripwire.reference.call_key("t", args)
            assert impl.call_key("t", args) == expected, (before, corner)
            assert impl.canonical_json("t", args) == tripwire.reference.canonical_json("t", args)


def test_subclasses(impl: Any) -> None:
    args = {
        "colour": Colour.RED,
        "huge": Colour.HUGE,
        "mode": Mode.SPACED,
        "label": Label(" x  y "),
        "ratio": [Ratio(2.0), Ratio(2.5), Ratio(-0.0)],
        "od": OrderedDict([("b", 1), ("a", None), ("nonce", 2), ("c", " p  q ")]),
    }
    assert impl.canonical_json("t", args) == dumped(
        '{"colour":1,"huge":1180591620717411303424,"label":"x y","mode":"two words",'
        '"od":{"b":1,"c":"p q"},"ratio":[2,2.5,0]}'
    )


def test_str_subclass_keys_and_names(impl: Any) -> None:
    assert impl.canonical_json(Label("get  logs"), {Label(" b "): 1, "a": 2}) == (
        b'{"args":{" b ":1,"a":2},"tool":"get  logs"}'
    )


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({2: "a", 1: "b", 3: None}, '{"1":"b","2":"a"}'),
        ({2.5: 1, 1.0: 2}, '{"1.0":2,"2.5":1}'),
        ({1: 1, 0.5: 2}, '{"0.5":2,"1":1}'),
        ({True: 1, False: 2}, '{"false":2,"true":1}'),
        ({None: 1}, '{"null":1}'),
        ({Colour.RED: "x"}, '{"1":"x"}'),
        ({"o": {1: {"request_id": 5, "b": None, "c": " x  y "}}}, '{"o":{"1":{"c":"x y"}}}'),
    ],
    ids=repr,
)
def test_non_str_keys(impl: Any, args: Any, text: str) -> None:
    assert impl.canonical_json("t", args) == dumped(text)


@pytest.mark.parametrize(
    "args",
    [{1: 1, "a": 2}, {"a": 1, None: 2}, {"x": [{None: 1, 2: 2}]}, ("a", {1: 1, "b": 2})],
    ids=repr,
)
def test_unsortable_keys_raise_type_error(impl: Any, args: Any) -> None:
    with pytest.raises(TypeError, match="not supported between instances"):
        impl.canonical_json("t", args)
    with pytest.raises(TypeError, match="not supported between instances"):
        impl.call_key("t", args)


@pytest.mark.parametrize(
    "value",
    [Decimal("1.5"), {1, 2}, frozenset({"a"}), b"bytes", bytearray(b"x"), 1j, object()],
    ids=lambda v: type(v).__name__,
)
def test_unserialisable_values_raise_type_error(impl: Any, value: Any) -> None:
    name = type(value).__name__
    with pytest.raises(TypeError, match=f"Object of type {name} is not JSON serializable"):
        impl.canonical_json("t", {"a": [1, value]})
    with pytest.raises(TypeError, match=f"Object of type {name} is not JSON serializable"):
        impl.call_key("t", value)


def test_unserialisable_values_under_dropped_keys_are_fine(impl: Any) -> None:
    args = {"request_id": {1, 2}, "b": Decimal(1), "keep": 1}
    assert impl.canonical_json("t", args, volatile_keys={"request_id", "b"}) == dumped('{"keep":1}')


# --- depth ---------------------------------------------------------------------------------


def nested_lists(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_dicts(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def nested_mixed(depth: int) -> Any:
    value: Any = [" x "]
    for i in range(depth - 1):
        value = {"a": value, "b": None} if i % 2 else [value, 1.0]
    return value


def test_max_depth_is_the_same_in_both() -> None:
    core = pytest.importorskip("tripwire._core")
    assert core.MAX_DEPTH == tripwire._keys.MAX_DEPTH == 256


def test_256_levels_are_fine(impl: Any) -> None:
    assert impl.canonical_json("t", nested_lists(256)) == dumped("[" * 256 + "]" * 256)
    assert impl.canonical_json("t", nested_dicts(256)) == dumped('{"a":' * 255 + "{}" + "}" * 255)
    assert (
        impl.canonical_json("t", nested_mixed(256))
        == json.dumps(
            {"args": tripwire._keys.normalise(nested_mixed(256)), "tool": "t"},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
    )
    # A leaf inside the deepest container is not a level of its own.
    leaf: Any = [" x "]
    for _ in range(255):
        leaf = [leaf]
    assert impl.canonical_json("t", leaf) == dumped("[" * 256 + '"x"' + "]" * 256)


@pytest.mark.parametrize("build", [nested_lists, nested_dicts, nested_mixed])
def test_257_levels_raise_recursion_error(impl: Any, build: Callable[[int], Any]) -> None:
    with pytest.raises(RecursionError, match="deeper than 256"):
        impl.canonical_json("t", build(257))
    with pytest.raises(RecursionError, match="deeper than 256"):
        impl.call_key("t", build(10_000))


def test_deep_ordered_dicts_raise_recursion_error(impl: Any) -> None:
    value: Any = OrderedDict()
    for _ in range(300):
        value = OrderedDict(a=value)
    with pytest.raises(RecursionError, match="deeper than 256"):
        impl.call_key("t", value)


def test_cycles_raise_recursion_error(impl: Any) -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(RecursionError, match="deeper than 256"):
        impl.call_key("t", looped)
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = {"again": cyclic}
    with pytest.raises(RecursionError, match="deeper than 256"):
        impl.canonical_json("t", cyclic)


def test_cycle_through_a_tuple_raises_recursion_error(impl: Any) -> None:
    # normalise does not enter tuples, but checks their depth (issue 17: json.dumps must not
    # go near Python's recursion limit), so a cycle through one ends as every cycle does.
    inner: list[Any] = []
    outer = (inner,)
    inner.append(outer)
    with pytest.raises(RecursionError, match="nested deeper than 256 levels"):
        impl.call_key("t", {"x": outer})


def test_tuples_count_towards_the_depth_limit(impl: Any) -> None:
    def nested(depth: int) -> Any:
        value: Any = 1
        for level in range(depth):
            value = (value,) if level % 2 else [value]
        return value

    assert impl.call_key("t", nested(256)) == tripwire.reference.call_key("t", nested(256))
    with pytest.raises(RecursionError, match="nested deeper than 256 levels"):
        impl.call_key("t", nested(257))


@pytest.mark.parametrize(
    "args",
    [
        {None: 1, "a": 2},
        {"a": 2, None: 1},
        {"outer": [{"b": 1, 2: 2}]},
        {1.5: 1, "a": 1, (1,): 2},
    ],
)
def test_mixed_key_types_raise_a_type_error_about_the_keys(impl: Any, args: Any) -> None:
    """Issue 17: sorted()'s own message names two types and not that they are dict keys."""
    with pytest.raises(TypeError, match=r"^dict keys cannot be sorted: keys of types ") as raised:
        impl.call_key("t", args)
    with pytest.raises(TypeError) as expected:
        tripwire.reference.call_key("t", args)
    assert str(raised.value) == str(expected.value)


def test_256_levels_need_no_python_stack_headroom(impl: Any) -> None:
    # _keys.py: "the reference must not depend on Python's recursion limit". A harness may
    # call the guard from deep inside its own stack; leave it 400 frames of room.
    def call_from_depth(frames_left: int) -> str:
        if frames_left > 0:
            return call_from_depth(frames_left - 1)
        return str(impl.call_key("t", nested_lists(256)))

    depth = 0
    frame = sys._getframe()
    while frame.f_back is not None:
        depth += 1
        frame = frame.f_back
    assert call_from_depth(sys.getrecursionlimit() - depth - 400) == impl.call_key(
        "t", nested_lists(256)
    )


# --- volatile keys -------------------------------------------------------------------------


def test_default_volatile_keys_are_dropped_at_every_depth(impl: Any) -> None:
    seed_set = {"request_id", "trace_id", "timestamp", "now", "nonce", "idempotency_key"}
    assert frozenset(seed_set) == impl.DEFAULT_VOLATILE_KEYS
    args = {name: 1 for name in impl.DEFAULT_VOLATILE_KEYS} | {
        "keep": [{"nonce": 2, "x": {"now": 3, "Now": 4}}],
        "request_id ": 5,
    }
    assert impl.canonical_json("t", args) == dumped('{"keep":[{"x":{"Now":4}}],"request_id ":5}')


def test_volatile_keys_replace_the_default_set(impl: Any) -> None:
    args = {"request_id": "r1", "cursor": "p3", "inner": {"cursor": "p4", "nonce": 1}}
    assert impl.canonical_json("t", args, volatile_keys={"cursor"}) == dumped(
        '{"inner":{"nonce":1},"request_id":"r1"}'
    )
    assert impl.canonical_json("t", args, volatile_keys=()) == dumped(
        '{"cursor":"p3","inner":{"cursor":"p4","nonce":1},"request_id":"r1"}'
    )
    assert impl.canonical_json("t", args, volatile_keys=["cursor", "inner"]) == dumped(
        '{"request_id":"r1"}'
    )
    assert impl.canonical_json("t", args, volatile_keys=(k for k in ["nonce"])) == dumped(
        '{"cursor":"p3","inner":{"cursor":"p4"},"request_id":"r1"}'
    )
    assert impl.canonical_json("t", args, volatile_keys=None) == impl.canonical_json("t", args)


def test_volatile_keys_match_code_points_exactly(impl: Any) -> None:
    args = {"\ud800": 1, "\U0001f600": 2, "\ud83d\ude00": 3, "é": 4, "x": 5}
    assert impl.canonical_json("t", args, volatile_keys={"\ud800", "\ud83d\ude00", "é"}) == (
        dumped('{"x":5,"\\ud83d\\ude00":2}')
    )


def test_long_volatile_keys(impl: Any) -> None:
    args = {"k" * n: n for n in (63, 64, 65, 100)} | {"\U0001f600" * 64: 1, "é" * 64: 2}
    volatile = {"k" * 64, "k" * 100, "\U0001f600" * 64, "é" * 64}
    assert impl.canonical_json("t", args, volatile_keys=volatile) == dumped(
        '{"' + "k" * 63 + '":63,"' + "k" * 65 + '":65}'
    )


def test_non_str_volatile_keys(impl: Any) -> None:
    args = {1: "a", 2: "b", 3: None}
    assert impl.canonical_json("t", args, volatile_keys=[1, "x"]) == dumped('{"2":"b"}')
    assert impl.canonical_json("t", {True: 1, 2: 2}, volatile_keys=[1]) == dumped('{"2":2}')
    assert impl.canonical_json("t", {"x": 1, "y": 2}, volatile_keys=[1, "x"]) == dumped('{"y":2}')


@pytest.mark.parametrize("bad", ["request_id", b"request_id", Label("request_id")], ids=repr)
def test_volatile_keys_as_a_bare_string_raise_type_error(impl: Any, bad: Any) -> None:
    with pytest.raises(TypeError, match="volatile_keys must be an iterable of keys"):
        impl.call_key("t", {}, volatile_keys=bad)
    with pytest.raises(TypeError, match="volatile_keys must be an iterable of keys"):
        impl.canonical_json("t", {}, volatile_keys=bad)


@pytest.mark.parametrize(
    ("bad", "message"),
    [(5, "'int' object is not iterable"), ([["x"]], "unhashable type: 'list'")],
    ids=repr,
)
def test_bad_volatile_keys_raise_type_error(impl: Any, bad: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        impl.call_key("t", {}, volatile_keys=bad)


# --- the tool name -------------------------------------------------------------------------


@pytest.mark.parametrize("name", [None, 5, b"get_logs", ["get_logs"]], ids=repr)
def test_non_str_tool_name_raises_type_error(impl: Any, name: Any) -> None:
    message = f"tool name must be a str, not {type(name).__name__}"
    with pytest.raises(TypeError, match=message):
        impl.call_key(name, {})
    with pytest.raises(TypeError, match=message):
        impl.canonical_json(name, {})


def test_arguments_are_positional_only(impl: Any) -> None:
    with pytest.raises(TypeError):
        impl.call_key(name="t", args={})
    with pytest.raises(TypeError):
        impl.call_key("t", {}, {"request_id"})


# --- differential properties ---------------------------------------------------------------


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What a call returns, or the type and message of what it raises."""
    try:
        return ("returned", fn(*args, **kwargs))
    except Exception as error:
        return (type(error).__name__, str(error))


tool_names = st.one_of(st.sampled_from(["get_logs", "list_orders", ""]), dict_keys(), texts())
volatile_sets = st.one_of(
    st.none(),
    st.frozensets(dict_keys(), max_size=4),
    # Lists and tuples are iterables too; ints, None and bools are keys a dict can have.
    st.lists(st.one_of(dict_keys(), st.integers(-2, 2), st.none(), st.booleans()), max_size=4),
    st.lists(dict_keys(), max_size=3).map(tuple),
)


def assert_backends_agree(native: Any, reference: Any, name: Any, args: Any, vk: Any) -> None:
    for function in ("canonical_json", "call_key"):
        got = outcome(getattr(native, function), name, args, volatile_keys=vk)
        want = outcome(getattr(reference, function), name, args, volatile_keys=vk)
        assert got == want, f"{function}: native {got!r} != reference {want!r}"


@given(args=json_values(), name=tool_names, volatile_keys=volatile_sets)
@example(args={"q": "\x1ca  b\u3000"}, name="t", volatile_keys=None)
@example(args={"\uff61": 1, "\U0001f600": 2}, name="\ud800", volatile_keys=None)
@example(args=[1e23, 5e-324, 2.5e-05, -0.0, math.nan, 2**64], name=" t ", volatile_keys=None)
@example(args={"a": 1, "b": {"a": None}}, name="t", volatile_keys=["a", 1])
def test_backends_agree_on_json_values(
    native: Any, reference: Any, args: Any, name: str, volatile_keys: Any
) -> None:
    assert_backends_agree(native, reference, name, args, volatile_keys)


@given(args=exotic_values(), name=tool_names, volatile_keys=volatile_sets)
@example(args=(1, {"b": None}), name="t", volatile_keys=None)
@example(args={1: {"nonce": 1}, 2: None}, name="t", volatile_keys=[1])
@example(args=[{1, 2}, 10**5000], name="t", volatile_keys=None)
@example(args=[10**5000, {1, 2}], name="t", volatile_keys=None)
def test_backends_agree_on_exotic_values(
    native: Any, reference: Any, args: Any, name: str, volatile_keys: Any
) -> None:
    assert_backends_agree(native, reference, name, args, volatile_keys)


@given(args=exotic_values(unserialisable=False), name=tool_names, volatile_keys=volatile_sets)
def test_backends_agree_on_serialisable_exotic_values(
    native: Any, reference: Any, args: Any, name: str, volatile_keys: Any
) -> None:
    assert_backends_agree(native, reference, name, args, volatile_keys)


# For the costlier properties (256-level values, a variant drawn per example): a share of
# the profile's budget, so the default run stays quick and `thorough` still scales up.
fewer_examples = settings(max_examples=max(10, settings.default.max_examples // 4))
half_the_examples = settings(max_examples=max(10, settings.default.max_examples // 2))


def wrap(value: Any, kinds: list[int]) -> Any:
    """``value`` inside one container per item of ``kinds``, innermost first."""
    wrappers: list[Callable[[Any], Any]] = [
        lambda v: [v],
        lambda v: {"a": v, "n": None},
        lambda v: [1, v, " x "],
        lambda v: OrderedDict(b=v),
        lambda v: {1: v},
        lambda v: (v,),
    ]
    for kind in kinds:
        value = wrappers[kind](value)
    return value


@fewer_examples
@given(
    args=st.one_of(json_values(max_leaves=5), exotic_values(max_leaves=5)),
    # Mostly plain containers, so that the depth is what is being tested.
    kinds=st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 4, 5]), min_size=250, max_size=262),
)
def test_backends_agree_near_the_depth_limit(
    native: Any, reference: Any, args: Any, kinds: list[int]
) -> None:
    assert_backends_agree(native, reference, "t", wrap(args, kinds), None)


class Growing(str):
    """A str whose ``split`` (which normalise calls) appends to a list it was given."""

    grows: list[Any]

    def split(self, sep: Any = None, maxsplit: int = -1) -> list[str]:
        if len(self.grows) < 4:
            self.grows.append(" late  item ")
        return str(self).split(sep, maxsplit)


def test_list_grown_during_the_walk(native: Any, reference: Any) -> None:
    # Python's normalise iterates the live list, so it sees items appended by a callback
    # made while walking it; the native walker must write the same items.
    def growing_list() -> list[Any]:
        items: list[Any] = []
        first = Growing(" a  b ")
        first.grows = items
        items += [first, 1]
        return items

    want = reference.canonical_json("t", growing_list())
    assert want == dumped('["a b",1,"late item"]')
    assert native.canonical_json("t", growing_list()) == want


class Clearing(str):
    """A str whose ``split`` (which normalise calls) empties the dicts it was given, then
    makes garbage, so that what those dicts alone held is freed and its memory reused."""

    targets: list[dict[str, Any]]

    def split(self, sep: Any = None, maxsplit: int = -1) -> list[str]:
        for target in self.targets:
            target.clear()
        garbage = [[f"garbage {i}"] for i in range(2000)]
        del garbage
        return str(self).split(sep, maxsplit)


def test_dicts_cleared_during_the_walk(native: Any, reference: Any) -> None:
    # Python's normalise walks a sorted copy of each dict's items, so entries removed by a
    # callback are still walked, and still alive. The native walker borrows the entries: it
    # must hold them (its own reference) before any Python code runs.
    def cleared() -> dict[str, Any]:
        inner: dict[str, Any] = {}
        outer: dict[str, Any] = {"a": inner}
        first = Clearing(" a  b ")
        first.targets = [inner, outer]
        inner["a"] = first
        inner["b"] = [f"only  in {n}" for n in ("inner", "this list")]
        inner["c"] = {"x": f"{2**70}", "y": [2.5, f"{'z' * 3}"]}
        outer["b"] = [f"only in {'outer'}", {"k": f"{'v' * 2}"}]
        return outer

    want = reference.canonical_json("t", cleared())
    assert want == dumped(
        '{"a":{"a":"a b","b":["only in inner","only in this list"],'
        '"c":{"x":"1180591620717411303424","y":[2.5,"zzz"]}},'
        '"b":["only in outer",{"k":"vv"}]}'
    )
    for _ in range(20):
        assert native.canonical_json("t", cleared()) == want
        assert native.call_key("t", cleared()) == reference.call_key("t", cleared())


@pytest.mark.parametrize(
    ("name", "volatile_keys"),
    [(5, "request_id"), (None, 5), (b"t", [["x"]])],
    ids=repr,
)
def test_argument_errors_agree(native: Any, reference: Any, name: Any, volatile_keys: Any) -> None:
    # Both backends must report the same problem first when the tool name and the
    # volatile keys are both wrong.
    assert_backends_agree(native, reference, name, {}, volatile_keys)


@half_the_examples
@given(st.data(), json_values(), tool_names)
def test_equivalent_variants_share_the_key(
    impl: Any, data: st.DataObject, args: Any, name: str
) -> None:
    variant = data.draw(equivalent_variants(args), label="variant")
    assert impl.canonical_json(name, variant) == impl.canonical_json(name, args)
    assert impl.call_key(name, variant) == impl.call_key(name, args)


@half_the_examples
@given(st.data(), json_values(), st.frozensets(dict_keys(), max_size=3))
def test_equivalent_variants_with_custom_volatile_keys(
    impl: Any, data: st.DataObject, args: Any, volatile: frozenset[str]
) -> None:
    variant = data.draw(equivalent_variants(args, volatile_keys=volatile), label="variant")
    assert impl.call_key("t", variant, volatile_keys=volatile) == impl.call_key(
        "t", args, volatile_keys=volatile
    )


def test_equivalent_variants_rejects_a_bare_string() -> None:
    with pytest.raises(TypeError):
        equivalent_variants({}, volatile_keys="request_id")


# --- the public API and the backend switch -------------------------------------------------

KEY_API = ("call_key", "canonical_json", "normalise", "DEFAULT_VOLATILE_KEYS", "IMPLEMENTATION")


def test_reference_exports_the_key_api() -> None:
    import tripwire.reference

    for name in KEY_API:
        assert name in tripwire.__all__
        assert name in tripwire.reference.__all__
        assert hasattr(tripwire.reference, name)
    assert tripwire.reference.IMPLEMENTATION == "reference"


def test_reference_exports_everything_tripwire_exports() -> None:
    import tripwire.reference

    missing = set(tripwire.__all__) - set(tripwire.reference.__all__) - {"__version__"}
    assert not missing
    assert all(hasattr(tripwire.reference, name) for name in tripwire.reference.__all__)


def run_with_implementation(value: str | None, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRIPWIRE_IMPLEMENTATION"}
    if value is not None:
        env["TRIPWIRE_IMPLEMENTATION"] = value
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


SHOW_BACKEND = (
    "import tripwire, tripwire.reference as r;"
    "native = tripwire.call_key is not r.call_key;"
    "print(tripwire.IMPLEMENTATION, native, tripwire.call_key('get_logs', "
    "{'service': 'checkout', 'since': '15m', 'level': 'error'}))"
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("reference", "reference False"),
        (" Reference ", "reference False"),
        ("native", "native True"),
        ("auto", "native True"),
        ("", "native True"),
        (None, "native True"),
    ],
    ids=repr,
)
def test_implementation_is_chosen_by_the_environment(value: str | None, expected: str) -> None:
    if expected.startswith("native"):
        pytest.importorskip("tripwire._core")
    done = run_with_implementation(value, SHOW_BACKEND)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [*expected.split(), SEED_KEY]


def test_bogus_implementation_fails_to_import() -> None:
    done = run_with_implementation("rust", "import tripwire")
    assert done.returncode != 0
    assert "ImportError: TRIPWIRE_IMPLEMENTATION='rust'" in done.stderr
    assert "expected 'auto', 'native' or 'reference'" in done.stderr


# Makes `import tripwire._core` fail, as it does where the extension was never built.
HIDE_NATIVE = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "tripwire._core":
            raise ImportError("no module named 'tripwire._core' (hidden by the test)")
sys.meta_path.insert(0, _Hide())
"""


@pytest.mark.parametrize(
    ("value", "expected"), [("auto", "reference False"), (None, "reference False")], ids=repr
)
def test_auto_falls_back_to_the_reference(value: str | None, expected: str) -> None:
    done = run_with_implementation(value, HIDE_NATIVE + SHOW_BACKEND)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [*expected.split(), SEED_KEY]


def test_native_without_the_core_fails_to_import() -> None:
    done = run_with_implementation("native", HIDE_NATIVE + "import tripwire")
    assert done.returncode != 0
    assert "ImportError: no module named 'tripwire._core' (hidden by the test)" in done.stderr


@pytest.mark.parametrize(
    "value",
    [
        0.001,
        -0.001,
        0.0011,
        250.75,
        -43.2,
        0.1 + 0.2,
        999_999_999_999.999,
        1e12 + 0.5,
        0.0009999,
        1.005,
        2.675,
        123456.789,
        5e-324,
        1.5e-5,
        0.30000000000000004,
    ],
)
def test_floats_are_written_as_repr(impl: Any, value: float) -> None:
    # Short decimals take a fast path in the native core; its edges and its neighbours.
    for v in (value, -value, math.nextafter(value, 0), math.nextafter(value, math.inf)):
        if v.is_integer():
            continue  # written as an integer (test_floats covers those)
        assert impl.canonical_json("t", {"x": v}) == dumped('{"x":' + repr(v) + "}")
