"""Solvers: the offline minimising-makespan assignment (P||Cmax and Q||Cmax) and the full MIP.

Solver packages (OR-Tools, PySCIPOpt) are imported only by the steps that use them; HiGHS,
through scipy, needs no extra (:mod:`llmsched.mip.backends`: which backends are installed,
``backend="auto"``, and :class:`~llmsched.mip.backends.MissingSolverError`).
"""

from llmsched.mip.full import FullResult, solve_full
from llmsched.mip.pcmax.solve import PcmaxResult, solve_pcmax
from llmsched.mip.traces import Status, TracePoint

__all__ = ["FullResult", "PcmaxResult", "Status", "TracePoint", "solve_full", "solve_pcmax"]
