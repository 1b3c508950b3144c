"""``check_tool``: runs a real tool on two spellings of one call that its key treats as one,
and on one call twice, and says where the key would lie (issue 30).

The seed's test for a normalisation is whether *the tool* could behave differently on two
inputs the key collapses; if it could, the guard will later count a corrected call as a
repeat. The other lie is on the result side: a result that carries the time or a request id
is never the same twice, so ``observe`` takes every repeat for progress.

For each kind of normalisation separately (key order, whitespace, nulls dropped, integral
floats, volatile keys) hypothesis looks for arguments and a variant with equal keys whose
results differ, and shrinks them to a minimal pair. Results are compared as ``observe``
compares them (``describe_result``'s digest), after the result fields found to change
between identical calls are dropped, and a difference counts only where the first spelling,
run again, answers as it did (a clock ticking between two calls is not a lie about
whitespace). What is found becomes the policy that makes the key truthful, where the guard
has one: ``"whitespace": "keep"``, ``"volatile_result_keys"``, ``Guard(volatile_keys=...)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample, Unsatisfiable
from hypothesis.strategies import SearchStrategy

from tripwire._keys import DEFAULT_VOLATILE_KEYS, call_key
from tripwire._policy import ToolPolicy, check_definitions
from tripwire._results import describe_result, unwrap
from tripwire._schema import (
    definition_schema,
    from_schema,
    is_schema,
    properties,
    signature_schema,
)

Kind = Literal["key_order", "whitespace", "nulls", "integral_floats", "volatile_keys"]
KINDS: Final[tuple[Kind, ...]] = (
    "key_order",
    "whitespace",
    "nulls",
    "integral_floats",
    "volatile_keys",
)
Call = Literal["kwargs", "dict"]

# Below 2**53 every int is exactly a float.
_EXACT_FLOAT_LIMIT: Final = 2**53
# Keys a variant may set to null when the tool's argument names are unknown.
_SOME_KEYS: Final = ("limit", "cursor", "filter", "since")
_SHOWN_CHARS: Final = 160
_WHITESPACE: Final = " \t\n\u00a0\u3000"


class ToolUnavailable(Exception):
    """The tool could not answer: it hung past the timeout, or its process died. Raised by a
    tool wrapper (``tripwire fuzz mcp``'s, or ``check_tool``'s own timeout) to end the check
    of that tool; never a result."""


@dataclass(frozen=True)
class Finding:
    """One lie the key would tell: two spellings with one key that the tool answers
    differently (``kind`` one of ``KINDS``), or a result field that changes between
    identical calls (``kind == "result"``)."""

    kind: str
    arguments: Any
    variant: Any
    answer: str
    variant_answer: str
    advice: str
    fields: tuple[str, ...] = ()


@dataclass
class ToolReport:
    """What ``check_tool`` found for one tool; ``str()`` is a readable report."""

    name: str
    findings: list[Finding] = field(default_factory=list)
    # The tool policy that makes the key truthful, for Guard(tools={name: policy}); None:
    # the tool's kind is unknown, declare it yourself.
    policy: dict[str, Any] | str | None = None
    # Guard-wide settings the findings call for (volatile_keys the tool reads).
    guard_settings: dict[str, Any] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    calls: int = 0
    # Results that still differed between identical calls after the fields were dropped
    # (text with a clock in it): not expressible as fields.
    unsettled: bool = False

    @property
    def honest(self) -> bool:
        """No lie found and the tool answered every call."""
        return not self.findings and self.problem is None and not self.unsettled

    def finding(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)

    def __str__(self) -> str:
        verdict = (
            "could not be checked"
            if self.problem is not None
            else "honest"
            if self.honest
            else "the key would lie"
        )
        lines = [f"{self.name}: {verdict}"]
        if self.problem is not None:
            lines.append(f"  problem: {self.problem}")
        for found in self.findings:
            lines.append(f"  {found.kind}: {found.advice}")
            if found.kind == "result":
                lines.append(f"    called twice with {_shown(found.arguments)}")
                lines.append(f"      first:  {found.answer}")
                lines.append(f"      second: {found.variant_answer}")
            else:
                lines.append(f"    {_shown(found.arguments)} -> {found.answer}")
                lines.append(f"    {_shown(found.variant)} -> {found.variant_answer}")
        if self.unsettled:
            lines.append("  results differ between identical calls beyond any field: volatile")
        for kind, why in self.not_applicable.items():
            lines.append(f"  {kind}: not tried ({why})")
        shown = "undeclared (kind unknown)" if self.policy is None else _shown(self.policy)
        lines.append(f"  policy: {shown}")
        for setting, value in self.guard_settings.items():
            lines.append(f"  guard: {setting}={_shown(value)}")
        lines.append(f"  ({self.calls} calls)")
        return "\n".join(lines)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


# -- calling the tool ----------------------------------------------------------------------


class _Caller:
    """Calls the tool with a timeout, sync or async; one event loop (in a thread of its own)
    for all of an async tool's calls, so a check run inside a running loop works too."""

    def __init__(self, tool: Callable[..., Any], call: Call, timeout: float | None) -> None:
        self._tool = tool
        self._call = call
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.calls = 0

    def __call__(self, arguments: Any) -> tuple[Any, BaseException | None]:
        self.calls += 1
        try:
            return self._run(arguments), None
        except ToolUnavailable:
            raise
        except Exception as exc:
            return None, exc

    def _invoke(self, arguments: Any) -> Any:
        if self._call == "dict":
            return self._tool(arguments)
        if not isinstance(arguments, Mapping):
            raise TypeError(f"call='kwargs' needs dict arguments, not {type(arguments).__name__}")
        return self._tool(**arguments)

    def _run(self, arguments: Any) -> Any:
        if inspect.iscoroutinefunction(self._tool):
            return self._await(self._invoke(arguments))
        if self._timeout is None:
            outcome = self._invoke(arguments)
        else:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, "tripwire-check")
            future = self._pool.submit(self._invoke, arguments)
            try:
                outcome = future.result(self._timeout)
            except concurrent.futures.TimeoutError:
                # The thread cannot be stopped: it is left behind, and the tool not called
                # again.
                self._pool.shutdown(wait=False)
                self._pool = None
                raise ToolUnavailable(f"no answer within {self._timeout:g} s") from None
        return self._await(outcome) if inspect.isawaitable(outcome) else outcome

    def _await(self, awaitable: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True).start()

        async def wrapped() -> Any:
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(wrapped(), self._loop)
        try:
            return future.result(self._timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolUnavailable(f"no answer within {self._timeout:g} s") from None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._pool is not None:
            self._pool.shutdown(wait=False)


@dataclass(frozen=True)
class _Answer:
    digest: str | None
    failed: bool
    text: str
    value: Any


def _answer(outcome: tuple[Any, BaseException | None], policy: ToolPolicy) -> _Answer:
    result, error = outcome
    digest, _, failed, _, text = describe_result(result, error, None, policy)
    value = None if error is not None else unwrap(result)[0]
    shown = f"error: {text}" if failed else _shown(value)
    return _Answer(digest, failed, shown, value)


def _same(one: _Answer, two: _Answer) -> bool:
    """Equal answers; two errors that differ only in whitespace are one error too (an error
    that quotes the argument back, spacing and all, says nothing more)."""
    if one.digest == two.digest:
        return True
    return one.failed and two.failed and "".join(one.text.split()) == "".join(two.text.split())


# -- variants: one kind of spelling at a time --------------------------------------------


@dataclass(frozen=True)
class _Context:
    names: tuple[str, ...] | None  # the tool's top-level argument names, None: unknown
    volatile: frozenset[str]
    values: SearchStrategy[Any]  # any argument value, for volatile keys the tool has


def _key_order(draw: st.DrawFn, value: Any, ctx: _Context) -> Any:
    if isinstance(value, dict):
        items = [(k, _key_order(draw, v, ctx)) for k, v in value.items()]
        return dict(draw(st.permutations(items)))
    if isinstance(value, list):
        return [_key_order(draw, v, ctx) for v in value]
    return value


def _respaced(draw: st.DrawFn, text: str) -> str:
    runs = st.text(st.sampled_from(_WHITESPACE), min_size=1, max_size=2)
    words = text.split()
    if not words:
        return draw(st.text(st.sampled_from(_WHITESPACE), max_size=2))
    gaps = [draw(runs) for _ in words[1:]]
    spelled = words[0] + "".join(g + w for g, w in zip(gaps, words[1:], strict=True))
    if draw(st.booleans()):
        spelled = draw(runs) + spelled
    if draw(st.booleans()):
        spelled += draw(runs)
    return spelled


def _whitespace(draw: st.DrawFn, value: Any, ctx: _Context) -> Any:
    if isinstance(value, dict):
        return {k: _whitespace(draw, v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_whitespace(draw, v, ctx) for v in value]
    if isinstance(value, str) and draw(st.booleans()):
        return _respaced(draw, value)
    return value


def _nulls(draw: st.DrawFn, value: Any, ctx: _Context) -> Any:
    if not isinstance(value, dict):
        return value
    variant = {k: v for k, v in value.items() if not (v is None and draw(st.booleans()))}
    absent = [k for k in (ctx.names if ctx.names is not None else _SOME_KEYS) if k not in value]
    for key in absent:
        if draw(st.booleans()):
            variant[key] = None
    return variant


def _integral_floats(draw: st.DrawFn, value: Any, ctx: _Context) -> Any:
    if isinstance(value, dict):
        return {k: _integral_floats(draw, v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats(draw, v, ctx) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) < _EXACT_FLOAT_LIMIT and draw(st.booleans()):
        return float(value)
    if isinstance(value, float) and value.is_integer() and draw(st.booleans()):
        return int(value)
    return value


def _volatile_keys(draw: st.DrawFn, value: Any, ctx: _Context) -> Any:
    if not isinstance(value, dict):
        return value
    names = ctx.names if ctx.names is not None else sorted(ctx.volatile, key=str)
    variant = dict(value)
    for key in names:
        if key not in ctx.volatile:
            continue
        choice = draw(st.sampled_from(("keep", "drop", "set")))
        if choice == "drop":
            variant.pop(key, None)
        elif choice == "set":
            variant[key] = draw(ctx.values)
    return variant


_VARIANTS: Final[dict[Kind, Callable[[st.DrawFn, Any, _Context], Any]]] = {
    "key_order": _key_order,
    "whitespace": _whitespace,
    "nulls": _nulls,
    "integral_floats": _integral_floats,
    "volatile_keys": _volatile_keys,
}


def _spelled(value: Any) -> str:
    """The exact spelling of a value: key order, float-ness and whitespace all count."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_spelled(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_spelled(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


# -- advice --------------------------------------------------------------------------------


def _changed_strings(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in a if k in b for p in _changed_strings(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        return [p for x, y in zip(a, b, strict=False) for p in _changed_strings(x, y, path)]
    return [path.lstrip(".") or "(the arguments)"] if _spelled(a) != _spelled(b) else []


def _advice(kind: Kind, args: Any, variant: Any, volatile: frozenset[str]) -> tuple[str, Any]:
    """One line of advice, and the policy setting (or guard setting) that answers it."""
    changed = sorted(set(_changed_strings(args, variant)))
    where = ", ".join(changed) if changed else "an argument"
    if kind == "whitespace":
        return (
            f"the whitespace of {where} matters to the tool: keep it in the key "
            '({"whitespace": "keep"}; per-argument keys are not supported, so the whole '
            "tool's strings keep theirs)",
            {"whitespace": "keep"},
        )
    if kind == "nulls":
        keys = sorted(
            {k for k in set(args) ^ set(variant)} if isinstance(args, dict) else set(), key=str
        )
        return (
            f"null and absent differ to the tool ({', '.join(map(str, keys)) or where}); the "
            "key drops nulls for every tool and no policy keeps them: make the tool treat "
            "null as absent, or have the harness drop nulls before the call",
            None,
        )
    if kind == "integral_floats":
        return (
            f"1 and 1.0 differ to the tool ({where}); no policy keeps a number's spelling: "
            "make the tool accept both",
            None,
        )
    if kind == "key_order":
        return (
            "the tool depends on the order of the keys it is given; JSON objects have none "
            "and no policy can express it: a bug in the tool",
            None,
        )
    keys = sorted(
        {k for k in set(args) | set(variant) if k in volatile} if isinstance(args, dict) else []
    )
    return (
        f"the tool reads {', '.join(keys)}, which the key ignores as volatile: take "
        f"{', '.join(keys)} out of the guard's volatile_keys",
        keys,
    )


# -- the repeat: results that change between identical calls -------------------------------


def _changed_fields(a: Any, b: Any, key: str | None, out: set[str | None]) -> None:
    """The innermost dict keys under which two results differ; ``None`` for a difference
    under no key at all (a text result)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in set(a) | set(b):
            if k not in a or k not in b:
                out.add(k)
            else:
                _changed_fields(a[k], b[k], k, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for x, y in zip(a, b, strict=True):
            _changed_fields(x, y, key, out)
    elif a != b:
        out.add(key)


def _sample(strategy: SearchStrategy[Any], count: int, seed: int | None) -> list[Any]:
    drawn: list[Any] = []

    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        derandomize=seed is not None,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    unique: dict[str, Any] = {}
    for value in drawn:
        unique.setdefault(_spelled(value), value)
    return list(unique.values())[:count]


def _repeat(
    caller: _Caller,
    samples: list[Any],
    report: ToolReport,
    policy: ToolPolicy,
    gap: float,
) -> frozenset[str]:
    """Calls each sample twice, at least ``gap`` seconds apart (a clock of whole seconds
    ticks), and returns the result fields that changed."""
    started = time.monotonic()
    first = [_answer(caller(args), policy) for args in samples]
    wait = gap - (time.monotonic() - started)
    if wait > 0:
        time.sleep(wait)
    second = [_answer(caller(args), policy) for args in samples]
    fields: set[str | None] = set()
    example: tuple[Any, _Answer, _Answer] | None = None
    for args, one, two in zip(samples, first, second, strict=True):
        if one.digest == two.digest or one.failed or two.failed:
            continue
        found: set[str | None] = set()
        _changed_fields(one.value, two.value, None, found)
        fields |= found
        if example is None:
            example = (args, one, two)
    keys = frozenset(k for k in fields if k is not None)
    if example is not None:
        args, one, two = example
        if keys:
            report.findings.append(
                Finding(
                    "result",
                    args,
                    args,
                    one.text,
                    two.text,
                    f"results change between identical calls in {', '.join(sorted(keys))}: "
                    f'ignore them ({{"volatile_result_keys": {sorted(keys)!r}}})',
                    tuple(sorted(keys)),
                )
            )
        if None in fields:
            report.unsettled = True
            if not keys:
                report.findings.append(
                    Finding(
                        "result",
                        args,
                        args,
                        one.text,
                        two.text,
                        "results change between identical calls, and not in a field that "
                        "could be ignored: the tool's answer moves on its own ('volatile')",
                    )
                )
    return keys


# -- the check -----------------------------------------------------------------------------


def _strategy_of(
    tool: Callable[..., Any],
    arguments: Any,
    values: Mapping[str, Sequence[Any]] | None,
) -> tuple[SearchStrategy[Any], tuple[str, ...] | None, str | None, Any]:
    """The arguments' strategy, the tool's argument names (``None``: unknown), the name a
    definition gives, and the definition's annotations."""
    if isinstance(arguments, SearchStrategy):
        return arguments, None, None, None
    if arguments is None:
        read = signature_schema(tool)
        if read is None:
            raise TypeError(
                "check_tool needs arguments=: a JSON schema, a tool definition or a "
                "hypothesis strategy (the tool's signature cannot be read)"
            )
        schema, extra = read
        names = None if extra else tuple(properties(schema) or ())
        return from_schema(schema, values), names, None, None
    name, defined, annotations = definition_schema(arguments)
    if defined is not None:
        schema = defined
    else:
        if not is_schema(arguments):
            raise TypeError(
                "arguments must be a JSON schema, a tool definition (OpenAI, Anthropic, MCP) "
                f"or a hypothesis strategy, not {type(arguments).__name__}"
            )
        schema = dict(arguments)
    props = properties(schema)
    extra = schema.get("additionalProperties", True) is not False and props is None
    names = None if extra or props is None else tuple(props)
    return from_schema(schema, values), names, name, annotations


def _kind_of(name: str, annotations: Any, volatile_result: bool) -> str | None:
    """The policy kind: what the definition's annotations say, ``volatile`` for a read
    whose answer moves on its own (never cached), else what the name says."""
    from tripwire._policy import infer_policy

    definitions = check_definitions(
        [{"name": name, "annotations": annotations}] if isinstance(annotations, Mapping) else []
    )
    inferred = infer_policy(name, definitions)
    kind = None if inferred is None else inferred.kind
    if volatile_result and kind in ("read", None) and inferred is not None:
        return "volatile"
    return kind


def check_tool(
    tool: Callable[..., Any],
    arguments: Any = None,
    *,
    name: str | None = None,
    examples: int = 50,
    kinds: Iterable[Kind] = KINDS,
    values: Mapping[str, Sequence[Any]] | None = None,
    call: Call = "kwargs",
    policy: str | None = None,
    annotations: Any = None,
    volatile_keys: Iterable[str] | None = None,
    timeout: float | None = 10.0,
    repeat_gap: float = 1.1,
    repeats: int = 4,
    seed: int | None = 0,
) -> ToolReport:
    """Runs ``tool`` on spellings of its arguments that get one key and says where the key
    would lie; see the module docstring.

    ``arguments``: a JSON schema, a tool definition (OpenAI, Anthropic, an MCP ``Tool`` or
    its dict), or a hypothesis strategy of argument dicts; ``None``: read from the tool's
    signature. ``values``: candidate values by argument name (a real path, an id that
    exists). ``call``: ``"kwargs"`` calls ``tool(**args)``, ``"dict"`` calls ``tool(args)``.
    ``examples``: arguments tried per kind. ``policy``: the tool's kind, where neither its
    definition nor its name says. ``timeout``: seconds a call may take (a hung tool is
    reported and not called again). ``repeat_gap``: seconds between the two identical calls.
    ``seed``: ``None`` for a random run, else a reproducible one.
    """
    strategy, names, defined_name, defined_hints = _strategy_of(tool, arguments, values)
    tool_name = name or defined_name or getattr(tool, "__name__", None) or "tool"
    hints = annotations if annotations is not None else defined_hints
    volatile = DEFAULT_VOLATILE_KEYS if volatile_keys is None else frozenset(volatile_keys)
    report = ToolReport(tool_name)
    caller = _Caller(tool, call, timeout)
    current = ToolPolicy("read")
    result_keys: frozenset[str] = frozenset()
    setting: dict[str, Any] = {}
    try:
        samples = _sample(strategy, repeats, seed)
        result_keys = _repeat(caller, samples, report, current, repeat_gap)
        current.ignore_in_results(result_keys)
        ctx = _Context(names, volatile, _sample_values(strategy))
        for kind in kinds:
            why = _not_applicable(kind, names, volatile)
            if why is not None:
                report.not_applicable[kind] = why
                continue
            found = _search(kind, caller, strategy, ctx, current, tool_name, examples, seed)
            if found is None:
                continue
            args, variant = found
            one, two = _answer(caller(args), current), _answer(caller(variant), current)
            advice, fix = _advice(kind, args, variant, volatile)
            report.findings.append(Finding(kind, args, variant, one.text, two.text, advice))
            if kind == "whitespace":
                setting.update(fix)
            elif kind == "volatile_keys" and fix:
                kept = set(report.guard_settings.get("volatile_keys", volatile)) - set(fix)
                report.guard_settings["volatile_keys"] = sorted(kept)
    except ToolUnavailable as exc:
        report.problem = str(exc)
    finally:
        caller.close()
        report.calls = caller.calls
    if result_keys:
        setting["volatile_result_keys"] = sorted(result_keys)
    kind_name = policy or _kind_of(tool_name, hints, bool(result_keys) or report.unsettled)
    if kind_name is not None:
        report.policy = {"policy": kind_name, **setting} if setting else kind_name
    return report


def _sample_values(strategy: SearchStrategy[Any]) -> SearchStrategy[Any]:
    """Values to give a volatile argument: any JSON scalar."""
    del strategy
    return st.one_of(st.integers(0, 10**6), st.text("abcdef0123456789", min_size=1, max_size=12))


def _not_applicable(
    kind: Kind, names: tuple[str, ...] | None, volatile: frozenset[str]
) -> str | None:
    if kind == "volatile_keys" and names is not None and not volatile.intersection(names):
        return "it takes no argument named as a volatile key"
    if kind == "nulls" and names is not None and not names:
        return "it takes no arguments"
    return None


def _search(
    kind: Kind,
    caller: _Caller,
    strategy: SearchStrategy[Any],
    ctx: _Context,
    policy: ToolPolicy,
    name: str,
    examples: int,
    seed: int | None,
) -> tuple[Any, Any] | None:
    """The minimal (arguments, variant) pair of this kind that the tool answers differently,
    or ``None``."""
    vary = _VARIANTS[kind]

    @st.composite
    def pairs(draw: st.DrawFn) -> tuple[Any, Any]:
        args = draw(strategy)
        return args, vary(draw, args, ctx)

    def lies(pair: tuple[Any, Any]) -> bool:
        args, variant = pair
        if _spelled(args) == _spelled(variant):
            return False
        try:
            same_key = call_key(name, args, volatile_keys=ctx.volatile) == call_key(
                name, variant, volatile_keys=ctx.volatile
            )
        except (TypeError, ValueError, RecursionError):
            return False
        if not same_key:
            return False
        one = _answer(caller(args), policy)
        two = _answer(caller(variant), policy)
        if _same(one, two):
            return False
        # The first spelling again: if it now answers as the variant did, or otherwise than
        # it did, the tool is not repeatable here, and nothing is learnt about the key.
        return _answer(caller(args), policy).digest == one.digest

    try:
        return find(
            pairs(),
            lies,
            settings=settings(
                max_examples=examples,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.generate, Phase.shrink],
            ),
            random=None if seed is None else random.Random(seed),
        )
    except (NoSuchExample, Unsatisfiable):
        return None
