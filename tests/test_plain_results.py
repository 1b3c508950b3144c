"""The plain-result short cut of ``observe``: one rule, ``tripwire._results.plain_result``,
which the native core mirrors in Rust (``plain_result`` in ``rust/py_guard.rs``: calling
Python for it would cost observe about a microsecond a call). Driven here through the
native guard, on both sides of every edge of the rule, against the reference: the two
guards' states after observing a result are the same bytes."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from _guards import NATIVE, REFERENCE, requires_native
from tripwire._results import plain_result

# Every code point ``str.isspace`` says is white space (the 29 ``str.split`` splits on), and
# the characters around the rule's other edges: JSON starts, error starts, plain letters.
SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
STARTS = [
    *SPACES,
    "[",
    "{",
    '"',
    "n",
    "e",
    "E",
    "<",
    "N",
    "x",
    "0",
    "-",
    "\x00",
    "\u00e9",
    "\U0001f600",
]

LISTS: list[Any] = [
    [],
    [1, 2],
    [None],
    ["text"],
    [{"type": "text", "text": "a"}],
    [{"type": "input_text", "text": "a"}],
    [{"type": "output_text", "text": "a"}],
    [{"type": "text", "text": 1}],
    [{"type": "texts", "text": "a"}],
    [{"type": "image", "data": "..."}],
    [{"text": "a"}],
    [{"type": "text", "text": "a"}, {"type": "image"}],
    [{"id": 1}, {"type": "text", "text": "a"}],
    [({"type": "text"})],
]


def _observed(module: Any, result: Any) -> bytes:
    guard = module.Guard(tools={"t": "read"})
    for _ in range(2):
        guard.observe(guard.check("t", 1), result)
    return guard.snapshot()  # type: ignore[no-any-return]


@requires_native
@pytest.mark.parametrize("first", STARTS, ids=[f"U+{ord(c):04X}" for c in STARTS])
@pytest.mark.parametrize("rest", ["", "ok", " ", "rror: no", "error: no", "null", "[1]"])
def test_texts_are_read_alike(first: str, rest: str) -> None:
    text = first + rest
    assert _observed(NATIVE, text) == _observed(REFERENCE, text)


@requires_native
@pytest.mark.parametrize("result", LISTS, ids=[repr(r)[:40] for r in LISTS])
def test_lists_are_read_alike(result: list[Any]) -> None:
    assert _observed(NATIVE, result) == _observed(REFERENCE, result)


def test_the_rule() -> None:
    assert plain_result([]) is True
    assert plain_result([{"id": 1}]) is False
    assert plain_result([{"type": "text", "text": "a"}]) is None
    assert plain_result("found 3 rows") is False
    for text in ("", " ok", "null", "error: x", "Error", "<tool_use_error>", "[1]", '"a"', "{}"):
        assert plain_result(text) is None, text
    assert plain_result({"rows": 3}) is None
    assert plain_result(("a",)) is None
