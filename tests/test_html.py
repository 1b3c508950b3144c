"""``tripwire replay --html``: one self-contained page, checked in a real headless Chromium
(Debian's ``chromium``; ``.ci/run`` installs it): it renders without console errors, fetches
nothing, and a screenshot shows the runs' timelines in the allow, nudge and stop colours."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from _traces import edit_undo_events
from test_replay_formats import openhands_events, tau_bench, write, write_lines
from tripwire.cli import main
from tripwire.replay.html import COLOURS
from tripwire.replay.simulate import ALLOW, NUDGE, STOP

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "checkout-triage.jsonl"
CHROMIUM = next(
    (path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium here (apt-get install -y chromium; .ci/run does)"
)


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = ["--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars"]
    if os.geteuid() == 0:
        flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


def _console(page: Path) -> list[str]:
    """What the page wrote to the console, errors included (Chromium logs each message as a
    ``:CONSOLE`` line on stderr with ``--enable-logging=stderr``)."""
    done = _chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    assert "</html>" in done.stdout, done.stderr[-2000:]
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page for a fleet: the example's loop, a tau-bench list, an OpenHands run and an
    edit-undo cycle; stopped, nudged and healthy runs."""
    root = tmp_path_factory.mktemp("fleet")
    write(root / "tau.json", tau_bench())
    write(root / "openhands.json", openhands_events())
    write_lines(root / "cart.jsonl", edit_undo_events())
    out = root / "report.html"
    code = main(["replay", "--html", str(out), str(root), str(EXAMPLE)])
    assert code == 0
    return out


def test_the_page_is_self_contained(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    # Nothing is fetched: no src or href to anywhere, no url() in the style.
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    assert "url(" not in text and "@import" not in text
    assert "default-src 'none'" in text
    for tool in ("get_logs", "book_reservation", "execute_bash"):
        assert tool in text
    assert text.count('class="run"') == 5
    assert "How each stop came about" in text


def test_trace_text_is_escaped(tmp_path: Path) -> None:
    rows = [
        {"run": "<script>alert(1)</script>", "tool": "<b>x</b>", "args": {"q": "<i>"}}
        for _ in range(3)
    ]
    out = tmp_path / "page.html"
    assert main(["replay", "--html", str(out), str(write_lines(tmp_path / "x.jsonl", rows))]) == 0
    text = out.read_text(encoding="utf-8")
    assert "<script>alert" not in text and "&lt;script&gt;alert(1)" in text
    assert "<b>x</b>" not in text


@needs_chromium
def test_the_page_renders_without_console_errors(page: Path, tmp_path: Path) -> None:
    assert _console(page) == []
    # The check can fail: a page with an error is caught by it.
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>nosuchfunction()</script></body></html>")
    assert any("nosuchfunction" in line for line in _console(bad))


@needs_chromium
def test_a_screenshot_shows_the_runs_in_their_colours(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = _chromium(f"--screenshot={shot}", "--window-size=1280,1000", page.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    width, height, pixels = _png_rgb(shot.read_bytes())
    assert (width, height) == (1280, 1000)
    counts = {code: pixels.count(_rgb(COLOURS[code])) for code in (ALLOW, NUDGE, STOP)}
    # Every colour drawn, and allowed steps (most of them) the most.
    assert all(count > 20 for count in counts.values()), counts
    assert counts[ALLOW] > counts[STOP]
    if os.environ.get("TRIPWIRE_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["TRIPWIRE_KEEP_SCREENSHOT"])


def _rgb(colour: str) -> tuple[int, int, int]:
    value = int(colour.lstrip("#"), 16)
    return (value >> 16, (value >> 8) & 0xFF, value & 0xFF)


def _png_rgb(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """An 8-bit RGB or RGBA PNG's pixels (what Chromium writes), decoded with zlib alone."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[x] = (line[x] + pred) & 0xFF
        rows.append(line)
        previous = line
    pixels = [(row[x], row[x + 1], row[x + 2]) for row in rows for x in range(0, stride, channels)]
    return width, height, pixels
