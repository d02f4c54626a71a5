"""ExeGPT (Oh et al., ASPLOS'24): constraint-aware configuration search.

So far: the monotone branch-and-bound of its Algorithm 1, generalised to any number of
integer control variables, and the exhaustive grid search it is checked against
(:mod:`llmsched.exegpt.search`), both over any ``perf(config) -> (throughput, latency)``;
and the per-layer cost model XSimulator will consume (:mod:`llmsched.exegpt.layers`).
"""

from llmsched.exegpt.layers import GPUS, MODELS, GPUSpec, LayerCostModel, ModelSpec
from llmsched.exegpt.search import (
    Evaluation,
    SearchResult,
    Variable,
    branch_and_bound,
    exhaustive,
    grid_size,
)

__all__ = [
    "GPUS",
    "MODELS",
    "Evaluation",
    "GPUSpec",
    "LayerCostModel",
    "ModelSpec",
    "SearchResult",
    "Variable",
    "branch_and_bound",
    "exhaustive",
    "grid_size",
]
