"""Differential fuzzer over run state and operations: native core against the reference.

Each case builds a run state the snapshot reader accepts but no ordinary run reaches (issue
26, finding 3): a reference guard is driven through a few random calls, then its state is
crafted at the edges (steps at 2**64 - 1, polls and turns at 2**32 - 1, ``RETRY`` on entries
without a result, an error text that is not its digest's, remembered verdicts with odd steps,
...), and written with the reference's own writer. Both backends restore those bytes; then the
same random operations (``check``, ``check_json``, ``check_turn``, ``observe``, ``keep``,
``user_message``, ``reset``, a snapshot round trip) go to both. After each step the outcomes
are compared: every verdict field (``message`` included), the exception type where one
raises, the state as shown (steps, stopped, window keys) and the snapshot bytes; and each
backend must restore the snapshot it just wrote.

It reports disagreements, grouped by where they first appear; it fixes nothing. Usage::

    .venv/bin/python fuzz/fuzz_guard_state.py --cases 2000 --seed 0
    .venv/bin/python fuzz/fuzz_guard_state.py --case 17 --seed 0 -v   # one case, in detail

Exit status 1 when any case disagrees (``--allow`` to report only). A case is reproducible
from ``(seed, case)``: its random generator is ``random.Random(f"{seed}:{case}")``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tripwire._core as native
import tripwire.reference as reference
from _differential import VERDICT_FIELDS, safe_repr

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
# Numbers at the edges of what a snapshot can hold, and ordinary ones.
EDGES = (0, 1, 2, 3, 7, 12, 13, U32 - 1, U32, U32 + 1, (1 << 63) - 1, 1 << 63, U64 - 1, U64)

TOOLS: dict[str, Any] = {
    "get_logs": "read",
    "deploy": "write",
    "build": {"policy": "poll", "max_polls": 3},
    "status": "poll",
    "metrics": "volatile",
}
NAMES = ("get_logs", "deploy", "build", "status", "metrics", "Bash", "Edit", "search")
ARGS: tuple[Any, ...] = ({"a": 1}, {"a": 2}, {"b": "x"}, {}, [1, 2])
JSON_ARGS = ('{"a": 1}', '{"a":1}', "{bad", '{"a": 2}', "[]")
RESULTS: tuple[Any, ...] = (
    "ok",
    "ok",
    "changed",
    [],
    "",
    None,
    {"rows": 1},
    "Error: 503 Service Unavailable",
    "Error: not found",
    [{"type": "text", "text": "ok"}],
    {"type": "tool_result", "content": "x", "is_error": True},
)
ERRORS = (None, None, None, True, False, "boom", "timed out", TimeoutError("slow"))
CALL_IDS = (None, None, "c1", "c2", "c3")


class Disagreement(Exception):
    def __init__(self, where: str, native_side: Any, reference_side: Any) -> None:
        super().__init__(where)
        self.where = where
        self.native_side = native_side
        self.reference_side = reference_side


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:
        return (type(exc).__name__, None)


def fields(verdict: Any) -> tuple[Any, ...]:
    return tuple(getattr(verdict, name) for name in VERDICT_FIELDS)


def shown(guard: Any) -> tuple[Any, ...]:
    return (guard.steps, guard.stopped, len(guard), tuple(guard.keys()))


# -- crafted states ----------------------------------------------------------------------


def config(rng: random.Random) -> dict[str, Any]:
    window = rng.choice((2, 3, 5, 12))
    nudge_at = rng.randint(2, min(3, window))
    stop_at = rng.randint(nudge_at + 1, min(nudge_at + 2, window + 1))
    return {
        "window": window,
        "nudge_at": nudge_at,
        "stop_at": stop_at,
        "tools": TOOLS if rng.random() < 0.7 else None,
        "max_steps": rng.choice((None, None, 5, 40, U64 - 1)),
    }


def crafted(rng: random.Random, options: dict[str, Any], log: list[str]) -> bytes | None:
    """A snapshot the reference writes, of a state driven by calls and then edited at its
    edges; ``None`` where the reference's writer refuses the edit."""
    guard = reference.Guard(**options)
    lasts: list[Any] = [None]
    for _ in range(rng.randint(0, 14)):
        operate(rng, [guard], lasts, log=None)
    edits = rng.randint(1, 4)
    for _ in range(edits):
        edit = rng.choice(EDITS)
        log.append(f"edit {edit.__name__}")
        edit(rng, guard)
    try:
        data: bytes = guard.snapshot()
        return data
    except Exception as exc:
        log.append(f"the reference would not write it: {type(exc).__name__}: {exc}")
        return None


# Each edit keeps the state consistent (the reader's invariants, tripwire._snapshot) most of
# the time, so that both backends restore it and run on from an edge; the rest of the time it
# breaks one, and both must refuse it alike.
VALID = 0.85


def _highest_step(guard: Any) -> int:
    steps = [e.step for e in guard._window]
    steps += [r.verdict.step for r in guard._by_call_id.values()]
    if guard._stopped is not None:
        steps.append(guard._stopped.step)
    return max(steps, default=0)


def _steps(rng: random.Random, guard: Any) -> None:
    if rng.random() < VALID:
        low = _highest_step(guard)
        guard._steps = rng.choice([e for e in EDGES if e >= low] or [low])
    else:
        guard._steps = rng.choice(EDGES)


def _turn(rng: random.Random, guard: Any) -> None:
    low = max((e.turn for e in guard._window), default=0)
    choices = (U32 - 1, U32, 0, 5)
    if rng.random() < VALID:
        choices = tuple(t for t in choices if t >= low) or (low,)
    guard._turn = rng.choice(choices)


def _entry_steps(rng: random.Random, guard: Any) -> None:
    if rng.random() < VALID:
        # Increasing, ending at an edge; steps raised to the last.
        n = len(guard._window)
        top = rng.choice([e for e in EDGES if e >= n] or [U64])
        for offset, entry in enumerate(guard._window):
            entry.step = top - (n - 1 - offset)
        guard._steps = max(guard._steps, top)
        return
    for entry in guard._window:
        if rng.random() < 0.5:
            entry.step = rng.choice(EDGES)


def _entry_turns(rng: random.Random, guard: Any) -> None:
    if rng.random() < VALID:
        turns = sorted(rng.choice((0, guard._turn)) for _ in guard._window)
        for entry, turn in zip(guard._window, turns, strict=True):
            entry.turn = turn
        return
    for entry in guard._window:
        entry.turn = rng.choice((0, guard._turn, guard._turn + 1, U32))


def _retry_flags(rng: random.Random, guard: Any) -> None:
    valid = rng.random() < VALID
    for entry in guard._window:
        if entry.failed:
            entry.retry = rng.random() < 0.5
            if entry.retry:
                entry.question = None  # observe drops a retry's question
        elif not valid and (entry.result is None or rng.random() < 0.3):
            entry.retry = True


def _flags(rng: random.Random, guard: Any) -> None:
    for entry in guard._window:
        name = rng.choice(("nudged", "writes", "changes", "empty"))
        setattr(entry, name, not getattr(entry, name))


def _error_text(rng: random.Random, guard: Any) -> None:
    valid = rng.random() < VALID
    for entry in guard._window:
        if entry.nudged or rng.random() < 0.5:
            continue
        text = rng.choice(("", "Error: something else", "é\ud800", "timed out"))
        entry.failed, entry.empty, entry.error = True, False, text
        entry.result = native.call_key("error", text) if valid else entry.result or "0" * 16
        entry.retry = False
        entry.held, entry.args = False, None


def _polls(rng: random.Random, guard: Any) -> None:
    if rng.random() < 0.3:
        # Near the memory's bound, so that the next polls forget the oldest.
        for i in range(rng.choice((250, 255, 256))):
            guard._polls[native.call_key("status", {"filler": i})] = rng.choice((1, 2, U32))
    key = rng.choice([e.key for e in guard._window] or [native.call_key("build", {"a": 1})])
    values = (U32 - 1, U32, 2, 3, 4, 20, 21) + ((0,) if rng.random() > VALID else ())
    guard._polls[key] = rng.choice(values)
    guard._polls.move_to_end(key, last=rng.random() < 0.5)


def _retries(rng: random.Random, guard: Any) -> None:
    key = rng.choice([e.key for e in guard._window] or [native.call_key("get_logs", {"a": 1})])
    values = (1, 2, 3) + ((U32, 4, 0) if rng.random() > VALID else ())
    guard._retries[key] = rng.choice(values)


def _remembered(rng: random.Random, guard: Any) -> None:
    valid = rng.random() < VALID
    for remembered in list(guard._by_call_id.values()):
        if rng.random() < 0.5:
            remembered.answered = not remembered.answered
        if rng.random() < 0.5:
            edges = [e for e in EDGES if 1 <= e <= guard._steps] if valid else EDGES
            step = rng.choice(edges or [guard._steps or 1])
            remembered.verdict = remembered.verdict._replace()
            object.__setattr__(remembered.verdict, "step", step)


EDITS: tuple[Callable[[random.Random, Any], None], ...] = (
    _steps,
    _turn,
    _entry_steps,
    _entry_turns,
    _retry_flags,
    _flags,
    _error_text,
    _polls,
    _retries,
    _remembered,
)


# -- operations ---------------------------------------------------------------------------


def operate(
    rng: random.Random, guards: list[Any], lasts: list[Any], log: list[str] | None
) -> list[Any]:
    """One random operation on each guard (the same one); what each gave back. ``lasts``:
    each guard's last verdict (what observe and keep are told), updated."""
    kind = rng.choice(
        ("check", "check", "check", "json", "turn", "observe", "observe", "keep", "user")
        + ("reset",) * (rng.random() < 0.05)
        + ("roundtrip",)
    )
    name, args, call_id = rng.choice(NAMES), rng.choice(ARGS), rng.choice(CALL_IDS)
    result, error = rng.choice(RESULTS), rng.choice(ERRORS)
    transient = rng.choice((None, None, True, False))
    text = rng.choice(JSON_ARGS)
    turn = [(rng.choice(NAMES), rng.choice(ARGS + JSON_ARGS)) for _ in range(rng.randint(1, 3))]
    if log is not None:
        log.append(
            f"{kind} name={name} args={args!r} call_id={call_id} result={result!r} "
            f"error={error!r} transient={transient} text={text!r} turn={turn!r}"
        )
    out = []
    for index, guard in enumerate(guards):
        last = lasts[index]
        if kind == "check":
            got = outcome(guard.check, name, args, call_id=call_id)
        elif kind == "json":
            got = outcome(guard.check_json, name, text, call_id=call_id)
        elif kind == "turn":
            got = outcome(guard.check_turn, turn)
        elif kind == "observe":
            got = (
                ("skipped", None)
                if last is None
                else outcome(guard.observe, last, result, error=error, transient=transient)
            )
        elif kind == "keep":
            got = ("skipped", None) if last is None else outcome(guard.keep, last, result)
        elif kind == "user":
            got = outcome(guard.user_message)
        elif kind == "reset":
            got = outcome(guard.reset)
        else:
            got = outcome(lambda g=guard: type(g).from_snapshot(g.snapshot()).snapshot())
        value = got[1]
        if got[0] == "ok" and kind in ("check", "json"):
            lasts[index] = value
            got = ("ok", fields(value))
        elif got[0] == "ok" and kind == "turn":
            if value:
                lasts[index] = value[-1]
            got = ("ok", [fields(v) for v in value])
        out.append(got)
    return out


# -- one case -----------------------------------------------------------------------------


def run_case(seed: int, case: int, steps: int, log: list[str]) -> None:
    rng = random.Random(f"{seed}:{case}")
    options = config(rng)
    log.append(f"config {options}")
    data = crafted(rng, options, log)
    if data is None:
        return
    restored = [outcome(module.Guard.from_snapshot, data) for module in (native, reference)]
    if restored[0][0] != restored[1][0]:
        raise Disagreement("restore", restored[0][0], restored[1][0])
    if restored[0][0] != "ok":
        log.append(f"both refuse the crafted state: {restored[0][0]}")
        return
    guards = [restored[0][1], restored[1][1]]
    check_alike("after restore", guards)
    lasts: list[Any] = [None, None]
    for step in range(steps):
        got = operate(rng, guards, lasts, log)
        if got[0] != got[1]:
            raise Disagreement(f"operation {step}: {log[-1].split()[0]}", got[0], got[1])
        check_alike(f"after operation {step} ({log[-1].split()[0]})", guards)


def check_alike(where: str, guards: list[Any]) -> None:
    states = [outcome(shown, g) for g in guards]
    if states[0] != states[1]:
        raise Disagreement(f"{where}: state", states[0], states[1])
    snapshots = [outcome(g.snapshot) for g in guards]
    if snapshots[0][0] != snapshots[1][0]:
        raise Disagreement(f"{where}: snapshot raises", snapshots[0][0], snapshots[1][0])
    if snapshots[0][0] != "ok":
        return
    # Each backend restores what it wrote itself (and what the other wrote).
    for writer, (_, data) in zip(("native", "reference"), snapshots, strict=True):
        for module in (native, reference):
            again = outcome(module.Guard.from_snapshot, data)
            if again[0] != "ok":
                reader = module.__name__.removeprefix("tripwire.").replace("_core", "native")
                raise Disagreement(
                    f"{where}: {reader} refuses the snapshot {writer} wrote", again[0], "ok"
                )
    if snapshots[0][1] != snapshots[1][1]:
        raise Disagreement(f"{where}: snapshot bytes", len(snapshots[0][1]), len(snapshots[1][1]))


def signature(exc: Disagreement) -> str:
    """What kind of disagreement: where, without the case's step numbers."""
    where = exc.where
    if where.startswith("operation "):
        return f"{where.split(': ', 1)[1]}: outcome (verdict or exception)"
    if where.startswith("after operation "):
        kind = where[where.index("(") + 1 : where.index(")")]
        return f"after {kind}: {where.split(': ', 1)[1]}"
    return where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=25, help="operations a case")
    parser.add_argument("--case", type=int, help="run this one case only")
    parser.add_argument("--examples", type=int, default=3, help="examples shown per kind")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each case's log")
    parser.add_argument("--allow", action="store_true", help="exit 0 even on disagreements")
    options = parser.parse_args()
    cases = [options.case] if options.case is not None else range(options.cases)
    kinds: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    refused = written = 0
    for case in cases:
        log: list[str] = []
        try:
            run_case(options.seed, case, options.steps, log)
        except Disagreement as exc:
            kind = signature(exc)
            kinds[kind] += 1
            shown_log = "\n      ".join(log[-6:])
            text = (
                f"case {case}: {exc.where}\n"
                f"    native:    {safe_repr(exc.native_side)}\n"
                f"    reference: {safe_repr(exc.reference_side)}\n"
                f"    last steps:\n      {shown_log}"
            )
            if len(examples.setdefault(kind, [])) < options.examples:
                examples[kind].append(text)
        refused += any("both refuse" in line for line in log)
        written += any("would not write" in line for line in log)
        if options.verbose:
            print(f"-- case {case}", *log, sep="\n  ")
    total = len(cases)
    bad = sum(kinds.values())
    print(
        f"{total} cases (seed {options.seed}, {options.steps} operations each): "
        f"{bad} disagree; {refused} crafted states refused by both backends, "
        f"{written} not written by the reference"
    )
    for kind, count in kinds.most_common():
        print(f"\n{count:5d}  {kind}")
        for example in examples[kind]:
            print("  " + example.replace("\n", "\n  "))
    return 1 if bad and not options.allow else 0


if __name__ == "__main__":
    sys.exit(main())
