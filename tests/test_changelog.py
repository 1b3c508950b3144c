"""The licence and the changelog: present, agreeing with the version, and shipped.

The version is declared once, in ``Cargo.toml``; the changelog's newest version must be that
one, so a release that forgets its changelog entry fails here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\S+))?$", re.MULTILINE)


def _cargo_version() -> str:
    with (ROOT / "Cargo.toml").open("rb") as file:
        return str(tomllib.load(file)["package"]["version"])


def _changelog_versions() -> list[tuple[str, str | None]]:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return [(m["version"], m["date"]) for m in VERSION_HEADING.finditer(text)]


def test_newest_changelog_version_is_cargos() -> None:
    released = [(v, d) for v, d in _changelog_versions() if v != "Unreleased"]
    assert released, "CHANGELOG.md names no version"
    version, date = released[0]
    assert version == _cargo_version(), (
        f"CHANGELOG.md's newest version is {version}, Cargo.toml says {_cargo_version()}"
    )
    assert date is not None and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), (
        f"version {version} has no ISO date in CHANGELOG.md"
    )


def test_changelog_keeps_a_changelog_form() -> None:
    versions = _changelog_versions()
    names = [v for v, _ in versions]
    # Unreleased, if present, comes first; no version twice; newest first.
    assert "Unreleased" not in names[1:]
    assert len(set(names)) == len(names)
    released = [tuple(int(p) for p in v.split(".")) for v in names if v != "Unreleased"]
    assert released == sorted(released, reverse=True)
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    kinds = set(re.findall(r"^### (\w+)$", text, re.MULTILINE))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds


def test_licence_is_mit_as_declared() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    with (ROOT / "Cargo.toml").open("rb") as file:
        cargo = tomllib.load(file)["package"]
    assert project["license"] == cargo["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) 2026 \S", text, re.MULTILINE)


def test_sdist_ships_licence_and_changelog(tmp_path: Path) -> None:
    beside = Path(sys.executable).with_name("maturin")  # the venv's, activated or not
    maturin = str(beside) if beside.exists() else shutil.which("maturin")
    if maturin is None:
        pytest.skip("maturin is not installed here (.ci/run installs it)")
    subprocess.run(
        [maturin, "sdist", "--out", str(tmp_path)], cwd=ROOT, check=True, capture_output=True
    )
    (sdist,) = tmp_path.glob("tripwire-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        info = archive.extractfile(f"tripwire-{_cargo_version()}/PKG-INFO")
        assert info is not None
        pkg_info = info.read().decode()
    assert {"LICENSE", "CHANGELOG.md"} <= names
    assert "License-File: LICENSE" in pkg_info
    assert "License-Expression: MIT" in pkg_info
