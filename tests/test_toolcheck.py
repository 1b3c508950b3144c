"""``tripwire.testing.check_tool`` on small tools with known lies: each lie found,
shrunk to a minimal pair, and given the policy that makes the key truthful; an honest tool
passes clean. The policies it suggests are taken by the guard of both backends.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from types import ModuleType
from typing import Any

import pytest
import tripwire
from hypothesis import strategies as st
from tripwire.testing import assert_tool_honest, check_tool

FAST = {"repeat_gap": 0.0, "examples": 40}


def read_file(path: str) -> str:
    """Whitespace matters: a path with a trailing space is another file."""
    if path != path.strip():
        raise FileNotFoundError(path)
    return f"contents of {path}"


def search_logs(query: str, start_date: str | None = None) -> list[str]:
    """Null is not absent: ``{"start_date": null}`` is rejected, ``{}`` accepted."""
    if "start_date" in search_logs.seen and start_date is None:
        raise ValueError("start_date must be a date")
    return [query]


search_logs.seen = {"start_date"}  # type: ignore[attr-defined]


def strict_search(query: str, **options: Any) -> list[str]:
    if "start_date" in options and options["start_date"] is None:
        raise ValueError("start_date must be a date, not null")
    return [query]


def get_page(cursor: str, nonce: str = "") -> dict[str, Any]:
    """Reads an argument the key drops as volatile: ``nonce`` picks the page."""
    return {"cursor": cursor, "page": len(nonce)}


def fetch_status(service: str) -> dict[str, Any]:
    """A fresh timestamp and request id in every answer."""
    return {
        "service": service,
        "ok": True,
        "meta": {"fetched_at": time.time_ns(), "request": str(uuid.uuid4())},
    }


def add_numbers(a: int, b: int, label: str | None = None) -> dict[str, Any]:
    """Honest: the answer depends on nothing the key collapses (1.0 + 2 is 3.0, which a
    result's digest takes for 3, as the key does)."""
    return {"sum": a + b, "label": label}


def test_whitespace_that_matters() -> None:
    report = check_tool(read_file, **FAST)
    found = report.finding("whitespace")
    assert found is not None, report
    # Shrunk: the shortest path, and a variant that only adds whitespace.
    assert found.arguments == {"path": ""}
    assert found.variant["path"].strip() == ""
    assert report.policy == {"policy": "read", "whitespace": "keep"}
    assert [f.kind for f in report.findings] == ["whitespace"]
    assert "whitespace of path matters" in str(report)


def test_null_is_not_absent() -> None:
    report = check_tool(
        strict_search,
        {
            "type": "object",
            "properties": {"query": {"type": "string"}, "start_date": {"type": ["string", "null"]}},
            "required": ["query"],
        },
        **FAST,
    )
    found = report.finding("nulls")
    assert found is not None, report
    assert found.arguments == {"query": ""}
    assert found.variant == {"query": "", "start_date": None}
    assert "start_date" in found.advice
    # No policy keeps nulls in the key: the advice says so, and the policy has no setting.
    assert report.policy == "read"


def test_a_volatile_key_the_tool_reads() -> None:
    report = check_tool(get_page, **FAST)
    found = report.finding("volatile_keys")
    assert found is not None, report
    assert found.arguments == {"cursor": ""} or found.variant == {"cursor": ""}
    assert report.guard_settings["volatile_keys"] == sorted(
        tripwire.DEFAULT_VOLATILE_KEYS - {"nonce"}
    )


def test_a_timestamp_in_the_result() -> None:
    report = check_tool(fetch_status, **FAST)
    found = report.finding("result")
    assert found is not None, report
    assert found.fields == ("fetched_at", "request")
    # A read whose answer moves on its own: volatile, never cached.
    assert report.policy == {
        "policy": "volatile",
        "volatile_result_keys": ["fetched_at", "request"],
    }
    # Only the result-side lie: the argument checks compare results without the fields.
    assert [f.kind for f in report.findings] == ["result"]


def test_a_clock_of_whole_seconds_is_caught_by_the_gap() -> None:
    def now(zone: str) -> dict[str, Any]:
        return {"zone": zone, "time": int(time.time())}

    report = check_tool(now, name="get_time", examples=10, repeat_gap=1.05, repeats=1)
    assert report.policy == {"policy": "volatile", "volatile_result_keys": ["time"]}


def test_integral_floats() -> None:
    def repeat(text: str, times: int) -> str:
        return text * times

    report = check_tool(repeat, kinds=["integral_floats"], **FAST)
    found = report.finding("integral_floats")
    assert found is not None, report
    assert found.arguments == {"text": "", "times": 0}
    assert found.variant == {"text": "", "times": 0.0}
    assert "times" in found.advice


def test_key_order() -> None:
    def first_filter(filters: dict[str, str]) -> str:
        return next(iter(filters), "")

    schema = {"type": "object", "properties": {"filters": {"type": "object"}}}
    report = check_tool(first_filter, schema, kinds=["key_order"], **FAST)
    found = report.finding("key_order")
    assert found is not None, report
    assert len(found.arguments["filters"]) == 2


def test_the_honest_tool_passes_clean() -> None:
    report = assert_tool_honest(add_numbers, **FAST)
    assert report.honest and report.findings == []
    assert "add_numbers: honest" in str(report)


def test_assert_tool_honest_fails_with_the_report() -> None:
    with pytest.raises(AssertionError, match="whitespace of path matters"):
        assert_tool_honest(read_file, **FAST)


def test_async_tools_and_definitions() -> None:
    async def lookup(args: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        return args["city"].strip().lower()

    openai = {
        "type": "function",
        "function": {
            "name": "lookup_city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "e.g. 'Paris'"}},
                "required": ["city"],
            },
        },
    }
    report = check_tool(lookup, openai, call="dict", **FAST)
    assert report.name == "lookup_city"
    assert report.honest, report
    # Inside a running event loop too.
    assert asyncio.run(_in_loop(lookup, openai)).honest


async def _in_loop(tool: Any, definition: Any) -> Any:
    return check_tool(tool, definition, call="dict", **FAST)


def test_a_strategy_of_arguments() -> None:
    calls = itertools.count()

    def echo(**args: Any) -> Any:
        next(calls)
        return len(args.get("q", ""))

    strategy = st.fixed_dictionaries({"q": st.sampled_from(["a b", "x"])})
    report = check_tool(echo, strategy, **FAST)
    assert report.finding("whitespace") is not None
    assert report.calls == next(calls)


def test_a_hanging_tool_is_reported_not_waited_for() -> None:
    release = threading.Event()

    def stuck(q: str) -> str:
        release.wait(30)
        return q

    try:
        report = check_tool(stuck, timeout=0.2, **FAST)
    finally:
        release.set()
    assert report.problem == "no answer within 0.2 s"
    assert not report.honest
    assert report.calls == 1


def test_a_tool_that_raises_is_judged_by_its_error() -> None:
    def broken(q: str) -> str:
        raise RuntimeError("always")

    assert check_tool(broken, **FAST).honest


def test_bad_arguments_are_a_clear_error() -> None:
    with pytest.raises(TypeError, match="JSON schema, a tool definition"):
        check_tool(read_file, 42)


@pytest.mark.parametrize("tw", ["native", "reference"])
def test_the_suggested_policies_are_taken_by_the_guard(tw: str) -> None:
    from _guards import backend

    module: ModuleType = backend(tw)
    tools = {
        "read_file": check_tool(read_file, **FAST).policy,
        "fetch_status": check_tool(fetch_status, **FAST).policy,
    }
    guard = module.Guard(tools=tools)
    verdicts = []
    for _ in range(4):
        verdict = guard.check("fetch_status", {"service": "api"})
        verdicts.append(verdict.action)
        if verdict.action == "allow":
            guard.observe(verdict, fetch_status("api"))
    # Its volatile field left out, the status repeats: nudged, run once more (issue 25: the
    # evidence a stop rests on), then stopped.
    assert verdicts == ["allow", "nudge", "allow", "stop"]
    # The whitespace of read_file's path is kept in its key.
    assert (
        guard.check("read_file", {"path": "a "}).key != guard.check("read_file", {"path": "a"}).key
    )
