"""The README is part of the contract: its examples run here, and its test command is the
one CI runs (``.ci/run``), read from both files and compared, not merely mentioned. The
documentation's examples run in ``test_docs.py``."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
PYPROJECT = ROOT / "pyproject.toml"


def _blocks(language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def test_readme_example_runs() -> None:
    blocks = _blocks("python")
    assert blocks, "the README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


# -- the test command ---------------------------------------------------------------------


def _steps(command: str) -> list[list[str]]:
    """A shell line as its ``&&``-joined commands, each split as the shell splits it."""
    steps: list[list[str]] = [[]]
    for word in shlex.split(command, comments=True):
        if word == "&&":
            steps.append([])
        else:
            steps[-1].append(word)
    return [step for step in steps if step]


def _install_and_test(steps: list[list[str]]) -> tuple[str, set[str], list[str]]:
    """From ``... pip install [-q] TARGET[EXTRAS] && pytest ARGS``: the target, its extras and
    pytest's arguments. The install must come right before pytest."""
    tests = [i for i, step in enumerate(steps) if step[0] == "pytest"]
    assert len(tests) == 1, f"expected one pytest command in {steps}"
    index = tests[0]
    assert index >= 1, "pytest must follow the install"
    install = steps[index - 1]
    assert install[:2] == ["pip", "install"], f"pytest must follow pip install, not {install}"
    options = [w for w in install[2:] if w.startswith("-")]
    assert set(options) <= {"-q", "--quiet"}, f"options that change what is installed: {options}"
    (requirement,) = [w for w in install[2:] if not w.startswith("-")]
    match = re.fullmatch(r"(?P<target>.+?)\[(?P<extras>[^\]]+)\]", requirement)
    assert match, f"no extras in {requirement!r}"
    extras = {e.strip() for e in match["extras"].split(",")}
    return match["target"], extras, steps[index][1:]


def _readme_test_command() -> str:
    commands = [b.strip() for b in _blocks("sh") if re.search(r"(^|&& )pytest\b", b)]
    assert len(commands) == 1, f"expected one test command in the README, found {commands}"
    return commands[0]


def _ci_test_command() -> str:
    lines = [
        line
        for line in CI.read_text(encoding="utf-8").splitlines()
        if re.search(r"&& pytest\b", line) and not line.lstrip().startswith("#")
    ]
    assert len(lines) == 1, f"expected one 'pip install ... && pytest' line in .ci/run: {lines}"
    # At the top level of the script (not indented into an `if` or a function that may not
    # run), where `set -euo pipefail` makes its failure CI's.
    assert lines[0] == lines[0].lstrip(), f"the test command is nested in .ci/run: {lines[0]!r}"
    return lines[0].strip()


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = _install_and_test(_steps(_readme_test_command()))
    ci = _install_and_test(_steps(_ci_test_command()))
    # The same extras and the same pytest invocation; the README installs the checkout,
    # CI the wheel it built from the checkout's sdist.
    assert (readme[1], readme[2]) == (ci[1], ci[2]), f"README {readme} vs .ci/run {ci}"
    assert readme[0] == "."
    assert ci[0] == "$wheel"
    ci_text = CI.read_text(encoding="utf-8")
    assert ci_text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in ci_text


def _extra_requirements(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The distributions an extra of this project brings, its own extras followed."""
    with PYPROJECT.open("rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    names: set[str] = set()
    for requirement in extras[extra]:
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement)
        assert name is not None
        inner = re.fullmatch(r"tripwire\[(.+)\]", requirement.strip())
        if inner:
            for sub in inner[1].split(","):
                if sub not in seen:
                    names |= _extra_requirements(sub.strip(), seen | {extra})
        else:
            names.add(_normal(name[0]))
    return names


def _skipped_modules() -> set[str]:
    """Top-level modules the tests skip without (``pytest.importorskip``)."""
    found: set[str] = set()
    for path in (ROOT / "tests").glob("*.py"):
        for module in re.findall(r'importorskip\("([\w.]+)"\)', path.read_text(encoding="utf-8")):
            found.add(module.split(".")[0])
    return found


@pytest.mark.parametrize("module", sorted(_skipped_modules()))
def test_test_extra_brings_what_the_tests_skip_without(module: str) -> None:
    """``.[test]`` must bring every module a test would skip without, or the README's
    command skips tests CI runs. A module's distribution is read from the installed
    metadata (``agents`` is ``openai-agents``)."""
    if module == "tripwire":
        return
    distributions = importlib.metadata.packages_distributions().get(module)
    if not distributions:
        pytest.skip(f"{module} is not installed here, so its distribution is unknown")
    wanted = {_normal(d) for d in distributions}
    assert wanted & _installed_closure(_extra_requirements("test")), (
        f"{module} ({', '.join(sorted(wanted))}) is not brought by the test extra"
    )


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_closure(names: set[str]) -> set[str]:
    """The distributions named and, as installed here, everything they require (markers
    that name an extra left out): what installing them brings."""
    closure: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" in requirement.partition(";")[2]:
                continue
            found = re.match(r"[A-Za-z0-9_.\-]+", requirement)
            if found:
                todo.append(_normal(found[0]))
    return closure


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "replay.md"])
def test_directory_search_lists_every_suffix(page: Path) -> None:
    """Where a page says what a directory search reads, it lists what it does read (the
    README once left out ``.traj``)."""
    from tripwire.replay.formats import trace_suffixes

    text = " ".join(page.read_text(encoding="utf-8").split())
    said = re.search(r"searched for (.*?) or `-` for stdin", text)
    assert said, f"{page.name} no longer says what a directory search reads"
    listed = re.findall(r"`\*(\.\w+)`", said[1])
    assert sorted(listed) == sorted(trace_suffixes())
    assert ".gz" in said[1]
