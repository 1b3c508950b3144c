"""Prints the ratio tables of ``test_ratios_*`` after pytest-benchmark's own tables."""

from __future__ import annotations

from typing import Any

import _timing


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _timing.TABLES:
        return
    terminalreporter.section("tripwire ratios (timeit, same process, best of repeats)")
    for text in _timing.TABLES:
        terminalreporter.write_line(text)
        terminalreporter.write_line("")
