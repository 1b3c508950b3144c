"""The replay as one self-contained HTML page (``tripwire replay --html FILE``): the fleet at a
glance, with no network at all (no CDN, no fonts, no scripts from elsewhere: inline CSS, SVG
and a few lines of script), so it opens from a CI artefact or a mail attachment.

Per run, a timeline of its steps, one bar each, coloured by what the guard did (allow, nudge,
stop; the steps the stop saved greyed), with the money saved; the tools the guard stopped
runs on; and for each stop the calls that led to it, the stopped one last. Everything from the
traces (run names, tool names, arguments) is escaped: a trace is data, never markup.
"""

from __future__ import annotations

import html
from typing import Any, Final

from tripwire.replay.report import DEFAULT_LIMIT, _select, summary, tools_ranked
from tripwire.replay.simulate import ALLOW, NUDGE, SAVED, STOP, Report, RunResult

# Colours of the actions, also what the screenshot test looks for.
COLOURS: Final = {ALLOW: "#2e9e44", NUDGE: "#f0a400", STOP: "#d62728", SAVED: "#c8c8c8"}
# Runs drawn (stopped ones first, as in the terminal table); stops whose calls are listed.
RUNS_SHOWN: Final = 200
STOPS_SHOWN: Final = 50
BAR_WIDTH: Final = 6
TIMELINE_WIDTH: Final = 720

_STYLE: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.figures{display:flex;gap:16px;flex-wrap:wrap}
.figure{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:120px}
.figure b{display:block;font-size:20px}
table{border-collapse:collapse}td,th{padding:3px 8px;text-align:left;vertical-align:middle}
th{border-bottom:1px solid #999;font-weight:600}tr:nth-child(even) td{background:#f6f6f6}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-1px}
code{font:12px ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
details{margin:6px 0}summary{cursor:pointer}
"""

# Clicking a run's name opens its stop, if listed: the page works without it.
_SCRIPT: Final = """
document.querySelectorAll('a[data-stop]').forEach(function (a) {
  a.addEventListener('click', function () {
    var d = document.getElementById(a.getAttribute('data-stop'));
    if (d) { d.open = true; }
  });
});
"""


def _e(text: object) -> str:
    # Lone surrogates (legal in a str from a trace) as escapes: the page must be writable.
    value = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(value, quote=True)


def _dollars(value: float) -> str:
    return f"${value:,.4f}" if abs(value) < 0.01 and value else f"${value:,.2f}"


def _timeline(run: RunResult) -> str:
    """The run's steps as an SVG strip of bars, squeezed to fit when there are many."""
    steps = run.timeline
    if not steps:
        return '<svg width="8" height="14" role="img" aria-label="no steps"></svg>'
    width = min(BAR_WIDTH, max(1, TIMELINE_WIDTH // len(steps)))
    bars = []
    for index, code in enumerate(steps):
        colour = COLOURS.get(code, "#999")
        bars.append(
            f'<rect x="{index * width}" y="0" width="{max(1, width - 1)}" height="14"'
            f' fill="{colour}"><title>step {index + 1}: {_NAMES.get(code, code)}</title></rect>'
        )
    label = f"{len(steps)} steps"
    return (
        f'<svg class="timeline" width="{len(steps) * width}" height="14" role="img"'
        f' aria-label="{label}">{"".join(bars)}</svg>'
    )


_NAMES: Final = {ALLOW: "allow", NUDGE: "nudge", STOP: "stop", SAVED: "saved"}


def render(report: Report, *, limit: int = RUNS_SHOWN) -> str:
    """The whole page."""
    s = summary(report)
    cost = s["cost"]
    tokens = s["tokens"]
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # Nothing may be fetched: the page is one file.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
        " style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
        "<title>tripwire replay</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>tripwire replay</h1>",
        f"<p>{s['files']:,} files, {s['runs']:,} runs, {s['steps']:,} steps,"
        f" {s['model_calls']:,} model calls. Guard: window {report.settings.window},"
        f" nudge at {report.settings.nudge_at}, stop at {report.settings.stop_at}.</p>",
        '<div class="figures">',
        _figure("runs stopped", f"{s['stopped']:,} of {s['runs']:,}"),
        _figure("runs nudged only", f"{s['nudged_only']:,}"),
        _figure("steps saved", f"{s['steps_saved']:,} of {s['steps']:,}"),
        _figure("money saved", f"{_dollars(cost['saved'])} of {_dollars(cost['total'])}"),
        _figure("input read from cache", _share(tokens["cached_share"])),
        "</div>",
        '<p class="legend">Each bar is one step (a tool call checked):'
        + "".join(
            f'<span style="background:{COLOURS[code]}"></span>{_NAMES[code]}'
            for code in (ALLOW, NUDGE, STOP, SAVED)
        )
        + "</p>",
        "<h2>Runs</h2>",
        "<table><tr><th>run</th><th>steps</th><th>timeline</th><th>stopped on</th>"
        "<th>saved</th></tr>",
    ]
    runs = _select(report.runs, limit)
    stops: list[RunResult] = []
    for number, run in enumerate(runs):
        anchor = ""
        if run.stopped and len(stops) < STOPS_SHOWN:
            stops.append(run)
            anchor = f' data-stop="stop-{len(stops)}" href="#stop-{len(stops)}"'
        name = f"<a{anchor}>{_e(run.run)}</a>" if anchor else _e(run.run)
        out.append(
            f'<tr class="run" id="run-{number}"><td>{name}</td><td class="n">{run.steps:,}</td>'
            f"<td>{_timeline(run)}</td><td>{_e(run.tool or '')}</td>"
            f'<td class="n">{_dollars(run.cost_saved)}</td></tr>'
        )
    out.append("</table>")
    hidden = len(report.runs) - len(runs)
    if hidden:
        out.append(f"<p>... and {hidden:,} more runs (the JSON report has every one).</p>")
    tools = [(name, stats) for name, stats in tools_ranked(report) if stats.stops]
    if tools:
        out.append("<h2>Top offending tools</h2>")
        out.append(
            "<table><tr><th>tool</th><th>runs stopped</th><th>nudges</th>"
            "<th>steps saved</th><th>saved</th></tr>"
        )
        for name, stats in tools[:10]:
            out.append(
                f'<tr><td>{_e(name)}</td><td class="n">{stats.stops:,}</td>'
                f'<td class="n">{stats.nudges:,}</td><td class="n">{stats.steps_saved:,}</td>'
                f'<td class="n">{_dollars(stats.cost_saved)}</td></tr>'
            )
        out.append("</table>")
    if stops:
        out.append("<h2>How each stop came about</h2>")
        for number, run in enumerate(stops, 1):
            out.append(
                f'<details id="stop-{number}"{" open" if number <= 5 else ""}><summary>'
                f"{_e(run.run)}: {_e(run.reason)} on {_e(run.tool)} at step {run.stop_step}"
                f" ({_e(run.stop_location or '')})</summary><table>"
            )
            for step, action, call in run.lead():
                colour = COLOURS.get(action[:1], "#999")
                out.append(
                    f'<tr><td class="n">{step}</td><td style="color:{colour}">{_e(action)}'
                    f"</td><td><code>{_e(call)}</code></td></tr>"
                )
            out.append(f"</table><p>{_e(run.stop_message or '')}</p></details>")
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


def _figure(label: str, value: str) -> str:
    return f'<div class="figure"><b>{_e(value)}</b>{_e(label)}</div>'


def _share(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


__all__ = ("COLOURS", "DEFAULT_LIMIT", "render")
