"""ExeGPT (Oh et al., ASPLOS'24): constraint-aware configuration search.

So far: the monotone branch-and-bound of its Algorithm 1, generalised to any number of
integer control variables, and the exhaustive grid search it is checked against
(:mod:`llmsched.exegpt.search`). Both work over any ``perf(config) -> (throughput, latency)``.
"""

from llmsched.exegpt.search import (
    Evaluation,
    SearchResult,
    Variable,
    branch_and_bound,
    exhaustive,
    grid_size,
)

__all__ = ["Evaluation", "SearchResult", "Variable", "branch_and_bound", "exhaustive", "grid_size"]
