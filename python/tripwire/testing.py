"""Hypothesis strategies for fuzzing code that builds or consumes tripwire call keys.

This module imports `hypothesis <https://hypothesis.readthedocs.io>`_, which tripwire itself
does not depend on: it is importable only where hypothesis is installed (``pip install
tripwire[test]`` or ``pip install hypothesis``).

* :func:`json_values` draws JSON-like argument values that reach every corner of the key
  contract (docs/design/key.md): the 29 code points ``str.split()`` treats as whitespace, in runs,
  leading and trailing; lone surrogates; astral characters; DEL and C0 controls; float ties,
  subnormals, the ``1e-05``/``0.0001`` boundary, huge and non-finite floats; integers past 64
  bits; ``bool`` beside ``int``; ``None``; nested dicts and lists.
* :func:`exotic_values` adds what is not JSON but which ``call_key`` still accepts or must
  reject the way ``json.dumps`` does: tuples, subclasses, non-``str`` keys and, optionally,
  unserialisable values (``Decimal``, sets, bytes, mixed-type keys).
* :func:`check_tool` runs *your* tool on such spellings, and on one call twice, and reports
  where the key would lie about it, with the policy that makes it truthful;
  :func:`assert_tool_honest` is its form for a test suite.
* :func:`equivalent_variants` draws, for one argument value, other spellings of it that must
  get the same call key: reordered keys, different whitespace, extra ``None`` entries, ints
  written as floats, volatile keys added.

Example, in a test of your own tool wrapper::

    from hypothesis import given, strategies as st
    import tripwire
    from tripwire.testing import equivalent_variants, json_values

    @given(st.data(), json_values())
    def test_retries_are_detected(data, args):
        variant = data.draw(equivalent_variants(args))
        assert tripwire.call_key("get_logs", variant) == tripwire.call_key("get_logs", args)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from enum import IntEnum, StrEnum
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tripwire import DEFAULT_VOLATILE_KEYS
from tripwire._toolcheck import KINDS, Finding, ToolReport, ToolUnavailable, check_tool

__all__ = (
    "KINDS",
    "WHITESPACE",
    "Colour",
    "Finding",
    "FloatSubclass",
    "IntSubclass",
    "Mode",
    "StrSubclass",
    "ToolReport",
    "ToolUnavailable",
    "assert_tool_honest",
    "check_tool",
    "dict_keys",
    "equivalent_variants",
    "exotic_values",
    "json_values",
    "texts",
)

#: The 29 code points on which ``str.split()`` splits, in code-point order. Rust's
#: ``char::is_whitespace`` lacks U+001C..U+001F, which is why they are worth fuzzing.
WHITESPACE: str = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000"
)

# Below 2**53 every int is exactly a float, so `float(n)` is another spelling of `n`.
_EXACT_FLOAT_LIMIT = 2**53

# Python refuses to turn ints of more than 4300 digits into text (sys.int_max_str_digits),
# so the largest drawn have 4300 digits: 10**4299 is the largest power of ten json.dumps
# still writes. (Drawn as exponents, so that failing examples print short.)
_BIG_INTS = (
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    -(2**64),
    2**200 + 1,
    -(3**300),
)
_MAX_INT_DIGITS = 4300

_SPECIAL_FLOATS = (
    0.5,
    1.5,
    2.5,
    -2.5,
    0.1,
    0.3,
    0.1 + 0.2,
    1 / 3,
    1e-4,
    1e-5,
    2.5e-5,
    9.999999999999999e-05,
    1e15 + 0.5,
    4503599627370495.5,
    1e16,
    1e22,
    1e23,
    2.0**53,
    2.0**53 + 2,
    2.0**64,
    1e308,
    1.7976931348623157e308,
    2.2250738585072014e-308,
    5e-324,
    -5e-324,
    0.0,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
)

# Dict keys and tool names that matter: the seed's, look-alikes of the volatile names, and
# keys whose order differs between code points and UTF-16 (U+FF61 vs U+1F600).
_KEY_WORDS = (
    "service",
    "since",
    "level",
    "cursor",
    "q",
    "a",
    "b",
    "B",
    "",
    " ",
    "a b",
    " a",
    "a ",
    "\t",
    "\x1c",
    "\x7f",
    "é",
    "\uff61",
    "\U0001f600",
    "\ud83d\ude00",
    "\ud800",
    "\udfff",
    "Request_ID",
    "request_id ",
    " nonce",
)


class Colour(IntEnum):
    """An ``IntEnum``; ``json.dumps`` writes its members as their integer values."""

    RED = 1
    GREEN = 2
    HUGE = 2**70


class Mode(StrEnum):
    """A ``StrEnum`` whose values need collapsing and escaping."""

    PLAIN = "plain"
    SPACED = "  two \u3000 words\x1c"
    ASTRAL = "\U0001f600\ud800"


class StrSubclass(str):
    """A plain ``str`` subclass (the native walker hands these back to Python)."""

    def __repr__(self) -> str:
        return f"StrSubclass({str.__repr__(self)})"


class IntSubclass(int):
    """A plain ``int`` subclass."""

    def __repr__(self) -> str:
        return f"IntSubclass({int.__repr__(self)})"


class FloatSubclass(float):
    """A plain ``float`` subclass."""

    def __repr__(self) -> str:
        return f"FloatSubclass({float.__repr__(self)})"


def _word_chars() -> SearchStrategy[str]:
    """Single characters that are not whitespace, weighted toward the awkward ones."""
    return st.one_of(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E),
        st.sampled_from([chr(c) for c in range(0x20) if not chr(c).isspace()] + ["\x7f"]),
        st.integers(0xD800, 0xDFFF).map(chr),
        st.integers(0x10000, 0x10FFFF).map(chr),
        # Look-alikes of whitespace that str.split() does not split on.
        st.sampled_from(["\u200b", "\u180e", "\ufeff", "\u00ad", "\u2060"]),
        st.characters(exclude_characters=WHITESPACE),
    )


def _whitespace_runs(min_size: int = 1) -> SearchStrategy[str]:
    return st.text(st.sampled_from(WHITESPACE), min_size=min_size, max_size=4)


def texts() -> SearchStrategy[str]:
    """Strings made of words and runs of Python whitespace, the runs anywhere (leading,
    trailing, doubled), the words full of surrogates, astral characters and controls."""
    word = st.text(_word_chars(), min_size=1, max_size=6)
    pieces = st.lists(st.one_of(word, _whitespace_runs()), max_size=6).map("".join)
    return st.one_of(pieces, st.sampled_from((*_KEY_WORDS, "checkout", "checkout ", "15m")))


def dict_keys() -> SearchStrategy[str]:
    """``str`` dict keys: the default volatile names, near misses of them, whitespace,
    surrogates and astral characters."""
    return st.one_of(
        st.sampled_from(sorted(DEFAULT_VOLATILE_KEYS)),
        st.sampled_from(_KEY_WORDS),
        texts(),
    )


def _power_of_ten(exponent: int) -> int:
    return int(10**exponent)


def _minus_power_of_ten(exponent: int) -> int:
    return -int(10**exponent)


def _ints() -> SearchStrategy[int]:
    return st.one_of(
        st.integers(-1000, 1000),
        st.integers(),
        st.integers(-(2**256), 2**256),
        st.sampled_from(_BIG_INTS),
        st.integers(_MAX_INT_DIGITS - 30, _MAX_INT_DIGITS - 1).map(_power_of_ten),
        st.integers(_MAX_INT_DIGITS - 30, _MAX_INT_DIGITS - 1).map(_minus_power_of_ten),
    )


def _floats() -> SearchStrategy[float]:
    return st.one_of(
        st.sampled_from(_SPECIAL_FLOATS),
        st.floats(),
        st.floats(1e-5, 1e-4),
        st.floats(-1e-4, -1e-5),
        # Halves are ties for any rounding done in the wrong place.
        st.integers(-(2**52), 2**52).map(lambda n: n + 0.5),
        st.integers(-(2**60), 2**60).map(float),
        st.integers(-330, 308).map(lambda e: float(f"1e{e}")),
    )


def _json_leaves() -> SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        _ints(),
        _floats(),
        texts(),
    )


def _json_containers(children: SearchStrategy[Any]) -> SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(dict_keys(), children, max_size=5),
    )


def json_values(*, max_leaves: int = 30) -> SearchStrategy[Any]:
    """JSON-like values (dicts with ``str`` keys, lists, ``str``, ``int``, ``float``,
    ``bool``, ``None``) covering every corner of the key contract, nested up to
    ``max_leaves`` leaves."""
    return st.recursive(_json_leaves(), _json_containers, max_leaves=max_leaves)


def _exotic_leaves(unserialisable: bool) -> SearchStrategy[Any]:
    leaves: list[SearchStrategy[Any]] = [
        st.sampled_from(Colour),
        st.sampled_from(Mode),
        texts().map(StrSubclass),
        _ints().map(IntSubclass),
        _floats().map(FloatSubclass),
    ]
    if unserialisable:
        leaves += [
            st.decimals(),
            st.binary(max_size=6),
            st.sets(st.integers(-3, 3), max_size=3),
            st.frozensets(texts(), max_size=3),
            st.complex_numbers(max_magnitude=10),
        ]
    return st.one_of(*leaves)


def _exotic_containers(children: SearchStrategy[Any], unserialisable: bool) -> SearchStrategy[Any]:
    def keyed(keys: SearchStrategy[Any]) -> SearchStrategy[dict[Any, Any]]:
        return st.dictionaries(keys, children, max_size=4)

    containers: list[SearchStrategy[Any]] = [
        _json_containers(children),
        st.lists(children, max_size=4).map(tuple),
        keyed(dict_keys()).map(OrderedDict),
        # Keys of one kind (or of kinds that compare with each other), so sorting works.
        keyed(st.integers()),
        keyed(st.floats()),
        keyed(st.one_of(st.integers(-5, 5), st.floats(-5, 5))),
        keyed(st.booleans()),
        keyed(st.none()),
        keyed(st.sampled_from(Colour)),
        keyed(texts().map(StrSubclass)),
        keyed(st.one_of(dict_keys(), st.sampled_from(Mode))),
    ]
    if unserialisable:
        # Keys that cannot be sorted together: TypeError from sorted(), in both backends.
        mixed = st.tuples(
            st.dictionaries(dict_keys(), children, min_size=1, max_size=3),
            st.dictionaries(st.one_of(st.integers(), st.none()), children, min_size=1, max_size=3),
        ).map(lambda pair: {**pair[0], **pair[1]})
        containers.append(mixed)
    return st.one_of(*containers)


def exotic_values(*, max_leaves: int = 30, unserialisable: bool = True) -> SearchStrategy[Any]:
    """Everything :func:`json_values` draws, mixed with what is not JSON: tuples, ``IntEnum``
    and ``StrEnum`` members, ``str``/``int``/``float`` subclasses, ``OrderedDict``, dicts
    with ``int``, ``float``, ``bool``, ``None`` or ``str``-subclass keys.

    With ``unserialisable`` (the default) it also draws values on which ``call_key`` must
    raise ``TypeError`` as ``json.dumps`` does: ``Decimal``, ``bytes``, sets, complex
    numbers, and dicts mixing ``str`` keys with ``int``/``None`` keys.
    """
    return st.recursive(
        st.one_of(_json_leaves(), _exotic_leaves(unserialisable)),
        lambda children: _exotic_containers(children, unserialisable),
        max_leaves=max_leaves,
    )


# Built once: equivalent_variants draws from these many times per example.
_RUNS = _whitespace_runs()
_RUNS_OR_NOTHING = _whitespace_runs(min_size=0)
_EXTRA_KEYS = st.lists(dict_keys(), max_size=2)
_VOLATILE_VALUES = json_values(max_leaves=3)


def _respaced(draw: st.DrawFn, text: str) -> str:
    """Another spelling of ``text`` with the same ``" ".join(text.split())``."""
    words = text.split()
    if not words:
        return draw(_RUNS_OR_NOTHING)
    gaps = [draw(_RUNS) for _ in words[1:]]
    spelled = words[0] + "".join(gap + word for gap, word in zip(gaps, words[1:], strict=True))
    if draw(st.booleans()):
        spelled = draw(_RUNS) + spelled
    if draw(st.booleans()):
        spelled += draw(_RUNS)
    return spelled


def _variant(draw: st.DrawFn, value: Any, volatile: SearchStrategy[list[str]] | None) -> Any:
    if isinstance(value, dict):
        entries = [(key, _variant(draw, item, volatile)) for key, item in value.items()]
        taken = set(value)
        # Entries that normalise drops: None values under new keys, volatile keys anywhere.
        for key in draw(_EXTRA_KEYS):
            if key not in taken:
                taken.add(key)
                entries.append((key, None))
        if volatile is not None:
            for key in draw(volatile):
                if key not in taken:
                    taken.add(key)
                    entries.append((key, draw(_VOLATILE_VALUES)))
        return dict(draw(st.permutations(entries)))
    if isinstance(value, list):
        return [_variant(draw, item, volatile) for item in value]
    if isinstance(value, str):
        return _respaced(draw, value) if draw(st.booleans()) else value
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) < _EXACT_FLOAT_LIMIT:
        return float(value) if draw(st.booleans()) else value
    if isinstance(value, float) and value.is_integer() and draw(st.booleans()):
        return int(value)
    return value


@st.composite
def _variants(draw: st.DrawFn, args: Any, volatile: SearchStrategy[list[str]] | None) -> Any:
    return _variant(draw, args, volatile)


def equivalent_variants(
    args: Any, *, volatile_keys: Iterable[Any] | None = None
) -> SearchStrategy[Any]:
    """Other spellings of ``args`` that must get the same ``call_key`` (with the same
    ``volatile_keys``): every dict rebuilt with its keys in another insertion order; the
    whitespace in string values changed to other runs of Python whitespace, some leading or
    trailing (dict keys are left alone: they are not collapsed); ``None``-valued entries
    added; ints below 2**53 written as the equal float and integral floats as ints; volatile
    keys (the ``str`` ones of ``volatile_keys``, else the default set) added with random
    values at any depth. A bare ``str`` for ``volatile_keys`` raises ``TypeError``, as it does
    in ``call_key``.

    ``args`` is assumed JSON-like: dicts with ``str`` keys, lists, ``str``, ``int``,
    ``float``, ``bool`` and ``None``. Anything else (tuples, subclasses, ...) is kept as it
    is, without looking inside.
    """
    if isinstance(volatile_keys, (str, bytes)):
        raise TypeError("volatile_keys must be an iterable of keys such as {'request_id'}")
    keys = DEFAULT_VOLATILE_KEYS if volatile_keys is None else volatile_keys
    # Only str keys are added: a key of another type would make a dict's keys unsortable.
    names = sorted(key for key in set(keys) if type(key) is str)
    volatile = st.lists(st.sampled_from(names), max_size=2, unique=True) if names else None
    return _variants(args, volatile)


def assert_tool_honest(tool: Any, arguments: Any = None, **options: Any) -> ToolReport:
    """``check_tool(tool, arguments, **options)``, raising ``AssertionError`` with the report
    if the key would lie about the tool (or it hung); else the report. In a test::

        def test_my_tool_is_keyed_truthfully():
            assert_tool_honest(get_invoice, {"type": "object", "properties": {...}})
    """
    report = check_tool(tool, arguments, **options)
    if not report.honest:
        raise AssertionError(f"the call key would lie about this tool:\n{report}")
    return report
