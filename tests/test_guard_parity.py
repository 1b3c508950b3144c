"""The native and reference guards give the same verdicts for every sequence of calls.

A hypothesis state machine holds one ``tripwire._core.Guard`` and one
``tripwire.reference.Guard`` built with the same random configuration and drives both with
the same random calls: repeats and near-repeats (same arguments, different key order,
whitespace, volatile keys, ``None`` entries, integral floats), arguments as JSON text
(broken text included), call-id retries and floods of new call ids, turns with duplicates,
kept results, observed results (the same, a different or an empty result for a
repeat, revisits that make cycles, tools declared ``poll`` with a ``max_polls`` or ``read``
with ``empty`` texts), resets, and bad calls. After every step every verdict field and the
visible state (steps, stopped, len, keys, repr) must be identical.

``HYPOTHESIS_PROFILE=thorough`` runs ten times as many examples.
"""

from __future__ import annotations

import json
import os
from typing import Any

import hypothesis.strategies as st
import pytest
from _guards import (
    NATIVE,
    NO_NATIVE,
    REFERENCE,
    VERDICT_FIELDS,
    deep_args,
    outcome,
    state,
    verbatim_key_written_out,
)
from hypothesis import HealthCheck, event, settings
from hypothesis import given as hypothesis_given
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from tripwire.testing import json_values

pytestmark = pytest.mark.skipif(NATIVE is None, reason=NO_NATIVE)

# -- the alphabet ---------------------------------------------------------------------------

# Tools the random configurations give policies to, and one that never has a policy. Few
# tools and few arguments, so that repeats are common. Non-ASCII names and a lone surrogate
# (legal in a str) test the native policy lookup.
POLICY_TOOLS = ("get_logs", "deploy", "build_status", "récupérer", "bad\ud800tool")
# Tools whose policy is inferred (issue 16): a code-editing tool whose arguments keep their
# whitespace, a shell (no policy), a write and a read by their verbs, one no rule knows.
INFERRED_TOOLS = ("Edit", "Bash", "cancel_order", "list_services", "think")
TOOL_NAMES = (*POLICY_TOOLS, *INFERRED_TOOLS)

# Policies by name, and as settings (issue #6): polls with small limits, so that they are
# reached, and a read whose "No results" counts as empty.
POLICY_SPECS: tuple[Any, ...] = (
    {"policy": "poll", "max_polls": 2},
    {"policy": "poll", "max_polls": 4},
    {"policy": "read", "empty": ["No results"]},
    {"policy": "write"},
)
policies = st.sampled_from(("read", "write", "volatile", "poll")) | st.sampled_from(POLICY_SPECS)
configs = st.fixed_dictionaries(
    {
        "max_steps": st.none() | st.integers(1, 16),
        # Mostly with get_logs a read, so that cached results show up.
        "tools": st.none()
        | st.fixed_dictionaries(
            {
                "get_logs": st.sampled_from(
                    ("read", "read", "read", "write", "volatile", "poll", *POLICY_SPECS)
                )
            },
            optional={tool: policies for tool in POLICY_TOOLS[1:]},
        ),
        "volatile_keys": st.sampled_from((None, frozenset({"session"}), ("request_id",))),
        "infer": st.sampled_from((None, True, False)),
        # Definitions whose MCP annotations say what "think" and "deploy" do.
        "definitions": st.sampled_from(
            (
                None,
                [{"name": "think", "annotations": {"readOnlyHint": True}}],
                [
                    {"name": "think", "annotations": {"destructiveHint": True}},
                    {"type": "function", "function": {"name": "deploy"}},
                ],
            )
        ),
    }
)


@st.composite
def limits(draw: st.DrawFn) -> dict[str, int]:
    window = draw(st.integers(1, 15))
    nudge_at = draw(st.integers(2, window + 1))
    stop_at = draw(st.integers(nudge_at, window + 1))
    return {"window": window, "nudge_at": nudge_at, "stop_at": stop_at}


# Base arguments; each call is one of these, possibly respelled.
BASES: tuple[Any, ...] = (
    {"service": "checkout", "since": "15m", "level": "error"},
    {"cursor": "p1"},
    {"query": "refund policy", "limit": 10},
    ["checkout", "payments"],
)

# Respellings that never change the key, except "request_id" where the configuration
# replaces the default volatile set. "session" (drawn rarely) changes the key unless the
# configuration makes it volatile.
RESPELLINGS = ("reorder", "whitespace", "none_entry", "float", "nested_order", "request_id")


def respell(base: Any, changes: frozenset[str], salt: int) -> Any:
    """``base`` written differently; the same call unless the volatile keys say otherwise."""
    if not isinstance(base, dict):
        if "whitespace" in changes:
            return [f" {item}  " for item in base]
        return list(base)
    items = [
        (k, f"  {v}\t" if "whitespace" in changes and isinstance(v, str) else v)
        for k, v in base.items()
    ]
    if "reorder" in changes:
        items.reverse()
    args = dict(items)
    if "float" in changes and "limit" in args:
        args["limit"] = float(args["limit"])
    if "none_entry" in changes:
        args["level" if "level" not in args else "region"] = None
    if "nested_order" in changes and "service" in args:
        args["filters"] = {"b": [1.0, {"y": None, "x": "v"}], "a": 2}
    elif "service" in args:
        args["filters"] = {"a": 2, "b": [1, {"x": " v "}]}
    if "request_id" in changes:
        args["request_id"] = f"req-{salt}"
    if "session" in changes:
        args["session"] = f"s{salt % 2}"
    return args


calls_args = st.builds(
    respell,
    st.sampled_from(BASES),
    st.builds(
        frozenset.union,
        st.frozensets(st.sampled_from(RESPELLINGS)),
        st.sampled_from([frozenset()] * 7 + [frozenset({"session"})]),
    ),
    st.integers(0, 1),
)
names = st.sampled_from((*TOOL_NAMES, "get_logs"))


def _as_json(args: Any, spaced: bool, as_bytes: bool) -> str | bytes:
    text = json.dumps(args, separators=(", ", ": ") if spaced else (",", ":"))
    return text.encode() if as_bytes else text


json_texts = st.one_of(
    st.builds(_as_json, calls_args, st.booleans(), st.booleans()),
    st.sampled_from(('{"service": "checkout",', "not json", "", '{"cursor": "p1"} trailing')),
)
call_ids = st.sampled_from((None, None, None, "c0", "c1", "c2", "toolu_ç", "c\udc00"))
# Arguments in a turn: values, or JSON text (issue 19), broken text included.
turn_args = calls_args | json_texts
turn_calls = st.lists(
    st.one_of(
        st.tuples(names, turn_args),
        st.tuples(names, turn_args, call_ids),
    ),
    min_size=1,
    max_size=5,
)

# Results to keep; the same object goes to both guards, so ``cached`` can be compared
# by identity.
RESULTS: tuple[Any, ...] = (None, [], ["error: timeout"], {"rows": 3}, "ok", 0, False)


class SdkResult:
    """Shaped like an SDK's pydantic result: compared by its ``model_dump(mode="json")``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        return {"content": [{"type": "text", "text": self.text}], "isError": False}


# Results to observe: few, so that a repeat often sees the same result as the call before it;
# empty ones (None, "", [], the "No results" a policy may declare empty, b""), and the same
# value spelled differently (bytes and text, an SDK object and its JSON form).
OBSERVED: tuple[Any, ...] = (
    None,
    [],
    "",
    b"",
    "No results",
    "ok",
    b"ok",
    "pending",
    ["error: timeout"],
    {"rows": 3},
    {"rows": 3.0},
    SdkResult("ok"),
    {"content": [{"type": "text", "text": "ok"}], "isError": False},
    # Shapes the native observe short-cuts, and their neighbours that it must not (issue 16):
    # a content-block list, a record list, text led by space or by a JSON or error start.
    [{"type": "text", "text": "ok"}],
    [{"type": "row", "id": 1}],
    [{"id": 1}],
    " ok",
    "null",
    "nothing found",
    "Error: not found",
    '"ok"',
)

# Failures as harnesses report them (issue 16): ``(result, error, transient)`` for observe.
FAILURES: tuple[tuple[Any, Any, Any], ...] = (
    ("Error: 503 Service Unavailable", None, None),
    ("Error: payment amount does not add up", None, None),
    ({"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}, None, None),
    ({"content": [{"type": "text", "text": "rate limit"}], "isError": True}, None, None),
    ({"role": "tool", "tool_call_id": "c1", "content": "nope", "status": "error"}, None, None),
    ("anything", "ValueError: no such order", None),
    ("anything", TimeoutError("read timed out"), None),
    ("503 from the proxy", True, False),
    ("the same words", True, True),
    ("Error: looks like one", False, None),
)

# What a verdict's message says about observed results (issue #6), for the statistics.
MESSAGE_DETAILS = (
    ("has not changed", "result unchanged"),
    ("same result", "result unchanged"),
    ("returned nothing", "run of empty results"),
    ("same cycle", "cycle"),
    ("was polled", "poll limit"),
    ("failed with", "failure named"),
)

# Calls that must fail in both backends and change nothing.
BAD_CALLS: dict[str, Any] = {
    "set-in-args": lambda g: g.check("get_logs", {"service": {"checkout"}}),
    "int-name": lambda g: g.check(7, {}),
    "too-deep": lambda g: g.check("get_logs", deep_args()),
    "int-call-id": lambda g: g.check("get_logs", {}, call_id=3),
    "turn-bad-args": lambda g: g.check_turn(
        [("deploy", {"v": 1}, "c0"), ("list_services", {}), ("get_logs", {"x": {1}})]
    ),
    "turn-bad-shape": lambda g: g.check_turn([("deploy", {"v": 1}), ("get_logs",)]),
    "turn-bad-call-id": lambda g: g.check_turn([("deploy", {"v": 1}), ("get_logs", {}, 1.5)]),
    "turn-str": lambda g: g.check_turn([("deploy", {"v": 1}), "get_logs"]),
    "turn-too-deep": lambda g: g.check_turn([("deploy", {}), ("status", deep_args())]),
    "keep-not-a-verdict": lambda g: g.keep({"action": "allow"}, ["x"]),
    "observe-not-a-verdict": lambda g: g.observe({"action": "allow"}, ["x"]),
    "observe-none": lambda g: g.observe(None, []),
    "policy-of-int": lambda g: g.policy_of(3),
}


# What infer_policy says of the alphabet's undeclared names, by name alone (its table and
# verb rules, docs/guard/policies.md), written out.
BY_NAME: dict[str, tuple[str | None, str | None]] = {
    "Edit": ("write", "name"),
    "Write": ("write", "name"),
    "replace": ("write", "name"),
    "cancel_order": ("write", "name"),
    "Bash": ("shell", "name"),
    "list_services": ("read", "name"),
    "getUserInfo": ("read", "name"),
    "get_logs": ("read", "name"),
    "think": ("volatile", "name"),
}


def expected_policy(kwargs: dict[str, Any], name: str) -> tuple[str | None, str | None]:
    """The policy a guard made with ``kwargs`` has for ``name``: declared, else (unless
    ``infer=False``) from the definitions' MCP annotations, else by name, else none."""
    declared = (kwargs.get("tools") or {}).get(name)
    if declared is not None:
        return (declared["policy"] if isinstance(declared, dict) else declared, "declared")
    if kwargs.get("infer") is False:
        return (None, None)
    for definition in kwargs.get("definitions") or ():
        annotations = definition.get("annotations", {})
        if definition.get("name") == name and annotations:
            return ("read" if annotations.get("readOnlyHint") else "write", "definition")
    return BY_NAME.get(name, (None, None))


def _scale() -> int:
    return 10 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 1


class GuardParity(RuleBasedStateMachine):
    """One native and one reference guard, the same calls, the same answers."""

    def __init__(self) -> None:
        super().__init__()
        self.native: Any = None
        self.reference: Any = None
        # Every verdict pair so far, to keep and observe results against, with the call it answered
        # (None for JSON text).
        self.pairs: list[tuple[Any, Any]] = []
        self.calls: list[tuple[str, Any] | None] = []
        # Once a guard is restored from a snapshot, its cached results are copies (JSON
        # values read back), equal but not the same objects as the other guard's.
        self.restored = False
        self.kwargs: dict[str, Any] = {}

    @initialize(limits=limits(), config=configs)
    def build(self, limits: dict[str, int], config: dict[str, Any]) -> None:
        kwargs = {**limits, **config}
        self.kwargs = kwargs
        assert NATIVE is not None
        self.native = NATIVE.Guard(**kwargs)
        self.reference = REFERENCE.Guard(**kwargs)
        assert repr(self.native) == repr(self.reference)

    # -- comparing ----------------------------------------------------------------------

    def agree(self, native: Any, reference: Any, call: tuple[str, Any] | None) -> None:
        for name in VERDICT_FIELDS:
            assert getattr(native, name) == getattr(reference, name), name
        if self.restored:
            assert (type(native.cached), native.cached) == (
                type(reference.cached),
                reference.cached,
            )
        else:
            assert native.cached is reference.cached
        event(f"verdict: {reference.action} {reference.reason or ''}".strip())
        if reference.cached is not None:
            event("verdict: served from the cache")
        if reference.duplicate_of is not None:
            event("verdict: duplicate within a turn")
        message = reference.message or ""
        for needle, detail in MESSAGE_DETAILS:
            if needle in message:
                event(f"verdict: {reference.action}, {detail}")
        self.pairs.append((native, reference))
        self.calls.append(call)

    def both(self, fn: Any) -> tuple[Any, Any]:
        """``fn`` on each guard; both succeed, or both raise the same error."""
        native = outcome(fn, self.native)
        reference = outcome(fn, self.reference)
        if native[0] != "ok" or reference[0] != "ok":
            assert native == reference
        return native[1], reference[1]

    def last_call(self) -> tuple[str, Any]:
        known = [call for call in self.calls[-5:] if call is not None]
        return known[-1] if known else ("get_logs", BASES[0])

    @invariant()
    def states_agree(self) -> None:
        if self.native is not None:
            assert state(self.native) == state(self.reference)
            assert repr(self.native) == repr(self.reference)

    # -- rules ----------------------------------------------------------------------------

    @rule(name=names, args=calls_args, call_id=call_ids)
    def check(self, name: str, args: Any, call_id: str | None) -> None:
        native, reference = self.both(lambda g: g.check(name, args, call_id=call_id))
        self.agree(native, reference, (name, args))

    @rule(
        changes=st.frozensets(st.sampled_from(RESPELLINGS)),
        salt=st.integers(0, 1),
        call_id=call_ids,
    )
    def repeat_last(self, changes: frozenset[str], salt: int, call_id: str | None) -> None:
        """The previous call again, respelled: how a stuck model repeats itself."""
        name, args = self.last_call()
        args = respell(args, changes, salt) if isinstance(args, dict) else args
        native, reference = self.both(lambda g: g.check(name, args, call_id=call_id))
        self.agree(native, reference, (name, args))

    @precondition(lambda self: self.pairs)
    @rule(result=st.sampled_from(RESULTS[1:]), changes=st.frozensets(st.sampled_from(RESPELLINGS)))
    def keep_and_read_again(self, result: Any, changes: frozenset[str]) -> None:
        """What a harness does: dispatch, keep the result, and later the same call."""
        native, reference = self.pairs[-1]
        self.native.keep(native, result)
        self.reference.keep(reference, result)
        name, args = self.last_call()
        args = respell(args, changes, 0) if isinstance(args, dict) else args
        native, reference = self.both(lambda g: g.check(name, args))
        self.agree(native, reference, (name, args))

    @precondition(lambda self: hasattr(self.reference, "check_json"))
    @rule(name=names, text=json_texts, call_id=call_ids)
    def check_json(self, name: str, text: str | bytes, call_id: str | None) -> None:
        """Arguments as JSON text (OpenAI-style), broken text included: its key shares the
        window with ``check``'s."""
        native, reference = self.both(lambda g: g.check_json(name, text, call_id=call_id))
        self.agree(native, reference, None)

    @rule(calls=turn_calls)
    def check_turn(self, calls: list[tuple[Any, ...]]) -> None:
        native, reference = self.both(lambda g: g.check_turn(calls))
        assert len(native) == len(reference) == len(calls)
        for n, r, call in zip(native, reference, calls, strict=True):
            # Text arguments are JSON text: not a call ``check`` could make again.
            text = isinstance(call[1], (str, bytes))
            self.agree(n, r, None if text else (call[0], call[1]))

    @precondition(lambda self: self.pairs)
    @rule(data=st.data(), result=st.sampled_from(RESULTS))
    def keep(self, data: st.DataObject, result: Any) -> None:
        # Mostly one of the latest verdicts, as a harness would.
        last = len(self.pairs) - 1
        index = data.draw(st.integers(max(0, last - 3), last) | st.integers(0, last))
        native, reference = self.pairs[index]
        self.native.keep(native, result)
        self.reference.keep(reference, result)

    @precondition(lambda self: self.pairs)
    @rule(data=st.data(), result=st.sampled_from(OBSERVED))
    def observe(self, data: st.DataObject, result: Any) -> None:
        """What a harness tells the guard after running a call (issue #6). Mostly one of the
        latest verdicts; nudged and stopped ones too, which the guards must both ignore."""
        last = len(self.pairs) - 1
        index = data.draw(st.integers(max(0, last - 3), last) | st.integers(0, last))
        native, reference = self.pairs[index]
        assert outcome(self.native.observe, native, result) == outcome(
            self.reference.observe, reference, result
        )

    @precondition(lambda self: self.pairs)
    @rule(
        result=st.sampled_from(OBSERVED),
        changes=st.frozensets(st.sampled_from(RESPELLINGS)),
        back=st.integers(1, 4),
    )
    def observe_and_revisit(self, result: Any, changes: frozenset[str], back: int) -> None:
        """Observe the latest verdict, then make one of the last few calls again: a repeat
        whose result may or may not have changed, or the next lap of a cycle."""
        native, reference = self.pairs[-1]
        self.native.observe(native, result)
        self.reference.observe(reference, result)
        known = [call for call in self.calls[-8:] if call is not None]
        name, args = known[-min(back, len(known))] if known else ("get_logs", BASES[0])
        args = respell(args, changes, 0) if isinstance(args, dict) else args
        native, reference = self.both(lambda g: g.check(name, args))
        self.agree(native, reference, (name, args))
        if reference.action == "stop":
            event(f"observe: stopped, {reference.reason}")

    def check_and_observe(self, name: str, args: Any, result: Any) -> None:
        native, reference = self.both(lambda g: g.check(name, args))
        self.agree(native, reference, (name, args))
        self.native.observe(native, result)
        self.reference.observe(reference, result)

    @precondition(lambda self: self.pairs)
    @rule(
        results=st.lists(st.sampled_from((None, [], "", b"", "No results", "ok")), max_size=6),
        first=st.integers(0, 3),
    )
    def reword(self, results: list[Any], first: int) -> None:
        """Differently worded questions to the latest call's tool, in a row, each observed,
        mostly with an empty result: fruitless rewording (issue #6)."""
        name = self.pairs[-1][1].tool
        for wording, result in enumerate(results, start=first):
            args = {"query": f"refund policy, wording {wording}", "limit": 10}
            self.check_and_observe(name, args, result)

    @precondition(lambda self: len([call for call in self.calls if call is not None]) >= 2)
    @rule(
        period=st.integers(2, 3),
        laps=st.integers(1, 3),
        results=st.lists(st.sampled_from(OBSERVED), min_size=3, max_size=3),
        drift=st.booleans(),
    )
    def go_round(self, period: int, laps: int, results: list[Any], drift: bool) -> None:
        """The last ``period`` calls again, ``laps`` times, each observed with the result of
        its place in the cycle, or (``drift``) with one that changes every lap: edit, undo,
        edit (issue #6)."""
        cycle = [call for call in self.calls if call is not None][-period:]
        for lap in range(laps):
            for place, (name, args) in enumerate(cycle):
                result = OBSERVED[(lap + place) % len(OBSERVED)] if drift else results[place]
                self.check_and_observe(name, args, result)

    @rule(results=st.lists(st.sampled_from(("pending", "pending", "running", None)), max_size=6))
    def poll(self, results: list[Any]) -> None:
        """One status call again and again, each observed (issue #6): a wait, bounded by
        ``max_polls`` where the configuration declares the tool ``poll``."""
        for result in results:
            self.check_and_observe("build_status", {"build_id": "b-1"}, result)

    @rule(laps=st.integers(1, 3), tool=st.sampled_from(POLICY_TOOLS[:3]), same=st.booleans())
    def edit_undo(self, laps: int, tool: str, same: bool) -> None:
        """A change and its undo, lap after lap, each observed with the same result or with
        one that changes every lap (issue #6)."""
        for lap in range(laps):
            for version in ("v2", "v1"):
                result = "applied" if same else f"applied, lap {lap}"
                self.check_and_observe(tool, {"path": "rates.py", "set": version}, result)

    # A stopped guard answers nothing new, so reset it; otherwise now and then.
    @precondition(lambda self: self.reference.stopped or self.reference.steps >= 10)
    @rule()
    def reset(self) -> None:
        self.native.reset()
        self.reference.reset()

    @rule(count=st.integers(120, 135))
    def flood_call_ids(self, count: int) -> None:
        """Many new call ids: the oldest are forgotten (128 are remembered)."""
        base = len(self.pairs)
        for i in range(count):
            call_id = f"flood-{base}-{i}"
            native, reference = self.both(
                lambda g, i=i, call_id=call_id: g.check("deploy", {"n": i}, call_id=call_id)
            )
            self.agree(native, reference, ("deploy", {"n": i}))

    @precondition(lambda self: self.pairs)
    @rule(data=st.data(), failure=st.sampled_from(FAILURES))
    def observe_failure(self, data: st.DataObject, failure: tuple[Any, Any, Any]) -> None:
        """A call that failed, as the harness says it (issue 16): flagged in the result,
        said with ``error=``, transient or not."""
        last = len(self.pairs) - 1
        index = data.draw(st.integers(max(0, last - 2), last))
        native, reference = self.pairs[index]
        result, error, transient = failure
        assert outcome(
            lambda: self.native.observe(native, result, error=error, transient=transient)
        ) == outcome(
            lambda: self.reference.observe(reference, result, error=error, transient=transient)
        )

    @precondition(lambda self: self.pairs)
    @rule(
        failures=st.lists(st.sampled_from(FAILURES), min_size=1, max_size=5),
        end=st.sampled_from(OBSERVED),
        reworded=st.booleans(),
    )
    def retry(self, failures: list[tuple[Any, Any, Any]], end: Any, reworded: bool) -> None:
        """The latest call's tool tried again after failures, as the same call (a retry:
        transient failures are not repeats) or reworded (one error across varied
        arguments), and finally observed with ``end``."""
        name = self.pairs[-1][1].tool
        for attempt, (result, error, transient) in enumerate(failures):
            args = {"order": f"#W{attempt if reworded else 0}", "amount": 10}
            native, reference = self.both(lambda g, args=args: g.check(name, args))
            self.agree(native, reference, (name, args))
            self.native.observe(native, result, error=error, transient=transient)
            self.reference.observe(reference, result, error=error, transient=transient)
        args = {"order": "#W0", "amount": 10}
        self.check_and_observe(name, args, end)

    @rule()
    def user_message(self) -> None:
        """A human message arrived (issue 16)."""
        self.native.user_message()
        self.reference.user_message()

    @rule(name=st.sampled_from((*TOOL_NAMES, "Write", "replace", "getUserInfo", "x")))
    def policy_of(self, name: str) -> None:
        """Which policy each guard finds for a tool, against the configuration's literal
        answer (``expected_policy``). What a policy *is* comes from Python in both backends
        (``check_tools``, ``infer_policy``); what this drives on the native side is its own
        lookup: declared names by their bytes (non-ASCII, a lone surrogate), then the
        per-guard and cross-guard caches of inferred policies, through checks, snapshots
        and restores."""
        expected = expected_policy(self.kwargs, name)
        assert self.native.policy_of(name) == expected
        assert self.reference.policy_of(name) == expected

    @rule(
        old=st.sampled_from(("a  b", "a b", "a\n b", "a\r\nb")),
        json_text=st.booleans(),
        call_id=call_ids,
    )
    def edit(self, old: str, json_text: bool, call_id: str | None) -> None:
        """A code edit: its whitespace is part of the key (issue 16)."""
        args = {"file_path": "app.py", "old_string": old, "new_string": "x"}
        if json_text:
            text = json.dumps(args)
            native, reference = self.both(lambda g: g.check_json("Edit", text, call_id=call_id))
            self.agree(native, reference, None)
        else:
            native, reference = self.both(lambda g: g.check("Edit", args, call_id=call_id))
            self.agree(native, reference, ("Edit", args))

    @rule(which=st.sampled_from(("native", "reference", "both")), state_only=st.booleans())
    def restore_from_the_other(self, which: str, state_only: bool) -> None:
        """Issue 18: identical state is identical bytes, and a guard restored mid-run from the
        other backend's snapshot goes on as the uninterrupted one (``which`` is replaced; the
        other, when there is one, never was)."""
        assert NATIVE is not None
        data = self.native.snapshot()
        assert data == self.reference.snapshot()
        event(f"snapshot: {len(data) // 256 * 256}+ bytes")

        def restored(backend: Any, other: Any) -> Any:
            if not state_only:
                return backend.Guard.from_snapshot(other.snapshot())
            guard = backend.Guard(**self.kwargs)
            guard.load(other.snapshot(state_only=True))
            return guard

        native, reference = self.native, self.reference
        if which != "reference":
            self.native = restored(NATIVE, reference)
        if which != "native":
            self.reference = restored(REFERENCE, native)
        assert self.native.snapshot() == self.reference.snapshot() == data
        self.restored = True

    @rule(kind=st.sampled_from(sorted(BAD_CALLS)))
    def bad_call(self, kind: str) -> None:
        before = state(self.reference), state(self.native)
        native, reference = self.both(BAD_CALLS[kind])
        assert reference[0] != "ok", kind
        assert native[0] == reference[0], kind
        assert (state(self.reference), state(self.native)) == before


GuardParity.TestCase.settings = settings(
    max_examples=100 * _scale(),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGuardParity = GuardParity.TestCase


@settings(max_examples=300 * _scale(), deadline=None)
@hypothesis_given(args=json_values())
def test_verbatim_keys_agree(args: Any) -> None:
    """The key of a tool whose arguments keep their whitespace (``whitespace: keep``), on
    the values that are hard for keys (every whitespace character, lone surrogates, deep
    nesting): the native walker (``py_canon::verbatim_key``), the reference and the key
    contract written out here give the same key, or both backends raise alike."""
    tools = {"patch": {"policy": "write", "whitespace": "keep"}}
    assert NATIVE is not None
    native, reference = NATIVE.Guard(tools=tools), REFERENCE.Guard(tools=tools)
    got = outcome(native.check, "patch", args), outcome(reference.check, "patch", args)
    expected = outcome(verbatim_key_written_out, "patch", args)
    if got[0][0] == "ok" and got[1][0] == "ok":
        assert got[0][1].key == got[1][1].key == expected[1]
        assert got[0][1].invalid_arguments is got[1][1].invalid_arguments is None
    else:
        assert got[0][0] == got[1][0] == expected[0]


@settings(max_examples=300 * _scale(), deadline=None)
@hypothesis_given(args=json_values())
def test_verbatim_json_key_is_the_parsed_values_key(args: Any) -> None:
    """Contract test of the Python cold path: ``check_json`` of a tool that keeps
    whitespace is keyed by the reference's ``verbatim_key_json`` on both backends (the
    native guard hands such text to Python: these are editing tools' calls, whose time goes
    to the edit). What it checks is that this key is the key ``check`` gives the parsed
    value, which on the native backend is the native walker's: the two paths agree."""
    tools = {"patch": {"policy": "write", "whitespace": "keep"}}
    try:
        text = json.dumps(args)
    except (ValueError, RecursionError):
        return
    assert NATIVE is not None
    for module in (NATIVE, REFERENCE):
        guard = module.Guard(tools=tools)
        from_text = outcome(guard.check_json, "patch", text)
        from_value = outcome(module.Guard(tools=tools).check, "patch", json.loads(text))
        if from_text[0] == "ok" and from_text[1].invalid_arguments is not None:
            # Text the guard cannot parse (too deep) is keyed by its raw text instead.
            assert from_value[0] == "RecursionError"
        elif from_text[0] == "ok" and from_value[0] == "ok":
            assert from_text[1].key == from_value[1].key
        else:
            assert from_text[0] == from_value[0]


# Content blocks' "type" as JSON (and SDKs) may have it: the text block types, others, and
# values that are no str at all (JSON Schema's lists, GraphQL's objects, numbers, null).
_BLOCK_TYPES = st.one_of(
    st.sampled_from(["text", "input_text", "output_text", "image", "tool_use", "tool_result"]),
    json_values(max_leaves=3),
)
_RESULTS = st.one_of(
    json_values(max_leaves=6),
    json_values(max_leaves=6).map(lambda v: json.dumps(v) if _dumpable(v) else "x"),
    st.lists(
        st.fixed_dictionaries(
            {"type": _BLOCK_TYPES},
            optional={"text": st.one_of(st.sampled_from(["ok", "[]", "Error: x", ""]), st.text())},
        ),
        min_size=1,
        max_size=3,
    ),
    st.fixed_dictionaries(
        {"type": _BLOCK_TYPES},
        optional={
            "content": json_values(max_leaves=3),
            "role": _BLOCK_TYPES,
            "is_error": json_values(max_leaves=1),
            "status": _BLOCK_TYPES,
            "tool_call_id": st.just("c"),
        },
    ),
)


def _dumpable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (ValueError, RecursionError):
        return False
    return True


@settings(max_examples=300 * _scale(), deadline=None, suppress_health_check=list(HealthCheck))
@hypothesis_given(
    results=st.lists(_RESULTS, min_size=1, max_size=6),
    errors=st.lists(st.sampled_from([None, None, None, True, False, "boom"]), min_size=6),
    tools=st.sampled_from([None, {"t": "read"}, {"t": {"policy": "read", "empty": ["none"]}}]),
)
def test_results_are_read_alike(results: list[Any], errors: list[Any], tools: Any) -> None:
    """Issue 26: one result reader. Whatever a result holds (content blocks whose "type" is
    anything JSON allows, envelopes whose role or status is no str), the native guard's fast
    path and the reference read it alike: the same verdicts, the same state, byte for byte."""
    assert NATIVE is not None
    runs = []
    for module in (NATIVE, REFERENCE):
        guard = module.Guard(tools=tools)
        seen = []
        for result, error in zip(results, errors, strict=False):
            verdict = guard.check("t", 1)
            guard.observe(verdict, result, error=error)
            seen.append(tuple(getattr(verdict, name) for name in VERDICT_FIELDS))
        runs.append((seen, guard.snapshot()))
    assert runs[0] == runs[1]
