"""Writes the seed corpora in fuzz/corpus/ (checked in; run again only to change them).

    .venv/bin/python fuzz/make_corpus.py

``call_key_json``: JSON texts, one a file: the seed's get_logs calls as the model spelt
them, escapes, surrogates, numbers, nesting near the 256-level limit, and invalid texts.
``json_canon`` (the Rust target, fuzz/rust/): the same texts after a byte that picks the
volatile keys. ``call_key``: byte strings chosen (deterministically) so that the values they
decode to cover different kinds of value, hostile objects included.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

JSON_SEEDS: list[bytes | str] = [
    # The seed's get_logs call, as the model spelt it step after step.
    '{"service":"checkout","since":"15m","level":"error"}',
    '{"service": "checkout", "level": "error", "since": "15m"}',
    '{"since":"15m","service":"checkout","level":"error"}',
    '{"service":"checkout ","since":"15m","level":"error"}',
    '{"service":"checkout","since":"15m","level":"error","request_id":"req-8812"}',
    '{"service":"checkout","since":"15m","level":"error","trace_id":null,"nonce":7}',
    # Other calls of the run.
    '{"order_id":"A-1001","amount":12.5,"currency":"EUR"}',
    '{"query":"  refund   policy\\u00a0EU ","top_k":5,"filters":{"lang":"en","tags":["a","b"]}}',
    "{}",
    "[]",
    '""',
    "null",
    # Escapes and surrogates.
    '"\\ud83d\\ude00 \\ud800 \\udfff\\u00e9\\t\\/\\"\\\\\\b\\f\\n\\r"',
    '{"\\ud800":1,"\\ud83d\\ude00":2,"\\ue000":3,"\\U0001":4}',
    '"\\ud800\\u0041\\udc00\\ud800\\ud800\\udc00"',
    '{"k":"\\u001c\\u001d\\u001e\\u001f\\u0085\\u00a0\\u1680\\u2028\\u3000x"}',
    '{"é":"ü","😀":"\u2028\u2029","\x7f":"\x7f"}',
    b'{"raw":"\xed\xa0\x80 lone surrogate as WTF-8"}',
    b'\xef\xbb\xbf{"bom":"utf-8-sig"}',
    "\ufeff{}",
    '{"a":"x"}'.encode("utf-16"),
    '{"a":"x"}'.encode("utf-16-le"),
    '{"a":"x"}'.encode("utf-32-be"),
    # Numbers.
    "[1.0, 1e2, -0, -0.0, 2.5, 1e-5, 1E+400, -1e400, 5e-324, 1e23, 0.1, 12345678901234567890]",
    "[NaN, Infinity, -Infinity, 1e16, 1e17, 9007199254740993, 0.30000000000000004]",
    "[123456789012345678901234567890123456789, -9223372036854775809, 18446744073709551616]",
    "1" + "0" * 700,
    "-" + "9" * 4301,
    # Duplicates, nulls, volatile keys at depth.
    '{"a":1,"a":2,"b":null,"b":3,"c":4,"c":null}',
    '{"outer":{"request_id":1,"timestamp":2,"now":3,"keep":{"nonce":4,"x":[null,{"trace_id":5}]}}}',
    '{"z":1,"y":{"x":[{"w":null}]},"a":[[[[]]]]}',
    # Nesting around the limit.
    "[" * 256 + "]" * 256,
    "[" * 257 + "]" * 257,
    '{"a":' * 255 + "1" + "}" * 255,
    '{"request_id":' + "[" * 300 + "]" * 300 + ',"a":1}',
    # Invalid texts.
    "",
    " ",
    "[1,]",
    '{"a":1,}',
    '{"a" 1}',
    "[1 2]",
    '"\\x"',
    '"\\u12G4"',
    '"unterminated',
    '"a\x01b"',
    "nul",
    "01",
    "[1]x",
    "[" * 2000,
    b"\xff\xfe\x00",
    b'{"bad utf-8":"\xc0\x80"}',
    "\ud800",
]


def write_json_corpus(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for seed in JSON_SEEDS:
        data = seed if isinstance(seed, bytes) else seed.encode("utf-8", "surrogatepass")
        (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def write_json_canon_corpus(out: Path) -> None:
    """The Rust target's seeds: a byte picking the volatile keys, then the JSON text."""
    out.mkdir(parents=True, exist_ok=True)
    for n, seed in enumerate(JSON_SEEDS):
        data = bytes([n % 3]) + (
            seed if isinstance(seed, bytes) else seed.encode("utf-8", "surrogatepass")
        )
        (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def signature(value: Any, depth: int = 0, seen: set[str] | None = None) -> set[str]:
    """The kinds of value found in ``value`` (bounded walk)."""
    seen = set() if seen is None else seen
    seen.add(type(value).__name__)
    if depth < 6 and type(value) in (list, tuple, dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in list(items)[:8]:
            if isinstance(value, dict):
                seen.add("key:" + type(k).__name__)
            signature(v, depth + 1, seen)
    return seen


def write_call_key_corpus(out: Path, wanted: int = 48) -> None:
    sys.argv = sys.argv[:1]
    sys.path.insert(0, str(HERE))
    import fuzz_call_key

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20240607)
    kept: dict[frozenset[str], bytes] = {}
    for _ in range(40_000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(6, 160)))
        try:
            _, args, volatile, _ = fuzz_call_key.build(data)
        except Exception:
            continue
        sig = frozenset(signature(args)) | {f"volatile:{type(volatile).__name__}"}
        if sig not in kept:
            kept[sig] = data
    # The most varied values first.
    chosen = sorted(kept.items(), key=lambda kv: (-len(kv[0]), kv[1]))[:wanted]
    for _, data in chosen:
        (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


if __name__ == "__main__":
    os.environ.setdefault("TRIPWIRE_IMPLEMENTATION", "auto")
    write_json_corpus(HERE / "corpus" / "call_key_json")
    write_json_canon_corpus(HERE / "corpus" / "json_canon")
    write_call_key_corpus(HERE / "corpus" / "call_key")
    for name in ("call_key_json", "json_canon", "call_key"):
        print(name, len(os.listdir(HERE / "corpus" / name)), "seeds")
