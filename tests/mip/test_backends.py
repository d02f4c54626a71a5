"""Installed backends, ``backend="auto"``, and the error for a solver whose extra is missing
(simulated by blocking its module in ``sys.modules``)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from llmsched import Workload
from llmsched.core.cost import LevelCostModel
from llmsched.mip import Status, solve_full, solve_pcmax
from llmsched.mip.backends import (
    MissingSolverError,
    auto_backend,
    installed,
    installed_backends,
    load,
    require,
)

COST = LevelCostModel([(256, 0.03), (512, 0.05), (1024, 0.09)], 0.01)
WORKLOAD = Workload(prompt_tokens=[50, 60, 70], output_tokens=[3, 9, 4])
MODULES = {"scip": "pyscipopt", "cpsat": "ortools"}


@pytest.mark.parametrize("backend", sorted(MODULES))
def test_a_missing_extra_names_the_pip_command(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its package, scip or cpsat raises a ModuleNotFoundError that says which package
    is missing and how to install it, from solve_full and solve_pcmax alike, before any work."""
    monkeypatch.setitem(sys.modules, MODULES[backend], None)
    assert not installed(backend) and backend not in installed_backends()
    for call in (
        lambda: solve_full(WORKLOAD, COST, 2, time_limit=10, backend=backend),
        lambda: solve_pcmax(np.array([4, 3, 3, 2]), 2, time_limit=10, backend=backend),
        lambda: require(backend),
        lambda: load(backend),
    ):
        with pytest.raises(MissingSolverError) as caught:
            call()
        error = caught.value
        assert isinstance(error, ModuleNotFoundError) and isinstance(error, ImportError)
        assert error.name == MODULES[backend] and error.backend == backend
        message = str(error)
        assert "pip install 'llmsched[solvers]'" in message and MODULES[backend] in message
        assert "\n" not in message  # a command line prints it on one line


def test_auto_is_highs_without_scip(monkeypatch: pytest.MonkeyPatch) -> None:
    """backend='auto' (solve_full's default) solves with HiGHS when PySCIPOpt is missing, and
    the result says so."""
    monkeypatch.setitem(sys.modules, "pyscipopt", None)
    assert auto_backend() == "highs"
    result = solve_full(WORKLOAD, COST, 2, time_limit=30, formulation="literal")
    assert result.backend == "highs" and result.status is Status.OPTIMAL


def test_auto_is_scip_where_it_is_installed() -> None:
    """With the solvers extra, 'auto' keeps SCIP (the backend of the README's figures)."""
    if not installed("scip"):
        pytest.skip("PySCIPOpt is not installed")
    assert auto_backend() == "scip"
    assert solve_full(WORKLOAD, COST, 2, time_limit=30, formulation="literal").backend == "scip"


def test_highs_is_always_installed() -> None:
    """scipy is a core dependency: HiGHS is there whatever extras are, and it loads."""
    assert "highs" in installed_backends()
    require("highs")
    load("highs")
    assert "scipy.optimize" in sys.modules


def test_unknown_backends_are_refused_with_the_choices() -> None:
    """An unknown backend is a ValueError listing auto and every backend."""
    with pytest.raises(
        ValueError, match=r"unknown backend 'gurobi'; choose one of \['auto', 'scip', 'cpsat', 'highs'\]"
    ):
        solve_full(WORKLOAD, COST, 2, backend="gurobi")
    with pytest.raises(ValueError, match="unknown backend 'gurobi'"):
        solve_pcmax(np.array([4, 3]), 2, backend="gurobi")
