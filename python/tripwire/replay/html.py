"""The replay as one self-contained HTML page (``tripwire replay --html FILE``): the fleet at a
glance, with no network at all (no CDN, no fonts, no scripts from elsewhere: inline CSS, SVG
and a short script), so it opens from a CI artefact or a mail attachment.

For a fleet: every run is on the page, keyed by its source (file or dataset: run names repeat
across files) and its name, in pages of ``PER_PAGE`` with a filter (text, what the guard did,
the outcome); per run its outcome where the trace gives one, and a timeline of its steps, one
bar each, coloured by what the guard did (allow, nudge, stop; the steps the stop saved
greyed), whose bars name the tool and the verdict on hover; the money lost to loops (what the
calls after each stop cost) by tool and by source (sources in order: a fleet sharded by day
reads as days), and the stops split by outcome; figures resting on estimated tokens marked
``~``. For each of the first ``STOPS_SHOWN`` stops, the calls that led to it.

The runs travel as compact JSON in the page (``_row``: a run's timeline as its action
characters and its tools run-length coded: about 200 bytes a run), so that a fleet of a
million runs is a page of some 200 megabytes rather than of gigabytes of markup; the first
page of runs is also written as markup (``_row_html``) so that the page shows runs before (or
without) its script, and the script draws the same markup for any other page (a browser test
holds the two equal).

Everything from the traces (run names, tool names, arguments) is escaped: a trace is data,
never markup.
"""

from __future__ import annotations

import html
import io
import json
import os
from array import array
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Final, TextIO

from tripwire.replay.report import DEFAULT_LIMIT, summary, tools_ranked
from tripwire.replay.simulate import (
    ALLOW,
    MAX_TIMELINE,
    NUDGE,
    SAVED,
    STOP,
    CallRow,
    Report,
    RunResult,
)

# Colours of the actions, also what the screenshot test looks for.
COLOURS: Final = {ALLOW: "#2e9e44", NUDGE: "#f0a400", STOP: "#d62728", SAVED: "#c8c8c8"}
# Colours of the tools in the charts: none of the actions' (the screenshot test counts those).
PALETTE: Final = ("#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
# Runs a page of the table; stops whose calls are listed; tools drawn in the charts.
PER_PAGE: Final = 50
STOPS_SHOWN: Final = 50
CHART_TOOLS: Final = 6
BAR_WIDTH: Final = 6
TIMELINE_WIDTH: Final = 720
CHART_WIDTH: Final = 720
# Kinds of run, for the filter and the order (stopped first, then nudged, then the rest).
STOPPED, NUDGED, HEALTHY = 0, 1, 2
# A tool index past the last one a page can name (``StepTools``).
_MAX_TOOLS: Final = 65_535

_STYLE: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.figures{display:flex;gap:16px;flex-wrap:wrap}
.figure{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:120px}
.figure b{display:block;font-size:20px}
table{border-collapse:collapse}td,th{padding:3px 8px;text-align:left;vertical-align:middle}
th{border-bottom:1px solid #999;font-weight:600}tr:nth-child(even) td{background:#f6f6f6}
td.n{text-align:right;font-variant-numeric:tabular-nums}
td.src{max-width:220px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.legend span,.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;
vertical-align:-1px}
.controls{margin:0 0 8px;display:flex;gap:8px;align-items:center;flex-wrap:wrap}
code{font:12px ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
details{margin:6px 0}summary{cursor:pointer}.note{color:#555}
#tip{position:fixed;z-index:9;pointer-events:none;background:#222;color:#fff;
padding:3px 6px;border-radius:4px;font-size:12px;white-space:nowrap}
#tip[hidden]{display:none}
"""

_NAMES: Final = {ALLOW: "allow", NUDGE: "nudge", STOP: "stop", SAVED: "saved"}

# The runs table's pages and filter, and the tooltips. ``row`` is ``_row_html`` in
# JavaScript: the browser test holds the two equal.
_SCRIPT: Final = r"""
(function () {
  var D = JSON.parse(document.getElementById('tripwire-data').textContent);
  var C = D.colours, NAMES = {a: 'allow', n: 'nudge', s: 'stop', '.': 'saved'};
  var body = document.getElementById('runs-body');
  var q = document.getElementById('filter'), kind = document.getElementById('kind');
  var outcome = document.getElementById('outcome'), pages = document.getElementById('pages');
  var prev = document.getElementById('prev'), next = document.getElementById('next');
  var tip = document.getElementById('tip');
  var page = 0, shown = null;
  function e(t) {
    return String(t).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#x27;');
  }
  function money(v, est) {
    var t = Math.abs(v) < 0.01 && v ? '$' + v.toFixed(4) :
      '$' + v.toLocaleString('en-US', {minimumFractionDigits: 2, maximumFractionDigits: 2});
    return (est ? '~' : '') + t;
  }
  function outcomeText(r) {
    if (r === null) { return ''; }
    var word = r > 0 ? 'success' : 'failure';
    return (r === 0 || r === 1) ? word : word + ' (' + r + ')';
  }
  function timeline(t) {
    if (!t.length) {
      return '<svg width="8" height="14" role="img" aria-label="no steps"></svg>';
    }
    var w = Math.min(D.bar, Math.max(1, Math.floor(D.width / t.length))), bars = '';
    for (var i = 0; i < t.length; i++) {
      bars += '<rect x="' + i * w + '" y="0" width="' + Math.max(1, w - 1) +
        '" height="14" fill="' + (C[t[i]] || '#999') + '" data-s="' + i + '"></rect>';
    }
    return '<svg class="timeline" width="' + t.length * w + '" height="14" role="img"' +
      ' aria-label="' + t.length + ' steps">' + bars + '</svg>';
  }
  function row(i) {
    var r = D.runs[i], name = e(r[1]) + (r[2] > 1 ? ' (part ' + r[2] + ')' : '');
    if (r[11]) {
      name = '<a data-stop="stop-' + r[11] + '" href="#stop-' + r[11] + '">' + name + '</a>';
    }
    // Single quotes: the browser's DOM is the same, and the page's text holds one
    // row's class once a row written out (tests count them).
    return "<tr class='run' data-r='" + i + "'><td class='src' title='" +
      e(D.sources[r[0]]) + "'>" + e(D.labels[r[0]]) + '</td><td>' + name + '</td><td>' +
      outcomeText(r[10]) + '</td><td class="n">' + r[3].toLocaleString('en-US') +
      '</td><td>' + timeline(r[4]) + '</td><td>' + e(r[6] === null ? '' : D.tools[r[6]]) +
      '</td><td class="n">' + money(r[8], r[9]) + '</td></tr>';
  }
  function wanted(r) {
    var k = kind.value, o = outcome.value, text = q.value.trim().toLowerCase();
    if (k !== 'all' && String(r[12]) !== k) { return false; }
    if (o === 'success' && !(r[10] !== null && r[10] > 0)) { return false; }
    if (o === 'failure' && !(r[10] !== null && r[10] <= 0)) { return false; }
    if (o === 'none' && r[10] !== null) { return false; }
    if (!text) { return true; }
    var hay = (D.sources[r[0]] + '\n' + r[1] + '\n' + (r[6] === null ? '' : D.tools[r[6]]));
    return hay.toLowerCase().indexOf(text) >= 0;
  }
  function draw() {
    var total = shown === null ? D.runs.length : shown.length;
    var last = Math.max(0, Math.ceil(total / D.perPage) - 1);
    page = Math.min(Math.max(page, 0), last);
    var out = [], start = page * D.perPage, end = Math.min(total, start + D.perPage);
    for (var j = start; j < end; j++) { out.push(row(shown === null ? j : shown[j])); }
    body.innerHTML = out.join('');
    pages.textContent = 'page ' + (page + 1).toLocaleString('en-US') + ' of ' +
      (last + 1).toLocaleString('en-US') + ', ' + total.toLocaleString('en-US') + ' runs';
    prev.disabled = page === 0;
    next.disabled = page >= last;
  }
  function refilter() {
    var all = !q.value.trim() && kind.value === 'all' && outcome.value === 'any';
    shown = null;
    if (!all) {
      shown = [];
      for (var i = 0; i < D.runs.length; i++) { if (wanted(D.runs[i])) { shown.push(i); } }
    }
    page = 0;
    draw();
  }
  q.addEventListener('input', refilter);
  kind.addEventListener('change', refilter);
  outcome.addEventListener('change', refilter);
  prev.addEventListener('click', function () { page -= 1; draw(); });
  next.addEventListener('click', function () { page += 1; draw(); });
  window.tripwireRow = row;
  // Clicking a run's name opens its stop, if listed.
  document.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[data-stop]');
    if (a) {
      var d = document.getElementById(a.getAttribute('data-stop'));
      if (d) { d.open = true; }
    }
  });
  function toolAt(r, s) {
    var runs = r[5];
    for (var k = 0; k < runs.length; k += 2) {
      if (s < runs[k + 1]) { return D.tools[runs[k]]; }
      s -= runs[k + 1];
    }
    return null;
  }
  function stepTip(tr, rect) {
    var r = D.runs[+tr.getAttribute('data-r')], s = +rect.getAttribute('data-s');
    var code = r[4][s], tool = toolAt(r, s), verdict = NAMES[code] || code;
    if (code === 's' && r[7]) { verdict += ' (' + r[7] + ')'; }
    if (code === '.') { verdict = 'not run: the guard had stopped the run'; }
    return 'step ' + (s + 1) + ' \u00b7 ' + (tool === null ? (code === '.' ? '' :
      'tool not recorded') : tool) + (tool === null && code === '.' ? '' : ' \u00b7 ') + verdict;
  }
  document.addEventListener('mouseover', function (ev) {
    var t = ev.target, text = null;
    if (t.matches && t.matches('rect[data-s]')) {
      var tr = t.closest('tr[data-r]');
      if (tr) { text = stepTip(tr, t); }
    } else if (t.getAttribute && t.getAttribute('data-tip')) {
      text = t.getAttribute('data-tip');
    }
    if (text === null) { tip.hidden = true; return; }
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = (ev.clientX + 12) + 'px';
    tip.style.top = (ev.clientY + 12) + 'px';
  });
  draw();
})();
"""


class StepTools:
    """Hears the replay's calls (``on_call``) and keeps, per run, the tool of each step the
    guard checked (the first ``MAX_TIMELINE``, as the timeline keeps), for the page's
    tooltips: two bytes a step, tool names interned."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._runs: dict[tuple[str, str, int], array[int]] = {}

    def __call__(self, row: CallRow) -> None:
        step = row.step
        if step is None or row.duplicate_of is not None or step > MAX_TIMELINE:
            return  # not run (after the stop), or one action with an earlier call
        key = (row.file, row.run, row.part)
        steps = self._runs.get(key)
        if steps is None:
            steps = self._runs[key] = array("H")
        if len(steps) == step - 1:
            steps.append(self._id(row.tool))

    def _id(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = min(len(self.names), _MAX_TOOLS)
            if found < _MAX_TOOLS:
                self.names.append(name)
                self._ids[name] = found
        return found

    def of(self, run: RunResult) -> array[int] | None:
        return self._runs.pop((run.file, run.run, run.part), None)


def _e(text: object) -> str:
    # Lone surrogates (legal in a str from a trace) as escapes: the page must be writable.
    value = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(value, quote=True)


def _dollars(value: float, estimated: bool = False) -> str:
    """Money as the page's script writes it: cents, rounded half up from the shortest decimal
    (as the browser's ``toLocaleString`` rounds: ``0.125`` is ``$0.13``), or four places
    under a cent."""
    if abs(value) < 0.01 and value:
        text = f"${value:,.4f}"
    else:
        cents = Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        text = f"${cents:,}"
    return ("~" if estimated else "") + text


def _estimated(source: str) -> bool:
    return source in ("estimated", "mixed")


class _Tools:
    """Tool names interned for the page's data (the step tools' and the stops')."""

    def __init__(self, known: list[str]) -> None:
        self.names = list(known)
        self._ids = {name: index for index, name in enumerate(self.names)}

    def id(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self.names)
            self.names.append(name)
        return found


def _rle(steps: Iterable[int], names: list[str], tools: _Tools) -> list[int]:
    """Step tools as (tool, count) pairs, flat; ids are the page's."""
    out: list[int] = []
    for step in steps:
        tool = tools.id(names[step]) if step < len(names) else -1
        if out and out[-2] == tool:
            out[-1] += 1
        else:
            out += [tool, 1]
    return out


def _kind(run: RunResult) -> int:
    return STOPPED if run.stopped else NUDGED if run.nudges else HEALTHY


def _row(run: RunResult, source: int, tools: _Tools, steps: list[int]) -> list[Any]:
    """A run as the page's data: [source, name, part, steps, timeline, step tools (pairs of
    tool and count), stop tool, reason, money saved, estimated, reward]; the page adds the
    number of its stop where listed (else 0) and its kind (``STOPPED``, ...)."""
    return [
        source, run.run, run.part, run.steps, run.timeline, steps,
        None if run.tool is None else tools.id(run.tool), run.reason,
        round(run.cost_saved, 6), int(_estimated(run.tokens_source)), run.reward,
    ]  # fmt: skip


def _outcome(reward: float | None) -> str:
    if reward is None:
        return ""
    word = "success" if reward > 0 else "failure"
    return word if reward in (0, 1) else f"{word} ({_js_number(reward)})"


def _js_number(value: float) -> str:
    """A number as JavaScript's ``String(n)`` writes it (for the common cases: integers, and
    decimals that ``repr`` writes without an exponent)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _timeline(timeline: str) -> str:
    """The run's steps as an SVG strip of bars, squeezed to fit when there are many."""
    if not timeline:
        return '<svg width="8" height="14" role="img" aria-label="no steps"></svg>'
    width = min(BAR_WIDTH, max(1, TIMELINE_WIDTH // len(timeline)))
    bars = "".join(
        f'<rect x="{index * width}" y="0" width="{max(1, width - 1)}" height="14"'
        f' fill="{COLOURS.get(code, "#999")}" data-s="{index}"></rect>'
        for index, code in enumerate(timeline)
    )
    return (
        f'<svg class="timeline" width="{len(timeline) * width}" height="14" role="img"'
        f' aria-label="{len(timeline)} steps">{bars}</svg>'
    )


def _labels(sources: list[str]) -> list[str]:
    """Sources as the table shows them: below the directory they share (the full name is
    the cell's title), so that the names that tell them apart are not clipped."""
    try:
        common = os.path.commonpath(sources) if len(sources) > 1 else ""
    except ValueError:  # absolute and relative paths mixed
        common = ""
    if len(sources) == 1 or common in sources:
        common = os.path.dirname(common)
    prefix = common.rstrip("/") + "/" if common else ""
    return [name[len(prefix) :] if prefix and name.startswith(prefix) else name for name in sources]


def _row_html(
    index: int, row: list[Any], sources: list[str], labels: list[str], tools: list[str]
) -> str:
    """A run's row of the table: ``row`` in the page's script, written out for the first
    page."""
    name = _e(row[1]) + (f" (part {row[2]})" if row[2] > 1 else "")
    if row[11]:
        name = f'<a data-stop="stop-{row[11]}" href="#stop-{row[11]}">{name}</a>'
    source = _e(sources[row[0]])
    tool = "" if row[6] is None else _e(tools[row[6]])
    return (
        f'<tr class="run" data-r="{index}"><td class="src" title="{source}">'
        f"{_e(labels[row[0]])}</td>"
        f'<td>{name}</td><td>{_outcome(row[10])}</td><td class="n">{row[3]:,}</td>'
        f"<td>{_timeline(row[4])}</td><td>{tool}</td>"
        f'<td class="n">{_dollars(row[8], bool(row[9]))}</td></tr>'
    )


class _Losses:
    """Money lost to loops (the cost of the calls after each stop), by tool and by source,
    and the runs, stops and losses by outcome."""

    def __init__(self) -> None:
        self.by_source: dict[tuple[int, str], float] = {}
        self.outcomes: dict[str, list[float]] = {}

    def add(self, run: RunResult, source: int) -> None:
        outcome = (
            "no outcome in the trace"
            if run.reward is None
            else "success"
            if run.reward > 0
            else "failure"
        )
        figures = self.outcomes.setdefault(outcome, [0, 0, 0, 0.0])
        figures[0] += 1
        figures[1] += run.stopped
        figures[2] += bool(run.nudges) and not run.stopped
        if run.stopped and run.tool is not None:
            figures[3] += run.cost_saved
            key = (source, run.tool)
            self.by_source[key] = self.by_source.get(key, 0.0) + run.cost_saved


def render(report: Report, *, tools: StepTools | None = None) -> str:
    """The whole page (``write`` it to a file for a big fleet)."""
    out = io.StringIO()
    write(report, out, tools=tools)
    return out.getvalue()


def write(report: Report, out: TextIO, *, tools: StepTools | None = None) -> None:
    """Writes the page. ``tools``: the steps' tools, heard during the replay (without them
    a bar's tooltip names its verdict only)."""
    s = summary(report)
    estimated = _estimated(report.totals.tokens_source)
    sources: list[str] = []
    source_ids: dict[str, int] = {}
    for stats in report.files:
        source_ids.setdefault(stats.path, len(sources))
        if len(sources) < len(source_ids):
            sources.append(stats.path)
    page_tools = _Tools([])
    step_names = tools.names if tools is not None else []
    losses = _Losses()
    # (order, the run's data as JSON): the data, not the runs, are held (a few hundred
    # bytes a run, where a RunResult is kilobytes and the store spills them to disk).
    rows: list[tuple[tuple[int, float, int], str]] = []
    for number, run in enumerate(report.runs):
        source = source_ids.get(run.file)
        if source is None:
            source = source_ids[run.file] = len(sources)
            sources.append(run.file)
        steps = tools.of(run) if tools is not None else None
        losses.add(run, source)
        row = _row(run, source, page_tools, _rle(steps or (), step_names, page_tools))
        order = (_kind(run), -run.cost_saved if run.stopped else 0.0, number)
        # Without its closing bracket: the stop's number and the kind are added when written.
        rows.append((order, json.dumps(row, ensure_ascii=True, separators=(",", ":"))[:-1]))
    rows.sort(key=lambda item: item[0])
    # The stops listed: the first STOPS_SHOWN of the table (stopped runs come first).
    listed = {order[2]: n for n, (order, _) in enumerate(rows[:STOPS_SHOWN], 1) if order[0] == 0}
    found: dict[int, RunResult] = {}
    if listed:
        for number, run in enumerate(report.runs):
            if number in listed:
                found[listed[number]] = run
    stops = [found[number] for number in sorted(found)]

    def data(item: tuple[tuple[int, float, int], str]) -> str:
        order, text = item
        return f"{text},{listed.get(order[2], 0)},{order[0]}]"

    labels = _labels(sources)
    cost = s["cost"]
    tokens = s["tokens"]
    w = out.write
    w(
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        # Nothing may be fetched: the page is one file.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
        " style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        "<title>tripwire replay</title>\n"
        f"<style>{_STYLE}</style></head><body>\n"
        "<h1>tripwire replay</h1>\n"
        f"<p>{len(sources):,} sources, {s['runs']:,} runs, {s['steps']:,} steps,"
        f" {s['model_calls']:,} model calls. Guard: window {report.settings.window},"
        f" nudge at {report.settings.nudge_at}, stop at {report.settings.stop_at}.</p>\n"
        '<div class="figures">\n'
        + _figure("runs stopped", f"{s['stopped']:,} of {s['runs']:,}")
        + _figure("runs nudged only", f"{s['nudged_only']:,}")
        + _figure("steps saved", f"{s['steps_saved']:,} of {s['steps']:,}")
        + _figure(
            "money saved",
            f"{_dollars(cost['saved'], estimated)} of {_dollars(cost['total'], estimated)}",
        )
        + _figure("input read from cache", _share(tokens["cached_share"]))
        + "</div>\n"
    )
    if estimated:
        w(
            '<p class="note">~ an estimate: the traces lack token counts for some model calls,'
            " which are estimated from the transcript's size.</p>\n"
        )
    w(
        '<p class="legend">Each bar is one step (a tool call checked; hover for its tool and'
        " verdict):"
        + "".join(
            f'<span style="background:{COLOURS[code]}"></span>{_NAMES[code]}'
            for code in (ALLOW, NUDGE, STOP, SAVED)
        )
        + "</p>\n<h2>Runs</h2>\n"
        '<div class="controls"><input id="filter" type="search" aria-label="filter runs"'
        ' placeholder="run, source or tool"><select id="kind" aria-label="what the guard did">'
        f'<option value="all">all runs</option><option value="{STOPPED}">stopped</option>'
        f'<option value="{NUDGED}">nudged only</option><option value="{HEALTHY}">'
        "neither</option></select>"
        '<select id="outcome" aria-label="outcome"><option value="any">any outcome</option>'
        '<option value="success">success</option><option value="failure">failure</option>'
        '<option value="none">no outcome</option></select>'
        '<button id="prev" type="button">previous</button><span id="pages">'
        f"page 1 of {max(1, -(-len(rows) // PER_PAGE)):,}, {len(rows):,} runs</span>"
        '<button id="next" type="button">next</button></div>\n'
        "<table><thead><tr><th>source</th><th>run</th><th>outcome</th><th>steps</th>"
        "<th>timeline</th><th>stopped on</th><th>saved</th></tr></thead>"
        '<tbody id="runs-body">'
    )
    # No white space between rows: the script's rows have none (the test compares them).
    for index, item in enumerate(rows[:PER_PAGE]):
        w(_row_html(index, json.loads(data(item)), sources, labels, page_tools.names))
    w("</tbody></table>\n")
    _charts(w, report, losses, labels, estimated)
    _outcomes(w, losses, estimated)
    ranked = [(name, stats) for name, stats in tools_ranked(report) if stats.stops]
    if ranked:
        w(
            "<h2>Top offending tools</h2>\n"
            "<table><tr><th>tool</th><th>runs stopped</th><th>nudges</th>"
            "<th>steps saved</th><th>saved</th></tr>\n"
        )
        for name, stats in ranked[:10]:
            w(
                f'<tr><td>{_e(name)}</td><td class="n">{stats.stops:,}</td>'
                f'<td class="n">{stats.nudges:,}</td><td class="n">{stats.steps_saved:,}</td>'
                f'<td class="n">{_dollars(stats.cost_saved, estimated)}</td></tr>\n'
            )
        w("</table>\n")
    if stops:
        w("<h2>How each stop came about</h2>\n")
        for number, run in enumerate(stops, 1):
            w(
                f'<details id="stop-{number}"{" open" if number <= 5 else ""}><summary>'
                f"{_e(run.run)}: {_e(run.reason)} on {_e(run.tool)} at step {run.stop_step}"
                f" ({_e(run.stop_location or '')})</summary><table>\n"
            )
            for step, action, call in run.lead():
                colour = COLOURS.get(action[:1], "#999")
                w(
                    f'<tr><td class="n">{step}</td><td style="color:{colour}">{_e(action)}'
                    f"</td><td><code>{_e(call)}</code></td></tr>\n"
                )
            w(f"</table><p>{_e(run.stop_message or '')}</p></details>\n")
    meta = {
        "sources": sources,
        "labels": labels,
        "tools": page_tools.names,
        "colours": COLOURS,
        "perPage": PER_PAGE,
        "bar": BAR_WIDTH,
        "width": TIMELINE_WIDTH,
    }
    head = json.dumps(meta, ensure_ascii=True, separators=(",", ":"))[:-1]
    w('<div id="tip" role="tooltip" hidden></div>\n')
    # JSON in a script element: "<" escaped, so that no "</script>" in a trace ends it.
    w('<script type="application/json" id="tripwire-data">')
    w(_script_safe(head) + ',"runs":[')
    for index, item in enumerate(rows):
        w(("," if index else "") + _script_safe(data(item)))
    w("]}</script>\n")
    w(f"<script>{_SCRIPT}</script></body></html>\n")


def _script_safe(text: str) -> str:
    return text.replace("<", "\\u003c")


def _charts(w: Any, report: Report, losses: _Losses, sources: list[str], estimated: bool) -> None:
    """Money lost to loops by tool (bars) and by source, in order (columns stacked by tool)."""
    ranked = sorted(
        ((name, stats.cost_saved) for name, stats in report.tools.items() if stats.stops),
        key=lambda item: (-item[1], item[0]),
    )
    if not ranked:
        return
    mark = "~" if estimated else ""
    w(
        '<h2>Money lost to loops</h2>\n<p class="note">What the calls after each stop cost:'
        " the money the guard would have saved"
        + (" (~ estimated from transcript sizes)" if estimated else "")
        + ".</p>\n"
    )
    top = [name for name, _ in ranked[:CHART_TOOLS]]
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(top)}
    other = PALETTE[-1]
    shown = ranked[:10]
    peak = max(value for _, value in shown) or 1.0
    height = 20 * len(shown) + 4
    bars = []
    for i, (name, value) in enumerate(shown):
        width = max(1.0, (CHART_WIDTH - 260) * value / peak)
        tip = _e(f"{name}: {mark}{_dollars(value)} lost to loops")
        bars.append(
            f'<text x="0" y="{20 * i + 14}" font-size="12">{_e(_clip(name, 28))}</text>'
            f'<rect x="190" y="{20 * i + 3}" width="{width:.1f}" height="14"'
            f' fill="{colour.get(name, other)}" data-tip="{tip}"></rect>'
            f'<text x="{190 + width + 6:.1f}" y="{20 * i + 14}" font-size="12">'
            f"{_e(mark + _dollars(value))}</text>"
        )
    w(
        f'<h3>By tool</h3>\n<svg id="chart-tools" width="{CHART_WIDTH}" height="{height}"'
        f' role="img" aria-label="money lost to loops by tool">{"".join(bars)}</svg>\n'
    )
    columns: dict[int, dict[str, float]] = {}
    for (source, tool), value in losses.by_source.items():
        series = tool if tool in colour else "other tools"
        column = columns.setdefault(source, {})
        column[series] = column.get(series, 0.0) + value
    order = list(range(len(sources)))
    totals = [sum(columns.get(i, {}).values()) for i in order]
    peak = max(totals) or 1.0
    step = CHART_WIDTH / max(1, len(order))
    chart_height = 160
    rects = []
    for i in order:
        y = float(chart_height)
        for series in [*top, "other tools"]:
            value = columns.get(i, {}).get(series, 0.0)
            if not value:
                continue
            h = max(1.0, (chart_height - 10) * value / peak)
            y -= h
            tip = _e(f"{sources[i]}: {series}, {mark}{_dollars(value)}")
            rects.append(
                f'<rect x="{i * step:.1f}" y="{y:.1f}" width="{max(1.0, step - 1):.1f}"'
                f' height="{h:.1f}" fill="{colour.get(series, other)}" data-tip="{tip}"></rect>'
            )
    first, last = _clip(sources[0], 50), _clip(sources[-1], 50)
    axis = (
        f'<text x="0" y="{chart_height + 14}" font-size="11">{_e(first)}</text>'
        f'<text x="{CHART_WIDTH}" y="{chart_height + 14}" font-size="11"'
        f' text-anchor="end">{_e(last)}</text>'
    )
    key = "".join(
        f'<span style="background:{colour.get(series, other)}"></span>{_e(series)}'
        for series in [*top, "other tools"]
    )
    w(
        "<h3>Over time (by source, in order: a fleet sharded by day reads as days)</h3>\n"
        f'<svg id="chart-time" width="{CHART_WIDTH}" height="{chart_height + 20}" role="img"'
        f' aria-label="money lost to loops by source">{"".join(rects)}{axis}</svg>\n'
        f'<p class="key">{key}</p>\n'
    )


def _outcomes(w: Any, losses: _Losses, estimated: bool) -> None:
    """Stops split by the runs' outcomes, where the traces give one: a stop on a run that
    succeeded is the guard's worst mistake."""
    if set(losses.outcomes) <= {"no outcome in the trace"}:
        return
    w(
        '<h2>Stops by outcome</h2>\n<table id="outcomes"><tr><th>outcome</th><th>runs</th>'
        "<th>stopped</th><th>nudged only</th><th>lost to loops</th></tr>\n"
    )
    for name in ("success", "failure", "no outcome in the trace"):
        figures = losses.outcomes.get(name)
        if figures is None:
            continue
        runs, stopped, nudged, lost = figures
        w(
            f'<tr><td>{name}</td><td class="n">{int(runs):,}</td><td class="n">'
            f'{int(stopped):,}</td><td class="n">{int(nudged):,}</td>'
            f'<td class="n">{_dollars(lost, estimated)}</td></tr>\n'
        )
    w("</table>\n")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _figure(label: str, value: str) -> str:
    return f'<div class="figure"><b>{_e(value)}</b>{_e(label)}</div>\n'


def _share(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


__all__ = ("COLOURS", "DEFAULT_LIMIT", "StepTools", "render", "write")
