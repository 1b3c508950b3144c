"""Shared fixtures: every behaviour test runs on both backends through ``impl``.

Hypothesis profiles are chosen by ``HYPOTHESIS_PROFILE``: ``default`` (quick, local),
``ci`` (a few more examples, failures printed as reproducible blobs) and ``thorough``.
"""

from __future__ import annotations

import os
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import tripwire
import tripwire.reference
from _guards import BACKENDS
from hypothesis import settings

# No deadline: the first call into a backend imports helpers, and 4300-digit integers are
# slow to print; neither is what these tests measure (benches/ does that).
settings.register_profile("default", max_examples=200, deadline=None)
# CI is derandomized so that a landing never depends on luck; `thorough` explores.
settings.register_profile("ci", max_examples=300, deadline=None, derandomize=True, print_blob=True)
settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

_KEY_API = ("call_key", "canonical_json", "normalise", "DEFAULT_VOLATILE_KEYS")


def _native_api() -> SimpleNamespace | None:
    """The native backend's key API, whatever ``TRIPWIRE_IMPLEMENTATION`` says; ``None``
    where the extension is not built. Names ``_core`` does not define (``normalise`` and
    the default set are Python's in both backends) come from ``tripwire``."""
    try:
        import tripwire._core as core
    except ImportError:
        return None
    api = {name: getattr(core, name, getattr(tripwire, name)) for name in _KEY_API}
    return SimpleNamespace(IMPLEMENTATION="native", **api)


_NATIVE = _native_api()
_NO_NATIVE = "tripwire._core is not built (run `maturin develop`); testing the reference only"


@pytest.fixture(scope="session")
def native() -> SimpleNamespace:
    if _NATIVE is None:
        pytest.skip(_NO_NATIVE)
    return _NATIVE


@pytest.fixture(scope="session")
def reference() -> ModuleType:
    return tripwire.reference


# Session scope: hypothesis refuses function-scoped fixtures in @given tests, and neither
# backend has state the tests could leak into each other.
@pytest.fixture(scope="session", params=["native", "reference"])
def impl(request: pytest.FixtureRequest) -> Any:
    """The key API of one backend: ``tripwire._core`` (id ``native``) or
    ``tripwire.reference`` (id ``reference``)."""
    if request.param == "native":
        if _NATIVE is None:
            pytest.skip(_NO_NATIVE)
        return _NATIVE
    return tripwire.reference


@pytest.fixture(params=BACKENDS)
def tw(request: pytest.FixtureRequest) -> ModuleType:
    """One backend module, for the guard's tests: ``tripwire._core`` (id ``native``) or
    ``tripwire.reference`` (id ``reference``)."""
    module: ModuleType = request.param
    return module
