"""Hash-only vs progress-aware verdicts on the scenario suite, and what ``observe`` costs.
``python benches/progress.py [--backend native|reference] [--no-timing]``

(a) Verdicts. Replays every run of ``tests/scenarios/progress.json`` (issue #6) twice:

    - *hash-only*: the guard as it was before #6, which is what today's guard does when
      ``observe`` is never called. Policies are mapped to their pre-#6 equivalents: ``poll``
      becomes ``volatile`` (what a status tool was declared before #6; it only keeps the tool
      out of the result cache), and the settings #6 added (``max_polls``, ``empty``) are
      dropped. No ``observe`` calls.
    - *progress-aware*: the scenario's own policies, and ``observe(verdict, result)`` after
      every allowed call.

    A replay checks each scripted step; an allowed call runs (and is observed); a nudged one
    does not run, and the script goes on with its next step, as a model that ignores the nudge
    would; a stop ends the run. A *stuck* run is a positive, a stop is a positive prediction:
    precision = TP / (TP + FP), recall = TP / (TP + FN). Nudges on healthy runs are counted
    but are not errors. Runs marked ``known_gap`` are runs the reference is known to misjudge;
    they are counted like the others and listed at the end.

(b) Cost. ``Guard.check`` on the seed call in a steady state (as ``test_bench_guard.py``: a
    default guard, 13 seed-shaped ``get_logs`` calls in rotation, every verdict "allow", the
    window full) against ``check`` followed by ``observe`` of the call's result, per call,
    for the native guard and the reference. Two results: one log record (about the size of
    the seed's arguments) and the 1 KB payload of ``payloads.py``. Not the seed's ``[]``: in
    this rotation every call goes to ``get_logs``, so a run of ``[]`` results is a fruitless
    rewording and the guard would nudge the fourth call and stop the fifth. Target: check +
    observe within 2x of check, on the seed-sized result. Timed with ``_timing.best_ns``
    (interleaved, best of 15); nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The harness loop the tests use (tests/_traces.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _timing
import tripwire.reference as reference
from _traces import run_calls
from payloads import ONE_KB, SEED

try:
    import tripwire._core as native
except ImportError:  # pragma: no cover - only where the extension is not built
    native = None  # type: ignore[assignment]

SUITE = Path(__file__).resolve().parent.parent / "tests" / "scenarios" / "progress.json"
OBSERVE_TARGET = 2.0
# Twice the repeats of the other benches: the ratio is of two sub-microsecond times.
TIMING_REPEATS = 15

SEED_NAME, SEED_ARGS = SEED
CALLS = [(SEED_NAME, {**SEED_ARGS, "since": f"{minutes}m"}) for minutes in range(1, 14)]
LOG_RECORD = [{"ts": "2026-12-02T02:01:13Z", "level": "error", "msg": "upstream timeout"}]
RESULTS = {"1 log record": LOG_RECORD, "1 KB result": ONE_KB[1]}


# -- (a) verdicts ---------------------------------------------------------------------------


def baseline_tools(tools: dict[str, Any]) -> dict[str, str]:
    """The scenario's policies as the pre-#6 guard knew them."""
    mapped = {}
    for tool, spec in tools.items():
        kind = spec["policy"] if isinstance(spec, dict) else spec
        mapped[tool] = "volatile" if kind == "poll" else kind
    return mapped


def replay(module: ModuleType, scenario: dict[str, Any], *, progress: bool) -> list[Any]:
    tools = scenario["tools"] if progress else baseline_tools(scenario["tools"])
    return run_calls(module.Guard(tools=tools), scenario["steps"], observe=progress)


class Score:
    """Confusion counts of one guard over the suite."""

    def __init__(self) -> None:
        self.tp = self.fp = self.fn = self.tn = 0
        self.healthy_nudged = 0
        self.nudges = 0
        self.wrong_reason = 0
        self.stuck_steps: list[int] = []
        self.by_kind: dict[str, Counter[str]] = {}

    def add(self, scenario: dict[str, Any], verdicts: list[Any]) -> str:
        last = verdicts[-1]
        stopped = last.action == "stop"
        stuck = scenario["label"] == "stuck"
        outcome = ("TP" if stopped else "FN") if stuck else ("FP" if stopped else "TN")
        setattr(self, outcome.lower(), getattr(self, outcome.lower()) + 1)
        self.by_kind.setdefault(scenario["kind"], Counter())[outcome] += 1
        nudges = sum(v.action == "nudge" for v in verdicts)
        if not stuck:
            self.nudges += nudges
            self.healthy_nudged += nudges > 0
        if stuck and stopped:
            self.stuck_steps.append(last.step)
            if last.reason != scenario["reason"]:
                self.wrong_reason += 1
        return outcome

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")


def quality(module: ModuleType) -> tuple[str, list[str]]:
    scenarios: list[dict[str, Any]] = json.loads(SUITE.read_text(encoding="utf-8"))
    scores = {"hash-only": Score(), "progress-aware": Score()}
    misjudged: list[str] = []
    for scenario in scenarios:
        for label, score in scores.items():
            verdicts = replay(module, scenario, progress=label == "progress-aware")
            outcome = score.add(scenario, verdicts)
            if label == "progress-aware" and outcome in ("FP", "FN"):
                last = verdicts[-1]
                what = last.message if last.action == "stop" else "never stopped"
                gap = " (known_gap)" if scenario.get("known_gap") else ""
                misjudged.append(
                    f"  {outcome} {scenario['name']} [{scenario['kind']}]{gap}: {what}"
                )

    labels = Counter(scenario["label"] for scenario in scenarios)
    header = [
        "guard",
        "TP",
        "FP",
        "FN",
        "TN",
        "precision",
        "recall",
        "healthy runs nudged",
        "stuck: stopped at step (mean)",
    ]
    rows = []
    for label, s in scores.items():
        mean = sum(s.stuck_steps) / len(s.stuck_steps) if s.stuck_steps else float("nan")
        rows.append(
            [
                label,
                str(s.tp),
                str(s.fp),
                str(s.fn),
                str(s.tn),
                f"{s.precision:.3f}",
                f"{s.recall:.3f}",
                f"{s.healthy_nudged} ({s.nudges} nudges)",
                f"{mean:.1f}",
            ]
        )
    progress = scores["progress-aware"]
    summary = _timing.table(
        f"Scenario suite {SUITE.name}: {len(scenarios)} runs ({labels['healthy']} healthy,"
        f" {labels['stuck']} stuck), backend {module.__name__}",
        header,
        rows,
        [
            "Positive = a stuck run; predicted positive = the run was stopped.",
            "hash-only: no observe, poll -> volatile, max_polls/empty dropped (the pre-#6 guard).",
            f"progress-aware: stopped with a reason other than the scenario's:"
            f" {progress.wrong_reason}.",
        ],
    )

    kinds = sorted({scenario["kind"] for scenario in scenarios})
    kind_rows = []
    for kind in kinds:
        runs = [s for s in scenarios if s["kind"] == kind]
        healthy = sum(s["label"] == "healthy" for s in runs)
        row = [kind, f"{healthy}/{len(runs) - healthy}"]
        for score in scores.values():
            counts = score.by_kind.get(kind, Counter())
            row += [str(counts["FP"]), str(counts["FN"])]
        kind_rows.append(row)
    per_kind = _timing.table(
        "False positives (healthy run stopped) and false negatives (stuck run not stopped),"
        " per kind",
        ["kind", "healthy/stuck", "hash FP", "hash FN", "progress FP", "progress FN"],
        kind_rows,
        [],
    )
    return summary + "\n\n" + per_kind, misjudged


def _fields(verdict: Any) -> tuple[Any, ...]:
    return (
        verdict.action,
        verdict.reason,
        verdict.tool,
        verdict.key,
        verdict.repeats,
        verdict.step,
        verdict.message,
    )


def parity(scenarios: list[dict[str, Any]]) -> str:
    """Whether the native guard gives the reference's verdicts on every run, both modes."""
    if native is None:
        return "native and reference: not compared (tripwire._core is not built)."
    differ = sorted(
        {
            scenario["name"]
            for scenario in scenarios
            for progress in (True, False)
            if list(map(_fields, replay(native, scenario, progress=progress)))
            != list(map(_fields, replay(reference, scenario, progress=progress)))
        }
    )
    if not differ:
        return f"native and reference: identical verdicts on all {len(scenarios)} runs, both modes."
    return f"native and reference DIFFER on {len(differ)} runs: {', '.join(differ)}"


# -- (b) cost -------------------------------------------------------------------------------


def steady_guard(module: ModuleType, result: Any = None, observe: bool = False) -> Any:
    guard = module.Guard()
    for _ in range(2):
        for name, args in CALLS:
            verdict = guard.check(name, args)
            assert verdict.action == "allow", verdict
            if observe:
                guard.observe(verdict, result)
    return guard


def cost(module: ModuleType) -> list[list[str]]:
    rows = []
    for label, result in RESULTS.items():
        plain = steady_guard(module)
        observed = steady_guard(module, result, observe=True)
        namespace: dict[str, Any] = {
            "check": plain.check,
            "check_o": observed.check,
            "observe": observed.observe,
            "result": result,
        }
        for i, (name, args) in enumerate(CALLS):
            namespace[f"n{i}"], namespace[f"a{i}"] = name, args
        plain_stmt = "; ".join(f"check(n{i}, a{i})" for i in range(len(CALLS)))
        observe_stmt = "; ".join(f"observe(check_o(n{i}, a{i}), result)" for i in range(len(CALLS)))
        namespace["call_key"] = module.call_key
        key_stmt = "; ".join("call_key('result', result)" for _ in CALLS)
        ns = _timing.best_ns(
            {"check": plain_stmt, "check+observe": observe_stmt, "key": key_stmt},
            namespace,
            calls_per_stmt=len(CALLS),
        )
        # The steady state held: every check in the timed loops was allowed.
        for guard in (plain, observed):
            assert guard.check(*CALLS[0]).action == "allow" and not guard.stopped
        ratio = ns["check+observe"] / ns["check"]
        mark = ("ok" if ratio <= OBSERVE_TARGET else "MISS") if label == "1 log record" else ""
        rows.append(
            [
                "native" if module is native else "reference",
                label,
                _timing.fmt_ns(ns["check"]),
                _timing.fmt_ns(ns["check+observe"]),
                _timing.fmt_ns(ns["check+observe"] - ns["check"]),
                _timing.fmt_ns(ns["key"]),
                f"{ratio:.2f}x {mark}".rstrip(),
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=("native", "reference"), default=None)
    parser.add_argument("--no-timing", action="store_true", help="verdicts only")
    options = parser.parse_args()
    backend = options.backend or ("native" if native is not None else "reference")
    if backend == "native" and native is None:
        parser.error("tripwire._core is not built")
    module = native if backend == "native" else reference

    scenarios = json.loads(SUITE.read_text(encoding="utf-8"))
    tables, misjudged = quality(module)
    print(tables)
    print()
    print(parity(scenarios))
    print()
    print("Runs the progress-aware guard misjudges:" if misjudged else "No run misjudged.")
    for line in misjudged:
        print(line)

    if options.no_timing:
        return
    _timing.REPEATS = TIMING_REPEATS
    rows = []
    for candidate in (native, reference):
        if candidate is not None:
            rows += cost(candidate)
    print()
    print(
        _timing.table(
            "Cost per call: check vs check + observe (seed-shaped get_logs, steady state, all"
            " allow)",
            [
                "backend",
                "result observed",
                "check",
                "check+observe",
                "observe",
                "call_key(result)",
                "ratio",
            ],
            rows,
            [
                f"ratio: (check + observe) / check; target <= {OBSERVE_TARGET:g}x on the seed-sized"
                " result (1 log record).",
                "observe = (check + observe) - check: about one call_key of the result, so it"
                " grows with the result's size; the 1 KB row is for scale, not held to the target.",
            ],
        )
    )


if __name__ == "__main__":
    main()
