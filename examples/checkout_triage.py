"""The seed's stuck triage run, put through the guard.

An on-call agent with a 40-step budget asks the log service for checkout errors; the service
has silently stopped returning them, so every answer is `[]`, and the model keeps asking the
same question in slightly different spellings. Without a guard the run spends all 40 steps.
With one, it is nudged on the first repeat and stopped on the second, naming the tool. (This
example checks the calls only. A harness that also tells the guard what each call returned,
with ``observe``, as ``tripwire replay`` does, runs the call after the nudge and stops the
one after that: a stop rests on a result seen after the nudge.)

Run: python examples/checkout_triage.py
"""

from __future__ import annotations

import tripwire

SPELLINGS = [
    {"service": "checkout", "since": "15m", "level": "error"},
    {"service": "checkout", "level": "error", "since": "15m"},
    {"since": "15m", "service": "checkout", "level": "error"},
    {"service": "checkout ", "since": "15m", "level": "error", "request_id": "r-7"},
]

CALLS = [
    ("get_deploys", {"service": "checkout", "since": "6h"}),
    ("get_metrics", {"service": "checkout", "metric": "p99_latency", "since": "6h"}),
    ("get_config_changes", {"namespace": "checkout", "since": "6h"}),
] + [("get_logs", SPELLINGS[i % len(SPELLINGS)]) for i in range(37)]


def main() -> int:
    guard = tripwire.Guard(max_steps=40, tools={"get_logs": "read"})
    print(f"tripwire {tripwire.__version__} ({tripwire.IMPLEMENTATION} core)")
    print(f"{'step':>4}  {'tool':<20} {'key':<16}  verdict")
    for name, args in CALLS:
        verdict = guard.check(name, args)
        print(f"{verdict.step:>4}  {name:<20} {verdict.key}  {verdict.action}")
        if verdict.action == "nudge":
            print(f"      -> tool result for the model: {verdict.message}")
        if verdict.action == "stop":
            print(f"      -> run ends: {verdict.reason} ({verdict.message})")
            break
    saved = len(CALLS) - guard.steps
    print(f"\nStopped at step {guard.steps} of {len(CALLS)}: {saved} tool calls never made.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
