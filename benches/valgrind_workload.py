"""A short workload through every native entry point, error paths included, for valgrind
(issue #7): no leak or invalid access in ``_core``.

    PYTHONMALLOC=malloc valgrind --leak-check=full --show-leak-kinds=definite \\
        --error-exitcode=1 .venv/bin/python benches/valgrind_workload.py

CPython itself leaves memory reachable (and "possibly lost") at exit; what counts is a
"definitely lost" record, or an invalid read/write, with a frame in _core.cpython-*.so.
``benches/valgrind_summary.py`` filters valgrind's log to those.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import tripwire._core as native

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 300


class Splits(str):
    def split(self, *args: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
        raise KeyboardInterrupt


class Model:
    def model_dump(self, mode: str = "python") -> Any:
        return {"rows": [1, 2, 3], "mode": mode}


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def expect(errors: tuple[type[BaseException], ...], fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except errors:
        return
    raise AssertionError(f"{fn} did not raise {errors}")


def one_round(i: int) -> None:
    args = {
        "service": "checkout ",
        "since": f"{i % 13}m",
        "nested": {"a": [1, 2.5, 1e23, -0.0, None, True, "x\u3000y\ud800"], "b": None},
        "big": 2**70 + i,
        "tuple": (1, "two", [3.5, {"k": "v"}]),
        "request_id": i,
        "\U0001f600": "astral",
    }
    native.call_key("get_logs", args)
    native.canonical_json("get_logs", args, volatile_keys=["since", 1])
    native.call_key_json(
        "get_logs", '{"service": "checkout", "s": "\\ud83d\\ude00 \\ud800", "n": 1e400}'
    )
    native.call_key_json("get_logs", b'\xef\xbb\xbf{"bom": [1, 2, {"k": null}]}')
    native.call_key_json("get_logs", '{"a": 1}'.encode("utf-16"))
    native.call_keys(
        [
            ("a", {"x": i}),
            ("b", '{"y": [1, 2, 3]}'),
            ("c", b"[1]"),
            ("d", "[" * 200 + "]" * 200),
            ("e", '{"request_id": ' + "[" * 300 + "]" * 300 + "}"),
        ]
        if i % 50 == 0
        else [("a", {"x": i}), ("b", '{"y": [1, 2, 3]}')]
    )
    # Error paths.
    expect((RecursionError,), native.call_key, "t", nested(300))
    expect((TypeError,), native.call_key, "t", {"s": {1, 2}})
    expect((TypeError,), native.call_key, "t", {1: 1, "a": 2})
    expect((ValueError,), native.call_key, "t", [10**5000])
    expect((KeyboardInterrupt,), native.call_key, "t", {"a": Splits("x")})
    expect((ValueError,), native.call_key_json, "t", '{"a": 1,}')
    expect((ValueError,), native.call_key_json, "t", b'{"a": "\xff"}')
    expect((RecursionError,), native.call_key_json, "t", "[" * 2000)
    expect((TypeError,), native.call_key_json, "t", memoryview(b"{}"))
    expect((TypeError,), native.call_key, 7, {})
    expect((ValueError,), native.call_keys, [("a", "{}"), ("b", "[1,")])


def guard_round(guard: Any, i: int) -> None:
    verdict = guard.check("get_logs", {"service": "checkout", "page": i % 5}, call_id=f"c{i % 200}")
    guard.keep(verdict, ["line", i % 3])
    guard.observe(verdict, ["line", i % 3])
    verdict = guard.check_json("search", '{"q": "refund  policy"}' if i % 3 else "{bad json")
    guard.observe(verdict, Model())
    guard.observe(verdict, "")
    guard.check("poller", {"job": 1})
    guard.check_turn([("get_logs", {"p": 1}), ("get_logs", {"p": 1}), ("deploy", {"v": i})])
    expect((TypeError,), guard.check, "get_logs", {"x": object()})
    expect((KeyboardInterrupt,), guard.check, "get_logs", {"x": Splits("y")})
    expect((TypeError,), guard.check, "get_logs", {}, call_id=5)
    _ = (guard.keys(), len(guard), guard.steps, guard.stopped, repr(guard))
    _ = (verdict.message, repr(verdict), verdict == verdict)
    if i % 40 == 0 or guard.stopped:
        guard.reset()


def main() -> None:
    guard = native.Guard(
        tools={"get_logs": "read", "deploy": "write", "poller": {"policy": "poll", "max_polls": 3}},
        max_steps=10_000,
    )
    for i in range(ROUNDS):
        one_round(i)
        guard_round(guard, i)
    # A guard shared by threads, and a batch big enough to be keyed on several threads.
    threads = [
        threading.Thread(target=lambda n=n: [guard_round(guard, n * 1000 + i) for i in range(30)])
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    big = '{"text": "' + "x" * 100_000 + '"}'
    native.call_keys([("t", big)] * 4, threads=2)
    print("workload done:", guard.steps, "steps")


if __name__ == "__main__":
    main()
