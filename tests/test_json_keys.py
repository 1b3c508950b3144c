"""Keys from JSON text: ``call_key_json``, ``call_keys`` and ``Guard.check_json``.

The contract is ``reference.call_key(name, json.loads(text))`` (docs/design/key.md): for every text
``json.loads`` accepts the native key must equal it, and wherever ``json.loads`` raises the
native parser must raise the same exception type, and for ``json.JSONDecodeError`` the same
``msg`` and ``pos`` (and so the same message, line and column).

- Behaviour tests run on both backends through ``backend`` (``tripwire._core`` and
  ``tripwire.reference``).
- Differential tests compare the native module with the contract computed in this process:
  the corner list as explicit cases, then hypothesis texts (``json.dumps`` with random
  options; a JSON grammar with random whitespace, escapes and number spellings; mutations of
  both that break them; random bytes), as ``str`` and as bytes in UTF-8 (with and without a
  BOM), UTF-16 and UTF-32.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections import UserList
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import tripwire._keys
import tripwire.reference as reference
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy
from tripwire.testing import json_values, texts

try:
    import tripwire._core as _core
except ImportError:  # pragma: no cover - only where the extension is not built
    _core = None

NO_NATIVE = "tripwire._core is not built (run `maturin develop`); testing the reference only"

# The native call_keys keys a batch on several threads only past this much JSON text.
PARALLEL_MIN_BYTES = 256 * 1024

SEED_TEXT = '{"service":"checkout","since":"15m","level":"error"}'


@pytest.fixture(scope="session", params=["native", "reference"])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """One backend module: ``tripwire._core`` (id ``native``) or ``tripwire.reference``."""
    if request.param == "native":
        if _core is None:
            pytest.skip(NO_NATIVE)
        return _core
    return reference


@pytest.fixture(scope="session")
def core() -> ModuleType:
    """The native module, for differential tests against the contract."""
    if _core is None:
        pytest.skip(NO_NATIVE)
    return _core


def fewer_examples(divisor: int) -> settings:
    """The loaded profile with a ``divisor``-th of its examples, for the costly properties (so
    the file stays quick with the default profile and still scales with ``ci``/``thorough``)."""
    return settings(
        max_examples=max(10, settings.default.max_examples // divisor),
        suppress_health_check=[HealthCheck.too_slow],
    )


# --- outcomes ------------------------------------------------------------------------------


def outcome(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``("ok", result)``, or the exception as parity compares it: its type, and for a
    ``JSONDecodeError`` also ``msg``, ``pos`` and the message (line and column)."""
    try:
        return ("ok", function(*args, **kwargs))
    except json.JSONDecodeError as exc:
        return (type(exc), exc.msg, exc.pos, str(exc))
    except Exception as exc:
        return (type(exc),)


def outcome_with_notes(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        return ("ok", function(*args, **kwargs))
    except json.JSONDecodeError as exc:
        return (type(exc), exc.msg, exc.pos, getattr(exc, "__notes__", None))
    except Exception as exc:
        return (type(exc), getattr(exc, "__notes__", None))


def contract(name: str, text: Any, **kwargs: Any) -> str:
    """What ``call_key_json`` must equal: the reference key of ``json.loads(text)``."""
    return reference.call_key(name, json.loads(text), **kwargs)


def stable_id(value: Any) -> str:
    """A test id that is the same in every run: sets sorted (their order follows the hash
    seed), objects without a literal repr named by their type."""
    if isinstance(value, (set, frozenset)):
        return type(value).__name__ + "(" + ",".join(sorted(map(repr, value))) + ")"
    shown = repr(value)
    return type(value).__name__ if " at 0x" in shown else shown


def short(text: Any) -> str:
    shown = repr(text)
    return shown if len(shown) <= 300 else f"{shown[:150]} ... {shown[-100:]} ({len(text)} long)"


def assert_like_json_loads(core: ModuleType, name: str, text: Any, **kwargs: Any) -> None:
    got = outcome(core.call_key_json, name, text, **kwargs)
    want = outcome(contract, name, text, **kwargs)
    assert got == want, f"text {short(text)}: native {got!r} != json.loads + reference {want!r}"


def encode(text: str, encoding: str) -> str | bytes | bytearray:
    """``text`` as ``json.loads`` may receive it. Lone surrogates are encoded as themselves
    (``surrogatepass``), which is how ``json.loads`` decodes bytes."""
    if encoding == "str":
        return text
    if encoding == "bytearray":
        return bytearray(text.encode("utf-8", "surrogatepass"))
    return text.encode(encoding, "surrogatepass")


ENCODINGS = [
    "str",
    "utf-8",
    "utf-8-sig",
    "utf-16",
    "utf-16-le",
    "utf-16-be",
    "utf-32",
    "utf-32-le",
    "utf-32-be",
    "bytearray",
]
# str and UTF-8 are what models send: draw them most often.
encodings = st.sampled_from(["str"] * 4 + ["utf-8"] * 3 + ENCODINGS)


# --- the corners, as explicit cases --------------------------------------------------------

DEEP_DUPLICATE = '{"a":' + "[" * 300 + "]" * 300 + ',"a":1}'

VALID_TEXTS: list[Any] = [
    SEED_TEXT,
    '{"service": "checkout", "level": "error", "since": "15m"}',
    '{"service":" checkout\\t","since":"15m","level":"error","request_id":"r-1","page":null}',
    # Duplicate keys: the last one wins, also when it is null or a volatile key's.
    '{"a":1,"a":2}',
    '{"a":1,"a":null}',
    '{"a":null,"a":1}',
    '{"a":{"b":1},"a":{"c":2}}',
    '{"a":1,"b":2,"a":3,"b":null}',
    '{"\\u00e9":1,"\u00e9":2}',
    '{"\\ud83d\\ude00":1,"\U0001f600":2}',
    '{"request_id":1,"request_id":2,"x":{"nonce":3,"nonce":null}}',
    '{"\\u006eonce":1,"request_\\u0069d":2,"a":3}',
    # Non-finite numbers.
    "NaN",
    "Infinity",
    "-Infinity",
    "[NaN,Infinity,-Infinity]",
    '{"x":NaN,"y":-Infinity}',
    # Number spellings.
    "1.0",
    "1e2",
    "1E2",
    "1E+2",
    "1e-2",
    "1e+0",
    "-0",
    "-0.0",
    "0.0",
    "-0e0",
    "0E-0",
    "0.5e-3",
    "1e400",
    "-1e400",
    "1E400",
    "1e-400",
    "-1e-400",
    "1e23",
    "1e22",
    "2.5",
    "0.1",
    "5e-324",
    "2.4703282292062327e-324",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "4503599627370495.5",
    "9007199254740993.0",
    "1.00000000000000000000000000001",
    "0." + "0" * 400 + "1",
    "1" + "0" * 400 + ".0",
    "123456789012345678901234567890",
    "-123456789012345678901234567890",
    "18446744073709551616",
    "9" * 4300,
    "-" + "9" * 4300,
    "[1.0,1e2,1E+2,-0,-0.0,0.5e-3,1e400,12345678901234567890123]",
    "1e999999999999",
    "-1e-99999999999999999999",
    "1" * 5000 + ".5",
    "1" * 5000 + "e0",
    "0." + "0" * 5000 + "1e5000",
    "17976931348623158e292",
    "2.2250738585072011e-308",
    # Escapes.
    '"\\/"',
    '"a\\/b\\/"',
    '"\\b\\f\\n\\r\\t\\"\\\\"',
    '"\\u00e9\\u00E9\\u00c9"',
    '"\\ud83d\\ude00"',
    '"\\uD83D\\uDE00"',
    '"\\ud800"',
    '"\\udc00"',
    '"\\udfff\\ud800"',
    '"\\ud800\\ud800"',
    '"\\ud800x"',
    '"\\ud800\\n"',
    '"\\ud800\\u0041"',
    '"\\ud83d\\ude00\\ude00"',
    '"\\ud83d\ude00"',
    '"\ud83d\\ude00"',
    '"\ud800"',
    '"\udfff\ud800"',
    '"\U0001f600"',
    '"\\u0000\\u001f\\u007f\x7f"',
    '" a \\t b \\u3000 c \\u001c d \\u0085 "',
    '"\\u2028\u2029"',
    '"\\u200b\\ufeff\ufeff"',
    # Keys in code-point order, not UTF-16 order; keys are not collapsed.
    '{"\\ud800":1,"\\ue000":2,"\\ud83d\\ude00":3,"\\uff61":4}',
    '{"b":1,"a":2,"B":3," a":4,"a ":5,"":6}',
    # Whitespace between tokens: JSON's four.
    ' \t\n\r{ "a" : [ 1 , 2 ] ,\n\t"b" :\r{ } } \r\n\t ',
    "[]",
    "{}",
    "[{}]",
    '""',
    "null",
    "true",
    "false",
    "[null,true,false]",
    '{"a":[null,{"b":null}],"c":null}',
    # Bytes: UTF-8 with and without a BOM, UTF-16, UTF-32, lone surrogates via surrogatepass.
    SEED_TEXT.encode(),
    b"\xef\xbb\xbf" + SEED_TEXT.encode(),
    bytearray(SEED_TEXT.encode()),
    SEED_TEXT.encode("utf-16"),
    SEED_TEXT.encode("utf-16-le"),
    SEED_TEXT.encode("utf-16-be"),
    SEED_TEXT.encode("utf-32"),
    SEED_TEXT.encode("utf-32-le"),
    SEED_TEXT.encode("utf-32-be"),
    b'"\xed\xa0\x80"',
    b'"\xed\xa0\xbd\xed\xb8\x80"',
    b'{"\xed\xa0\x80":1,"\\ud800":2}',
    b'["\xf0\x9f\x98\x80","\xc3\xa9"]',
    b"1",
    b"12",
    b" 1",
    b"1\x00\x00\x00",
    b"\x00\x00\x00\x31",
    "\ufeff{}".encode("utf-16-be"),
    '["\ud800"]'.encode("utf-16", "surrogatepass"),
    '"\udc00"'.encode("utf-32-be", "surrogatepass"),
]

INVALID_TEXTS: list[Any] = [
    "",
    " ",
    "\t\n",
    "{",
    "[",
    '{"a"',
    '{"a":',
    '{"a":1',
    '{"a":1,',
    # Trailing commas.
    '{"a":1,}',
    "[1,]",
    "[1,2,]",
    '{"a":[1,],"b":2}',
    "[,1]",
    "[1,,2]",
    "{,}",
    # Delimiters.
    "[1 2]",
    '{"a" 1}',
    '{"a":1 "b":2}',
    "{'a':1}",
    "{a:1}",
    '{1:"a"}',
    "]",
    "}",
    # Bad escapes.
    '"\\x"',
    '"\\u12"',
    '"\\u12G4"',
    '"\\uZZZZ"',
    '"\\U0001F600"',
    '"\\\'"',
    '"\\a"',
    '"\\0"',
    '"\\u00e"',
    '"\\ud800\\u12x4"',
    '"\\ud800\\uDZ00"',
    '"\\ud800\\x"',
    '"\\ud800\\u"',
    '"\\ud800\\u12"',
    '"\\ud800\\',
    '"\\',
    '"\\u',
    '"\\u12\u00e9"',
    '"\\ud800\\u12\u00e9x"',
    '"\u00e9\\u12"',
    # Unterminated strings and raw control characters in strings.
    '"abc',
    '"\u00e9\U0001f600',
    '"a\x01"',
    '"a\x00"',
    '"\n"',
    '"\t"',
    '"\x1f"',
    '{"a\nb":1}',
    # Literals and numbers json.loads refuses.
    "nul",
    "tru",
    "fals",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "Infinit",
    "-Infinit",
    "-NaN",
    "NaN1",
    "+1",
    "-",
    "--1",
    "01",
    "-01",
    "1.",
    ".5",
    "1e",
    "1e+",
    "1.e5",
    "1.5e",
    "0x10",
    "1_000",
    "\u0661",
    # Garbage after the value.
    "[1]x",
    "{} {}",
    "1 2",
    '"\u00e9" x',
    '{"a":1}}',
    "[1]]",
    "null,",
    "1\x00",
    # Whitespace JSON does not allow; a BOM in a str.
    "\x0c{}",
    "\x0b[]",
    "\xa0{}",
    "{}\u2028",
    "[1,\u3000 2]",
    "\ufeff{}",
    "\ufeff",
    " \ufeff{}",
    # Integers past Python's int/str conversion limit: ValueError, not JSONDecodeError.
    "9" * 4301,
    "-" + "9" * 4301,
    "[" + "9" * 5000 + "]",
    '{"a":1,"a":' + "9" * 4301 + "}",
    # Bytes: invalid UTF-8, truncated or overlong sequences, too-large code points.
    b"\xff",
    b'"\xff"',
    b'"\xed\xa0"',
    b'"\xed"',
    b'"\xc0\x80"',
    b'"\xe0\x80\x80"',
    b'"\xf4\x90\x80\x80"',
    b'"\xf8\x88\x80\x80\x80"',
    b'"\x80"',
    b'"\xc3"',
    b"\xef\xbb\xbf\xef\xbb\xbf{}",
    b"\xef\xbb\xbf",
    b"\xef\xbb\xbf\xff",
    b"\xef\xbb",
    b"",
    b"\x00",
    b"\x00\x00",
    b"{\x00",
    b"\x00{",
    b'{"a":1',
    b'{"a":1,}',
    # UTF-16 and UTF-32: a BOM after the BOM, odd lengths, broken text.
    "\ufeff1".encode("utf-16"),
    "\ufeff1".encode("utf-32"),
    "\ufeff\ufeff{}".encode("utf-16-be"),
    b"\xff\xfe\x00",
    b"\xff\xfe{\x00\x00",
    b"\xfe\xff\xd8\x00",
    '{"a":1'.encode("utf-16"),
    '{"a":1,}'.encode("utf-32-le"),
    "x".encode("utf-32-le"),
    bytearray(b"{"),
    # Not text at all: TypeError.
    5,
    None,
    1.5,
    memoryview(b"{}"),
    ["{}"],
    {"a": 1},
]


@pytest.mark.parametrize("text", VALID_TEXTS, ids=short)
def test_valid_corners_key_like_json_loads(backend: ModuleType, text: Any) -> None:
    assert backend.call_key_json("t", text) == contract("t", text)


@pytest.mark.parametrize("text", VALID_TEXTS + INVALID_TEXTS, ids=short)
def test_corners_native_like_json_loads(core: ModuleType, text: Any) -> None:
    assert_like_json_loads(core, "t", text)


def _short_string_corners() -> list[str]:
    """Strings around the native parser's short-string path (content under 32 bytes with
    nothing escaped, written straight from the text): its length limits, spaces it must
    not keep, non-ASCII characters to escape (whitespace among them, which it leaves to the
    general path), DEL, and strings at the very end of the text."""
    contents = [
        "",
        "a",
        "x" * 15,
        "x" * 16,
        "x" * 17,
        "x" * 31,
        "x" * 32,
        "x" * 33,
        " a",
        "a ",
        "a  b",
        "a b c",
        " " * 20,
        "São Paulo",
        "Zürich",
        "東京",
        "Αθήνα",
        "😀",
        "a😀b" * 5,
        "\ud800",
        "x" * 14 + "é",
        "x" * 15 + "é",
        "x" * 30 + "é",
        "a\u00a0b",
        "a\u3000",
        "\u0085a",
        "a\u2028b",
        "a\x7fb",
        "a\x1fb",
        'a\\"b',
    ]
    texts = []
    for c in contents:
        raw = json.dumps(c, ensure_ascii=False)
        texts += [
            f'{{"key":{raw},"pad":"................"}}',
            f'{{"pad":"................","key":{raw}}}',
            f'{{{raw}:1,"pad":"................"}}',
            f"[{raw}]",
            raw,
        ]
    return texts


def test_objects_of_one_shape_in_a_row(backend: ModuleType) -> None:
    """The native parser remembers the key order of the last object it reordered; objects
    whose keys share 8-byte prefixes, or differ only past them, must not take it."""
    records = [
        {"b": 1, "aaaaaaaax": 2, "aaaaaaaay": 3},
        {"b": 1, "aaaaaaaay": 2, "aaaaaaaax": 3},
        {"zzzzzzzz_2": 1, "yyyyyyyy_1": 2},
        {"zzzzzzzz_1": 1, "yyyyyyyy_2": 2},
        {"b": 1, "a": 2},
        {"b": 1, "a\x00": 2},
        {"b": 1, "a": None},
    ]
    texts = [json.dumps(r) for r in records * 3]
    want = [reference.call_key("t", json.loads(t)) for t in texts]
    assert [backend.call_key_json("t", t) for t in texts] == want
    assert backend.call_keys([("t", t) for t in texts]) == want
    nested = json.dumps({"z": records, "a": records[::-1]})
    assert backend.call_key_json("t", nested) == reference.call_key("t", json.loads(nested))


@pytest.mark.parametrize("text", _short_string_corners(), ids=short)
@pytest.mark.parametrize("encoding", ["str", "utf-8"])
def test_short_string_corners_like_json_loads(core: ModuleType, text: str, encoding: str) -> None:
    assert_like_json_loads(core, "t", encode(text, encoding))


@pytest.mark.parametrize(
    "text", [t for t in INVALID_TEXTS if isinstance(t, (str, bytes))], ids=short
)
def test_invalid_corners_raise_value_error(backend: ModuleType, text: str | bytes) -> None:
    with pytest.raises(ValueError) as raised:
        json.loads(text)
    with pytest.raises(type(raised.value)) as got:
        backend.call_key_json("t", text)
    if isinstance(raised.value, json.JSONDecodeError):
        assert isinstance(got.value, json.JSONDecodeError)
        assert (got.value.msg, got.value.pos) == (raised.value.msg, raised.value.pos)


def test_seed_spellings_share_the_seed_key(backend: ModuleType) -> None:
    seed_key = backend.call_key("get_logs", json.loads(SEED_TEXT))
    for text in [
        SEED_TEXT,
        '{"since":"15m","service":"checkout","level":"error"}',
        '{ "service" : "checkout ", "since": "15m", "level": "error", "limit": null }',
        '{"service":"checkout","since":"15m","level":"error","request_id":"req-8f2a"}',
        b'\xef\xbb\xbf{"service":"checkout","since":"15m","level":"error"}',
        '{"service":"\\u0063heckout","since":"15m","level":"error","level":"error"}',
    ]:
        assert backend.call_key_json("get_logs", text) == seed_key, short(text)


def test_positions_are_character_positions(backend: ModuleType) -> None:
    for text in ['"\U0001f600" x', '"\ud800" x', b'"\xed\xa0\x80" x', b'"\xf0\x9f\x98\x80" x']:
        with pytest.raises(json.JSONDecodeError) as raised:
            backend.call_key_json("t", text)
        assert (raised.value.msg, raised.value.pos) == ("Extra data", 4)


def test_value_errors_carry_the_position(backend: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"line 2 column 3 \(char 10\)"):
        backend.call_key_json("t", '{"a":1,\n  }')


def test_int_digit_limit_in_force(backend: ModuleType) -> None:
    old = sys.get_int_max_str_digits()
    try:
        for limit, digits in [(640, 640), (640, 641), (640, 700), (0, 5000), (5000, 4400)]:
            sys.set_int_max_str_digits(limit)
            for text in ["1" * digits, "-" + "1" * digits, '{"a":[' + "7" * digits + "]}"]:
                assert outcome(backend.call_key_json, "t", text) == outcome(contract, "t", text)
                calls = [("t", "[1]"), ("t", text), ("t", "[")]
                assert outcome_with_notes(backend.call_keys, calls) == outcome_with_notes(
                    reference.call_keys, calls
                )
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize(
    "volatile_keys",
    [None, (), {"a"}, ["a", "nonce"], frozenset({"\ud800", "\U0001f600", "b c"}), {"a", 1}],
    ids=stable_id,
)
def test_volatile_keys(backend: ModuleType, volatile_keys: Any) -> None:
    text = (
        '{"a":1,"nonce":2,"request_id":3,"\\ud800":4,"\\ud83d\\ude00":5,"b c":6,'
        '"x":{"a":[{"a":1,"nonce":{"z":null}}]}}'
    )
    want = contract("t", text, volatile_keys=volatile_keys)
    assert backend.call_key_json("t", text, volatile_keys=volatile_keys) == want
    assert backend.call_keys([("t", text)], volatile_keys=volatile_keys) == [want]
    assert backend.call_keys([("t", text.encode())], volatile_keys=volatile_keys) == [want]


@pytest.mark.parametrize(
    ("name", "text", "volatile_keys", "error"),
    [
        (5, "{}", None, TypeError),
        (None, "{", None, TypeError),
        (b"t", "{}", None, TypeError),
        ("t", 5, None, TypeError),
        ("t", "{}", "request_id", TypeError),
        ("t", "{", "request_id", TypeError),
        ("t", b"{", b"nonce", TypeError),
        ("t", "{}", 5, TypeError),
    ],
)
def test_argument_errors(
    backend: ModuleType, name: Any, text: Any, volatile_keys: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        backend.call_key_json(name, text, volatile_keys=volatile_keys)
    assert outcome(backend.call_key_json, name, text, volatile_keys=volatile_keys) == outcome(
        reference.call_key_json, name, text, volatile_keys=volatile_keys
    )


def test_tool_name_is_keyed_as_call_key_keys_it(backend: ModuleType) -> None:
    for name in ["get_logs", " t ", "\ud800", "\U0001f600", "a\x1cb", ""]:
        assert backend.call_key_json(name, "[1]") == reference.call_key(name, [1])


def test_arguments_are_positional_only(backend: ModuleType) -> None:
    with pytest.raises(TypeError):
        backend.call_key_json(name="t", text="{}")
    with pytest.raises(TypeError):
        backend.call_keys(calls=[])


# --- depth -----------------------------------------------------------------------------------


def nested(depth: int, kind: str, leaf: str = "1") -> str:
    """``depth`` levels of lists, dicts (``{"a": ...}``) or both in turn, around ``leaf``."""
    openers = {"list": ["["], "dict": ['{"a":'], "mixed": ["[", '{"a":']}[kind]
    levels = [openers[i % len(openers)] for i in range(depth)]
    closing = "".join("]" if level == "[" else "}" for level in reversed(levels))
    return "".join(levels) + leaf + closing


@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
def test_256_levels_are_fine(backend: ModuleType, kind: str) -> None:
    for leaf in ["1", '" x "', "null", "NaN", "1e400"]:
        text = nested(256, kind, leaf)
        assert backend.call_key_json("t", text) == reference.call_key("t", json.loads(text))


@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
def test_257_levels_raise_recursion_error(backend: ModuleType, kind: str) -> None:
    with pytest.raises(RecursionError):
        backend.call_key_json("t", nested(257, kind))
    with pytest.raises(RecursionError):
        backend.call_keys([("t", "[]"), ("t", nested(257, kind))])


@pytest.mark.parametrize("depth", [2_000, 1_000_000])
@pytest.mark.parametrize("kind", ["list", "dict", "unclosed"])
def test_very_deep_texts_raise_recursion_error(backend: ModuleType, depth: int, kind: str) -> None:
    text = "[" * depth if kind == "unclosed" else nested(depth, kind)
    with pytest.raises(RecursionError):
        json.loads(text)
    with pytest.raises(RecursionError):
        backend.call_key_json("t", text)
    with pytest.raises(RecursionError):
        backend.call_key_json("t", text.encode())
    with pytest.raises(RecursionError) as raised:
        backend.call_keys([("t", "{}"), ("t", text)], threads=2)
    assert raised.value.__notes__ == ["in call 1 of call_keys()"]


def test_depth_under_a_dropped_entry_counts_too(backend: ModuleType) -> None:
    """Issue 17: every container in the text counts, so whether text is too deep is known
    while it is parsed, before json.loads could reach Python's recursion limit (which
    depends on the caller's stack) on the way to a volatile or overwritten key."""
    for text in [
        DEEP_DUPLICATE,
        '{"nonce":' + nested(300, "list") + "}",
        '{"a":1,"a":' + nested(300, "list") + "}",
    ]:
        with pytest.raises(RecursionError, match="nested deeper than 256 levels"):
            backend.call_key_json("t", text)
    shallow = '{"a":' + nested(255, "list") + ',"a":1,"nonce":' + nested(255, "list") + "}"
    assert backend.call_key_json("t", shallow) == contract("t", shallow)


@pytest.mark.parametrize(
    "depth", [255, 256, 257, 258, 300, 500, 900, 990, 998, 999, 1000, 1001, 1500]
)
@pytest.mark.parametrize("tail", ["valid", "x", "unclosed", "trailing_comma"])
def test_deep_texts_like_json_loads_up_to_the_depth_limit(
    core: ModuleType, depth: int, tail: str
) -> None:
    """Up to 256 levels, text is keyed or raises as ``json.loads`` does; opening a 257th
    level raises the depth limit's RecursionError, valid or not, whatever follows (issue 17:
    before, an invalid text raised whatever ``json.loads`` raised, which near Python's
    recursion limit depended on the caller's stack)."""
    text = {
        "valid": nested(depth, "list"),
        "x": "[" * depth + "x",
        "unclosed": "[" * depth,
        "trailing_comma": "[" * depth + "1,]" + "]" * (depth - 1),
    }[tail]
    if depth <= 256:
        assert_like_json_loads(core, "t", text)
    else:
        with pytest.raises(RecursionError, match="nested deeper than 256 levels"):
            core.call_key_json("t", text)


@pytest.mark.parametrize("depth", [1200, 2000, 4000])
def test_deep_texts_under_a_raised_recursion_limit(core: ModuleType, depth: int) -> None:
    """Python's recursion limit, raised or not, does not move the depth limit."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        for text in ("[" * depth + "x", '{"a":' * depth + "}"):
            with pytest.raises(RecursionError, match="nested deeper than 256 levels"):
                core.call_key_json("t", text)
    finally:
        sys.setrecursionlimit(old)


# --- hypothesis: texts json.dumps writes -------------------------------------------------------

dump_options = st.fixed_dictionaries(
    {
        "indent": st.sampled_from([None, None, 0, 2, "\t", " \r\n"]),
        "separators": st.sampled_from(
            [None, (",", ":"), (", ", ": "), (" , ", " : "), (",\n", ":\t"), ("\r,", "\n:")]
        ),
        "ensure_ascii": st.booleans(),
        "sort_keys": st.booleans(),
    }
)


@st.composite
def dumped_texts(draw: st.DrawFn, max_leaves: int = 20) -> str:
    value = draw(json_values(max_leaves=max_leaves), label="value")
    options = draw(dump_options, label="options")
    return json.dumps(value, **options)


@fewer_examples(2)
@given(text=dumped_texts(), encoding=encodings, name=st.sampled_from(["t", "get_logs", "\ud800"]))
@example(text=json.dumps({"a": "\ud800", "\udfff": [1e23, -0.0]}), encoding="utf-16", name="t")
@example(text=json.dumps("\U0001f600\ud83d", ensure_ascii=False), encoding="utf-8", name="t")
def test_dumped_values_key_like_json_loads(
    core: ModuleType, text: str, encoding: str, name: str
) -> None:
    assert_like_json_loads(core, name, encode(text, encoding))


@fewer_examples(4)
@given(value=json_values(max_leaves=10), options=dump_options)
def test_dumped_values_key_like_their_value(backend: ModuleType, value: Any, options: Any) -> None:
    # The round trip through text keeps the key (json.loads(json.dumps(v)) == v for these).
    text = json.dumps(value, **options)
    assert backend.call_key_json("t", text) == reference.call_key("t", json.loads(text))


# --- hypothesis: texts from the JSON grammar, spelled every way json.loads accepts ------------

json_ws = st.text(st.sampled_from(" \t\n\r"), max_size=2)

NUMBER_SPELLINGS = [
    "0",
    "-0",
    "1.0",
    "-0.0",
    "1e2",
    "1E2",
    "1E+2",
    "1e-2",
    "0.5e-3",
    "0e0",
    "1e400",
    "-1e400",
    "1e-400",
    "1e23",
    "5e-324",
    "1.7976931348623159e308",
    "4503599627370495.5",
    "18446744073709551616",
    "-9223372036854775809",
    "9" * 4300,
    "-" + "1" * 4300,
    "9" * 4301,
    "NaN",
    "Infinity",
    "-Infinity",
]
numbers = st.one_of(
    st.sampled_from(NUMBER_SPELLINGS),
    st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
)


def _u_escape(code: int, upper: bool) -> str:
    return f"\\u{code:04X}" if upper else f"\\u{code:04x}"


def _pair_escape(code: int, upper: bool) -> str:
    high, low = divmod(code - 0x10000, 0x400)
    return _u_escape(0xD800 + high, upper) + _u_escape(0xDC00 + low, upper)


string_pieces = st.one_of(
    st.characters(min_codepoint=0x20, exclude_characters='"\\'),
    st.integers(0xD800, 0xDFFF).map(chr),  # raw lone surrogates: legal in a str
    st.integers(0x10000, 0x10FFFF).map(chr),
    st.sampled_from(["\x7f", " ", "\xa0", "\u3000", "\u2028", "\ufeff", "/"]),
    st.sampled_from(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"]),
    st.builds(_u_escape, st.integers(0, 0xFFFF), st.booleans()),
    st.builds(_u_escape, st.integers(0xD800, 0xDFFF), st.booleans()),
    st.builds(_u_escape, st.sampled_from([0, 9, 0x1C, 0x1F, 0x20, 0x85, 0x3000]), st.booleans()),
    st.builds(_pair_escape, st.integers(0x10000, 0x10FFFF), st.booleans()),
    texts().map(lambda t: json.dumps(t)[1:-1]),
    texts().map(lambda t: json.dumps(t, ensure_ascii=False)[1:-1]),
)
strings = st.lists(string_pieces, max_size=6).map(lambda pieces: '"' + "".join(pieces) + '"')
# A small pool of keys, so that objects get duplicate keys (some spelled differently).
object_keys = st.one_of(
    st.sampled_from(
        [
            '"a"',
            '"\\u0061"',
            '"b"',
            '"request_id"',
            '"nonce"',
            '"\\ud800"',
            '"\ud800"',
            '"\\ud83d\\ude00"',
            '"\U0001f600"',
            '"\\u00e9"',
            '"\u00e9"',
            '" a"',
            '""',
        ]
    ),
    strings,
)
literals = st.sampled_from(["null", "null", "true", "false"])


@st.composite
def _array(draw: st.DrawFn, children: SearchStrategy[str]) -> str:
    items = draw(st.lists(children, max_size=4))
    if not items:
        return "[" + draw(json_ws) + "]"
    return "[" + ",".join(draw(json_ws) + item + draw(json_ws) for item in items) + "]"


@st.composite
def _object(draw: st.DrawFn, children: SearchStrategy[str]) -> str:
    entries = draw(st.lists(st.tuples(object_keys, children), max_size=4))
    if not entries:
        return "{" + draw(json_ws) + "}"
    return (
        "{"
        + ",".join(
            draw(json_ws) + key + draw(json_ws) + ":" + draw(json_ws) + value + draw(json_ws)
            for key, value in entries
        )
        + "}"
    )


json_texts = st.builds(
    lambda before, value, after: before + value + after,
    json_ws,
    st.recursive(
        st.one_of(numbers, strings, literals),
        lambda children: st.one_of(_array(children), _object(children)),
        max_leaves=20,
    ),
    json_ws,
)
volatile_sets = st.one_of(
    st.none(),
    st.frozensets(st.sampled_from(["a", "b", "nonce", "\ud800", "\U0001f600", " a", ""])),
)


@given(text=json_texts, encoding=encodings, volatile_keys=volatile_sets)
@example(text='{"a":1.0,"a":1E+2,"b":[-0,-0.0,0.5e-3,1e400]}', encoding="str", volatile_keys=None)
@example(text='"\\ud83d\\ude00\\ud800\\/\ud800"', encoding="utf-8", volatile_keys=None)
@example(text='{"\\ud800":1,"\ud800":2}', encoding="utf-16-be", volatile_keys=frozenset({"\ud800"}))
def test_spelled_texts_key_like_json_loads(
    core: ModuleType, text: str, encoding: str, volatile_keys: Any
) -> None:
    assert_like_json_loads(core, "t", encode(text, encoding), volatile_keys=volatile_keys)


# --- hypothesis: broken texts ----------------------------------------------------------------

INSERTED = [
    *'{}[],:"\\ -+.eE0123456789ntfNIa/',
    "\x00",
    "\x01",
    "\x1f",
    "\x7f",
    "\x0b",
    "\x0c",
    "\x1c",
    "\xa0",
    "\u2028",
    "\u3000",
    "\ufeff",
    "\ud800",
    "\udc00",
    "\u00e9",
    "\U0001f600",
]
BAD_ESCAPES = [
    "\\x",
    "\\u12",
    "\\u12G4",
    "\\uZZZZ",
    "\\U0001F600",
    "\\'",
    "\\a",
    "\\0",
    "\\\n",
    "\\u",
    "\\",
    "\\u00e",
    "\\ud800\\u12x4",
    "\\ud800\\x",
    "\\ud800\\u",
    "\\ud800\\",
    "\\uD83D\\uDZ00",
    "\\ud83d\\u\u00e9\u00e9\u00e9\u00e9",
]
GARBAGE = [" x", "}", "]", ",", " 1", "\x00", "\ufeff", "//", " {}", "\n\n[", "\u3000", "\xa0"]
mutations = st.sampled_from(
    [
        "truncate",
        "truncate",
        "insert",
        "delete",
        "bad_escape",
        "trailing_comma",
        "control",
        "garbage",
        "bom",
        "raw_surrogate",
        "double",
    ]
)


@st.composite
def broken_texts(draw: st.DrawFn) -> str:
    """A valid text, broken (most of the time) by one edit."""
    text = draw(st.one_of(json_texts, dumped_texts(max_leaves=8)), label="valid")
    kind = draw(mutations, label="mutation")
    pos = draw(st.integers(0, len(text)), label="pos")
    quotes = [m.end() for m in re.finditer('"', text)]
    if kind == "truncate":
        return text[:pos]
    if kind == "insert":
        return text[:pos] + draw(st.one_of(st.sampled_from(INSERTED), st.characters())) + text[pos:]
    if kind == "delete":
        return text[:pos] + text[pos + 1 :]
    if kind in ("bad_escape", "control") and quotes and draw(st.booleans()):
        pos = draw(st.sampled_from(quotes))  # just inside a string (or a key)
    if kind == "bad_escape":
        return text[:pos] + draw(st.sampled_from(BAD_ESCAPES)) + text[pos:]
    if kind == "control":
        return text[:pos] + chr(draw(st.integers(0, 0x1F))) + text[pos:]
    if kind == "trailing_comma":
        closers = [m.start() for m in re.finditer(r"[\]}]", text)]
        at = draw(st.sampled_from(closers)) if closers else len(text)
        return text[:at] + draw(st.sampled_from([",", ", ", ",\n"])) + text[at:]
    if kind == "garbage":
        return text + draw(st.sampled_from(GARBAGE))
    if kind == "bom":
        return "\ufeff" + text
    if kind == "raw_surrogate":
        return text[:pos] + chr(draw(st.integers(0xD800, 0xDFFF))) + text[pos:]
    return text + draw(json_ws) + text


@given(text=broken_texts(), encoding=encodings)
@example(text="[1,]", encoding="str")
@example(text='{"a":"\\ud800\\u12x4"}', encoding="utf-8")
@example(text="\ufeff{}", encoding="str")
@example(text="\ufeff{}", encoding="utf-8")
@example(text='"\ud800', encoding="utf-8")
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_broken_texts_raise_like_json_loads(core: ModuleType, text: str, encoding: str) -> None:
    assert_like_json_loads(core, "t", encode(text, encoding))


small_json_texts = st.recursive(
    st.one_of(numbers, strings, literals),
    lambda children: st.one_of(_array(children), _object(children)),
    max_leaves=6,
)


@fewer_examples(5)
@given(text=st.one_of(small_json_texts, dumped_texts(max_leaves=4)))
@example(text='{"a":[1.5e-3,"\\ud83d\\ude00\u00e9\ud800"],"b":-Infinity}')
def test_truncated_at_every_position(core: ModuleType, text: str) -> None:
    raw = text.encode("utf-8", "surrogatepass")
    for end in range(len(text) + 1):
        assert_like_json_loads(core, "t", text[:end])
    for end in range(len(raw) + 1):  # also inside multi-byte sequences
        assert_like_json_loads(core, "t", raw[:end])


# --- hypothesis: bytes -------------------------------------------------------------------------

BYTE_PIECES = [
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"1",
    b" ",
    b"\\",
    b"\\u",
    b"\x00",
    b"\xed\xa0\x80",  # an encoded lone surrogate: json.loads accepts it (surrogatepass)
    b"\xed\xbf\xbf",
    b"\xed\xa0",
    b"\xed",
    b"\xc3\xa9",
    b"\xc3",
    b"\xc0\x80",
    b"\xe0\x80\x80",
    b"\xf0\x9f\x98\x80",
    b"\xf4\x90\x80\x80",
    b"\x80",
    b"\xff",
    b"\xef\xbb\xbf",
    b"\xff\xfe",
    b"\xfe\xff",
]
byte_texts = st.one_of(
    st.binary(max_size=24),
    st.lists(st.sampled_from(BYTE_PIECES), max_size=10).map(b"".join),
    st.lists(st.one_of(st.sampled_from(BYTE_PIECES), st.binary(max_size=3)), max_size=6).map(
        lambda parts: b'["' + b"".join(parts) + b'"]'
    ),
)


@given(data=byte_texts)
@example(data=b'"\xed\xa0\x80"')
@example(data=b'"\xed\xa0\xbd\xed\xb8\x80"')
@example(data=b'"\xed\xa0"')
@example(data=b"\xef\xbb\xbf\xef\xbb\xbf1")
def test_random_bytes_like_json_loads(core: ModuleType, data: bytes) -> None:
    assert_like_json_loads(core, "t", data)
    assert_like_json_loads(core, "t", bytearray(data))


@given(valid=json_texts, data=st.data())
def test_bytes_spliced_into_texts_like_json_loads(
    core: ModuleType, valid: str, data: st.DataObject
) -> None:
    raw = valid.encode("utf-8", "surrogatepass")
    pos = data.draw(st.integers(0, len(raw)), label="pos")
    piece = data.draw(st.one_of(st.sampled_from(BYTE_PIECES), st.binary(min_size=1, max_size=2)))
    assert_like_json_loads(core, "t", raw[:pos] + piece + raw[pos:])


# --- call_keys ---------------------------------------------------------------------------------


def keys_one_by_one(backend: ModuleType, calls: list[Any], **kwargs: Any) -> list[str]:
    return [
        backend.call_key_json(name, args, **kwargs)
        if isinstance(args, (str, bytes, bytearray))
        else backend.call_key(name, args, **kwargs)
        for name, args in calls
    ]


class Text(str):
    """A str subclass: still JSON text."""


MIXED_CALLS: list[Any] = [
    ("get_logs", SEED_TEXT),
    ("get_logs", json.loads(SEED_TEXT)),
    ("get_logs", SEED_TEXT.encode()),
    ("get_logs", bytearray(SEED_TEXT.encode("utf-16"))),
    ["get_logs", Text(SEED_TEXT)],
    ("t", '{"a":1,"nonce":2,"a":null}'),
    ("t", {"a": [1.0, None, " x  y "], "nonce": 2}),
    ("t", [1, 2]),
    ("t", "[1,2]"),
    ("t", "1e400"),
    ("t", None),
    ("t", "null"),
    ("\ud800", '"\\ud800"'),
    ("t", (1, 2)),
    ("t", b'"\xed\xa0\x80"'),
]


@pytest.mark.parametrize("threads", [None, 1, 2, 3])
@pytest.mark.parametrize("volatile_keys", [None, {"a"}, {"a", 1}], ids=stable_id)
def test_call_keys_equals_keys_one_by_one(
    backend: ModuleType, threads: int | None, volatile_keys: Any
) -> None:
    want = keys_one_by_one(reference, MIXED_CALLS, volatile_keys=volatile_keys)
    assert keys_one_by_one(backend, MIXED_CALLS, volatile_keys=volatile_keys) == want
    got = backend.call_keys(MIXED_CALLS, volatile_keys=volatile_keys, threads=threads)
    assert got == want
    assert backend.call_keys(iter(MIXED_CALLS), volatile_keys=volatile_keys) == want
    assert backend.call_keys(tuple(MIXED_CALLS), volatile_keys=volatile_keys) == want
    assert backend.call_keys([]) == []


def large_batch(count: int = 900) -> list[Any]:
    """Enough JSON text (> 256 KiB) for the native core to key it on several threads, with
    dict arguments in between."""
    calls: list[Any] = []
    for i in range(count):
        args = {
            "service": f"svc-{i % 13}",
            "query": f"  error   near line {i}\t ",
            "ratio": i / 7,
            "whole": float(i),
            "tags": ["\u00e9t\u00e9", "\U0001f600", None, i],
            "request_id": f"r-{i}",
            "pad": "x" * (250 + i % 50),
        }
        if i % 10 == 3:
            calls.append(("t", args))
        elif i % 10 == 7:
            calls.append(("t", json.dumps(args).encode()))
        else:
            calls.append(("t", json.dumps(args, ensure_ascii=i % 2 == 0, indent=i % 3 or None)))
    return calls


LARGE = large_batch()
LARGE_TEXT_BYTES = sum(
    len(args) if isinstance(args, (bytes, bytearray)) else len(args.encode())
    for _, args in LARGE
    if isinstance(args, (str, bytes))
)


def test_large_batch_crosses_the_parallel_threshold() -> None:
    assert LARGE_TEXT_BYTES > PARALLEL_MIN_BYTES


@pytest.mark.parametrize("threads", [None, 1, 2, 3, 8])
def test_call_keys_large_batch(backend: ModuleType, threads: int | None) -> None:
    want = keys_one_by_one(reference, LARGE)
    assert backend.call_keys(LARGE, threads=threads) == want
    assert backend.call_keys(LARGE, threads=threads, volatile_keys={"pad", "ratio"}) == (
        keys_one_by_one(reference, LARGE, volatile_keys={"pad", "ratio"})
    )


def broken_at(calls: list[Any], errors: dict[int, Any]) -> list[Any]:
    out = list(calls)
    for index, bad in errors.items():
        out[index] = bad
    return out


BAD_TEXT = ("t", '{"a":1,}')
BAD_BYTES = ("t", b'"\xff"')
BAD_DICT = ("t", {"a": {1, 2}})
BAD_PAIR = ("t",)
BAD_NAME = (5, "{}")
DEEP_TEXT = ("t", nested(300, "list"))
LONG_INT = ("t", "[" + "9" * 5000 + "]")
SMALL = [("t", f'{{"i":{i}}}') if i % 2 else ("t", {"i": i}) for i in range(40)]
LAST = len(LARGE) - 1
LATE = len(LARGE) * 3 // 4  # in the last of two or three threads' shares

ERROR_CASES = {
    "text then dict": (SMALL, {3: BAD_TEXT, 7: BAD_DICT}, 3),
    "dict then text": (SMALL, {3: BAD_DICT, 7: BAD_TEXT}, 3),
    "bytes then text": (SMALL, {5: BAD_BYTES, 6: BAD_TEXT}, 5),
    "text then bytes": (SMALL, {5: BAD_TEXT, 6: BAD_BYTES}, 5),
    "pair then text": (SMALL, {9: BAD_PAIR, 11: BAD_TEXT}, 9),
    "text then pair": (SMALL, {9: BAD_TEXT, 11: BAD_PAIR}, 9),
    "name then text": (SMALL, {9: BAD_NAME, 11: BAD_TEXT}, 9),
    "deep then text": (SMALL, {1: DEEP_TEXT, 11: BAD_TEXT}, 1),
    "text then deep": (SMALL, {1: BAD_TEXT, 11: DEEP_TEXT}, 1),
    "long int then text": (SMALL, {2: LONG_INT, 4: BAD_TEXT}, 2),
    "text then long int": (SMALL, {2: BAD_TEXT, 4: LONG_INT}, 2),
    "long int then dict": (SMALL, {2: LONG_INT, 4: BAD_DICT}, 2),
    "last only": (SMALL, {39: BAD_TEXT}, 39),
    "large: text, text": (LARGE, {5: BAD_TEXT, LATE: BAD_TEXT}, 5),
    "large: late text, dict": (LARGE, {LATE: BAD_TEXT, LATE + 50: BAD_DICT}, LATE),
    "large: dict, late text": (LARGE, {LATE: BAD_DICT, LATE + 50: BAD_TEXT}, LATE),
    "large: second half only": (LARGE, {LATE: BAD_TEXT, LAST: BAD_BYTES}, LATE),
    "large: deep late, text later": (LARGE, {LATE - 1: DEEP_TEXT, LAST: BAD_TEXT}, LATE - 1),
    "large: long int late": (LARGE, {LATE + 1: LONG_INT, LAST - 1: BAD_TEXT}, LATE + 1),
    "large: text early, dict late": (LARGE, {10: BAD_TEXT, LAST: BAD_DICT}, 10),
    "large: pair early, text late": (LARGE, {10: BAD_PAIR, LAST: BAD_TEXT}, 10),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_call_keys_error_names_the_lowest_failing_call(
    backend: ModuleType, case: str, threads: int
) -> None:
    calls, errors, lowest = ERROR_CASES[case]
    batch = broken_at(calls, errors)
    with pytest.raises(Exception) as raised:
        backend.call_keys(batch, threads=threads)
    assert raised.value.__notes__ == [f"in call {lowest} of call_keys()"]
    # The error is the lowest call's own, as keying that call alone raises it.
    alone = outcome(reference.call_keys, [errors[lowest]])
    assert outcome(backend.call_keys, batch, threads=threads) == alone
    assert outcome_with_notes(backend.call_keys, batch, threads=threads) == outcome_with_notes(
        reference.call_keys, batch, threads=threads
    )


@pytest.mark.parametrize(
    ("threads", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (-(2**70), ValueError),
        (True, TypeError),
        (False, TypeError),
        (1.0, TypeError),
        ("2", TypeError),
        (2.5, TypeError),
        ([2], TypeError),
    ],
    ids=stable_id,
)
def test_call_keys_bad_threads(backend: ModuleType, threads: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="threads"):
        backend.call_keys([("t", "{}")], threads=threads)
    with pytest.raises(error, match="threads"):
        backend.call_keys([], threads=threads)


@pytest.mark.parametrize("threads", [64, 2**31, 2**63, 10**30], ids=stable_id)
def test_call_keys_any_positive_thread_count(core: ModuleType, threads: int) -> None:
    """The reference accepts any positive int for ``threads``."""
    calls = [("t", "{}"), ("t", {"a": 1})]
    assert outcome(core.call_keys, calls, threads=threads) == outcome(
        reference.call_keys, calls, threads=threads
    )


def test_call_keys_many_threads_large_batch(backend: ModuleType) -> None:
    batch = LARGE
    assert backend.call_keys(batch, threads=200) == keys_one_by_one(reference, batch)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_call_keys_threads_that_cannot_start_do_not_crash(core: ModuleType) -> None:
    """Where the OS refuses more threads (here: little address space), call_keys still
    answers as the reference does; the process must not abort (docs/design/guard.md, "Errors")."""
    script = textwrap.dedent(
        """
        import resource
        import tripwire._core as core, tripwire.reference as reference
        calls = [("t", '{"q":"%06d","pad":"%s"}' % (i, "x" * 80)) for i in range(4000)]
        want = reference.call_keys(calls)
        size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize"))
        limit = size * 1024 + 256 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            got = core.call_keys(calls, threads=4000)
        except Exception as exc:
            print("raised", type(exc).__name__, exc)
        else:
            print("ok" if got == want else "wrong keys")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert (run.returncode, run.stdout.strip()) == (0, "ok"), run.stderr[-2000:]


def test_call_keys_iterator_errors_are_not_notes_of_a_call(core: ModuleType) -> None:
    """An error raised by the iterable itself is not an error of a call: the reference
    raises it as it is, without a note."""

    def calls() -> Iterator[Any]:
        yield ("t", "{}")
        raise KeyError("from the iterable")

    assert outcome_with_notes(core.call_keys, calls()) == outcome_with_notes(
        reference.call_keys, calls()
    )


class Pair:
    """Indexable and sized, but not a ``collections.abc.Sequence``."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __getitem__(self, index: int) -> Any:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)


class PairList(UserList[Any]):
    """A ``Sequence`` that is not a list or tuple."""


@pytest.mark.parametrize(
    "call",
    [
        Pair("t", "{}"),
        PairList(["t", "{}"]),
        PairList(["t", {"a": 1}]),
        memoryview(b"ab"),
        range(2),
        {0: "t", 1: "{}"},
        ("t", "{}", None),
        ("t",),
        b"ab",
        ["t", bytearray(b"[1]")],
        ("t", memoryview(b"[1]")),
        ("t", PairList([1])),
        None,
    ],
    ids=stable_id,
)
def test_call_keys_pair_shapes(backend: ModuleType, call: Any) -> None:
    calls = [("t", "[]"), call]
    assert outcome_with_notes(backend.call_keys, calls) == outcome_with_notes(
        reference.call_keys, calls
    )


def test_call_keys_non_iterable(backend: ModuleType) -> None:
    with pytest.raises(TypeError):
        backend.call_keys(5)
    with pytest.raises(TypeError) as raised:
        backend.call_keys("ab")
    assert raised.value.__notes__ == ["in call 0 of call_keys()"]


call_args = st.one_of(
    json_texts,
    broken_texts(),
    json_values(max_leaves=5),
    json_texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
    byte_texts,
)


@given(
    calls=st.lists(st.tuples(st.sampled_from(["t", "u", "\ud800"]), call_args), max_size=5),
    threads=st.sampled_from([None, 1, 2]),
    volatile_keys=volatile_sets,
)
@fewer_examples(2)
def test_call_keys_like_the_reference(
    core: ModuleType, calls: list[Any], threads: int | None, volatile_keys: Any
) -> None:
    got = outcome_with_notes(core.call_keys, calls, threads=threads, volatile_keys=volatile_keys)
    want = outcome_with_notes(
        reference.call_keys, calls, threads=threads, volatile_keys=volatile_keys
    )
    assert got == want
    if got[0] == "ok":
        assert got[1] == keys_one_by_one(reference, calls, volatile_keys=volatile_keys)


# --- Guard.check_json --------------------------------------------------------------------------


def verdict_fields(verdict: Any) -> tuple[Any, ...]:
    return (
        verdict.action,
        verdict.reason,
        verdict.tool,
        verdict.key,
        verdict.repeats,
        verdict.step,
        verdict.invalid_arguments,
        verdict.message,
        verdict.call_id,
    )


def check_outcome(guard: Any, name: Any, text: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        return ("ok", verdict_fields(guard.check_json(name, text, **kwargs)))
    except Exception as exc:
        return (type(exc), str(exc))


def loads_error(text: Any) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"{short(text)} is valid JSON")


GUARD_INVALID = [t for t in INVALID_TEXTS if isinstance(t, (str, bytes, bytearray))]


@pytest.mark.parametrize("text", GUARD_INVALID, ids=short)
def test_check_json_invalid_text_does_not_raise(backend: ModuleType, text: Any) -> None:
    guard = backend.Guard()
    verdict = guard.check_json("t", text)
    assert verdict.action == "allow"
    assert verdict.invalid_arguments == loads_error(text)
    assert verdict.key == reference.Guard().check_json("t", text).key
    assert guard.steps == 1


def test_check_json_repeated_broken_text_nudges_then_stops(backend: ModuleType) -> None:
    guard = backend.Guard()
    text = '{"service":"checkout","since":"15m",'
    actions = [guard.check_json("get_logs", text) for _ in range(3)]
    assert [v.action for v in actions] == ["allow", "nudge", "stop"]
    assert [v.repeats for v in actions] == [1, 2, 3]
    assert actions[2].reason == "loop_detected"
    assert all(v.invalid_arguments == loads_error(text) for v in actions)
    assert len({v.key for v in actions}) == 1
    assert guard.stopped


def test_check_json_whitespace_variants_of_a_broken_text_share_a_key(backend: ModuleType) -> None:
    guard = backend.Guard()
    variants = [
        '{"service": "checkout",  "since":"15m",',
        '  {"service":\n"checkout",\t"since":"15m",\r\n',
        '{"service":\u3000"checkout", \x1c "since":"15m", ',
        b'{"service": "checkout",\n\n"since":"15m",',
    ]
    verdicts = [guard.check_json("get_logs", text) for text in variants[:2]]
    assert [v.action for v in verdicts] == ["allow", "nudge"]
    keys = {backend.Guard().check_json("get_logs", text).key for text in variants}
    assert len(keys) == 1
    assert all(v.invalid_arguments is not None for v in verdicts)
    # Different words (not only whitespace) are a different call.
    other = backend.Guard().check_json("get_logs", '{"service": "checkout", "since":"16m",')
    assert other.key not in keys


def test_check_json_invalid_key_is_not_a_valid_key(backend: ModuleType) -> None:
    guard = backend.Guard()
    valid = guard.check_json("t", "[1]")
    broken = guard.check_json("t", "[1")
    assert valid.invalid_arguments is None
    assert broken.invalid_arguments is not None
    assert valid.key != broken.key
    assert broken.action == "allow"


@pytest.mark.parametrize(
    "text", VALID_TEXTS[:40] + [t for t in VALID_TEXTS if not isinstance(t, str)], ids=short
)
def test_check_json_valid_text_keys_like_check(backend: ModuleType, text: Any) -> None:
    by_text = backend.Guard().check_json("get_logs", text)
    by_value = backend.Guard().check("get_logs", json.loads(text))
    assert by_text.key == by_value.key == contract("get_logs", text)
    assert by_text.invalid_arguments is None
    assert verdict_fields(by_text) == verdict_fields(by_value)


def test_check_json_and_check_count_as_one_call(backend: ModuleType) -> None:
    guard = backend.Guard()
    first = guard.check("get_logs", json.loads(SEED_TEXT))
    second = guard.check_json("get_logs", '{"level":"error","since":"15m","service":"checkout "}')
    third = guard.check_json("get_logs", SEED_TEXT.encode("utf-16"))
    assert [first.action, second.action, third.action] == ["allow", "nudge", "stop"]


def test_check_json_uses_the_guards_volatile_keys(backend: ModuleType) -> None:
    guard = backend.Guard(volatile_keys={"cursor"})
    a = guard.check_json("t", '{"q":"x","cursor":"c1","nonce":1}')
    b = guard.check_json("t", b'{"q":"x","cursor":"c2","nonce":1}')
    assert b.action == "nudge"
    assert a.key == b.key == contract("t", '{"q":"x","nonce":1}', volatile_keys={"cursor"})
    # The guard's set replaces the default one: nonce is not volatile here.
    c = guard.check_json("t", '{"q":"x","cursor":"c3","nonce":2}')
    assert c.key != a.key
    assert c.action == "allow"


def test_check_json_call_id(backend: ModuleType) -> None:
    guard = backend.Guard()
    first = guard.check_json("t", "[1", call_id="c1")
    again = guard.check_json("t", "[1", call_id="c1")
    assert verdict_fields(again) == verdict_fields(first)
    assert guard.steps == 1
    with pytest.raises(TypeError):
        guard.check_json("t", "[1", call_id=5)
    assert guard.steps == 1


@pytest.mark.parametrize("text", [nested(300, "list"), "[" * 100_000, "[{" * 50_000], ids=short)
def test_check_json_of_deep_text_is_a_verdict(backend: ModuleType, text: str) -> None:
    """Issue 17: deep text no longer raises from check_json (it did, RecursionError)."""
    guard = backend.Guard()
    guard.check_json("t", "{}")
    verdict = guard.check_json("t", text)
    assert verdict.invalid_arguments
    assert verdict.key == tripwire._keys.invalid_json_key("t", text)
    assert guard.steps == 2


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        (5, "{}", TypeError),
        (5, "{", TypeError),
        ("t", 5, TypeError),
        ("t", None, TypeError),
    ],
    ids=short,
)
def test_check_json_errors_that_are_not_invalid_json_raise(
    backend: ModuleType, name: Any, text: Any, error: type[Exception]
) -> None:
    guard = backend.Guard()
    guard.check_json("t", "{}")
    with pytest.raises(error):
        guard.check_json(name, text)
    assert guard.steps == 1
    assert len(guard.keys()) == 1


GUARD_CORNERS = (
    VALID_TEXTS[:30]
    + GUARD_INVALID
    + [
        "[" * 999 + "x",
        "[" * 500 + "x",
        nested(300, "list"),
        "9" * 4301,
    ]
)


@pytest.mark.parametrize("text", GUARD_CORNERS, ids=short)
def test_check_json_native_like_reference(core: ModuleType, text: Any) -> None:
    native_guard, reference_guard = core.Guard(), reference.Guard()
    for _ in range(3):
        assert check_outcome(native_guard, "t", text) == check_outcome(reference_guard, "t", text)


guard_texts = st.one_of(small_json_texts, broken_texts(), byte_texts)


@given(
    texts_=st.lists(guard_texts, min_size=1, max_size=4),
    order=st.lists(st.integers(0, 3), max_size=10),
)
@fewer_examples(2)
def test_check_json_sequences_like_reference(
    core: ModuleType, texts_: list[Any], order: list[int]
) -> None:
    native_guard, reference_guard = core.Guard(), reference.Guard()
    for i in order:
        text = texts_[i % len(texts_)]
        got = check_outcome(native_guard, "t", text)
        want = check_outcome(reference_guard, "t", text)
        assert got == want, short(text)


BATCH_ERRORS = [BAD_TEXT, BAD_BYTES, BAD_DICT, BAD_PAIR, BAD_NAME, DEEP_TEXT, LONG_INT]


@fewer_examples(10)
@given(
    errors=st.dictionaries(
        st.integers(0, LAST), st.sampled_from(BATCH_ERRORS), min_size=1, max_size=3
    ),
    threads=st.sampled_from([1, 2, 3]),
)
def test_call_keys_errors_in_a_large_batch_like_reference(
    core: ModuleType, errors: dict[int, Any], threads: int
) -> None:
    batch = broken_at(LARGE, errors)
    got = outcome_with_notes(core.call_keys, batch, threads=threads)
    assert got == outcome_with_notes(reference.call_keys, batch, threads=threads)
    assert got[-1] == [f"in call {min(errors)} of call_keys()"]


# --- text at chunk boundaries, and batches in every container ----------------------------

# The native core converts and scans text 16 units at a time; a character that is not
# ASCII (Latin-1, BMP, astral, a lone surrogate) lands on every offset of such a chunk here.
ODD_CHARACTERS = ["é", "\xa0", "東", "\u3000", "😀", "\ud800"]


@pytest.mark.parametrize("odd", ODD_CHARACTERS, ids=lambda c: f"U+{ord(c):04X}")
def test_odd_characters_at_every_chunk_offset(backend: ModuleType, odd: str) -> None:
    for length in range(0, 40):
        for at in range(0, length + 1):
            value = ("ab cd  ef" * 5)[:length]
            value = value[:at] + odd + value[at:]
            text = '{"k": "' + value + '", "' + value + '": 1.25}'
            expected = contract("t", text)
            assert backend.call_key_json("t", text) == expected, (length, at)
            if odd != "\ud800":
                assert backend.call_key_json("t", text.encode()) == expected, (length, at)


def test_call_keys_reads_every_kind_of_iterable_alike(backend: ModuleType) -> None:
    calls = [("get_logs", SEED_TEXT), ("t", {"a": [1, 2.5]}), ("t", "[1, 2]"), ("u", "{}")]
    expected = [reference.call_key(n, json.loads(a) if isinstance(a, str) else a) for n, a in calls]
    assert backend.call_keys(calls) == expected
    assert backend.call_keys(tuple(calls)) == expected
    assert backend.call_keys(iter(calls)) == expected
    assert backend.call_keys(UserList(calls)) == expected
    assert backend.call_keys([]) == []


def test_call_keys_sees_calls_appended_while_it_reads(backend: ModuleType) -> None:
    # A dict subclass is normalised by Python code, which here appends to the batch being
    # read: like a for loop over the list, call_keys reads on to the new end.
    calls: list[Any] = []

    class Growing(dict[str, Any]):
        def items(self) -> Any:
            calls.extend(("grown", f'{{"n": {n}}}') for n in (2, 3))
            return super().items()

    calls.extend([("t", Growing(a=1)), ("t", "{}")])
    keys = backend.call_keys(calls, threads=1)
    assert len(keys) == len(calls) == 4
    assert keys[0] == reference.call_key("t", {"a": 1})
    assert keys[2:] == [reference.call_key("grown", {"n": n}) for n in (2, 3)]


# With threads, workers key most of each block while the next block is read: a batch of
# several blocks (4,096 calls each natively, big enough to be shared), with errors in later
# blocks and the iterable failing while a block is being keyed.
MANY = [
    ("get_logs", json.dumps({"service": f"s{i % 7}", "n": i, "q": "  x  ", "pad": "x" * 40}))
    for i in range(20_000)
]


@pytest.mark.parametrize("threads", [1, 2])
def test_call_keys_several_blocks_like_reference(core: ModuleType, threads: int) -> None:
    assert core.call_keys(MANY, threads=threads) == [
        reference.call_key("get_logs", json.loads(text)) for _, text in MANY
    ]
    for errors in (
        {9_000: BAD_TEXT, 17_000: BAD_DICT},
        {17_500: BAD_PAIR},
        {8_191: BAD_TEXT},
        {4_095: BAD_TEXT},
    ):
        batch = broken_at(MANY, errors)
        got = outcome_with_notes(core.call_keys, batch, threads=threads)
        assert got == outcome_with_notes(reference.call_keys, batch, threads=threads)
        assert got[-1] == [f"in call {min(errors)} of call_keys()"]

    def failing() -> Any:
        yield from MANY[:12_000]
        raise KeyError("the source ran dry")

    got = outcome_with_notes(core.call_keys, failing(), threads=threads)
    assert got == outcome_with_notes(reference.call_keys, failing(), threads=threads)
    assert got[0] is KeyError
