"""Rendering a replay: a table for people, JSON for machines.

The terminal report says which guard ran (results observed, or hash only) and the tool
policies given, lists runs (stopped ones first, by money saved) and the calls the guard stops
them on with its reason, then the fleet: runs stopped (``loop_detected``: a call repeated
with nothing changed; ``no_progress``: a cycle gone round twice, or a run of empty results),
the share of steps and of money saved (two different numbers, because later steps re-send a
longer transcript and cost more), and the tools the guard stopped runs on: every stop is a
report on a tool. Figures that rest on estimated tokens are marked ``~``.

The JSON report (``SCHEMA``, written by ``write_json`` one run a line) has:

* ``settings``: the guard's window, nudge_at, stop_at, volatile_keys, ``mode`` (``observe``:
  results given to the guard; ``hash-only``: the guard from before results, which ignores
  results and tool policies) and ``tools`` (the policies given, as ``Guard(tools=...)`` takes
  them); prices (USD per million tokens) and the bytes-per-token figure used for estimates;
* ``summary``: runs, stopped, of them looped (stopped with ``loop_detected``) and
  no_progress, the same as ``reasons`` (reason: runs), nudged, nudged_only, steps,
  steps_saved and its share, model_calls and model_calls_saved, ``tokens`` (source: ``usage``,
  ``estimated``, ``mixed``; input, output, cached, and what was saved) and ``cost`` (total,
  guarded, saved, saved_share), split_runs, results (tool results linked to a call checked
  before its run's stop) and results_unlinked (results that matched no call: ignored);
* ``tools``: per tool the guard stopped or nudged a run on: stops, ``reasons`` (reason:
  stops), nudges, steps_saved, cost_saved, worst first;
* ``runs``: per run: run, file, line (of its first model call), format, part, steps, the
  first nudge_step and nudges, stop_step, reason, tool, repeats and key of the stopping call,
  stop_location and stop_call (the call refused, canonical JSON, clipped), stop_message (the
  guard's), steps_saved, model_calls and model_calls_saved, ``tokens`` and ``cost`` as in the
  summary, invalid_arguments (argument text that was not JSON), skipped_calls, results and
  results_unlinked;
* ``files``: path, formats found, lines, runs, ignored lines, problems, unreadable;
* ``problems`` (the first 1000: file, line, where, message) and ``problems_total``: input
  that could not be read (the exit status says so);
* ``without_calls`` (the first 1000: path, why): files and directories read whole that held
  no tool calls (empty, messages only, no trace files), not problems; ``summary`` has their
  number, ``without_calls``.

Money is rounded to a millionth of a dollar; shares to six places; nothing else is rounded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final, TextIO

import tripwire
from tripwire.replay.cost import BYTES_PER_TOKEN, Source, model_price
from tripwire.replay.simulate import DEFAULT_LIMIT as DEFAULT_LIMIT  # runs the table lists
from tripwire.replay.simulate import Report, RunResult, Selection

SCHEMA: Final = "tripwire.replay/1"
REASONS: Final = ("loop_detected", "no_progress")
# Tools listed in the terminal report.
TOP_TOOLS: Final = 5
# Looped runs whose stopped call is shown.
TOP_STOPS: Final = 5
RUN_NAME_WIDTH: Final = 36
LEGEND: Final = (
    "NUDGES: calls nudged (a count); NUDGED AT, STOPPED AT: step numbers of the first nudge"
    "\nand of the stop; STOPPED ON: the stopped call's tool."
)
TOOLS_LEGEND: Final = "  (RUNS STOPPED and NUDGES are counts, over all runs)"
TOOL_WIDTH: Final = 24


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _money(value: float) -> float:
    return round(value, 6)


def _rounded(share: float | None) -> float | None:
    return None if share is None else round(share, 6)


def prices_json(report: Report) -> dict[str, Any]:
    """The prices used: the flat ones given, and each model's the traces named."""
    prices = report.settings.prices
    models = {}
    for model in sorted(report.models, key=lambda m: (m is None, m or "")):
        price = prices.of(model)
        models["(unnamed)" if model is None else model] = {
            "input": price.input,
            "output": price.output,
            "cache_read": price.cache_read,
            "cache_write": price.cache_write,
            "model_calls": report.models[model],
            "listed": model_price(model) is not None,
        }
    return {
        "unit": "USD per million tokens",
        "per_model": prices.per_model,
        "input": prices.input,
        "output": prices.output,
        "cache_read": prices.cache_read,
        "cache_write": prices.cache_write,
        "models": models,
    }


# -- JSON -----------------------------------------------------------------------------------


def _run_json(run: RunResult) -> dict[str, Any]:
    return {
        "run": run.run,
        "file": run.file,
        "line": run.line,
        "format": run.format,
        "part": run.part,
        "steps": run.steps,
        "model_calls": run.turns,
        "nudge_step": run.nudge_step,
        "nudge_tool": run.nudge_tool,
        "nudges": run.nudges,
        "stop_step": run.stop_step,
        "reason": run.reason,
        "tool": run.tool,
        "repeats": run.repeats,
        "key": run.key,
        "stop_location": run.stop_location,
        "stop_call": run.stop_call,
        "stop_message": run.stop_message,
        "stop_lead": [
            {"step": step, "action": action, "call": call} for step, action, call in run.lead()
        ],
        "timeline": run.timeline,
        "model": run.model,
        "reward": run.reward,
        "steps_saved": run.steps_saved,
        "model_calls_saved": run.turns_saved,
        "tokens": {
            "source": run.tokens_source,
            "input": run.input_tokens,
            "output": run.output_tokens,
            "cached": run.cached_tokens,
            "cache_write": run.cache_write_tokens,
            "input_saved": run.input_tokens_saved,
            "output_saved": run.output_tokens_saved,
            "saved": run.tokens_saved,
        },
        "cost": {
            "total": _money(run.cost),
            "guarded": _money(run.cost_guarded),
            "saved": _money(run.cost_saved),
        },
        "invalid_arguments": run.invalid_arguments,
        "skipped_calls": run.skipped_calls,
        "results": run.results,
        "results_unlinked": run.results_unlinked,
    }


def summary(report: Report) -> dict[str, Any]:
    """Fleet totals, as in the JSON report's ``summary``."""
    t = report.totals
    share = _share(t.steps_saved, t.steps)
    cost_share = _share(t.cost - t.cost_guarded, t.cost)
    return {
        "files": len(report.files),
        "runs": t.runs,
        "stopped": t.stopped,
        "looped": t.looped,
        "no_progress": t.no_progress,
        "reasons": {"loop_detected": t.looped, "no_progress": t.no_progress},
        "nudged": t.nudged,
        "nudged_only": t.nudged_only,
        "steps": t.steps,
        "steps_saved": t.steps_saved,
        "steps_saved_share": None if share is None else round(share, 6),
        "model_calls": t.turns,
        "model_calls_saved": t.turns_saved,
        "tokens": {
            "source": t.tokens_source,
            "input": t.input_tokens,
            "output": t.output_tokens,
            "cached": t.cached_tokens,
            "cache_write": t.cache_write_tokens,
            "cached_share": _rounded(_share(t.cached_tokens, t.input_tokens)),
            "cache_write_share": _rounded(_share(t.cache_write_tokens, t.input_tokens)),
            "input_saved": t.input_tokens_saved,
            "output_saved": t.output_tokens_saved,
            "saved": t.input_tokens_saved + t.output_tokens_saved,
        },
        "cost": {
            "total": _money(t.cost),
            "guarded": _money(t.cost_guarded),
            "saved": _money(t.cost - t.cost_guarded),
            "saved_share": None if cost_share is None else round(cost_share, 6),
        },
        "outcomes": {
            "labelled": t.labelled,
            "succeeded": t.succeeded,
            "stopped": t.stopped_labelled,
            "stopped_succeeded": t.stopped_succeeded,
        },
        "split_runs": report.split_runs,
        "results": t.results,
        "results_unlinked": t.results_unlinked,
        "without_calls": report.without_calls_total,
    }


def tools_ranked(report: Report) -> list[tuple[str, Any]]:
    """Tools the guard stopped or nudged runs on, worst first."""
    return sorted(
        report.tools.items(), key=lambda item: (-item[1].stops, -item[1].cost_saved, item[0])
    )


def to_json(report: Report, *, runs: bool = True) -> dict[str, Any]:
    """The whole report as plain JSON data (schema ``SCHEMA``); ``runs=False`` leaves the
    list of runs empty (``write_json`` streams it instead)."""
    settings = report.settings
    volatile = (
        tripwire.DEFAULT_VOLATILE_KEYS if settings.volatile_keys is None else settings.volatile_keys
    )
    return {
        "schema": SCHEMA,
        "tripwire": {"version": tripwire.__version__, "implementation": tripwire.IMPLEMENTATION},
        "settings": {
            "window": settings.window,
            "nudge_at": settings.nudge_at,
            "stop_at": settings.stop_at,
            "volatile_keys": sorted(volatile),
            "mode": settings.mode,
            "tools": dict(settings.tools or {}),
            "prices": prices_json(report),
            "bytes_per_token": BYTES_PER_TOKEN,
        },
        "summary": summary(report),
        "tools": [
            {
                "tool": name,
                "stops": stats.stops,
                "reasons": {
                    "loop_detected": stats.stops - stats.no_progress,
                    "no_progress": stats.no_progress,
                },
                "nudges": stats.nudges,
                "steps_saved": stats.steps_saved,
                "cost_saved": _money(stats.cost_saved),
            }
            for name, stats in tools_ranked(report)
        ],
        "runs": [_run_json(run) for run in report.runs] if runs else [],
        "files": [
            {
                "path": f.path,
                "formats": sorted(f.formats),
                "lines": f.lines,
                "runs": f.runs,
                "ignored": f.ignored,
                "problems": f.problems,
                "unreadable": f.unreadable,
                "unknown_records": dict(sorted(f.unknown.items())),
            }
            for f in report.files
        ],
        "problems": [
            {"file": p.path, "line": p.line, "where": p.where, "message": p.message}
            for p in report.problems
        ],
        "problems_total": report.problems_total,
        "without_calls": [{"path": w.path, "why": w.message} for w in report.without_calls],
    }


def write_json(report: Report, out: TextIO) -> None:
    """``to_json(report)`` as indented JSON, one run a line, written run by run so that a
    fleet of any size needs no second copy of its runs in memory."""
    data = to_json(report, runs=False)
    out.write("{\n")
    last = len(data) - 1
    for index, (name, value) in enumerate(data.items()):
        out.write(f"  {json.dumps(name)}: ")
        if name == "runs":
            out.write("[")
            for number, run in enumerate(report.runs):
                out.write(",\n    " if number else "\n    ")
                out.write(json.dumps(_run_json(run)))
            out.write("\n  ]" if report.runs else "]")
        else:
            out.write(json.dumps(value, indent=2).replace("\n", "\n  "))
        out.write(",\n" if index < last else "\n")
    out.write("}\n")


# -- the terminal ---------------------------------------------------------------------------


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _dollars(value: float) -> str:
    if value == 0:
        return "$0"
    if abs(value) < 0.01:
        return f"${value:.4f}"  # sub-cent runs (estimated ones, often) still compare
    return f"${value:,.2f}"


def _tokens(value: int) -> str:
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k" if value < 10_000 else f"{value // 1000}k"
    if value < 1_000_000_000:
        return f"{value / 1e6:.2f}M" if value < 100_000_000 else f"{value / 1e6:.0f}M"
    return f"{value / 1e9:.2f}B"


def _pct(part: float, whole: float) -> str:
    share = _share(part, whole)
    return "-" if share is None else f"{share:.0%}"


def _clip(text: str, width: int) -> str:
    # Lone surrogates (legal in a str, from "\ud800" in a trace) as their escapes, before
    # measuring, so that the columns line up and the text can be written at all.
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :]


def _mark(source: Source) -> str:
    return "~" if source in ("estimated", "mixed") else ""


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _select(runs: Iterable[RunResult], limit: int) -> list[RunResult]:
    """The runs to list (``Selection``'s rule), in one pass. At most ``limit`` (0: all)."""
    selection = Selection(limit)
    for run in runs:
        selection.add(run)
    return selection.runs()


def render(report: Report, *, limit: int = DEFAULT_LIMIT) -> str:
    """The terminal report. ``limit``: runs listed in the table (0: all)."""
    s = summary(report)
    settings = report.settings
    out: list[str] = []
    files = s["files"]
    out.append(
        f"tripwire replay: {_n(files, 'file')}, {_n(s['runs'], 'run')}, "
        f"{_n(s['steps'], 'step')}, {_n(s['model_calls'], 'model call')}"
    )
    mode = "results observed" if settings.observe else "hash only"
    out.append(
        f"guard: window {settings.window}, nudge at {settings.nudge_at}, "
        f"stop at {settings.stop_at}, {mode} ({tripwire.IMPLEMENTATION} core)"
    )
    if settings.tools:
        policies = ", ".join(_policy(name, spec) for name, spec in settings.tools.items())
        ignored = "" if settings.observe else " (ignored: hash only)"
        out.append(f"tools: {policies}{ignored}")
    runs = report.runs
    if not len(runs):
        out.append("")
        out.append("No runs with model calls were found.")
    else:
        chosen = report.selection
        shown = (
            chosen.runs() if chosen is not None and chosen.limit == limit else _select(runs, limit)
        )
        header = [
            "RUN", "STEPS", "NUDGES", "NUDGED AT", "STOPPED AT", "REASON", "STOPPED ON",
            "STEPS SAVED", "TOKENS SAVED", "COST", "GUARDED", "SAVED",
        ]  # fmt: skip
        rows = [header]
        for r in shown:
            mark = _mark(r.tokens_source)
            name = r.run if r.part == 1 else f"{r.run} (part {r.part})"
            rows.append(
                [
                    _clip(name, RUN_NAME_WIDTH),
                    f"{r.steps:,}",
                    f"{r.nudges:,}",
                    "-" if r.nudge_step is None else f"{r.nudge_step:,}",
                    "-" if r.stop_step is None else f"{r.stop_step:,}",
                    r.reason or "-",
                    _clip(r.tool or "-", TOOL_WIDTH),
                    f"{r.steps_saved:,}",
                    mark + _tokens(r.tokens_saved),
                    mark + _dollars(r.cost),
                    mark + _dollars(r.cost_guarded),
                    mark + _dollars(r.cost_saved),
                ]
            )
        out.append("")
        out.extend(_table(rows, right={1, 2, 3, 4, 7, 8, 9, 10, 11}))
        out.extend(LEGEND.split("\n"))
        hidden = len(runs) - len(shown)
        if hidden:
            hidden_stopped = s["stopped"] - sum(1 for r in shown if r.stopped)
            out.append(
                f"... and {hidden:,} more run{'s' if hidden != 1 else ''}"
                f" ({hidden_stopped:,} stopped); --limit 0 lists all, --json gives every figure"
            )
        stops = [r for r in shown if r.stopped and r.stop_call is not None][:TOP_STOPS]
        if stops:
            out.append("")
            out.append("Where the guard stops them (the call it refuses, and why):")
            for r in stops:
                out.append(f"  {_clip(r.run, RUN_NAME_WIDTH)}  {_clip(r.stop_location or '', 90)}")
                out.append(f"      {r.stop_call}")
                if r.stop_message:
                    out.append(f"      {r.stop_message}")
    if len(runs):
        out.append("")
        out.extend(_fleet(s))
    tools = [(name, stats) for name, stats in tools_ranked(report) if stats.stops]
    if tools:
        out.append("")
        out.append("Top offending tools (each stop is a report on the tool):")
        rows = [["  TOOL", "RUNS STOPPED", "NUDGES", "STEPS SAVED", "SAVED"]]
        mark = _mark(s["tokens"]["source"])
        for name, stats in tools[:TOP_TOOLS]:
            rows.append(
                [
                    "  " + _clip(name, TOOL_WIDTH),
                    f"{stats.stops:,}",
                    f"{stats.nudges:,}",
                    f"{stats.steps_saved:,}",
                    mark + _dollars(stats.cost_saved),
                ]
            )
        out.extend(_table(rows, right={1, 2, 3, 4}))
        if len(tools) > TOP_TOOLS:
            out.append(f"  ... and {len(tools) - TOP_TOOLS} more")
        out.append(TOOLS_LEGEND)
    out.append("")
    out.extend(_notes(report, s))
    return "\n".join(out) + "\n"


def _policy(name: str, spec: Any) -> str:
    """A tool's policy as given: ``deploy write``, ``build_status poll (max_polls 30)``."""
    if not isinstance(spec, dict):
        return f"{name} {spec}"
    extra = ", ".join(f"{k} {json.dumps(v)}" for k, v in spec.items() if k != "policy")
    return f"{name} {spec.get('policy')}" + (f" ({extra})" if extra else "")


def _fleet(s: dict[str, Any]) -> list[str]:
    tokens = s["tokens"]
    cost = s["cost"]
    mark = _mark(tokens["source"])
    runs = s["runs"]
    return [
        "Fleet:",
        f"  runs         {runs:,}, of which {s['stopped']:,} stopped ({_pct(s['stopped'], runs)}:"
        f" {s['looped']:,} looped, {s['no_progress']:,} no progress)"
        f" and {s['nudged_only']:,} more {'was' if s['nudged_only'] == 1 else 'were'} nudged"
        " but not stopped",
        f"  steps        {s['steps_saved']:,} of {s['steps']:,} saved"
        f" ({_pct(s['steps_saved'], s['steps'])})",
        f"  model calls  {s['model_calls_saved']:,} of {s['model_calls']:,} saved"
        f" ({_pct(s['model_calls_saved'], s['model_calls'])})",
        f"  input        {_pct(tokens['cached'], tokens['input'])} read from prompt caches,"
        f" {_pct(tokens['cache_write'], tokens['input'])} written to them"
        f" (of {mark}{_tokens(tokens['input'])} input tokens)",
        f"  tokens       {mark}{_tokens(tokens['saved'])} of"
        f" {mark}{_tokens(tokens['input'] + tokens['output'])} saved"
        f" ({_pct(tokens['saved'], tokens['input'] + tokens['output'])})",
        f"  money        {mark}{_dollars(cost['saved'])} of {mark}{_dollars(cost['total'])} saved"
        f" ({_pct(cost['saved'], cost['total'])}); {mark}{_dollars(cost['guarded'])}"
        " spent with the guard",
    ]


_SOURCE_NOTES: Final = {
    "usage": "tokens from the traces' own usage figures",
    "estimated": f"~ tokens estimated from transcript size ({BYTES_PER_TOKEN} bytes a token):"
    " the traces have no usage figures",
    "mixed": f"~ tokens partly estimated from transcript size ({BYTES_PER_TOKEN} bytes a token)"
    " where the traces have no usage figures",
    "none": "no model calls",
}


def _prices_note(report: Report) -> str:
    """The prices used, per million tokens: flat ones given, or each named model's."""
    prices = report.settings.prices

    def one(price: Any) -> str:
        return (
            f"${price.input:g} in, ${price.output:g} out, cache reads ${price.cache_read:g},"
            f" writes ${price.cache_write:g}"
        )

    if not prices.per_model:
        return f"{one(prices.of(None))} per MTok, for every model"
    parts = []
    for model in sorted(report.models, key=lambda m: (m is None, m or ""))[:4]:
        known = model_price(model)
        name = known[0] if known is not None else (model or "unnamed model")
        listed = "" if known is not None or model is None else " (not listed: defaults)"
        parts.append(f"{name}{listed} {one(prices.of(model))}")
    if len(report.models) > 4:
        parts.append(f"{len(report.models) - 4} more models")
    return "; ".join(dict.fromkeys(parts)) + " per MTok" if parts else "per model"


def _notes(report: Report, s: dict[str, Any]) -> list[str]:
    notes = [f"Prices: {_prices_note(report)}; {_SOURCE_NOTES[s['tokens']['source']]}."]
    outcomes = s["outcomes"]
    if outcomes["labelled"]:
        notes.append(
            f"Outcomes in the traces: {outcomes['succeeded']:,} of {outcomes['labelled']:,}"
            f" labelled runs succeeded; the guard stopped {outcomes['stopped_succeeded']:,}"
            f" that succeeded and {outcomes['stopped'] - outcomes['stopped_succeeded']:,}"
            " that failed."
        )
    unknown: dict[str, int] = {}
    for f in report.files:
        for name, count in f.unknown.items():
            unknown[name] = unknown.get(name, 0) + count
    if unknown:
        listed = ", ".join(f"{name} x{count:,}" for name, count in sorted(unknown.items()))
        notes.append(f"Records of types this version does not read, skipped: {listed}.")
    settings = report.settings
    if settings.observe and s["runs"] and not s["results"]:
        notes.append("No tool results in these traces: the verdicts are the hash-only ones.")
    if settings.observe and s["results_unlinked"]:
        unlinked = s["results_unlinked"]
        notes.append(
            f"{unlinked:,} tool result{'s' if unlinked != 1 else ''} matched no call of"
            f" {'their' if unlinked != 1 else 'its'} run and {'were' if unlinked != 1 else 'was'}"
            " ignored."
        )
    if report.split_runs:
        notes.append(
            f"{report.split_runs:,} run{'s' if report.split_runs != 1 else ''} interleaved with"
            " too many others were replayed in parts, each with a fresh guard."
        )
    if report.without_calls_total:
        notes.append(_without_calls_note(report))
    if report.problems_total:
        unreadable = sum(1 for f in report.files if f.unreadable)
        detail = (
            f", {unreadable} file{'s' if unreadable != 1 else ''} unreadable" if unreadable else ""
        )
        notes.append(
            f"Bad input: {report.problems_total:,} problem"
            f"{'s' if report.problems_total != 1 else ''} skipped{detail}"
            " (listed on stderr; --json has them)."
        )
    return notes


# Input without tool calls named in the notes; the rest are counted (--json lists them).
NAMED_WITHOUT_CALLS: Final = 5


def _without_calls_note(report: Report) -> str:
    total = report.without_calls_total
    named = "; ".join(f"{w.path}: {w.message}" for w in report.without_calls[:NAMED_WITHOUT_CALLS])
    more = total - min(total, NAMED_WITHOUT_CALLS)
    rest = f"; and {more:,} more (--json lists them)" if more else ""
    return (
        f"{_n(total, 'input')} held no tool calls, counted and not replayed (not bad input):"
        f" {named}{rest}."
    )
