"""What "the same question" should mean for the rules over varied arguments (issue 25): the
trade-off between rewording loops caught and healthy exploration stopped, one row per rule.

    python benches/rewording.py [CORPUS] [--markdown]

The two rules that read *different* calls as one loop (a run of empty answers; one error
across varied arguments) hold only calls that ask the same question (``tripwire._question``).
This replays, with the reference guard and each candidate meaning of "the same question"
patched in:

* the stuck runs of the scenario suites whose calls all differ (``progress.json``'s reworded
  empty searches and cycles, ``real_work.json``'s one error across varied arguments): caught
  when the guard stops them;
* the healthy runs of both suites (never to be stopped);
* the public corpus (``benches/real_traces.py``): stops and nudges in healthy runs, and how
  many of those stops the trace does not justify.

Candidates, from the loosest to the strictest:

* ``any call`` — every call is the same question (the rule before issue 25: a run of one
  tool's empty answers, whatever it asked);
* ``same form`` — the same argument names and nesting, any values;
* ``shape, form for errors`` — empty answers by shape, errors by form (one error across any
  values of one form read as the tool refusing what they share);
* ``same shape`` — the same one-word values (ids, names, codes; respelled in case or
  punctuation only), free text free: what the guard does, for both rules;
* ``same raw call`` — only the very same arguments (the varied-argument rules never fire).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["TRIPWIRE_IMPLEMENTATION"] = "reference"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import real_traces  # noqa: E402
import test_progress  # noqa: E402
import test_real_work  # noqa: E402
import tripwire._guard as guard_module  # noqa: E402
import tripwire._question as question_module  # noqa: E402
import tripwire.reference as reference  # noqa: E402

Same = Callable[[Any, Any], bool]


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return "\x00value"


def _with_form(name: str, args: Any, text: bool, volatile: frozenset[Any]) -> Any:
    """The guard's question, with the form (the shape, every value masked) beside it."""
    told = question_module.question_of(name, args, text, volatile)
    if told is None:
        return None
    try:
        value = question_module.loads(args) if text else args
        shape = question_module._shape(value, volatile, 0)
        form = question_module._digest(json.dumps(_masked(shape), sort_keys=True))
    except (TypeError, ValueError, RecursionError):
        form = told[1]
    return (*told, form)


def _by(index: int | None) -> Same:
    def same(a: Any, b: Any) -> bool:
        if a is None or b is None:
            return False
        return True if index is None else bool(a[index] == b[index])

    return same


# (name, same question for empty answers, same question for errors)
CANDIDATES: list[tuple[str, Same, Same]] = [
    ("any call", _by(None), _by(None)),
    ("same form", _by(2), _by(2)),
    ("shape, form for errors", _by(1), _by(2)),
    ("same shape (the guard's)", _by(1), _by(1)),
    ("same raw call", _by(0), _by(0)),
]


_ORIGINAL_ERROR_RUN = guard_module.Guard._error_run
_SAME: list[Same] = []


def _patch(same_empty: Same, same_error: Same) -> None:
    """The reference guard, with these meanings of "the same question"."""

    def tail(self: Any, question: Any, fits: Any) -> list[Any]:
        same = _SAME[-1] if _SAME else same_empty
        run: list[Any] = []
        asked = [question]
        for entry in reversed(self._window):
            if entry.turn != self._turn or not (entry.nudged or fits(entry)):
                break
            if not any(same(entry.question, other) for other in asked):
                break
            run.append(entry)
            asked.append(entry.question)
        return run

    def error_run(self: Any, question: Any) -> Any:
        _SAME.append(same_error)
        try:
            return _ORIGINAL_ERROR_RUN(self, question)
        finally:
            _SAME.pop()

    guard_module.question_of = _with_form  # type: ignore[assignment]
    guard_module.Guard._tail = tail  # type: ignore[method-assign]
    guard_module.Guard._error_run = error_run  # type: ignore[method-assign]


VARIED_KINDS = {"reworded_empty", "error_across_args", "abab", "edit_undo"}


def _suites() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    progress = json.loads((HERE.parent / "tests/scenarios/progress.json").read_text())
    work = [e for e in json.loads((HERE.parent / "tests/scenarios/real_work.json").read_text())]
    return [s for s in progress if "steps" in s], [s for s in work if "steps" in s]


def _varied(scenario: dict[str, Any]) -> bool:
    """A stuck run whose calls are not one call repeated."""
    if scenario["label"] != "stuck":
        return False
    calls = [
        json.dumps([s.get("tool"), s.get("args", s.get("arguments"))], sort_keys=True)
        for s in scenario["steps"]
        if "tool" in s
    ]
    return len(set(calls)) == len(calls) or scenario.get("kind") in VARIED_KINDS


def measure(corpus: Path | None) -> list[tuple[str, ...]]:
    progress, work = _suites()
    runs = real_traces.read_corpus(corpus)[0] if corpus is not None else []
    rows = []
    for name, same_empty, same_error in CANDIDATES:
        _patch(same_empty, same_error)
        caught = stuck = healthy_stopped = healthy_nudged = healthy = 0
        outcomes = [
            (scenario, test_progress.replay(reference, scenario)) for scenario in progress
        ] + [(scenario, test_real_work.replay(reference, scenario).verdicts) for scenario in work]
        for scenario, verdicts in outcomes:
            stopped = verdicts[-1].action == "stop"
            if _varied(scenario):
                stuck += 1
                caught += stopped
            elif scenario["label"] == "healthy":
                healthy += 1
                healthy_stopped += stopped
                healthy_nudged += any(v.action == "nudge" for v in verdicts)
        stops = unjustified = nudges = calls = 0
        for run in runs:
            if run.success is False or run.harness.endswith("faults"):
                continue
            found, stop, _ = real_traces.replay(run, "progress", set())
            calls += sum(len(step.calls) for step in run.steps)
            nudges += len(found)
            if stop is not None:
                stops += 1
                unjustified += not stop.justified
        rate = 1000 * nudges / calls if calls else 0.0
        rows.append(
            (
                name,
                f"{caught} of {stuck}",
                f"{healthy_stopped} / {healthy_nudged} of {healthy}",
                f"{stops} ({unjustified})" if runs else "-",
                f"{rate:.1f}" if runs else "-",
            )
        )
    return rows


HEADERS = (
    "same question",
    "varied-argument loops stopped (suites)",
    "healthy suite runs stopped / nudged",
    "corpus healthy runs stopped (unjustified)",
    "corpus nudges / 1k healthy calls",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    corpus = args.corpus or real_traces.default_corpus()
    if corpus is not None and not corpus.is_dir():
        corpus = None
    rows = measure(corpus)
    if args.markdown:
        print("| " + " | ".join(HEADERS) + " |")
        print("|" + "---|" * len(HEADERS))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
        print("  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)))
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    if corpus is None:
        print("(no corpus: give its directory, or set TRIPWIRE_CORPUS)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
