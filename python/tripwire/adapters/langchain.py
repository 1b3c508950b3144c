"""tripwire for LangChain v1 agents (``langchain.agents.create_agent``): one middleware.

::

    agent = create_agent(model, tools, middleware=[LoopGuardMiddleware()],
                         checkpointer=InMemorySaver())

``LoopGuardMiddleware`` sees each model turn whole (``after_model``), before any of its calls
runs:

- a nudged call is answered with ``ToolMessage(status="error")`` carrying the guard's
  message, so the tool node does not run it;
- an identical copy of another call of the turn is not run either: it is given that call's
  result (its answer is put in place before the next model call);
- a stop answers every tool call id of the turn with the stop's message, adds an
  ``AIMessage`` that says why the run stopped, and ends the run (``jump_to: "end"``);
- a call the guard serves from its read cache (``verdict.cached``: the kept result of the
  same call to a tool declared ``read``) is answered with that result and not run, as every
  adapter does.

Before the next model call (``before_model``) the calls that ran are observed from their
``ToolMessage``s (``status="error"`` is a failure; a declared read's successful content is
kept, ``Guard.keep``), and a person's new message is told to the guard
(``Guard.user_message``; a new message after a stop starts the guard afresh: the person has
seen why it stopped).

The guard lives in the agent's state (``tripwire_guard``: its snapshot, ``Guard.snapshot``),
not in the middleware: it is checkpointed with the run, survives a resume in another process,
and each thread has its own, so one middleware serves every thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import tripwire
from tripwire.adapters._turn import as_text
from tripwire.telemetry import emit_turn

__all__ = ("LoopGuardMiddleware", "LoopGuardState")

# The id of the answer a copy is given while its original runs, replaced (add_messages
# replaces a message with the same id) by the original's answer before the next model call.
_COPY_ID = "tripwire-copy-"
# The id of the answer a nudged call is given: the nudge is that call's answer, and the guard
# counts a call checked again under its id after a nudge (the model repeating itself), so
# ``before_model`` must know which calls were nudged without checking them again.
_NUDGE_ID = "tripwire-nudge-"
# The id of the answer a call served from the guard's read cache is given: it did not run,
# so ``before_model`` observes nothing of it.
_CACHED_ID = "tripwire-cached-"


class LoopGuardState(AgentState[Any]):
    """The agent state the middleware adds: the guard's snapshot, and the id of the last
    model message whose results it has observed (so a step run twice observes once)."""

    tripwire_guard: NotRequired[Annotated[bytes | None, PrivateStateAttr]]
    tripwire_observed: NotRequired[Annotated[str | None, PrivateStateAttr]]


class LoopGuardMiddleware(AgentMiddleware[LoopGuardState, Any, Any]):
    """A loop guard for a ``create_agent`` agent (see the module). ``make_guard``: how a
    thread's guard is made (default: ``tripwire.Guard(**guard_options)``)."""

    state_schema = LoopGuardState

    def __init__(
        self, *, make_guard: Callable[[], Any] | None = None, **guard_options: Any
    ) -> None:
        super().__init__()
        if make_guard is not None and guard_options:
            raise TypeError("guard options are for the default guard: pass make_guard or them")
        self._make_guard: Callable[[], Any] = make_guard or (
            lambda: tripwire.Guard(**guard_options)
        )
        # Made once, now: bad options fail here, not in the middle of a run; and its class
        # (the backend) is the one snapshots are restored with.
        self._guard_type = type(self._make_guard())

    def guard_of(self, state: Any) -> Any:
        """The guard a state holds (a new one where it holds none yet)."""
        data = state.get("tripwire_guard")
        if data is None:
            return self._make_guard()
        return self._guard_type.from_snapshot(data)

    # -- after each model call: the turn ---------------------------------------------------

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: LoopGuardState, runtime: Any) -> dict[str, Any] | None:
        message = _last_ai_message(state["messages"])
        if message is None or not message.tool_calls:
            return None
        guard = self.guard_of(state)
        # LangChain's ToolCall types its id Optional; a model's tool calls always have one.
        calls: list[Any] = message.tool_calls
        verdicts = guard.check_turn([(call["name"], call["args"], call["id"]) for call in calls])
        emit_turn(verdicts)
        stop = next((verdict for verdict in verdicts if verdict.action == "stop"), None)
        if stop is not None:
            answers: list[Any] = [
                ToolMessage(
                    stop.message, tool_call_id=call["id"], name=call["name"], status="error"
                )
                for call in calls
            ]
            answers.append(AIMessage(stop.message))
            return {"messages": answers, "jump_to": "end", "tripwire_guard": guard.snapshot()}
        answers = []
        for call, verdict in zip(calls, verdicts, strict=True):
            if verdict.action == "nudge":
                answers.append(
                    ToolMessage(
                        verdict.message,
                        tool_call_id=call["id"],
                        name=call["name"],
                        status="error",
                        id=_NUDGE_ID + call["id"],
                    )
                )
            elif verdict.cached is not None:  # a copy of such a call too
                answers.append(
                    ToolMessage(
                        as_text(verdict.cached),
                        tool_call_id=call["id"],
                        name=call["name"],
                        id=_CACHED_ID + call["id"],
                    )
                )
            elif verdict.duplicate_of is not None:
                original = calls[verdict.duplicate_of]["id"]
                answers.append(
                    ToolMessage(
                        f"The same call as {original}: its result.",
                        tool_call_id=call["id"],
                        name=call["name"],
                        id=_COPY_ID + call["id"],
                    )
                )
        update: dict[str, Any] = {"tripwire_guard": guard.snapshot()}
        if answers:
            update["messages"] = answers
        return update

    # -- before each model call: the results ----------------------------------------------

    def before_model(self, state: LoopGuardState, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        index = _last_ai_index(messages)
        if index is None:
            return None
        message: Any = messages[index]
        if message.id is not None and state.get("tripwire_observed") == message.id:
            return None
        guard = self.guard_of(state)
        update: dict[str, Any] = {"tripwire_observed": message.id}
        later = messages[index + 1 :]
        answered: dict[Any, ToolMessage] = {
            m.tool_call_id: m for m in later if isinstance(m, ToolMessage)
        }
        # The nudged calls never ran: nothing of them is observed, and they are not checked
        # again (a nudged call asked again under its id is counted as a repeat).
        calls: list[Any] = [
            call
            for call in message.tool_calls
            if call["id"] in answered and not _ours(answered[call["id"]])
        ]
        if calls and not guard.stopped:
            # The turn's other calls again, with their ids: a retried delivery (the same id
            # and call, its result not yet observed) gets its first verdict back, uncounted.
            # So the verdicts need not be kept outside the guard to survive a checkpoint.
            verdicts = guard.check_turn([(c["name"], c["args"], c["id"]) for c in calls])
            copies: list[Any] = []
            for call, verdict in zip(calls, verdicts, strict=True):
                if verdict.action != "allow":
                    continue
                if verdict.duplicate_of is None:
                    answer = answered[call["id"]]
                    guard.observe(verdict, answer)
                    if answer.status != "error" and guard.policy_of(call["name"]) == (
                        "read",
                        "declared",
                    ):
                        guard.keep(verdict, answer.content)
                    continue
                source = answered[calls[verdict.duplicate_of]["id"]]
                copies.append(
                    ToolMessage(
                        source.content,
                        tool_call_id=call["id"],
                        name=call["name"],
                        status=source.status,
                        id=_COPY_ID + call["id"],
                    )
                )
            if copies:
                update["messages"] = copies
        if any(isinstance(m, HumanMessage) for m in later):
            if guard.stopped:
                guard.reset()
            guard.user_message()
        update["tripwire_guard"] = guard.snapshot()
        return update

    # No I/O: the async agent runs the same steps without a thread hop.
    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: LoopGuardState, runtime: Any) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    async def abefore_model(self, state: LoopGuardState, runtime: Any) -> dict[str, Any] | None:
        return self.before_model(state, runtime)


def _ours(answer: ToolMessage) -> bool:
    """Whether a call's answer is the guard's, not the tool's: a nudge (``_NUDGE_ID``) or a
    result served from the read cache (``_CACHED_ID``)."""
    return isinstance(answer.id, str) and answer.id.startswith((_NUDGE_ID, _CACHED_ID))


def _last_ai_index(messages: list[Any]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AIMessage):
            return index
    return None


def _last_ai_message(messages: list[Any]) -> AIMessage | None:
    index = _last_ai_index(messages)
    return None if index is None else messages[index]
