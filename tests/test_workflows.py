"""The GitHub workflows' job graph (``.github/workflows``), which cannot run here: what a pull
request is tested on, and that a release publishes nothing before every wheel passed its
tests on its own platform. ``.ci/run`` lints the same files with actionlint where it can be
installed; this checks what actionlint cannot know (which jobs must come before which)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def triggers(data: dict[str, Any]) -> dict[str, Any]:
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean true.
    found = data.get("on", data.get(True))
    assert isinstance(found, dict)
    return found


def needs(job: dict[str, Any]) -> set[str]:
    value = job.get("needs", [])
    return {value} if isinstance(value, str) else set(value)


def upstream(jobs: dict[str, Any], name: str) -> set[str]:
    """Every job that must finish before ``name`` starts."""
    seen: set[str] = set()
    todo = list(needs(jobs[name]))
    while todo:
        job = todo.pop()
        if job not in seen:
            seen.add(job)
            todo += needs(jobs[job])
    return seen


def test_pull_requests_and_main_are_tested_on_linux_and_macos() -> None:
    ci = workflow("ci.yml")
    on = triggers(ci)
    assert "pull_request" in on
    assert on["push"]["branches"] == ["main"]
    matrix = ci["jobs"]["tests"]["strategy"]["matrix"]
    assert any(os_.startswith("ubuntu") for os_ in matrix["os"])
    assert any(os_.startswith("macos") for os_ in matrix["os"])
    runs = " ".join(step.get("run", "") for step in ci["jobs"]["tests"]["steps"])
    assert "pytest" in runs and "cargo test" in runs


def test_the_msrv_job_builds_with_the_version_cargo_toml_declares(tmp_path: Path) -> None:
    """The job reads ``rust-version`` from Cargo.toml itself (one source), and its reading
    gives the version tomllib reads, when its script is run here on the real file."""
    declared = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["rust-version"]
    job = workflow("ci.yml")["jobs"]["msrv"]
    [reader] = [step for step in job["steps"] if step.get("id") == "msrv"]
    output = tmp_path / "github_output"
    subprocess.run(
        ["bash", "-e", "-c", reader["run"]],
        cwd=ROOT,
        env={**os.environ, "GITHUB_OUTPUT": str(output)},
        check=True,
    )
    assert output.read_text() == f"version={declared}\n"
    [toolchain] = [s for s in job["steps"] if "rust-toolchain" in s.get("uses", "")]
    assert toolchain["with"]["toolchain"] == "${{ steps.msrv.outputs.version }}"
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert "cargo build --locked" in runs and "cargo test --locked" in runs


def test_a_free_threaded_cpython_builds_and_imports_the_extension() -> None:
    job = workflow("ci.yml")["jobs"]["free-threaded"]
    versions = job["strategy"]["matrix"]["python"]
    assert versions and all(version.endswith("t") for version in versions)
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert re.search(r"maturin\"? build", runs) and "import tripwire" in runs
    # What the module declares (rust/lib.rs) is what the job checks after the import.
    declared = re.search(
        r"#\[pymodule\(gil_used = (true|false)\)\]", (ROOT / "rust/lib.rs").read_text()
    )
    assert declared is not None
    assert ("assert sys._is_gil_enabled()" in runs) == (declared.group(1) == "true")


def test_named_test_files_exist() -> None:
    """Test files the workflows name by path (a rename must not turn a job into a no-op)."""
    for name in ("ci.yml", "release.yml"):
        text = (WORKFLOWS / name).read_text()
        for path in re.findall(r"tests/test_\w+\.py", text):
            assert (ROOT / path).is_file(), f"{name} names {path}"


def test_a_release_publishes_nothing_before_every_wheel_is_tested() -> None:
    release = workflow("release.yml")
    jobs = release["jobs"]
    builds = {
        name for name, job in jobs.items()
        if any("maturin-action" in step.get("uses", "") for step in job["steps"])
        and name != "sdist"
    }  # fmt: skip
    assert builds == {"linux", "windows", "macos"}
    # Every job with a publishing step waits for the wheel tests (and every build).
    publishers = [
        name for name, job in jobs.items()
        if any("publish" in step.get("run", "") for step in job["steps"])
    ]  # fmt: skip
    assert publishers == ["release"]
    for name in publishers:
        assert {"test-wheels", *builds, "sdist"} <= upstream(jobs, name)
    tests = jobs["test-wheels"]
    assert needs(tests) == builds


def test_every_wheel_built_is_tested_on_its_platform() -> None:
    """The wheel tests' matrix covers each wheels artifact the builds upload, on a runner of
    the build's own platform, with each CPython the builds name."""
    jobs = workflow("release.yml")["jobs"]
    matrix = jobs["test-wheels"]["strategy"]["matrix"]
    tested = {entry["wheels"]: entry["runner"] for entry in matrix["platform"]}
    built: dict[str, str] = {}
    for name in ("linux", "windows", "macos"):
        job = jobs[name]
        platforms = job.get("strategy", {}).get("matrix", {}).get("platform", [{}])
        for platform in platforms:
            [upload] = [s for s in job["steps"] if "upload-artifact" in s.get("uses", "")]
            artifact = upload["with"]["name"].replace(
                "${{ matrix.platform.target }}", platform.get("target", "")
            )
            runner = job["runs-on"].replace(
                "${{ matrix.platform.runner }}", platform.get("runner", "")
            )
            built[artifact] = runner
    assert tested == built
    linux = next(s for s in jobs["linux"]["steps"] if "maturin-action" in s.get("uses", ""))
    interpreters = re.findall(r"python(3\.\d+)", linux["with"]["args"])
    assert sorted(matrix["python"]) == sorted(interpreters)
    steps = jobs["test-wheels"]["steps"]
    install = next(
        s for s in steps if "pip install" in s.get("run", "") and "--no-index" in s["run"]
    )
    assert "--find-links wheels" in install["run"]
    assert any("pytest" in s.get("run", "") for s in steps)
    assert any("IMPLEMENTATION == 'native'" in s.get("run", "") for s in steps)
