"""The full deterministic MIP of PD-competition inference (Pang et al., Eqs. 1-25).

:func:`solve_full` builds the model (:mod:`~llmsched.mip.full.model`: the paper's literal
formulation and a strong one, constraint families named by the paper's equations) in SCIP
(:mod:`~llmsched.mip.full.scip`), CP-SAT (:mod:`~llmsched.mip.full.cpsat`) or HiGHS through
scipy (:mod:`~llmsched.mip.full.highs`, no extra needed; ``backend="auto"`` picks SCIP when
it is installed, else HiGHS), warm-started from schedules the caller gives (the online
heuristics make good ones: :func:`llmsched.online.warm_starts.heuristic_schedules`; HiGHS
takes none through scipy, and the start is then only the incumbent), solves it within a time
limit with a trace of incumbent and bound, and turns its solution into a
:class:`~llmsched.Schedule` by replaying its plan (:mod:`~llmsched.mip.full.replay`), so the
validator checks it like any other schedule.

The MIP's semantics are those of :class:`~llmsched.core.cost.LevelCostModel` (prefill levels, a
constant decode time per iteration); a :class:`~llmsched.core.cost.LinearCostModel` is turned
into one with ``cost.to_levels(clients)``. The MIP does not see context: a
:class:`~llmsched.core.cost.ContextCostModel` enters it only through
``cost.to_levels(clients, context=N)`` (every iteration a full batch at ``N`` context tokens
per client), which the caller chooses, and ``solve_full`` refuses it otherwise.
"""

from llmsched.mip.full.model import FORMULATIONS, Plan
from llmsched.mip.full.replay import plan_from_schedule, schedule_from_plan
from llmsched.mip.full.solve import BACKENDS, FullResult, default_bins, min_decode_iterations, solve_full

__all__ = [
    "BACKENDS",
    "FORMULATIONS",
    "FullResult",
    "Plan",
    "default_bins",
    "min_decode_iterations",
    "plan_from_schedule",
    "schedule_from_plan",
    "solve_full",
]
