"""The native core's dependency on the Python package is one module, ``tripwire._for_native``:
every name it exports resolves, the Rust sources resolve exactly those (in
``rust/py_reference.rs``), and no other Rust file looks a Python name up. A rename on either
side fails here, not in a user's run when a cold path first needs the name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tripwire._for_native as for_native
from tripwire._policy import ToolPolicy
from tripwire._snapshot import Config

RUST = Path(__file__).resolve().parent.parent / "rust"
RESOLVER = RUST / "py_reference.rs"

# Attributes the native core reads of the objects it is handed (the shape of what it is
# given, not names it looks up): a tool policy's settings, a snapshot configuration's
# fields (read through a ``get`` closure in py_snapshot.rs), the methods of an exception
# (``add_note``) and of a number (``__format__``, for messages), and its own classes'.
POLICY_FIELDS = frozenset(
    {
        "kind",
        "max_polls",
        "whitespace",
        "source",
        "empty_answers",
        "empty_digests",
        "volatile_result_keys",
    }
)
# The native module's own classes' attributes (a Verdict's ``message`` is built on reading).
OWN_NAMES = frozenset({"_from_reduced", "from_snapshot", "message"})
# Protocol methods of objects a caller hands in: exceptions, formatting, and the Arrow
# PyCapsule interface of a table of calls (pyarrow, polars, DuckDB).
OBJECT_METHODS = frozenset({"add_note", "__format__", "__arrow_c_stream__", "__arrow_c_array__"})


def _rust_sources() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(RUST.glob("*.rs"))}


def _resolved_by_rust() -> list[str]:
    """The names listed in the ``reference!`` invocation of py_reference.rs."""
    source = RESOLVER.read_text(encoding="utf-8")
    listed = re.search(r"^reference!\(\n(.*?)^\);", source, re.MULTILINE | re.DOTALL)
    assert listed is not None, "py_reference.rs no longer lists its names in reference!(...)"
    body = re.sub(r"//[^\n]*", "", listed.group(1))
    return [name for name in re.split(r"[\s,]+", body) if name]


def test_every_exported_name_resolves() -> None:
    for name in for_native.__all__:
        assert getattr(for_native, name, None) is not None, name
    assert len(set(for_native.__all__)) == len(for_native.__all__)


def test_rust_resolves_exactly_the_exported_names() -> None:
    resolved = _resolved_by_rust()
    assert len(set(resolved)) == len(resolved), "a name listed twice"
    assert set(resolved) == set(for_native.__all__)


def test_rust_imports_one_python_module() -> None:
    imports = {
        (file, match.group(0))
        for file, source in _rust_sources().items()
        for match in re.finditer(r"\bimport(?:_bound)?\s*\(", source)
    }
    assert imports == {("py_reference.rs", "import(")}, imports
    assert 'const MODULE: &str = "tripwire._for_native";' in RESOLVER.read_text(encoding="utf-8")


def test_rust_looks_up_no_other_python_name() -> None:
    """Outside py_reference.rs, a Rust file reads only attributes of objects it was handed."""
    allowed = POLICY_FIELDS | OWN_NAMES | OBJECT_METHODS | set(Config.__slots__)
    read: dict[str, set[str]] = {}
    for file, source in _rust_sources().items():
        if file == RESOLVER.name:
            continue
        for pattern in (
            r'getattr\("([^"]*)"\)',
            r'call_method[01]?\("([^"]*)"',
            r'intern!\(py, "([^"]*)"\)\.as_any\(\);\s*\n\s*let \w+ = reference',
            r'\bget\("([^"]*)"\)',
        ):
            for match in re.finditer(pattern, source):
                read.setdefault(match.group(1), set()).add(file)
        # A getattr of anything but a literal is a lookup this test cannot read: only the
        # configuration reader's ``get`` closure may do it.
        for match in re.finditer(r"getattr\(([^\")][^)]*)\)", source):
            assert (file, match.group(1)) == ("py_snapshot.rs", "name"), (file, match.group(0))
    unexpected = {name: files for name, files in read.items() if name not in allowed}
    assert not unexpected, unexpected
    # The allowed names are real: a policy's settings and a configuration's fields.
    policy = ToolPolicy("read")
    for name in POLICY_FIELDS:
        assert hasattr(policy, name), name


def test_the_native_core_resolves_the_names_at_import() -> None:
    """A name missing from ``tripwire._for_native`` fails ``import tripwire._core`` itself."""
    pytest.importorskip("tripwire._core")
    code = (
        "import tripwire._for_native as f\n"
        "del f.verdict_message\n"
        "try:\n"
        "    import tripwire._core\n"
        "except AttributeError as exc:\n"
        "    print('refused:', exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    # The reference backend, so that importing the package does not import _core first.
    env = {**os.environ, "TRIPWIRE_IMPLEMENTATION": "reference"}
    child = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("refused:"), child.stdout
    assert "verdict_message" in child.stdout
