"""``tripwire replay --html`` for a fleet, in a real headless Chromium driven as a person would
(``_browser``: clicks, typing and the mouse as input events): every run reachable by paging and
by the filter, runs keyed by their source, outcomes and the stops split by them, estimates
marked ``~``, each step's tool and verdict on hover, and the chart of money lost to loops."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from _browser import CHROMIUM, Page
from tripwire.cli import main
from tripwire.replay import html

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium here (apt-get install -y chromium; .ci/run does)"
)
RUNS_A_DAY = 70
DAYS = ("2026-12-01", "2026-12-02")


def _day(path: Path, day: int) -> None:
    """A day's runs as a Parquet table of calls: the same run names every day. A run in five
    loops on a tool (the same call, the same result), and ends in failure; the others search
    and end in success; every seventh has no outcome."""
    columns: dict[str, list[Any]] = {
        k: [] for k in ("run", "step", "tool", "arguments", "result", "label")
    }
    for index in range(RUNS_A_DAY):
        name = f"run-{index:03d}"
        stuck = index % 5 == day
        tool = ("get_logs", "query_db", "fetch_url")[index % 3]
        label: float | None = None if index % 7 == 0 else (0.0 if stuck else 1.0)
        for step in range(1, 11):
            columns["run"].append(name)
            columns["step"].append(step)
            if stuck and step > 2:
                columns["tool"].append(tool)
                columns["arguments"].append('{"q": "same"}')
                columns["result"].append('{"items": []}')
            else:
                columns["tool"].append("search")
                columns["arguments"].append(json.dumps({"q": f"{name}-{day}-{step}"}))
                columns["result"].append(json.dumps({"n": step}))
            columns["label"].append(label)
    pq.write_table(pa.table(columns), path)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("days")
    for day, name in enumerate(DAYS):
        _day(root / f"{name}.parquet", day)
    out = root / "fleet.html"
    assert main(["replay", "--html", str(out), "--jobs", "1", str(root)]) == 0
    return out


def _data(page: Path) -> dict[str, Any]:
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="tripwire-data">(.*?)</script>', text)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_every_run_is_in_the_page_keyed_by_its_source(page: Path) -> None:
    data = _data(page)
    runs = data["runs"]
    assert len(runs) == 2 * RUNS_A_DAY
    keys = {(data["sources"][run[0]], run[1]) for run in runs}
    assert len(keys) == 2 * RUNS_A_DAY  # the same names, told apart by their source
    assert {os.path.basename(source) for source in data["sources"]} == {
        f"{day}.parquet" for day in DAYS
    }
    text = page.read_text(encoding="utf-8")
    assert text.count('class="run"') == html.PER_PAGE  # the first page written out
    assert "and 1" not in text and "more runs" not in text
    # Estimated money is marked: these tables have no usage figures.
    assert "~$" in text and "~ an estimate" in text
    # The stops split by outcome: the stuck runs failed.
    table = text[text.index('id="outcomes"') :]
    table = table[: table.index("</table>")]
    assert re.search(r"<td>failure</td><td class=\"n\">\d+</td><td class=\"n\">[1-9]", table)
    assert re.search(r"<td>success</td><td class=\"n\">\d+</td><td class=\"n\">0<", table)


def test_trace_text_in_the_data_cannot_end_the_script(tmp_path: Path) -> None:
    rows = [{"run": "</script><script>alert(1)</script>", "tool": "t", "args": {}}] * 3
    path = tmp_path / "x.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = tmp_path / "page.html"
    assert main(["replay", "--html", str(out), str(path)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "<script>alert" not in text
    assert _data(out)["runs"][0][1] == "</script><script>alert(1)</script>"


@needs_chromium
def test_the_script_draws_the_rows_as_written(page: Path) -> None:
    """The first page as Python wrote it equals the page the script draws (one markup)."""
    text = page.read_text(encoding="utf-8")
    body = text[text.index('<tbody id="runs-body">') + len('<tbody id="runs-body">') :]
    body = body[: body.index("</tbody>")]
    with Page(page.as_uri()) as browser:
        same = browser.evaluate(
            "(function () { var t = document.createElement('tbody');"
            f" t.innerHTML = {json.dumps(body)};"
            " return [t.innerHTML === document.getElementById('runs-body').innerHTML,"
            " t.rows.length]; })()"
        )
    assert same == [True, html.PER_PAGE]


@needs_chromium
def test_paging_and_the_filter_reach_every_run(page: Path) -> None:
    with Page(page.as_uri()) as browser:
        pages = "document.getElementById('pages').textContent"
        rows = "document.querySelectorAll('#runs-body tr.run').length"
        names = (
            "Array.from(document.querySelectorAll('#runs-body tr.run'))"
            ".map(function (r) { return r.cells[0].textContent + '|' + r.cells[1].textContent; })"
        )
        assert browser.evaluate(pages) == "page 1 of 3, 140 runs"
        seen = set(browser.evaluate(names))
        browser.click("#next")
        assert browser.evaluate(pages) == "page 2 of 3, 140 runs"
        seen |= set(browser.evaluate(names))
        browser.click("#next")
        assert browser.evaluate(pages) == "page 3 of 3, 140 runs"
        assert browser.evaluate(rows) == 40
        seen |= set(browser.evaluate(names))
        assert len(seen) == 140  # every run, each (source, run) once
        assert browser.evaluate("document.getElementById('next').disabled") is True
        browser.click("#prev")
        assert browser.evaluate(pages) == "page 2 of 3, 140 runs"
        # Typing into the filter: one run name, in both sources.
        browser.click("#filter")
        browser.type("run-042")
        assert browser.evaluate(pages) == "page 1 of 1, 2 runs"
        found = browser.evaluate(names)
        assert sorted(name.split("|")[1] for name in found) == ["run-042", "run-042"]
        assert len({name.split("|")[0] for name in found}) == 2
        # A source's name filters to its runs.
        browser.evaluate("document.getElementById('filter').value = ''")
        browser.click("#filter")
        browser.type("2026-12-02")
        assert browser.evaluate(pages) == "page 1 of 2, 70 runs"
        # What the guard did: the select, changed from the keyboard (the text filter emptied
        # first; the select's change redraws with both).
        browser.evaluate("document.getElementById('filter').value = ''")
        browser.evaluate("document.getElementById('kind').focus()")
        browser.key("ArrowDown", 40)
        assert browser.evaluate("document.getElementById('kind').value") == "0"
        stopped = browser.evaluate(
            "Array.from(document.querySelectorAll('#runs-body tr.run'))"
            ".map(function (r) { return r.cells[5].textContent; })"
        )
        assert all(tool in ("get_logs", "query_db", "fetch_url") for tool in stopped)
        assert browser.evaluate(pages) == "page 1 of 1, 28 runs"
        # And the outcome: no stopped run succeeded; the failures are stopped ones.
        browser.evaluate("document.getElementById('outcome').focus()")
        browser.key("ArrowDown", 40)
        assert browser.evaluate("document.getElementById('outcome').value") == "success"
        assert browser.evaluate(pages) == "page 1 of 1, 0 runs"
        browser.key("ArrowDown", 40)
        assert browser.evaluate(pages) == "page 1 of 1, 24 runs"


@needs_chromium
def test_hover_names_the_tool_and_the_verdict(page: Path) -> None:
    with Page(page.as_uri()) as browser:
        tip = "document.getElementById('tip')"
        assert browser.evaluate(f"{tip}.hidden") is True
        # The first row is a stopped run: its stop bar, then its first bar.
        stop = "#runs-body tr.run:first-child rect[fill='#d62728']"
        browser.hover(stop)
        assert browser.evaluate(f"{tip}.hidden") is False
        text = browser.evaluate(f"{tip}.textContent")
        tool = browser.evaluate(
            "document.querySelector('#runs-body tr.run:first-child').cells[5].textContent"
        )
        assert re.fullmatch(rf"step \d+ · {tool} · stop \((loop_detected|no_progress)\)", text)
        browser.hover("#runs-body tr.run:first-child rect[data-s='0']")
        assert browser.evaluate(f"{tip}.textContent") == "step 1 · search · allow"
        nudge = "#runs-body tr.run:first-child rect[fill='#f0a400']"
        browser.hover(nudge)
        assert browser.evaluate(f"{tip}.textContent").endswith(f"· {tool} · nudge")
        shots = os.environ.get("TRIPWIRE_SCREENSHOTS")
        if shots:  # the tooltip on the stop, for a person to look at
            browser.hover(stop)
            browser.screenshot(Path(shots) / "fleet-page-hover.png")
        browser.hover("h1")
        assert browser.evaluate(f"{tip}.hidden") is True


@needs_chromium
def test_the_chart_of_money_lost_to_loops(page: Path) -> None:
    with Page(page.as_uri(), height=1400) as browser:
        bars = browser.evaluate(
            "Array.from(document.querySelectorAll('#chart-tools rect'))"
            ".map(function (r) { return r.getAttribute('data-tip'); })"
        )
        assert len(bars) == 3 and all("lost to loops" in bar for bar in bars)
        assert all(re.search(r": ~\$", bar) for bar in bars)  # estimates
        columns = browser.evaluate("document.querySelectorAll('#chart-time rect').length")
        assert columns >= 2 * 3 - 1  # two days, a column each, stacked by tool
        browser.hover("#chart-time rect")
        text = browser.evaluate("document.getElementById('tip').textContent")
        assert DAYS[0] in text and "~$" in text
        shots = os.environ.get("TRIPWIRE_SCREENSHOTS")
        if shots:
            browser.screenshot(Path(shots) / "fleet-page-chart.png")
