"""The canonical call key in pure Python: the seed's ``normalise``/``call_key``, plus
``volatile_keys`` and a depth limit. This *is* the contract (docs/design/key.md); the native core
must produce the same bytes, and hands back to the helpers here whatever it does not walk
itself (tuples, subclasses, non-``str`` keys, Decimal, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hashlib import sha256 as sha256
else:

    def sha256(data):
        """``hashlib.sha256``, imported on first use: importing hashlib loads OpenSSL
        (~3 ms), which a hook process that never hashes in Python (the native core does)
        need not pay. The first call rebinds the name; later calls go straight to it."""
        global sha256
        from hashlib import sha256

        return sha256(data)


DEFAULT_VOLATILE_KEYS: frozenset[str] = frozenset(
    {"request_id", "trace_id", "timestamp", "now", "nonce", "idempotency_key"}
)

# Deeper nesting raises RecursionError in both implementations: the native walker must not
# overflow the C stack, and the reference must not depend on Python's recursion limit. Every
# container counts (dicts, lists, tuples, and in JSON text arrays and objects, under volatile
# keys too), so neither json.loads nor json.dumps is ever asked to go deeper than this: where
# they would give up depends on the caller's stack, and the two implementations' stacks differ.
MAX_DEPTH = 256

_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def volatile_set(volatile_keys: Iterable[Any] | None) -> frozenset[Any]:
    """The set of dict keys to drop: the default, or the caller's replacement."""
    if volatile_keys is None:
        return DEFAULT_VOLATILE_KEYS
    if isinstance(volatile_keys, (str, bytes)):
        raise TypeError(
            "volatile_keys must be an iterable of keys such as {'request_id'}, "
            f"not a single {type(volatile_keys).__name__}"
        )
    return frozenset(volatile_keys)


def _too_deep() -> RecursionError:
    return RecursionError(f"arguments nested deeper than {MAX_DEPTH} levels")


def check_depth(value: Any, depth: int) -> None:
    """Raises the depth limit's RecursionError if a value that is not normalised (a tuple,
    which json.dumps writes as it is) holds containers ``MAX_DEPTH`` deep, counting from
    ``depth``. A loop, not recursion, and the containers' own contents (``dict.values``,
    ``tuple.__iter__``), so no callback of the value runs here."""
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if level >= MAX_DEPTH:
                raise _too_deep()
            children = dict.values(item) if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)


def _sorted_items(value: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """The dict's items in key order; keys that cannot be ordered raise a TypeError that
    says so (``sorted``'s own names only the two types)."""
    try:
        return sorted(value.items())
    except TypeError as exc:
        if any(type(k) is not str for k in value):
            raise unorderable_keys(value, exc) from exc
        raise


def unorderable_keys(value: dict[Any, Any], exc: TypeError) -> TypeError:
    kinds = sorted({type(k).__name__ for k in value})
    return TypeError(f"dict keys cannot be sorted: keys of types {', '.join(kinds)} ({exc})")


def normalise_at(value: Any, volatile: frozenset[Any], depth: int, collapse: bool = True) -> Any:
    """``normalise`` for a value found inside ``depth`` enclosing dicts or lists; with
    ``collapse=False``, strings keep their whitespace (``verbatim_key``).

    Plain loops rather than comprehensions: a comprehension is a frame of its own, and the
    walk should cost one Python frame a level, so 256 levels fit any caller's stack."""
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        normalised = {}
        for k, v in _sorted_items(value):
            if k not in volatile and v is not None:
                normalised[k] = normalise_at(v, volatile, depth + 1, collapse)
        return normalised
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise _too_deep()
        items = []
        for v in value:
            items.append(normalise_at(v, volatile, depth + 1, collapse))
        return items
    if isinstance(value, tuple):
        check_depth(value, depth)
        return value
    if isinstance(value, str):
        return " ".join(value.split()) if collapse else value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def dumps_normalised(value: Any) -> str:
    """JSON text of an already normalised value, as the key contract writes it. Its depth
    was checked by ``normalise_at`` (tuples included), so json.dumps stays far from Python's
    recursion limit wherever it is called from."""
    return _dumps(value)


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"tool name must be a str, not {type(name).__name__}")
    return name


def normalise(value: Any, /, *, volatile_keys: Iterable[Any] | None = None) -> Any:
    """The normalised value: keys sorted, volatile keys and ``None`` entries dropped at every
    depth, whitespace in strings collapsed, integral floats made ints, lists recursed."""
    return normalise_at(value, volatile_set(volatile_keys), 0)


def canonical_json(name: str, args: Any, /, *, volatile_keys: Iterable[Any] | None = None) -> bytes:
    """Exactly the bytes that ``call_key`` hashes."""
    check_name(name)
    normalised = normalise_at(args, volatile_set(volatile_keys), 0)
    return _dumps({"tool": name, "args": normalised}).encode()


def call_key(name: str, args: Any, /, *, volatile_keys: Iterable[Any] | None = None) -> str:
    """16 hex digits of SHA-256 over ``canonical_json(name, args)``."""
    digest = sha256(canonical_json(name, args, volatile_keys=volatile_keys))
    return digest.hexdigest()[:16]


def verbatim_key(name: str, args: Any, volatile: frozenset[Any]) -> str:
    """``call_key`` with strings' whitespace kept: the guard's key for tools that see it
    (code, patches, file contents: an edit retried with corrected line breaks is another
    edit). Everything else is normalised as for ``call_key``."""
    check_name(name)
    normalised = normalise_at(args, volatile, 0, False)
    payload = _dumps({"tool": name, "args": normalised}).encode()
    return sha256(payload).hexdigest()[:16]


def verbatim_key_json(name: str, text: str | bytes | bytearray, volatile: frozenset[Any]) -> str:
    """``verbatim_key`` of arguments given as JSON text."""
    check_name(name)
    return verbatim_key(name, loads(text), volatile)


def decode_json_bytes(data: bytes | bytearray) -> str:
    """Bytes as ``json.loads`` decodes them (UTF-8 with or without BOM, UTF-16, UTF-32)."""
    return bytes(data).decode(json.detect_encoding(data), "surrogatepass")


# What the depth scan of JSON text steps through: whole strings (their brackets are text)
# and brackets. An unterminated string matches nothing and is stepped over, which can only
# matter after a syntax error that json.loads reports first.
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{\]}]', re.DOTALL)


def _too_deep_at(text: str) -> int | None:
    """Where JSON text opens its first container ``MAX_DEPTH`` deep (outside strings), if
    it does. Checked only for text with that many brackets at all."""
    if str.count(text, "[") + str.count(text, "{") <= MAX_DEPTH:
        return None
    depth = 0
    for token in _JSON_NESTING.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            if depth >= MAX_DEPTH:
                return token.start()
            depth += 1
        elif bracket in "]}":
            depth -= 1
    return None


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads(text)``, except that opening a container ``MAX_DEPTH`` deep raises the
    depth limit's RecursionError, as the native parser does: where the text has no syntax
    error before that bracket and the bracket opens a value. The answer then never depends
    on Python's recursion limit, which json.loads reaches (at a depth that depends on the
    caller's stack) on text nested ~1000 deep, valid or not."""
    plain = decode_json_bytes(text) if isinstance(text, (bytes, bytearray)) else text
    at = _too_deep_at(plain) if isinstance(plain, str) else None
    if at is not None:
        # The text up to and including that bracket nests at most MAX_DEPTH + 1 deep, well
        # within json.loads' reach. It fails: at or before the bracket if the text is wrong
        # there (json.loads of the whole text then fails the same way, as early), else just
        # past it, inside the container the bracket opened, which is too deep.
        try:
            json.loads(str.__getitem__(plain, slice(0, at + 1)))
        except json.JSONDecodeError as exc:
            if exc.pos > at:
                raise _too_deep() from None
    return json.loads(text)


def call_key_json(
    name: str, text: str | bytes | bytearray, /, *, volatile_keys: Iterable[Any] | None = None
) -> str:
    """``call_key(name, json.loads(text))``: keys OpenAI-style argument strings. Text nested
    deeper than ``MAX_DEPTH`` raises RecursionError (``loads``), even under a volatile key."""
    check_name(name)
    volatile = volatile_set(volatile_keys)
    return call_key(name, loads(text), volatile_keys=volatile)


def invalid_json_key(name: str, text: str | bytes | bytearray, collapse: bool = True) -> str:
    """The key for arguments that are not valid JSON: the raw text, whitespace collapsed
    (kept, with ``collapse=False``, for the tools that see it: ``verbatim_key``). A model that
    keeps sending the same broken arguments is looping too."""
    check_name(name)
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "surrogateescape")
    raw = " ".join(text.split()) if collapse else text
    payload = _dumps({"tool": name, "invalid_args": raw}).encode()
    return sha256(payload).hexdigest()[:16]


# What ``Guard.check_json`` answers with a verdict keyed by the raw text instead of raising:
# text that is not JSON (ValueError), nested past MAX_DEPTH (RecursionError), or too big to
# parse (MemoryError). A model's arguments must never stop the harness.
UNPARSABLE: tuple[type[BaseException], ...] = (ValueError, RecursionError, MemoryError)


def invalid_json(
    name: str, text: str | bytes | bytearray, exc: BaseException, collapse: bool = True
) -> tuple[str, str]:
    """The key of a call whose JSON text raised ``exc`` (one of ``UNPARSABLE``), and what
    ``Verdict.invalid_arguments`` says about it; ``collapse`` as for ``invalid_json_key``."""
    why = str(exc) or f"the arguments could not be parsed ({type(exc).__name__})"
    return invalid_json_key(name, text, collapse), why


def check_threads(threads: object) -> None:
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int or None, not {type(threads).__name__}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")


def unpack_pair(index: int, call: Any) -> tuple[Any, Any]:
    """Call ``index`` of ``call_keys``: a ``(name, args)`` pair (any sequence of two that
    is not text)."""
    if isinstance(call, (str, bytes)) or not isinstance(call, Sequence) or len(call) != 2:
        raise TypeError(f"call {index} must be a (name, args) pair, not {type(call).__name__}")
    return call[0], call[1]


def call_keys(
    calls: Iterable[Any],
    /,
    *,
    volatile_keys: Iterable[Any] | None = None,
    threads: int | None = None,
) -> list[str]:
    """Keys of many ``(name, args)`` calls; ``args`` is a value or JSON text. An error names
    the offending call's index in a note. ``threads`` is accepted for parity; the reference
    runs on one."""
    check_threads(threads)
    volatile = volatile_set(volatile_keys)
    keys: list[str] = []
    for index, call in enumerate(calls):
        try:
            name, args = unpack_pair(index, call)
            if isinstance(args, (str, bytes, bytearray)):
                keys.append(call_key_json(name, args, volatile_keys=volatile))
            else:
                keys.append(call_key(name, args, volatile_keys=volatile))
        except Exception as exc:
            exc.add_note(f"in call {index} of call_keys()")
            raise
    return keys
