"""Fixtures of the solver tests: every solver test runs on every installed backend."""

from __future__ import annotations

import importlib.util

import pytest

# Backend name -> the module it needs.
SOLVER_BACKENDS = {"scip": "pyscipopt", "cpsat": "ortools"}


def installed_backends() -> list[str]:
    return [name for name, module in SOLVER_BACKENDS.items() if importlib.util.find_spec(module)]


@pytest.fixture(params=sorted(SOLVER_BACKENDS))
def solver(request: pytest.FixtureRequest) -> str:
    """A MIP backend name; the test is skipped where that backend is not installed."""
    name = request.param
    if importlib.util.find_spec(SOLVER_BACKENDS[name]) is None:
        pytest.skip(f"{name} needs {SOLVER_BACKENDS[name]}, which is not installed")
    return name
