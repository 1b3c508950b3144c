"""Reads a valgrind (memcheck) log and reports what is attributable to the native core.

    PYTHONMALLOC=malloc valgrind --leak-check=full --error-exitcode=1 \\
        --log-file=valgrind.log .venv/bin/python benches/valgrind_workload.py
    .venv/bin/python benches/valgrind_summary.py valgrind.log

CPython reports errors of its own under valgrind (uninitialised values in ``int.from_bytes``
and the eval loop, memory still reachable or "possibly lost" at exit), so valgrind's exit
status alone says little. This prints every error and leak record by kind, split into those
with a frame in ``_core.cpython-*.so`` and the rest, and exits 1 if any error, or any
"definitely lost" record, has such a frame.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

CORE = "_core.cpython-"


def records(log: str) -> list[list[str]]:
    """The log's blocks (an error or a leak record each), as lists of lines without the
    ``==pid==`` prefix."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for raw in log.splitlines():
        line = re.sub(r"^==\d+==\s?", "", raw)
        if not line.strip():
            if current:
                blocks.append(current)
            current = []
        else:
            current.append(line)
    if current:
        blocks.append(current)
    return blocks


def kind_of(block: list[str]) -> str | None:
    head = block[0]
    if re.search(r"are definitely lost in loss record", head):
        return "definitely lost"
    if re.search(r"are possibly lost in loss record", head):
        return "possibly lost"
    if re.search(r"are (indirectly lost|still reachable) in loss record", head):
        return "indirectly lost / reachable"
    if len(block) > 1 and block[1].lstrip().startswith("at 0x"):
        return head.split(" of size")[0].strip()
    return None


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "valgrind.log"
    with open(path) as f:
        log = f.read()
    in_core: Counter[str] = Counter()
    elsewhere: Counter[str] = Counter()
    shown: list[list[str]] = []
    for block in records(log):
        kind = kind_of(block)
        if kind is None:
            continue
        if any(CORE in line for line in block):
            in_core[kind] += 1
            if kind not in ("possibly lost", "indirectly lost / reachable"):
                shown.append(block)
        else:
            elsewhere[kind] += 1
    summary = [line for line in records(log) if line and line[0].startswith("LEAK SUMMARY")]
    print(f"valgrind log: {path}")
    for lines in summary:
        print("\n".join("  " + line for line in lines))
    errors = [line for line in log.splitlines() if "ERROR SUMMARY" in line]
    if errors:
        print("  " + re.sub(r"^==\d+==\s?", "", errors[-1]))
    print("\nrecords with a frame in _core:")
    for kind, count in sorted(in_core.items()) or [("none", 0)]:
        print(f"  {kind}: {count}")
    print("records without one (CPython, libc, the dynamic loader):")
    for kind, count in sorted(elsewhere.items()):
        print(f"  {kind}: {count}")
    for block in shown:
        print("\n" + "\n".join(block[:25]))
    bad = sum(
        count
        for kind, count in in_core.items()
        if kind not in ("possibly lost", "indirectly lost / reachable")
    )
    print(f"\n{'FAIL' if bad else 'OK'}: {bad} error(s) or definite leak(s) attributable to _core")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
