"""Notes on fuzzing with coverage feedback from the native core too (see README.md, "With
native coverage"). Not a target: it checks that the instrumented build is the one loaded.

    PYTHONPATH=<dir with the instrumented tripwire> LD_PRELOAD=<atheris core_with_libfuzzer>
        .venv/bin/python fuzz/native_coverage.py
"""

from __future__ import annotations

import subprocess
import sys

import tripwire._core

symbols = subprocess.run(
    ["nm", "-D", "--undefined-only", tripwire._core.__file__], capture_output=True, text=True
).stdout
instrumented = "__sanitizer_cov_8bit_counters_init" in symbols
print(f"{tripwire._core.__file__}: {'instrumented' if instrumented else 'NOT instrumented'}")
sys.exit(0 if instrumented else 1)
