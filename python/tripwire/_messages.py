"""Every text a verdict says, and the guard's refusal of a re-entered call: the one source of
the messages for both backends (the native ``Verdict.message`` calls ``verdict_message``
through ``tripwire._for_native``). Cold: a message is built only when it is read."""

from __future__ import annotations

from typing import Any, Final, Literal

Action = Literal["allow", "nudge", "stop"]
Reason = Literal["loop_detected", "budget_exhausted", "no_progress"]

# What a verdict's message is about, beyond its action and reason:
#   None                  plain: nothing observed that the message could say
#   ("unchanged",)        the repeats' results were observed, and two or more were equal
#   ("failed", text, n)   the repeats failed: n of them with this error
#   ("errors", n, text)   n calls in a row to this tool failed with this error
#   ("empty", n, tools)   n calls in a row to these tools came back empty
#   ("cycle", tools, w)   the last calls went twice round a cycle of these tools (w: of writes
#                         and reads, where only the writes' results had to be the same)
#   ("poll", limit)       a poll tool reached its limit
#   ("after", tool, n, d) a call checked after the run stopped: the stop's own tool, repeats
#                         and detail, so that its message is the stop's
Detail = tuple[Any, ...] | None

# Why a call made from inside another on the same guard, in the same thread, is refused.
REENTERED: Final = (
    "tripwire: this guard is in the middle of a call in this thread (a signal handler, a "
    "finaliser or a gc callback called it again before that call returned); nothing was "
    "counted: make the call after the first one returns, or give the callback its own guard"
)

# ``Guard.record`` was ``keep``'s name (it never recorded a call): kept for a while, warned.
# The native guard writes the same text (tests/test_guard.py checks they agree).
DEPRECATED_RECORD: Final = "Guard.record() is deprecated: use Guard.keep(), which does the same"

_ORDINALS: Final = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")

_DO_NOT_REPEAT: Final = (
    "Do not repeat it. Either use different arguments, use a different tool, or report what "
    "you have so far."
)


def _ordinal(n: int) -> str:
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


def _empty_calls(detail: tuple[Any, ...]) -> str:
    count, tools = detail[1], detail[2]
    if len(tools) == 1:
        return f"{count} calls to {tools[0]} in a row"
    return f"{count} calls in a row to {', '.join(tools)}"


def _failed(detail: tuple[Any, ...]) -> str:
    text, times = detail[1], detail[2]
    if times == 1:
        return f'the last one failed with "{text}"'
    return f'it failed {times} times with "{text}"'


def nudge_message(tool: str, repeats: int, detail: Detail = None) -> str:
    if detail is not None and detail[0] == "empty":
        return (
            f"{_empty_calls(detail)} returned nothing. Do not reword the same request again: "
            "try a different tool or approach, or report what you have so far."
        )
    if detail is not None and detail[0] == "errors":
        return (
            f'{detail[1]} calls to {tool} in a row failed with the same error, "{detail[2]}". '
            "Do not retry it with other arguments: try a different tool or approach, or "
            "report what you have so far."
        )
    said = ""
    if detail == ("unchanged",):
        said = ", and the result has not changed"
    elif detail is not None and detail[0] == "failed":
        said = f", and {_failed(detail)}"
    return (
        f"This is the {_ordinal(repeats)} identical call to {tool} with the same "
        f"arguments{said}. {_DO_NOT_REPEAT}"
    )


def stop_message(
    reason: Reason,
    tool: str,
    repeats: int,
    window: int,
    budget: int | str | None,
    detail: Detail = None,
) -> str:
    if detail is not None and detail[0] == "after":
        return stop_message(reason, detail[1], detail[2], window, budget, detail[3])
    if reason == "budget_exhausted":
        # No budget: the run's 2**64 - 1 steps (``Guard._judge``).
        budget = (1 << 64) - 1 if budget is None else budget
        return f"Stopped (budget_exhausted): the budget of {budget} tool calls is spent."
    if reason == "no_progress":
        assert detail is not None
        if detail[0] == "empty":
            return f"Stopped (no_progress): {_empty_calls(detail)} returned nothing."
        if detail[0] == "errors":
            return (
                f"Stopped (no_progress): {detail[1]} calls to {tool} in a row failed with the "
                f'same error, "{detail[2]}".'
            )
        tools = " -> ".join(detail[1])
        same = "the same results from its writes" if detail[2] else "the same results"
        return (
            f"Stopped (no_progress): the last {2 * len(detail[1])} calls went twice round the "
            f"same cycle ({tools}) with {same}; {tool} would start a third round."
        )
    if detail is not None and detail[0] == "poll":
        return (
            f"Stopped (loop_detected): {tool} was polled {repeats} times with the same "
            f"arguments, more than its limit of {detail[1]}."
        )
    said = ""
    if detail == ("unchanged",):
        said = " and the same result"
    text = (
        f"Stopped (loop_detected): {tool} was called {repeats} times with the same "
        f"arguments{said} within the last {window} calls."
    )
    if detail is not None and detail[0] == "failed":
        text = f"{text[:-1]}; {_failed(detail)}."
    return text


def verdict_message(
    action: str,
    reason: Reason | None,
    tool: str,
    repeats: int,
    window: int,
    budget: int | str | None,
    detail: Detail,
) -> str | None:
    """A verdict's message: the one source of the texts, for both backends."""
    if action == "nudge":
        return nudge_message(tool, repeats, detail)
    if action == "stop" and reason is not None:
        return stop_message(reason, tool, repeats, window, budget, detail)
    return None
