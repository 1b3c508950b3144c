"""The OpenAI and Anthropic adapters with the SDKs' own clients and types.

No network: each client gets an HTTP transport of the SDK's own HTTP library (``httpx2``'s
``MockTransport``) that plays a scripted model and, like the real APIs, rejects with a 400 a
request in which a tool call id is left unanswered (or answered twice, or answered with no
call). Every test runs on both backends.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _guards import GET_LOGS_SPELLINGS

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
try:  # the SDKs' HTTP library: httpx2 in their current releases, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older SDKs
    httpx = pytest.importorskip("httpx")

from tripwire.adapters import anthropic as tw_anthropic  # noqa: E402
from tripwire.adapters import openai as tw_openai  # noqa: E402

# The seed's triage call, respelled as the model respelled it (JSON text).
SEED_ARGS = GET_LOGS_SPELLINGS


# -- the fake APIs ---------------------------------------------------------------------------


class ApiError(Exception):
    """What the real API answers with a 400."""


def _chat_check(body: dict[str, Any]) -> None:
    """Chat Completions: each assistant message's tool calls are answered by the tool
    messages right after it, one per id, and no tool message answers an unknown id."""
    messages = body["messages"]
    for index, message in enumerate(messages):
        if message["role"] == "tool" and (
            index == 0 or messages[index - 1]["role"] not in ("assistant", "tool")
        ):
            raise ApiError("messages with role 'tool' must be a response to a 'tool_calls'")
        ids = [call["id"] for call in message.get("tool_calls") or ()]
        if not ids:
            continue
        answered = []
        for following in messages[index + 1 :]:
            if following["role"] != "tool":
                break
            answered.append(following["tool_call_id"])
        if sorted(answered) != sorted(ids):
            raise ApiError(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing or extra: {ids} vs {answered}"
            )


def _responses_check(body: dict[str, Any]) -> None:
    """Responses: every function_call item of the input has exactly one output."""
    items = body["input"] if isinstance(body["input"], list) else []
    calls = [item["call_id"] for item in items if item.get("type") == "function_call"]
    outputs = [item["call_id"] for item in items if item.get("type") == "function_call_output"]
    if sorted(calls) != sorted(outputs):
        raise ApiError(f"No tool output found for function call (calls {calls}, outputs {outputs})")


def _messages_check(body: dict[str, Any]) -> None:
    """Messages: each tool_use id is answered by a tool_result block, first in the next user
    message."""
    messages = body["messages"]
    for index, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        ids = [block["id"] for block in content if block.get("type") == "tool_use"]
        if not ids:
            continue
        following = messages[index + 1]["content"] if index + 1 < len(messages) else []
        results = []
        for block in following:
            if block.get("type") != "tool_result":
                break
            results.append(block["tool_use_id"])
        if sorted(results) != sorted(ids):
            raise ApiError(
                "tool_use ids were found without tool_result blocks immediately after: "
                f"{ids} vs {results}"
            )


class FakeApi:
    """A scripted model behind the SDK's HTTP transport: each request is checked as the
    real API checks it, then answered with the next scripted response."""

    def __init__(self, check: Callable[[dict[str, Any]], None], script: list[dict[str, Any]]):
        self.check = check
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []

    def handle(self, request: Any) -> Any:
        body = json.loads(request.content)
        self.requests.append(body)
        try:
            self.check(body)
        except ApiError as exc:
            error = {"error": {"type": "invalid_request_error", "message": str(exc)}}
            return httpx.Response(400, json=error)
        return httpx.Response(200, json=self.script.pop(0))

    async def handle_async(self, request: Any) -> Any:
        return self.handle(request)


def _chat_response(calls: list[tuple[str, str, str]], text: str | None = None) -> dict[str, Any]:
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        for call_id, name, args in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
    }


def _anthropic_response(calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "Looking."}]
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _responses_response(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    output = [
        {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": name,
            "arguments": args,
            "status": "completed",
        }
        for call_id, name, args in calls
    ]
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-test",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "status": "completed",
    }


def openai_client(api: FakeApi) -> Any:
    transport = httpx.MockTransport(api.handle)
    return openai.OpenAI(
        api_key="test", base_url="http://api.test/v1", http_client=httpx.Client(transport=transport)
    )


def anthropic_client(api: FakeApi) -> Any:
    transport = httpx.MockTransport(api.handle)
    return anthropic.Anthropic(
        api_key="test", base_url="http://api.test", http_client=httpx.Client(transport=transport)
    )


# -- harness loops, as a user writes them with the adapters ----------------------------------


def chat_loop(tw: ModuleType, api: FakeApi, tools_run: list[Any]) -> Any:
    """A Chat Completions agent loop with the adapter; returns the last turn."""
    client, guard = openai_client(api), tw.Guard()
    messages: list[Any] = [{"role": "user", "content": "why is checkout slow?"}]
    turn = None
    while api.script:
        completion = client.chat.completions.create(model="gpt-test", messages=messages)
        turn = tw_openai.chat_turn(guard, completion)
        if not turn.calls:
            break
        for call in turn.to_run:
            tools_run.append((call.name, call.arguments))
            turn.observe(call, [])
        messages += [completion.choices[0].message.model_dump(exclude_none=True)]
        messages += turn.tool_messages()
        if turn.stopped:
            break
    return turn


def test_chat_seed_loop_is_nudged_then_stopped(tw: ModuleType) -> None:
    script = [_chat_response([(f"call_{i}", "get_logs", SEED_ARGS[i])]) for i in range(5)]
    api, tools_run = FakeApi(_chat_check, script), []
    turn = chat_loop(tw, api, tools_run)
    assert turn is not None and turn.stopped
    stop = turn.stop
    assert stop is not None and (stop.reason, stop.tool, stop.step, stop.repeats) == (
        "loop_detected",
        "get_logs",
        4,
        4,
    )
    # Issue 25: the first call ran; the second was nudged (not run); the third ran (its
    # result is the evidence a stop needs) and the fourth stopped the run.
    assert len(tools_run) == 2
    nudge = api.requests[2]["messages"][-1]
    assert nudge["tool_call_id"] == "call_1"
    assert nudge["content"].startswith("This is the second identical call to get_logs")
    assert api.requests[3]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": "[]",
    }
    assert len(api.requests) == 4  # no request after the stop


def test_chat_healthy_turn_is_untouched(tw: ModuleType) -> None:
    calls = [
        ("call_a", "get_logs", '{"service": "checkout"}'),
        ("call_b", "get_metrics", '{"service": "checkout", "metric": "p99"}'),
    ]
    api = FakeApi(_chat_check, [_chat_response(calls), _chat_response([], "Done.")])
    tools_run: list[Any] = []
    turn = chat_loop(tw, api, tools_run)
    assert turn is not None and not turn.stopped
    assert tools_run == [
        ("get_logs", {"service": "checkout"}),
        ("get_metrics", {"service": "checkout", "metric": "p99"}),
    ]
    sent = api.requests[1]["messages"][-2:]
    assert [(m["tool_call_id"], m["content"]) for m in sent] == [("call_a", "[]"), ("call_b", "[]")]


def test_chat_identical_parallel_calls_run_once(tw: ModuleType) -> None:
    calls = [
        ("call_a", "get_logs", '{"service": "checkout"}'),
        ("call_b", "get_logs", '{"service":"checkout"}'),
    ]
    api = FakeApi(_chat_check, [_chat_response(calls), _chat_response([], "Done.")])
    tools_run: list[Any] = []
    chat_loop(tw, api, tools_run)
    assert tools_run == [("get_logs", {"service": "checkout"})]
    sent = api.requests[1]["messages"][-2:]
    assert [m["tool_call_id"] for m in sent] == ["call_a", "call_b"]
    assert sent[0]["content"] == sent[1]["content"] == "[]"


def test_chat_broken_arguments_are_answered_not_run(tw: ModuleType) -> None:
    calls = [("call_a", "get_logs", '{"service": "checkout"'), ("call_b", "ping", "{}")]
    api = FakeApi(_chat_check, [_chat_response(calls), _chat_response([], "Done.")])
    tools_run: list[Any] = []
    chat_loop(tw, api, tools_run)
    assert tools_run == [("ping", {})]
    answer = api.requests[1]["messages"][-2]
    assert answer["tool_call_id"] == "call_a"
    assert "not valid JSON" in answer["content"]


def test_chat_stopped_turn_answers_every_id(tw: ModuleType) -> None:
    """A turn stopped in its middle: the call before runs, the rest get the stop, each by its
    own id, so the request that follows (for a summary) is accepted."""
    guard = tw.Guard()
    client = openai_client(FakeApi(_chat_check, []))
    del client
    # Allow, nudge, allow (issue 25: the call after the nudge runs): the next one stops.
    for i in range(3):
        turn = tw_openai.chat_turn(guard, _chat_response([(f"c{i}", "get_logs", SEED_ARGS[0])]))
        for call in turn.to_run:
            turn.observe(call, [])
    turn = tw_openai.chat_turn(
        guard,
        _chat_response(
            [
                ("x1", "get_metrics", "{}"),
                ("x2", "get_logs", SEED_ARGS[1]),
                ("x3", "get_traces", "{}"),
            ]
        ),
    )
    assert [c.verdict.action for c in turn.calls] == ["allow", "stop", "stop"]
    assert [c.verdict.call_id for c in turn.calls] == ["x1", "x2", "x3"]
    for call in turn.to_run:
        turn.observe(call, {"p99": 812})
    messages = turn.tool_messages()
    assert [m["tool_call_id"] for m in messages] == ["x1", "x2", "x3"]
    assert messages[0]["content"] == '{"p99": 812}'
    assert messages[1]["content"] == messages[2]["content"] == turn.stop.message  # type: ignore[union-attr]
    api = FakeApi(_chat_check, [_chat_response([], "Summary.")])
    reply = openai_client(api).chat.completions.create(
        model="gpt-test",
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": "{}"},
                    }
                    for c in turn.calls
                ],
            },
            *messages,
        ],
    )
    assert reply.choices[0].message.content == "Summary."


def test_chat_unanswered_id_is_rejected_by_the_fake_api() -> None:
    """The fake API is as strict as the real one (the tests above mean something)."""
    api = FakeApi(_chat_check, [_chat_response([], "x")])
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
    ]
    with pytest.raises(openai.BadRequestError):
        openai_client(api).chat.completions.create(model="gpt-test", messages=messages)


def test_chat_async_client_works_the_same(tw: ModuleType) -> None:
    script = [_chat_response([(f"call_{i}", "get_logs", SEED_ARGS[i])]) for i in range(5)]
    api = FakeApi(_chat_check, script)

    async def run() -> Any:
        client = openai.AsyncOpenAI(
            api_key="test",
            base_url="http://api.test/v1",
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(api.handle_async)),
        )
        guard = tw.Guard()
        messages: list[Any] = [{"role": "user", "content": "why?"}]
        while True:
            completion = await client.chat.completions.create(model="gpt-test", messages=messages)
            turn = tw_openai.chat_turn(guard, completion)
            for call in turn.to_run:
                turn.observe(call, [])
            messages += [completion.choices[0].message.model_dump(exclude_none=True)]
            messages += turn.tool_messages()
            if turn.stopped:
                return turn

    turn = asyncio.run(run())
    assert turn.stop.step == 4  # issue 25: the call after the nudge ran
    assert len(api.requests) == 4


def test_responses_seed_loop_and_outputs(tw: ModuleType) -> None:
    script = [_responses_response([(f"fc{i}", "get_logs", SEED_ARGS[i])]) for i in range(5)]
    api = FakeApi(_responses_check, script)
    client, guard = openai_client(api), tw.Guard()
    items: list[Any] = [{"role": "user", "content": "why is checkout slow?"}]
    runs = 0
    while True:
        response = client.responses.create(model="gpt-test", input=items)
        turn = tw_openai.responses_turn(guard, response)
        for call in turn.to_run:
            runs += 1
            turn.observe(call, "[]")
        items += [item.model_dump(exclude_none=True) for item in response.output]
        items += turn.outputs()
        if turn.stopped:
            break
    # Issue 25: the call after the nudge ran; the 4th occurrence is stopped.
    assert (turn.stop.reason, turn.stop.step, runs) == ("loop_detected", 4, 2)  # type: ignore[union-attr]
    assert len(api.requests) == 4
    assert items[-1] == {
        "type": "function_call_output",
        "call_id": "fc3",
        "output": turn.stop.message,
    }  # type: ignore[union-attr]


def anthropic_loop(tw: ModuleType, api: FakeApi, run_tool: Callable[[str, Any], Any]) -> Any:
    client, guard = anthropic_client(api), tw.Guard()
    messages: list[Any] = [{"role": "user", "content": "why is checkout slow?"}]
    turn = None
    while api.script:
        message = client.messages.create(model="claude-test", max_tokens=100, messages=messages)
        turn = tw_anthropic.message_turn(guard, message)
        if not turn.calls:
            break
        for call in turn.to_run:
            turn.observe(call, run_tool(call.name, call.arguments))
        messages += [{"role": "assistant", "content": message.model_dump()["content"]}]
        messages += [turn.user_message()]
        if turn.stopped:
            break
    return turn


def test_anthropic_seed_loop_is_nudged_then_stopped(tw: ModuleType) -> None:
    args = [json.loads(text) for text in SEED_ARGS]
    script = [_anthropic_response([(f"toolu_{i}", "get_logs", args[i])]) for i in range(5)]
    api, runs = FakeApi(_messages_check, script), []
    turn = anthropic_loop(tw, api, lambda name, a: runs.append(name) or [])
    assert turn is not None and turn.stop is not None
    # Issue 25: the call after the nudge ran; the 4th occurrence is stopped.
    assert (turn.stop.reason, turn.stop.step, len(runs)) == ("loop_detected", 4, 2)
    assert len(api.requests) == 4
    nudge = api.requests[2]["messages"][-1]["content"][0]
    assert nudge["tool_use_id"] == "toolu_1" and nudge["is_error"] is True
    assert "second identical call to get_logs" in nudge["content"]


def test_anthropic_parallel_duplicates_and_errors(tw: ModuleType) -> None:
    calls = [
        ("toolu_a", "get_logs", {"service": "checkout"}),
        ("toolu_b", "get_logs", {"service": "checkout "}),
        ("toolu_c", "deploy", {"version": "1.4.2"}),
    ]
    api = FakeApi(_messages_check, [_anthropic_response(calls), _anthropic_response([])])
    client, guard = anthropic_client(api), tw.Guard()
    messages: list[Any] = [{"role": "user", "content": "go"}]
    message = client.messages.create(model="claude-test", max_tokens=100, messages=messages)
    turn = tw_anthropic.message_turn(guard, message)
    assert [c.id for c in turn.to_run] == ["toolu_a", "toolu_c"]
    turn.observe("toolu_a", "no errors")
    turn.observe("toolu_c", None, error="deploy failed: quota exceeded")
    messages += [{"role": "assistant", "content": message.model_dump()["content"]}]
    messages += [turn.user_message()]
    client.messages.create(model="claude-test", max_tokens=100, messages=messages)
    sent = api.requests[1]["messages"][-1]["content"]
    assert [(b["tool_use_id"], b["content"], b.get("is_error", False)) for b in sent] == [
        ("toolu_a", "no errors", False),
        ("toolu_b", "no errors", False),
        ("toolu_c", "deploy failed: quota exceeded", True),
    ]


def test_anthropic_async_client_works_the_same(tw: ModuleType) -> None:
    args = [json.loads(text) for text in SEED_ARGS]
    script = [_anthropic_response([(f"toolu_{i}", "get_logs", args[i])]) for i in range(5)]
    api = FakeApi(_messages_check, script)

    async def run() -> Any:
        client = anthropic.AsyncAnthropic(
            api_key="test",
            base_url="http://api.test",
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(api.handle_async)),
        )
        guard = tw.Guard()
        messages: list[Any] = [{"role": "user", "content": "why?"}]
        while True:
            message = await client.messages.create(
                model="claude-test", max_tokens=100, messages=messages
            )
            turn = tw_anthropic.message_turn(guard, message)
            for call in turn.to_run:
                turn.observe(call, [])
            messages += [{"role": "assistant", "content": message.model_dump()["content"]}]
            messages += [turn.user_message()]
            if turn.stopped:
                return turn

    assert asyncio.run(run()).stop.step == 4  # issue 25: the call after the nudge ran
    assert len(api.requests) == 4


def test_a_result_not_recorded_is_named(tw: ModuleType) -> None:
    turn = tw_openai.chat_turn(tw.Guard(), _chat_response([("c1", "get_logs", "{}")]))
    with pytest.raises(ValueError, match="no result recorded for call 'c1'"):
        turn.tool_messages()
    with pytest.raises(ValueError, match="no call 'nope'"):
        turn.observe("nope", [])


class _StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str")


def test_results_that_will_not_print_are_answered(tw: ModuleType) -> None:
    """Issue 26: a tool's result is sent as text whatever it is: an int longer than Python
    prints (4,300 digits) as its digits, an error whose ``__str__`` raises by its type."""
    big = 10**5000 + 7
    calls = [("c1", "get_logs", "{}"), ("c2", "get_metrics", "{}")]
    turn = tw_openai.chat_turn(tw.Guard(), _chat_response(calls))
    turn.observe("c1", big)
    turn.observe("c2", None, error=_StrRaises())
    contents = [message["content"] for message in turn.tool_messages()]
    assert contents[0] == "1" + "0" * 4999 + "7"
    assert contents[1] == "_StrRaises"
    # Nested in a value that JSON cannot write either: never a traceback.
    from tripwire.adapters._turn import as_text

    assert as_text([big]).startswith("<a list")


# -- a declared read's kept result is served, not run (as the MCP adapter does) --------------

# A read the harness declares: its result is kept (Guard.keep) and a later allowed repeat is
# answered from the guard's read cache (verdict.cached) without running the tool.
READ_TOOLS = {"get_metrics": "read"}
METRICS = '{"service": "checkout", "metric": "p99"}'


def test_chat_serves_a_kept_read_without_running_it(tw: ModuleType) -> None:
    script = [
        _chat_response([("c1", "get_metrics", METRICS)]),
        _chat_response([("c2", "get_metrics", METRICS)]),
        _chat_response([], "p99 is 812 ms."),
    ]
    api = FakeApi(_chat_check, script)
    client, guard = openai_client(api), tw.Guard(tools=READ_TOOLS)
    messages: list[Any] = [{"role": "user", "content": "checkout p99?"}]
    ran, turns = [], []
    while api.script:
        completion = client.chat.completions.create(model="gpt-test", messages=messages)
        turn = tw_openai.chat_turn(guard, completion)
        turns.append(turn)
        for call in turn.to_run:
            ran.append(call.id)
            turn.observe(call, {"p99": 812})
        messages += [completion.choices[0].message.model_dump(exclude_none=True)]
        messages += turn.tool_messages()
        guard.user_message()  # the person asks again: the repeat is allowed, not a loop
    assert ran == ["c1"]
    served = turns[1].calls[0]
    assert (served.verdict.action, served.verdict.cached) == ("allow", {"p99": 812})
    assert turns[1].to_run == []
    assert api.requests[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "c2",
        "content": '{"p99": 812}',
    }
    with pytest.raises(ValueError, match="was not to run"):
        turns[1].observe("c2", {"p99": 900})


def test_responses_serves_a_kept_read_without_running_it(tw: ModuleType) -> None:
    script = [
        _responses_response([("fc1", "get_metrics", METRICS)]),
        _responses_response([("fc2", "get_metrics", METRICS)]),
    ]
    api = FakeApi(_responses_check, script)
    client, guard = openai_client(api), tw.Guard(tools=READ_TOOLS)
    items: list[Any] = [{"role": "user", "content": "checkout p99?"}]
    ran = []
    for _ in range(2):
        response = client.responses.create(model="gpt-test", input=items)
        turn = tw_openai.responses_turn(guard, response)
        for call in turn.to_run:
            ran.append(call.id)
            turn.observe(call, "p99=812")
        items += [item.model_dump(exclude_none=True) for item in response.output]
        items += turn.outputs()
        guard.user_message()
    assert ran == ["fc1"]
    assert turn.calls[0].verdict.cached == "p99=812"
    assert items[-1] == {"type": "function_call_output", "call_id": "fc2", "output": "p99=812"}


def test_anthropic_serves_a_kept_read_without_running_it(tw: ModuleType) -> None:
    args = json.loads(METRICS)
    script = [
        _anthropic_response([("toolu_1", "get_metrics", args)]),
        _anthropic_response([("toolu_2", "get_metrics", args)]),
        _anthropic_response([]),
    ]
    api = FakeApi(_messages_check, script)
    client, guard = anthropic_client(api), tw.Guard(tools=READ_TOOLS)
    messages: list[Any] = [{"role": "user", "content": "checkout p99?"}]
    ran = []
    while api.script:
        message = client.messages.create(model="claude-test", max_tokens=100, messages=messages)
        turn = tw_anthropic.message_turn(guard, message)
        for call in turn.to_run:
            ran.append(call.id)
            turn.observe(call, ["p99", 812])
        messages += [{"role": "assistant", "content": message.model_dump()["content"]}]
        if turn.calls:
            messages += [turn.user_message()]
        guard.user_message()
    assert ran == ["toolu_1"]
    sent = api.requests[2]["messages"][-1]["content"]
    assert sent == [{"type": "tool_result", "tool_use_id": "toolu_2", "content": '["p99", 812]'}]


def test_a_failed_read_is_not_kept(tw: ModuleType) -> None:
    """A result observed as a failure is not served again: the next repeat runs."""
    guard = tw.Guard(tools=READ_TOOLS)
    first = tw_openai.chat_turn(guard, _chat_response([("c1", "get_metrics", METRICS)]))
    first.observe("c1", None, error="503 Service Unavailable")
    guard.user_message()
    again = tw_openai.chat_turn(guard, _chat_response([("c2", "get_metrics", METRICS)]))
    assert [call.id for call in again.to_run] == ["c2"]
    assert again.calls[0].verdict.cached is None


def test_turn_record_is_observe_under_its_old_name(tw: ModuleType) -> None:
    guard = tw.Guard(tools=READ_TOOLS)
    turn = tw_openai.chat_turn(guard, _chat_response([("c1", "get_metrics", METRICS)]))
    with pytest.warns(DeprecationWarning, match=r"Turn\.record\(\) is deprecated"):
        turn.record("c1", {"p99": 812})
    assert turn.tool_messages()[0]["content"] == '{"p99": 812}'
    guard.user_message()
    again = tw_openai.chat_turn(guard, _chat_response([("c2", "get_metrics", METRICS)]))
    assert again.calls[0].verdict.cached == {"p99": 812}


# -- the docs' loops run as written ----------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs" / "adapters"


def _docs_block(page: str, marker: str) -> str:
    """The first example of an adapter's page that uses ``marker`` (its own scripted model
    is set up in a block before, which this module's replaces)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    return next(block for block in blocks if marker in block)


GET_LOGS_SCHEMA = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "since": {"type": "string"}},
}


def test_docs_openai_loop_runs() -> None:
    script = [_chat_response([(f"call_{i}", "get_logs", SEED_ARGS[i])]) for i in range(5)]
    api, ran = FakeApi(_chat_check, script), []
    namespace: dict[str, Any] = {
        "client": openai_client(api),
        "MODEL": "gpt-test",
        "TOOLS": [
            {"type": "function", "function": {"name": "get_logs", "parameters": GET_LOGS_SCHEMA}}
        ],
        "run_tool": lambda name, args: ran.append(name) or [],
    }
    block = _docs_block("openai.md", "tripwire.adapters.openai")
    exec(compile(block, str(DOCS / "openai.md"), "exec"), namespace)
    stop = namespace["turn"].stop
    # Issue 25: the call after the nudge ran; the 4th occurrence is stopped.
    assert (stop.reason, stop.step, ran) == ("loop_detected", 4, ["get_logs"] * 2)
    assert len(api.requests) == 4


def test_docs_anthropic_loop_runs() -> None:
    args = [json.loads(text) for text in SEED_ARGS]
    script = [_anthropic_response([(f"toolu_{i}", "get_logs", args[i])]) for i in range(5)]
    api, ran = FakeApi(_messages_check, script), []
    namespace: dict[str, Any] = {
        "client": anthropic_client(api),
        "MODEL": "claude-test",
        "TOOLS": [{"name": "get_logs", "input_schema": GET_LOGS_SCHEMA}],
        "run_tool": lambda name, args: ran.append(name) or [],
    }
    block = _docs_block("anthropic.md", "tripwire.adapters.anthropic")
    exec(compile(block, str(DOCS / "anthropic.md"), "exec"), namespace)
    stop = namespace["turn"].stop
    # Issue 25: the call after the nudge ran; the 4th occurrence is stopped.
    assert (stop.reason, stop.step, ran) == ("loop_detected", 4, ["get_logs"] * 2)
    assert len(api.requests) == 4


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _anthropic_stream(call_id: str, name: str, args: str) -> bytes:
    """A streamed Messages response with one tool_use block, its input in two deltas."""
    message = _anthropic_response([])
    message["content"] = []
    message["stop_reason"] = None
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    half = len(args) // 2
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
            *[
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": part},
                    },
                )
                for part in (args[:half], args[half:])
            ],
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def test_anthropic_streamed_message_once_accumulated(tw: ModuleType) -> None:
    """Streaming users hand the adapter the accumulated message (get_final_message)."""
    bodies = [_anthropic_stream(f"toolu_{i}", "get_logs", SEED_ARGS[i]) for i in range(5)]
    seen: list[dict[str, Any]] = []

    def handle(request: Any) -> Any:
        body = json.loads(request.content)
        seen.append(body)
        try:
            _messages_check(body)
        except ApiError as exc:
            return httpx.Response(400, json={"error": {"message": str(exc)}})
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, content=bodies.pop(0), headers=headers)

    client = anthropic.Anthropic(
        api_key="test",
        base_url="http://api.test",
        http_client=httpx.Client(transport=httpx.MockTransport(handle)),
    )
    guard = tw.Guard()
    messages: list[Any] = [{"role": "user", "content": "why?"}]
    while True:
        with client.messages.stream(model="claude-test", max_tokens=100, messages=messages) as s:
            message = s.get_final_message()
        turn = tw_anthropic.message_turn(guard, message)
        assert turn.calls[0].arguments == json.loads(SEED_ARGS[len(seen) - 1])
        for call in turn.to_run:
            turn.observe(call, [])
        messages += [{"role": "assistant", "content": message.model_dump()["content"]}]
        messages += [turn.user_message()]
        if turn.stopped:
            break
    # Issue 25: the call after the nudge ran; the 4th occurrence is stopped.
    assert (turn.stop.step, len(seen)) == (4, 4)  # type: ignore[union-attr]
