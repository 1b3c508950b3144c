"""Tokens and money: what each model call of a run cost, from the trace or estimated.

The seed's point is the model of cost used here: every step re-sends the whole transcript that
precedes it, so each model call's input is larger than the one before, and a loop costs more
per step at its end than at its beginning. Cost is therefore counted per *model call* (a turn:
one assistant message, which may carry several tool calls), never spread evenly over steps::

    cost = (input - cached) * price_in + cached * price_cached + output * price_out

with prices in US dollars per million tokens. ``price_cached`` (prompt-cache reads) defaults to
``price_in``, so the plain formula of the issue holds unless the user says otherwise; cache
*writes* are priced as ordinary input.

Where a turn carries usage figures (Anthropic ``input_tokens`` + ``cache_*_input_tokens`` /
``output_tokens``; OpenAI ``prompt_tokens`` / ``completion_tokens``; Responses
``input_tokens`` / ``output_tokens`` with ``*_tokens_details.cached_tokens``), they are used as
they are. Where it does not, tokens are estimated from the transcript: the bytes sent with that
call divided by ``BYTES_PER_TOKEN``, and the bytes the model produced likewise. Every figure
says which it is (``"usage"``, ``"estimated"`` or, for a run with some of each, ``"mixed"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

# Default prices, US dollars per million tokens: a mid-tier frontier model's list price
# ($3 in, $15 out). They are what the bundled example is written against; pass your own.
DEFAULT_PRICE_IN: Final = 3.0
DEFAULT_PRICE_OUT: Final = 15.0

# About four bytes of English or JSON text per token for the common BPE tokenizers. A rough
# figure on purpose: estimated numbers are labelled as such everywhere they are shown.
BYTES_PER_TOKEN: Final = 4

Source = Literal["usage", "estimated", "mixed", "none"]


class UsageError(ValueError):
    """A ``usage`` field that is present but is not token counts."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one model call. ``input`` counts every input token, cached ones included;
    ``cached`` is the part of ``input`` read from a prompt cache."""

    input: int
    output: int
    cached: int = 0


@dataclass(frozen=True, slots=True)
class Prices:
    """US dollars per million tokens. ``cached=None`` prices cache reads as ordinary input."""

    input: float = DEFAULT_PRICE_IN
    output: float = DEFAULT_PRICE_OUT
    cached: float | None = None

    def cost(self, usage: Usage) -> float:
        cached_price = self.input if self.cached is None else self.cached
        fresh = usage.input - usage.cached
        return (fresh * self.input + usage.cached * cached_price + usage.output * self.output) / 1e6


def estimate(sent_bytes: int, produced_bytes: int) -> Usage:
    """Tokens of a model call estimated from the bytes sent to it and the bytes it produced."""
    return Usage(
        input=-(-sent_bytes // BYTES_PER_TOKEN), output=-(-produced_bytes // BYTES_PER_TOKEN)
    )


def _count(name: str, value: object) -> int:
    if type(value) is int and value >= 0:
        return value
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"usage.{name} is {type(value).__name__}, not a number")
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"usage.{name} is {value!r}, not a token count")
    return int(value)


# What each usage field counts: input tokens (all of them, or cache reads, which are input
# too and cached), output tokens, or the cached part of input already counted.
_INPUT, _CACHE_READ, _OUTPUT, _CACHED = range(4)
_FIELDS: Final = {
    "input_tokens": _INPUT,
    "prompt_tokens": _INPUT,
    "cache_creation_input_tokens": _INPUT,
    "cache_read_input_tokens": _CACHE_READ,
    "output_tokens": _OUTPUT,
    "completion_tokens": _OUTPUT,
    "cached_input_tokens": _CACHED,
}
_DETAILS: Final = frozenset({"input_tokens_details", "prompt_tokens_details"})


def parse_usage(value: object) -> Usage | None:
    """Token counts from a trace's ``usage`` object; ``None`` when there is none.

    Anthropic's ``input_tokens`` excludes cache reads and writes, which are added; OpenAI's
    ``prompt_tokens`` and the Responses API's ``input_tokens`` include cached tokens
    (``*_tokens_details.cached_tokens``, Codex's ``cached_input_tokens``), which are only split
    out. Raises ``UsageError`` for a usage that is present but not counts."""
    if value is None:
        return None
    if type(value) is not dict:
        raise UsageError(f"usage is {type(value).__name__}, not an object of token counts")
    total_in = output = cached = 0
    found = False
    for name, raw in value.items():
        kind = _FIELDS.get(name)
        if kind is None:
            if name in _DETAILS and isinstance(raw, dict):
                cached += _count(f"{name}.cached_tokens", raw.get("cached_tokens"))
            continue
        count = _count(name, raw)
        if kind == _INPUT:
            total_in += count
            found = True
        elif kind == _OUTPUT:
            output += count
            found = True
        elif kind == _CACHE_READ:
            total_in += count
            cached += count
            found = True
        else:
            cached += count
    if not found:
        raise UsageError(
            "usage has none of input_tokens/output_tokens or prompt_tokens/completion_tokens"
        )
    return Usage(total_in, output, cached if cached <= total_in else total_in)


def combine(first: Source, second: Source) -> Source:
    """The source of a total made of figures from two sources."""
    if first == "none" or first == second:
        return second
    if second == "none":
        return first
    return "mixed"
