"""tripwire for the OpenAI Agents SDK (``openai-agents``): a tool input guardrail on every
function tool of an agent, in one call.

::

    agent = Agent(name="triage", tools=[get_logs, get_metrics], model=...)
    loop_guard = tripwire.adapters.agents.guard_agent(agent)
    try:
        result = await Runner.run(agent, "Why did checkout latency double?")
    except ToolInputGuardrailTripwireTriggered as exc:
        stop = stop_of(exc)  # the guard's verdict: reason "loop_detected", the tool ...

How it plugs in. The SDK runs a tool's input guardrails before each call, one call at a
time, but a loop guard must see a model response's calls together (identical calls in one
response are one action). So ``guard_agent`` also wraps the agent's hooks
(``agent.hooks``; the hooks it had still run): ``on_llm_end`` hands every function call of
each model response to ``Guard.check_turn``, and each call's guardrail then gives that
call's verdict:

- allow: the tool runs; a tool output guardrail observes what it returned
  (``Guard.observe``; the SDK's default error text for a tool that raised is observed as a
  failure), and keeps it where the tool is declared ``read`` (``Guard.keep``);
- allow, served from the guard's read cache (``verdict.cached``: the kept result of the same
  call to a declared ``read`` tool): not run; answered with that result
  (``reject_content`` with its text), as every adapter does;
- a copy of another call of the same response: not run; answered with that call's result
  once it is in (``reject_content`` with the result's text);
- nudge: not run; answered with the guard's message (``reject_content``);
- stop: ``raise_exception``, so the run ends with the SDK's
  ``ToolInputGuardrailTripwireTriggered``; ``stop_of(exc)`` gives the guard's verdict (it
  is the guardrail output's ``output_info``).

One guard per run. What ``guard_agent`` attaches is the agent's, and people run one agent
many times (a service, a notebook, a retry): a guard is one run's. Each ``Runner.run`` (or
``run_streamed``) of a guarded agent gets a guard of its own, told apart by the run's
``RunContextWrapper.usage`` (one object per run, shared by its hooks' and tools' contexts):
the guard given to ``guard_agent`` serves the first run, and each later run a new guard made
like it (its configuration, none of its state). Runs of one agent at the same time are
guarded apart too.

The name clash: the SDK calls every guardrail that halts a run a "tripwire"
(``tripwire_triggered``, ``ToolInputGuardrailTripwireTriggered``). That exception is the
SDK's, raised for any tool guardrail that halts a run; this package's guardrail is the one
named ``tripwire`` (``exc.guardrail.get_name()``), and ``stop_of`` returns ``None`` for the
others.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from agents import (
    AgentHooks,
    FunctionTool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.tool import default_tool_error_function

import tripwire
from tripwire.adapters._turn import as_text
from tripwire.telemetry import emit, emit_turn

__all__ = ("GUARDRAIL_NAME", "AgentGuard", "guard_agent", "stop_of")

GUARDRAIL_NAME = "tripwire"

# What the SDK sends the model when a tool raises and no failure_error_function is set; the
# output guardrail sees only this text, so it is how a failure is recognised.
_SDK_TOOL_ERROR: str = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
# What a copy is answered with when its original ended without a result (another guardrail
# rejected it, or the SDK cancelled it): the copy then runs as a call of its own.
_NO_RESULT = object()
# How many runs' guards are kept when a run's usage object cannot be watched for its end
# (weakref): the oldest are let go first.
_UNWATCHED_RUNS = 1024


class _Run:
    """One run's guard, and the calls of its current model response, by call id: their
    verdicts; for each call that is to run, a future of its result (what a copy of it waits
    for); and for the calls now running, their verdicts, for the output guardrail."""

    __slots__ = ("guard", "originals", "results", "running", "usage", "verdicts")

    def __init__(self, guard: Any, usage: Any) -> None:
        self.guard = guard
        # Held only where the usage object cannot be watched (so its id is not reused).
        self.usage = usage
        self.verdicts: dict[str, tripwire.Verdict] = {}
        self.originals: dict[str, str] = {}
        self.results: dict[str, asyncio.Future[Any]] = {}
        self.running: dict[str, tripwire.Verdict] = {}


class AgentGuard:
    """The guardrails and hooks that ``guard_agent`` attached, and the guards behind them:
    ``guard`` is the latest run's (the one given, until a run starts); ``make_guard`` makes
    each later run's."""

    def __init__(self, guard: Any, make_guard: Callable[[], Any] | None = None) -> None:
        self.guard = guard
        # The guard given to guard_agent (None when it made one), and the first run's guard
        # until a run takes it.
        self._given: Any = None
        self._first: Any = guard
        self._make_guard = make_guard
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check, name=GUARDRAIL_NAME
        )
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._observe, name=GUARDRAIL_NAME
        )
        self.tool_names: set[str] = set()
        # The runs under way, by the id of their usage object (see the module); each entry
        # is let go when its usage object is.
        self._runs: OrderedDict[int, _Run] = OrderedDict()
        self._lock = threading.Lock()

    def _new_guard(self) -> Any:
        """A guard for a run: the given one for the first, then one made like it."""
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self._make_guard is not None:
            return self._make_guard()
        # Made like the given guard: its configuration, none of its state.
        fresh = type(self.guard).from_snapshot(self.guard.snapshot())
        fresh.reset()
        return fresh

    def run_of(self, context: Any) -> _Run:
        """The run a hook's or a tool's context belongs to (a new one, with a new guard,
        the first time it is seen)."""
        usage = getattr(context, "usage", None)
        key = id(usage)
        run = self._runs.get(key)
        if run is not None:
            return run
        with self._lock:
            run = self._runs.get(key)
            if run is not None:
                return run
            run = _Run(self._new_guard(), None)
            self._runs[key] = run
            self.guard = run.guard
            try:
                weakref.finalize(usage, self._runs.pop, key, None)
            except TypeError:
                # Not watchable (or no usage at all): kept, so its id is not reused, and
                # bounded.
                run.usage = usage
                while len(self._runs) > _UNWATCHED_RUNS:
                    self._runs.popitem(last=False)
        return run

    def attach(self, agent: Any) -> None:
        """Puts the guardrails first on each of the agent's function tools (the guard must
        see every call, before a later guardrail can reject it), and wraps its hooks."""
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool):
                continue
            self.tool_names.add(tool.name)
            inputs = [g for g in tool.tool_input_guardrails or () if not _ours(g)]
            tool.tool_input_guardrails = [self.input_guardrail, *inputs]
            outputs = [g for g in tool.tool_output_guardrails or () if not _ours(g)]
            tool.tool_output_guardrails = [self.output_guardrail, *outputs]
        hooks = agent.hooks
        # Guarded again (a new guard for a new run): the new guard replaces the old one.
        agent.hooks = _TurnHooks(self, hooks.inner if isinstance(hooks, _TurnHooks) else hooks)

    # -- one model response ---------------------------------------------------------------

    def check_response(self, response: Any, context: Any = None) -> list[tripwire.Verdict]:
        """The function calls of a model response (``ModelResponse``) to this agent's
        tools, checked as one turn by the guard of the run ``context`` (the hook's) belongs
        to. The hooks call it; the guardrails then use its verdicts."""
        run = self.run_of(context)
        calls = [
            (item.name, item.arguments, item.call_id)
            for item in response.output
            if getattr(item, "type", None) == "function_call" and item.name in self.tool_names
        ]
        # A response's calls have all run (or the run ended) before the next response:
        # what was kept for the last one is let go.
        run.verdicts, run.originals, run.results, run.running = {}, {}, {}, {}
        if not calls:
            return []
        verdicts: list[tripwire.Verdict] = run.guard.check_turn(calls)
        emit_turn(verdicts)
        loop = asyncio.get_running_loop()
        for (_, _, call_id), verdict in zip(calls, verdicts, strict=True):
            run.verdicts[call_id] = verdict
            if verdict.duplicate_of is not None:
                run.originals[call_id] = calls[verdict.duplicate_of][2]
            elif verdict.action == "allow":
                run.results[call_id] = loop.create_future()
        return verdicts

    # -- the guardrails -------------------------------------------------------------------

    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        run = self.run_of(context)
        call_id = context.tool_call_id
        verdict = run.verdicts.pop(call_id, None)
        if verdict is None:
            # A call the hooks did not see (the agent's hooks were replaced after
            # guard_agent, or the tool is another agent's): checked on its own.
            verdict = run.guard.check_json(
                context.tool_name, context.tool_arguments, call_id=call_id
            )
            emit(verdict)
        if verdict.action == "stop":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=verdict)
        if verdict.action == "nudge":
            return ToolGuardrailFunctionOutput.reject_content(
                verdict.message or "", output_info=verdict
            )
        original = run.originals.pop(call_id, None)
        if original is None and verdict.cached is not None:
            # Served from the guard's read cache (a declared read's kept result): not run,
            # and a copy of this call in the response gets the same answer.
            future = run.results.get(call_id)
            if future is not None:
                _settle(future, verdict.cached)
            return ToolGuardrailFunctionOutput.reject_content(
                as_text(verdict.cached), output_info=verdict
            )
        if original is not None:
            result = await _result_of(run, original)
            if result is not _NO_RESULT:
                return ToolGuardrailFunctionOutput.reject_content(
                    as_text(result), output_info=verdict
                )
        else:
            future = run.results.get(call_id)
            task = asyncio.current_task()
            if future is not None and task is not None:
                # This task runs the call to its end (tool, output guardrails): if it ends
                # without a result, a copy waiting for one must not wait forever.
                task.add_done_callback(lambda _: _settle(future, _NO_RESULT))
        run.running[call_id] = verdict
        return ToolGuardrailFunctionOutput.allow(output_info=verdict)

    async def _observe(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        run = self.run_of(data.context)
        call_id = data.context.tool_call_id
        verdict = run.running.pop(call_id, None)
        if verdict is not None:
            output = data.output
            failed = True if isinstance(output, str) and output == _SDK_TOOL_ERROR else None
            run.guard.observe(verdict, output, error=failed)
            if not failed and run.guard.policy_of(verdict.tool) == ("read", "declared"):
                # Kept for a later allowed repeat, served from the guard (see _check).
                run.guard.keep(verdict, output)
            future = run.results.get(call_id)
            if future is not None:
                _settle(future, output)
        return ToolGuardrailFunctionOutput.allow()


async def _result_of(run: _Run, call_id: str) -> Any:
    future = run.results.get(call_id)
    if future is None:
        return _NO_RESULT
    # Shielded: a copy cancelled while it waits must not cancel the original's result.
    return await asyncio.shield(future)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _ours(guardrail: Any) -> bool:
    """A guardrail that ``guard_agent`` attached (to be replaced when guarded again)."""
    return isinstance(getattr(guardrail.guardrail_function, "__self__", None), AgentGuard)


class _TurnHooks(AgentHooks[Any]):
    """The agent's hooks, with every model response shown to the guard first. The hooks the
    agent had are called for every event (each is forwarded by name, so events a later SDK
    adds are forwarded too)."""

    def __init__(self, owner: AgentGuard, inner: Any) -> None:
        self.owner = owner
        self.inner = inner
        if inner is not None:
            for name in dir(inner):
                if name.startswith("on_") and name != "on_llm_end":
                    setattr(self, name, getattr(inner, name))

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.owner.check_response(response, context)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)


# What guard_agent attached for each guard given to it, by the guard's id (the entry holds
# the guard, so the id is not reused while it lives): agents guarded with one guard share
# their runs' guards, so a run that hands off from one to another is one run to the guard.
_ATTACHED: dict[int, weakref.ref[AgentGuard]] = {}


def guard_agent(
    agent: Any,
    guard: Any = None,
    /,
    *,
    make_guard: Callable[[], Any] | None = None,
    **guard_options: Any,
) -> AgentGuard:
    """Guards every function tool of ``agent`` (see the module); returns what was attached
    (its ``guard``: the latest run's). Each run gets a guard of its own: ``guard`` serves
    the first run and each later one gets a guard made like it (its configuration, none of
    its state); or ``make_guard()`` makes each run's; or, with neither, a new
    ``tripwire.Guard(**guard_options)``. Agents a run hands off to are guarded by calling
    this for each with the same ``guard`` (or with what the first call returned): their runs
    then share one guard.

    Calling this again on an agent, with another guard, replaces the guard attached before."""
    if (guard is not None or make_guard is not None) and guard_options:
        raise TypeError("guard options are for a new guard: pass a guard or options, not both")
    if guard is not None and make_guard is not None:
        raise TypeError("pass a guard or make_guard, not both")
    if isinstance(guard, AgentGuard):
        attached = guard
    elif guard is not None:
        attached = _attached_for(guard)
    else:
        if make_guard is None:
            options = guard_options

            def make_guard() -> Any:
                return tripwire.Guard(**options)

        attached = AgentGuard(make_guard(), make_guard)
    attached.attach(agent)
    return attached


def _attached_for(guard: Any) -> AgentGuard:
    """What was attached for ``guard`` before, if it lives; else a new one, remembered."""
    key = id(guard)
    known = _ATTACHED.get(key)
    before = known() if known is not None else None
    if before is not None and before._given is guard:
        return before
    if not callable(getattr(type(guard), "from_snapshot", None)):
        # Each run needs a guard of its own, made like this one.
        raise TypeError(
            f"a {type(guard).__name__} cannot be copied for each run: "
            "pass make_guard= (a function that makes a run's guard)"
        )
    attached = AgentGuard(guard)
    attached._given = guard

    def forget(ref: weakref.ref[AgentGuard]) -> None:
        if _ATTACHED.get(key) is ref:
            del _ATTACHED[key]

    _ATTACHED[key] = weakref.ref(attached, forget)
    return attached


def stop_of(exc: BaseException) -> tripwire.Verdict | None:
    """The guard's stop behind an exception a run raised: a
    ``ToolInputGuardrailTripwireTriggered`` from this package's guardrail (or an exception
    caused by one); ``None`` for any other guardrail's, or any other exception."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        guardrail = getattr(current, "guardrail", None)
        output = getattr(current, "output", None)
        info = getattr(output, "output_info", None)
        if (
            isinstance(guardrail, ToolInputGuardrail)
            and guardrail.get_name() == GUARDRAIL_NAME
            and getattr(info, "action", None) == "stop"
        ):
            # Either backend's Verdict (the native one is not the reference's class).
            return info
        current = current.__cause__ or current.__context__
    return None
