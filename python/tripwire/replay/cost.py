"""Tokens and money: what each model call of a run cost, from the trace or estimated.

The seed's point is the model of cost used here: every step re-sends the whole transcript that
precedes it, so each model call's input is larger than the one before, and a loop costs more
per step at its end than at its beginning. Cost is therefore counted per *model call* (a turn:
one assistant message, which may carry several tool calls), never spread evenly over steps::

    cost = fresh * in + cache_read * read + cache_write * write + output * out

with prices in US dollars per million tokens, priced as the providers bill them: prompt-cache
reads far below fresh input (Anthropic 0.1x; OpenAI at each model's listed cached-input price,
0.1x to 0.5x), Anthropic's cache writes at 1.25x (its five-minute cache; OpenAI charges none).
In long coding sessions nearly all input is cache reads (98.6% in one measured Claude Code
session), so pricing them as fresh input overstates the cost about eightfold.

Prices come from ``MODELS`` by the model each turn names (longest matching name first, so
``gpt-4o-mini`` is not ``gpt-4o``); a turn of an unknown or unnamed model gets the defaults
($3 in, $15 out, Anthropic's cache multipliers). ``Prices`` overrides: ``input``/``output``
replace every model's (cache prices then follow them by the default multipliers), ``cache_read``
and ``cache_write`` replace the cache prices.

Where a turn carries usage figures (Anthropic ``input_tokens`` + ``cache_*_input_tokens`` /
``output_tokens``; OpenAI ``prompt_tokens`` / ``completion_tokens``; Responses
``input_tokens`` / ``output_tokens`` with ``*_tokens_details.cached_tokens``), they are used as
they are. Where it does not, tokens are estimated from the transcript: the bytes sent with that
call divided by ``BYTES_PER_TOKEN``, and the bytes the model produced likewise. Every figure
says which it is (``"usage"``, ``"estimated"`` or, for a run with some of each, ``"mixed"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    """Tokens of one model call. ``input`` counts every input token, cache reads and writes
    included; ``cached`` is the part of ``input`` read from a prompt cache, ``cache_write``
    the part written to it."""

    input: int
    output: int
    cached: int = 0
    cache_write: int = 0


# Cache prices as multiples of the input price, where a model's table gives none: Anthropic's
# (reads 0.1x; writes to its five-minute cache 1.25x), which the default prices are.
CACHE_READ: Final = 0.1
CACHE_WRITE: Final = 1.25


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model's list prices, US dollars per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


def _anthropic(price_in: float, price_out: float) -> ModelPrice:
    return ModelPrice(price_in, price_out, price_in * CACHE_READ, price_in * CACHE_WRITE)


def _openai(price_in: float, price_out: float, cached: float) -> ModelPrice:
    # OpenAI caches automatically and charges nothing to write.
    return ModelPrice(price_in, price_out, cached, price_in)


# List prices of the common models (late 2025), by the name the APIs report, dated suffixes
# and provider prefixes ("anthropic/", "openai/") aside.
MODELS: Final[dict[str, ModelPrice]] = {
    "claude-opus-4-5": _anthropic(5, 25),
    "claude-opus-4-1": _anthropic(15, 75),
    "claude-opus-4": _anthropic(15, 75),
    "claude-sonnet-4-5": _anthropic(3, 15),
    "claude-sonnet-4": _anthropic(3, 15),
    "claude-3-7-sonnet": _anthropic(3, 15),
    "claude-3-5-sonnet": _anthropic(3, 15),
    "claude-haiku-4-5": _anthropic(1, 5),
    "claude-3-5-haiku": _anthropic(0.8, 4),
    "claude-3-opus": _anthropic(15, 75),
    "claude-3-haiku": _anthropic(0.25, 1.25),
    "gpt-5": _openai(1.25, 10, 0.125),
    "gpt-5-codex": _openai(1.25, 10, 0.125),
    "gpt-5.1": _openai(1.25, 10, 0.125),
    "gpt-5-mini": _openai(0.25, 2, 0.025),
    "gpt-5-nano": _openai(0.05, 0.4, 0.005),
    "gpt-4.1": _openai(2, 8, 0.5),
    "gpt-4.1-mini": _openai(0.4, 1.6, 0.1),
    "gpt-4.1-nano": _openai(0.1, 0.4, 0.025),
    "gpt-4o": _openai(2.5, 10, 1.25),
    "gpt-4o-mini": _openai(0.15, 0.6, 0.075),
    "o1": _openai(15, 60, 7.5),
    "o3": _openai(2, 8, 0.5),
    "o3-mini": _openai(1.1, 4.4, 0.55),
    "o4-mini": _openai(1.1, 4.4, 0.275),
}
# Longest names first: a model is priced as the longest name it starts with.
_BY_LENGTH: Final = sorted(MODELS, key=len, reverse=True)


def model_price(model: str | None) -> tuple[str, ModelPrice] | None:
    """The table entry for a model name as a trace gives it, or ``None``."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    for known in _BY_LENGTH:
        if name.startswith(known) and (len(name) == len(known) or name[len(known)] in "-.@:"):
            return known, MODELS[known]
    return None


@dataclass(frozen=True, slots=True)
class Prices:
    """US dollars per million tokens. ``input``/``output``: ``None`` prices each model by
    ``MODELS`` (the defaults for unknown ones); a number prices every model so.
    ``cache_read``/``cache_write``: ``None`` follows the model (or ``input`` by the default
    multipliers when that is given); a number prices every model's cache so."""

    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None
    # model name (as the trace gives it) -> price, memoised
    _memo: dict[str | None, ModelPrice] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def of(self, model: str | None) -> ModelPrice:
        """The prices a turn of ``model`` is charged."""
        price = self._memo.get(model)
        if price is None:
            price = self._memo[model] = self._price(model)
        return price

    def _price(self, model: str | None) -> ModelPrice:
        if self.input is None and self.output is None:
            known = model_price(model)
            base = (
                known[1] if known is not None else _anthropic(DEFAULT_PRICE_IN, DEFAULT_PRICE_OUT)
            )
        else:
            known = model_price(model)
            default = known[1] if known is not None else None
            price_in = (
                self.input
                if self.input is not None
                else (default.input if default else DEFAULT_PRICE_IN)
            )
            price_out = (
                self.output
                if self.output is not None
                else (default.output if default else DEFAULT_PRICE_OUT)
            )
            base = _anthropic(price_in, price_out)
        return ModelPrice(
            base.input,
            base.output,
            base.cache_read if self.cache_read is None else self.cache_read,
            base.cache_write if self.cache_write is None else self.cache_write,
        )

    def cost(self, usage: Usage, model: str | None = None) -> float:
        price = self.of(model)
        fresh = usage.input - usage.cached - usage.cache_write
        return (
            fresh * price.input
            + usage.cached * price.cache_read
            + usage.cache_write * price.cache_write
            + usage.output * price.output
        ) / 1e6

    @property
    def per_model(self) -> bool:
        """Whether prices follow the models (no flat input and output price given)."""
        return self.input is None and self.output is None


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


def parse_usage(value: object) -> Usage | None:
    """Token counts from a trace's ``usage`` object; ``None`` when there is none.

    Anthropic's ``input_tokens`` excludes cache reads and writes
    (``cache_read_input_tokens``, ``cache_creation_input_tokens``), which are added. OpenAI's
    ``prompt_tokens`` and the Responses API's ``input_tokens`` include cached tokens
    (``*_tokens_details.cached_tokens``, Codex's ``cached_input_tokens``, ATIF's
    ``cached_tokens``), which are only split out; so do LiteLLM's ``prompt_tokens`` with
    Anthropic's cache fields beside them (as OpenHands logs them), unless they do not fit in
    it. Raises ``UsageError`` for a usage that is present but not counts."""
    if value is None:
        return None
    if type(value) is not dict:
        raise UsageError(f"usage is {type(value).__name__}, not an object of token counts")
    # One pass over the fields (this is on the hot path of big logs): counts by kind.
    counts = [0, 0, 0, 0, 0, 0]
    found = inclusive = False
    for name, raw in value.items():
        field_kind = _FIELDS.get(name)
        if field_kind is None:
            if name in _DETAILS and isinstance(raw, dict):
                counts[_CACHED] += _count(f"{name}.cached_tokens", raw.get("cached_tokens"))
            continue
        counts[field_kind] += raw if type(raw) is int and raw >= 0 else _count(name, raw)
        if field_kind != _CACHED:
            found = True
            inclusive = inclusive or field_kind == _PROMPT
    if not found:
        raise UsageError(
            "usage has none of input_tokens/output_tokens or prompt_tokens/completion_tokens"
        )
    prompt, fresh, reads, writes, output, cached = counts
    if inclusive:
        total = prompt  # an input_tokens beside it says the same again
        if reads + writes > total:  # not parts of it after all
            total += reads + writes
    else:
        total = fresh + reads + writes
    cached = min(max(cached, reads), total)
    writes = min(writes, total - cached)
    return Usage(total, output, cached, writes)


# What each usage field counts (see ``parse_usage``).
_PROMPT, _INPUT, _CACHE_READ, _CACHE_WRITE, _OUTPUT, _CACHED = range(6)
_FIELDS: Final = {
    "prompt_tokens": _PROMPT,
    "input_tokens": _INPUT,
    "cache_read_input_tokens": _CACHE_READ,
    "cache_creation_input_tokens": _CACHE_WRITE,
    "output_tokens": _OUTPUT,
    "completion_tokens": _OUTPUT,
    "cached_input_tokens": _CACHED,
    "cached_tokens": _CACHED,
}


def merge_usage(old: Usage | None, new: Usage | None) -> Usage | None:
    """One response's usage from lines that each give it (the largest figures of each)."""
    if old is None or new is None:
        return new or old
    return Usage(
        max(old.input, new.input),
        max(old.output, new.output),
        max(old.cached, new.cached),
        max(old.cache_write, new.cache_write),
    )


_DETAILS: Final = ("input_tokens_details", "prompt_tokens_details")


def combine(first: Source, second: Source) -> Source:
    """The source of a total made of figures from two sources."""
    if first == "none" or first == second:
        return second
    if second == "none":
        return first
    return "mixed"
