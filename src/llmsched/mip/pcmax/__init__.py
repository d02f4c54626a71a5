"""P||Cmax: the offline decode packing (Eqs. 26-30) solved fast and exactly.

:func:`solve_pcmax` (:mod:`~llmsched.mip.pcmax.solve`) runs the pipeline: lower bounds
(:mod:`~llmsched.mip.pcmax.bounds`), heuristics (:mod:`~llmsched.mip.pcmax.heuristics`),
local search (:mod:`~llmsched.mip.pcmax.search`), exact steps (:mod:`~llmsched.mip.pcmax.exact`)
and the paper's own model (:mod:`~llmsched.mip.pcmax.paper`), within work budgets
(:mod:`~llmsched.mip.pcmax.budgets`); it returns a :class:`PcmaxResult`
(:mod:`~llmsched.mip.pcmax.result`).
"""

from llmsched.mip.pcmax.result import PcmaxResult
from llmsched.mip.pcmax.solve import solve_pcmax

__all__ = ["PcmaxResult", "solve_pcmax"]
