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
  failure);
- a copy of another call of the same response: not run; answered with that call's result
  once it is in (``reject_content`` with the result's text);
- nudge: not run; answered with the guard's message (``reject_content``);
- stop: ``raise_exception``, so the run ends with the SDK's
  ``ToolInputGuardrailTripwireTriggered``; ``stop_of(exc)`` gives the guard's verdict (it
  is the guardrail output's ``output_info``).

The name clash: the SDK calls every guardrail that halts a run a "tripwire"
(``tripwire_triggered``, ``ToolInputGuardrailTripwireTriggered``). That exception is the
SDK's, raised for any tool guardrail that halts a run; this package's guardrail is the one
named ``tripwire`` (``exc.guardrail.get_name()``), and ``stop_of`` returns ``None`` for the
others.
"""

from __future__ import annotations

import asyncio
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
from tripwire.telemetry import record, record_turn

__all__ = ("GUARDRAIL_NAME", "AgentGuard", "guard_agent", "stop_of")

GUARDRAIL_NAME = "tripwire"

# What the SDK sends the model when a tool raises and no failure_error_function is set; the
# output guardrail sees only this text, so it is how a failure is recognised.
_SDK_TOOL_ERROR: str = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
# What a copy is answered with when its original ended without a result (another guardrail
# rejected it, or the SDK cancelled it): the copy then runs as a call of its own.
_NO_RESULT = object()


class AgentGuard:
    """The guardrails and hooks that ``guard_agent`` attached, and the guard behind them."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check, name=GUARDRAIL_NAME
        )
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._observe, name=GUARDRAIL_NAME
        )
        self.tool_names: set[str] = set()
        # The current response's calls, by call id: their verdicts; for each call that is
        # to run, a future of its result (what a copy of it waits for); and for the calls
        # now running, their verdicts, for the output guardrail.
        self._verdicts: dict[str, tripwire.Verdict] = {}
        self._originals: dict[str, str] = {}
        self._results: dict[str, asyncio.Future[Any]] = {}
        self._running: dict[str, tripwire.Verdict] = {}

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

    def check_response(self, response: Any) -> list[tripwire.Verdict]:
        """The function calls of a model response (``ModelResponse``) to this agent's
        tools, checked as one turn. The hooks call it; the guardrails then use its
        verdicts."""
        calls = [
            (item.name, item.arguments, item.call_id)
            for item in response.output
            if getattr(item, "type", None) == "function_call" and item.name in self.tool_names
        ]
        # A response's calls have all run (or the run ended) before the next response:
        # what was kept for the last one is let go.
        self._verdicts, self._originals, self._results, self._running = {}, {}, {}, {}
        if not calls:
            return []
        verdicts: list[tripwire.Verdict] = self.guard.check_turn(calls)
        record_turn(verdicts)
        loop = asyncio.get_running_loop()
        for (_, _, call_id), verdict in zip(calls, verdicts, strict=True):
            self._verdicts[call_id] = verdict
            if verdict.duplicate_of is not None:
                self._originals[call_id] = calls[verdict.duplicate_of][2]
            elif verdict.action == "allow":
                self._results[call_id] = loop.create_future()
        return verdicts

    # -- the guardrails -------------------------------------------------------------------

    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        call_id = context.tool_call_id
        verdict = self._verdicts.pop(call_id, None)
        if verdict is None:
            # A call the hooks did not see (the agent's hooks were replaced after
            # guard_agent, or the tool is another agent's): checked on its own.
            verdict = self.guard.check_json(
                context.tool_name, context.tool_arguments, call_id=call_id
            )
            record(verdict)
        if verdict.action == "stop":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=verdict)
        if verdict.action == "nudge":
            return ToolGuardrailFunctionOutput.reject_content(
                verdict.message or "", output_info=verdict
            )
        original = self._originals.pop(call_id, None)
        if original is not None:
            result = await self._result_of(original)
            if result is not _NO_RESULT:
                return ToolGuardrailFunctionOutput.reject_content(
                    as_text(result), output_info=verdict
                )
        else:
            future = self._results.get(call_id)
            task = asyncio.current_task()
            if future is not None and task is not None:
                # This task runs the call to its end (tool, output guardrails): if it ends
                # without a result, a copy waiting for one must not wait forever.
                task.add_done_callback(lambda _: _settle(future, _NO_RESULT))
        self._running[call_id] = verdict
        return ToolGuardrailFunctionOutput.allow(output_info=verdict)

    async def _result_of(self, call_id: str) -> Any:
        future = self._results.get(call_id)
        if future is None:
            return _NO_RESULT
        # Shielded: a copy cancelled while it waits must not cancel the original's result.
        return await asyncio.shield(future)

    async def _observe(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        call_id = data.context.tool_call_id
        verdict = self._running.pop(call_id, None)
        if verdict is not None:
            output = data.output
            failed = True if isinstance(output, str) and output == _SDK_TOOL_ERROR else None
            self.guard.observe(verdict, output, error=failed)
            future = self._results.get(call_id)
            if future is not None:
                _settle(future, output)
        return ToolGuardrailFunctionOutput.allow()


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
        self.owner.check_response(response)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)


def guard_agent(agent: Any, guard: Any = None, /, **guard_options: Any) -> AgentGuard:
    """Guards every function tool of ``agent`` (see the module), with ``guard`` or a new
    ``tripwire.Guard(**guard_options)``; returns what was attached (its ``guard`` too).
    Agents a run hands off to are guarded by calling this for each, with the same guard.

    A guard is one run's, and what is attached is the agent's (its tools and hooks): runs
    at the same time each need an agent (and tools) of their own, guarded each; calling this
    again on an agent replaces the guard attached before."""
    if guard is None:
        guard = tripwire.Guard(**guard_options)
    elif guard_options:
        raise TypeError("guard options are for a new guard: pass a guard or options, not both")
    attached = AgentGuard(guard)
    attached.attach(agent)
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
