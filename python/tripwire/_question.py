"""What question a call asks, for the rules that read *different* calls as one loop (issue 25).

Two of the guard's rules look past the call key: a run of empty answers (fruitless rewording)
and a run of one error across varied arguments. Both are evidence of a loop only when the
calls ask *the same question* in other words: the seed's "refund policy" → "refund policy for
annual plans" → "annual plan refund rules". Searches for flights between different airport
pairs, reads of different files, lookups of different ids are different questions, and empty
answers to them are exploration, not a loop.

What tells the two apart without reading the words' meaning is the arguments' structure. A
value of one word (an id, a code, a file name, an airport, a date) names *what* is asked
about; free text (a string of two or more words: a search query, a description) is *how* it
is asked, and rewording changes only that. So a call's question is computed here, once, for
both backends (the native guard calls ``question_of``; ``same_question`` is mirrored in
``rust/guard.rs``):

- its **shape**: the call's arguments normalised as the key normalises them, with every free
  text replaced by one marker, every one-word value by its letters and digits (lower-cased,
  in sorted order: ``2024/05/20`` and ``20-05-2024``, ``Rossi`` and ``rossi`` are one value
  respelled), and every argument that only says where in a listing to read
  (``page``, ``offset``, ``cursor``: ``POSITION_KEYS``) by another (page after empty page
  is one question asked on). The tool's name is not in it: the same query put to two search
  tools in turn is one question asked twice;
- its **raw** identity: the arguments exactly as the model wrote them, only key order ignored
  (nulls, whitespace and number spellings kept). The key collapses ``{"x": null}`` and
  ``{}``; a tool that failed on one and not the other saw the difference, so a failed call
  retried with other raw arguments is a correction, not a repeat.

Two calls ask the same question when their shapes are equal (``same_question``), for both
rules. One error across calls of one *form* (the same argument names, any values) could be
read as the tool refusing what they have in common (every spelling of a date refused as
"invalid date format"), but as often it is exploration (one order id after another "not
found"), and a stop on a run that was exploring is the worst mistake the guard can make:
``benches/rewording.py`` measures the candidates. What this cannot see: one-word values that are
spellings of one thing beyond case and punctuation (``Yusuf``, ``Yousuf``; ``RetryPolicy``,
``retry_policy``) are different questions to it, and free texts that name different things
("New York", "San Francisco") one. The first only lets a loop run longer; the second can
nudge, and a stop still needs the evidence the guard's rules ask for. The corpus bench
(``benches/real_traces.py``) measures both on traces no one here wrote.

Nothing here runs on the check's fast path: a question is told only once a result came back
empty or failed (from the arguments the guard holds until the call is observed), or for a new
call while such a result is in the window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from tripwire._keys import MAX_DEPTH, call_key, loads

# Arguments that say where in a listing to read, not what to ask.
POSITION_KEYS: Final = frozenset(
    {
        "page",
        "page_number",
        "page_num",
        "pagenumber",
        "page_token",
        "pagetoken",
        "next_page_token",
        "next_token",
        "nexttoken",
        "continuation_token",
        "cursor",
        "offset",
        "start",
        "skip",
        "after",
        "before",
    }
)
# What stands for a free text and for a position in a shape (JSON text cannot hold a NUL
# unescaped, and each marker is a str like any other value, so the shape is keyed as a value).
_FREE_TEXT: Final = "\x00text"
_POSITION: Final = "\x00position"

_TOKEN: Final = re.compile(r"[^\W_]+")

# (raw digest, shape digest): 16 hex digits each.
Question = tuple[str, str]


# ``call_key`` of either backend (which also takes ``volatile_keys=``).
KeyFunction = Callable[..., str]


def _raw_digest(text: str, key: KeyFunction) -> str:
    """A text's digest, every character of it counted: through the key function (the native
    core's, which needs no OpenSSL in a hook process), as hex, which no normalisation of the
    key touches."""
    return key("raw", text.encode("utf-8", "surrogatepass").hex())


def _shape(value: Any, volatile: frozenset[Any], depth: int) -> Any:
    """The normalised value with free texts and positions masked."""
    if depth > MAX_DEPTH:
        raise RecursionError("too deep for a question")
    if isinstance(value, dict):
        shaped = {}
        for k in sorted(value, key=lambda k: (type(k).__name__, str(k))):
            v = value[k]
            if k in volatile or v is None:
                continue
            if isinstance(k, str) and k.lower() in POSITION_KEYS:
                shaped[str(k)] = _POSITION
            else:
                shaped[str(k)] = _shape(v, volatile, depth + 1)
        return shaped
    if isinstance(value, (list, tuple)):
        return [_shape(v, volatile, depth + 1) for v in value]
    if isinstance(value, str):
        if len(value.split()) >= 2:
            return _FREE_TEXT
        # One word: what is asked about, as its letters and digits, in any case and order
        # ("2024/05/20" and "20-05-2024"; "Rossi" and "rossi" are one value respelled).
        return " ".join(sorted(_TOKEN.findall(value.lower())))
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    return repr(value)


def question_of(
    name: str, args: Any, text: bool, volatile: frozenset[Any], key: KeyFunction = call_key
) -> Question | None:
    """The question a call asks (see the module), or ``None`` where it cannot be told
    (arguments nested too deep, or of a kind that will not print). ``text``: ``args`` is JSON
    text; text that does not parse is free text, its raw identity itself. ``key``: the
    backend's ``call_key`` (the native guard passes its own; the keys are equal)."""
    try:
        if text:
            try:
                value = loads(args)
            except (ValueError, RecursionError, MemoryError):
                raw_text = args if isinstance(args, str) else bytes(args).decode("utf-8", "replace")
                return _raw_digest(raw_text, key), key("shape", _FREE_TEXT, volatile_keys=())
        else:
            value = args
        # The shape is normalised already (its own volatile keys dropped): keyed as it is.
        shape = key("shape", _shape(value, volatile, 0), volatile_keys=())
        try:
            raw = json.dumps({"tool": name, "args": value}, sort_keys=True)
        except (TypeError, ValueError):
            raw = repr((name, value))
        return _raw_digest(raw, key), shape
    except (TypeError, ValueError, RecursionError, OverflowError, MemoryError):
        return None


def same_question(a: Question | None, b: Question | None) -> bool:
    """Whether two calls ask the same question (see the module); unknown is not the same."""
    return a is not None and b is not None and a[1] == b[1]
