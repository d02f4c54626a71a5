"""Solvers: the offline minimising-makespan assignment (P||Cmax and Q||Cmax) and the full MIP.

Solver packages (OR-Tools, PySCIPOpt) are imported only by the steps that use them.
"""

from llmsched.mip.full import FullResult, solve_full
from llmsched.mip.pcmax import PcmaxResult, solve_pcmax
from llmsched.mip.result import Status, TracePoint

__all__ = ["FullResult", "PcmaxResult", "Status", "TracePoint", "solve_full", "solve_pcmax"]
