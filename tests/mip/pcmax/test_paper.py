"""pcmax_paper: the paper's model (Eqs. 26-30) as written, on every installed backend."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched.mip import Status, solve_pcmax
from tests.mip.pcmax.oracles import brute_force


def test_paper_model_reaches_the_pipelines_optimum(solver: str) -> None:
    """The paper's Eqs. 26-30 reach the pipeline's optimum on a small instance, traced."""
    times = np.array([9, 8, 7, 6, 5, 5, 4, 3, 2])
    ours = solve_pcmax(times, 3)
    theirs = solve_pcmax(times, 3, time_limit=30, backend=solver)
    assert theirs.status is Status.OPTIMAL and ours.status is Status.OPTIMAL
    assert theirs.makespan == ours.makespan == theirs.lower_bound == 17
    assert theirs.trace and theirs.backend == solver and theirs.closed_by == solver
    loads = np.bincount(theirs.assignment, weights=times, minlength=3)
    assert loads.max() == 17


def test_paper_model_without_a_time_limit(solver: str) -> None:
    """time_limit=math.inf is accepted by every backend (SCIP has no infinite limit of its own)."""
    times = np.array([4, 4, 3, 3, 2])
    result = solve_pcmax(times, 2, time_limit=math.inf, backend=solver)
    assert result.status is Status.OPTIMAL and result.makespan == 8


def test_paper_model_with_speeds(solver: str) -> None:
    """Uniform machines in the paper's model: loads over speeds, the optimum of Q||Cmax."""
    times, speeds = np.array([6, 4, 3, 3, 2]), np.array([1, 3])
    result = solve_pcmax(times, 2, time_limit=30, backend=solver, speeds=speeds)
    assert result.status is Status.OPTIMAL
    assert result.makespan == pytest.approx(brute_force(times, 2, speeds)) == pytest.approx(14 / 3)


def test_paper_model_on_more_machines_than_jobs(solver: str) -> None:
    """Machines beyond the jobs are left out of the model: one job per machine is optimal."""
    result = solve_pcmax(np.array([7, 2, 5]), 10**6, time_limit=30, backend=solver)
    assert result.status is Status.OPTIMAL and result.makespan == 7
    assert result.assignment.max() < 3
