"""Fixtures of the solver tests: every solver test runs on every installed backend."""

from __future__ import annotations

import pytest

from llmsched.mip.backends import SOLVER_MODULES, installed, installed_backends

__all__ = ["SOLVER_MODULES", "installed_backends"]


@pytest.fixture(params=sorted(SOLVER_MODULES))
def solver(request: pytest.FixtureRequest) -> str:
    """A MIP backend name (``cpsat``, ``highs``, ``scip``); the test is skipped where that
    backend is not installed (``highs`` always is: scipy is a core dependency)."""
    name = request.param
    if not installed(name):
        pytest.skip(f"{name} needs {SOLVER_MODULES[name]}, which is not installed")
    return name
