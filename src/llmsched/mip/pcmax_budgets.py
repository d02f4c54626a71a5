"""Deterministic work budgets of the P||Cmax pipeline, at effort 1.

Each is multiplied by ``solve_pcmax(effort=...)``. They live apart from the pipeline so that
its exact step (:mod:`llmsched.mip.pcmax_exact`) reads them without importing the pipeline
back.
"""

from __future__ import annotations

# Deterministic budgets at effort 1 (each multiplied by ``effort``). Search work is counted
# in the units of :mod:`llmsched.mip.pcmax_search` (about a microsecond each on one core
# of a 2-core machine), so 1,000,000 units are about a second there.
SEARCH_WORK = 2_000_000  # one bisection of the gap by bin-completion search
EXACT_SEARCH_WORK = 1_500_000  # the same, in the exact step
REPACK_WORK = 3_000_000  # the repacking search
RESTART_WORK = 1_000_000  # randomised restarts (a pass costs its subset-sum bit sets)
ROUNDING_CAPACITIES = 3  # capacities from the LP bound up at which the LP is rounded
ROUNDING_WORK = 200_000  # the search that packs what rounding leaves over, per capacity
EXCHANGE_ROUNDS_PER_JOB = 2  # exchange rounds: this many per job, plus 100, and at most
EXCHANGE_WORK = 10_000_000  # this much work (see pcmax_heuristics.improve), per call
ARCFLOW_NODES = 2_000  # branch-and-bound nodes of one arc-flow decision in SCIP
ARCFLOW_ARCS = 100_000  # the largest arc-flow graph given to SCIP (its presolve and root LP
# grow with it before any node is counted)
ARCFLOW_LP_ITERATIONS = 20_000  # simplex iterations of each LP of an arc-flow decision (root included)
ARCFLOW_DECISIONS = 8  # arc-flow decisions (each a better incumbent or the proof)
CPSAT_DETERMINISTIC_TIME = 1.0  # CP-SAT's own deterministic time
RANDOM_SEED = 0  # every randomised step and solver starts from this seed
