"""Solvers: the offline minimising-makespan assignment (P||Cmax and Q||Cmax).

Solver packages (OR-Tools, PySCIPOpt) are imported only by the steps that use them.
"""

from llmsched.mip.pcmax import PcmaxResult, solve_pcmax
from llmsched.mip.result import Status, TracePoint

__all__ = ["PcmaxResult", "Status", "TracePoint", "solve_pcmax"]
