"""Deterministic work budgets of the P||Cmax pipeline, at effort 1.

Each is multiplied by ``solve_pcmax(effort=...)``. They live apart from the pipeline so that
its exact step (:mod:`llmsched.mip.pcmax.exact`) reads them without importing the pipeline
back.
"""

from __future__ import annotations

# Deterministic budgets at effort 1 (each multiplied by ``effort``). Search work is counted
# in the units of :mod:`llmsched.mip.pcmax.search` (about a microsecond each on one core
# of a 2-core machine, up to three on some instances), so 1,000,000 units are a second or
# a few there. Together they are sized so that an instance no step closes ends within about
# 10 s there (GSM8K-shaped outputs of 200-300 requests on 50-60 machines take 7.5-11 s, the
# repacking search the largest share; instances that close, nearly all, take well under a
# second), where the budgets of earlier releases ran 14-16 s; effort=3 gives at least those.
SEARCH_WORK = 800_000  # one bisection of the gap by bin-completion search
EXACT_SEARCH_WORK = 500_000  # the same, in the exact step
REPACK_WORK = 3_000_000  # the repacking search
RESTART_WORK = 300_000  # randomised restarts (a pass costs its subset-sum bit sets)
ROUNDING_CAPACITIES = 3  # capacities from the LP bound up at which the LP is rounded
ROUNDING_WORK = 200_000  # the search that packs what rounding leaves over, per capacity
EXCHANGE_ROUNDS_PER_JOB = 2  # exchange rounds: this many per job, plus 100, and at most
EXCHANGE_WORK = 10_000_000  # this much work (see heuristics.improve), per call
ARCFLOW_NODES = 1_000  # branch-and-bound nodes of one arc-flow decision in SCIP
ARCFLOW_ARCS = 20_000  # the largest arc-flow graph given to SCIP (its presolve and root LP
# grow with it before any node is counted: a graph of 44,792 arcs spent 120 s in its root
# alone; the graphs where the decision pays, a few dozen distinct sizes, have under 10,000)
ARCFLOW_LP_ITERATIONS = 20_000  # simplex iterations of each LP of an arc-flow decision (root included)
# An iteration's cost grows with the graph: on a large one (58,000 arcs) the root LP alone
# took 42 s for 20,000 iterations, and 1,000 nodes of such LPs ran for many minutes. So the
# LP iterations and the nodes are also capped by these amounts over the graph's arcs.
ARCFLOW_LP_WORK = 50_000_000  # arcs x simplex iterations of each LP (about 2 s at most)
ARCFLOW_NODE_WORK = 10_000_000  # arcs x branch-and-bound nodes of one decision
ARCFLOW_DECISIONS = 4  # arc-flow decisions (each a better incumbent or the proof)
CPSAT_DETERMINISTIC_TIME = 0.3  # CP-SAT's own deterministic time
RANDOM_SEED = 0  # every randomised step and solver starts from this seed
