"""ExeGPT (Oh et al., ASPLOS'24): constraint-aware configuration search.

* :mod:`~llmsched.exegpt.layers`: the per-layer cost model (analytic from Table 1 and the
  GPUs' rates, or fitted to measurements);
* :mod:`~llmsched.exegpt.xsim`: XSimulator, throughput and latency of RRA and WAA
  configurations from the input/output length distributions;
* :mod:`~llmsched.exegpt.search`: the monotone branch-and-bound of Algorithm 1 over any
  ``perf(config) -> (throughput, latency)``, and the exhaustive search it is checked against;
* :mod:`~llmsched.exegpt.optimize`: the search over RRA, WAA-C and WAA-M (per tensor-parallel
  degree) and the monotonicity report of Table 5;
* :mod:`~llmsched.exegpt.policy`: an RRA configuration as event-simulator policies, and the
  cross-check of XSimulator against the event simulator.
"""

from llmsched.exegpt.layers import GPUS, MODELS, GPUSpec, LayerCostModel, ModelSpec, calibrate_efficiencies
from llmsched.exegpt.optimize import SCHEDULES, ExeGPTResult, monotonicity, optimize, search_spaces
from llmsched.exegpt.policy import crosscheck, rra_policies
from llmsched.exegpt.search import (
    Evaluation,
    SearchResult,
    Variable,
    branch_and_bound,
    exhaustive,
    grid_size,
)
from llmsched.exegpt.xsim import DEFAULT_GPUS, Estimate, LengthDistribution, XSimulator

__all__ = [
    "DEFAULT_GPUS",
    "GPUS",
    "MODELS",
    "SCHEDULES",
    "Estimate",
    "Evaluation",
    "ExeGPTResult",
    "GPUSpec",
    "LayerCostModel",
    "LengthDistribution",
    "ModelSpec",
    "SearchResult",
    "Variable",
    "XSimulator",
    "branch_and_bound",
    "calibrate_efficiencies",
    "crosscheck",
    "exhaustive",
    "grid_size",
    "monotonicity",
    "optimize",
    "rra_policies",
    "search_spaces",
]
