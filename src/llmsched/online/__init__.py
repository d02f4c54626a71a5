"""Named policies and what they plan with: the baselines, the offline queues, Algorithm 1,
the iteration rules, the registry of policy names, and output-length predictors.

* :mod:`~llmsched.online.baselines`: FCFS, static queues, prefill-first, the free-client pool;
* :mod:`~llmsched.online.offline`: balanced per-client queues from the P||Cmax assignment,
  planned on a rolling horizon over the requests that have arrived;
* :mod:`~llmsched.online.requests`: Algorithm 1 (sorting and preemptive), sorted shared queues;
* :mod:`~llmsched.online.priority`: shortest predicted work first with aging, and earliest TTFT
  deadline first with the late deferred;
* :mod:`~llmsched.online.iteration`: the Lagrangian, threshold and SLO-aware rules;
* :mod:`~llmsched.online.tuning`: a threshold rule tuned by simulation;
* :mod:`~llmsched.online.registry`: policy names, their parameters and aliases;
* :mod:`~llmsched.online.predictors`: output-length predictors;
* :mod:`~llmsched.online.text`: an output-length predictor learned from the prompt's text;
* :mod:`~llmsched.online.warm_starts`: the heuristics run as the full MIP's warm starts.
"""

from llmsched.online.baselines import FCFS, BatchWise, FreeClients, PrefillFirst, StaticQueues
from llmsched.online.iteration import Lagrangian, LagrangianAsWritten, SLOAware, Threshold, threshold_k
from llmsched.online.offline import OfflineQueues, RollingQueues, check_sizes, decode_sizes, offline_queues
from llmsched.online.predictors import (
    BucketClassifier,
    ConstantMean,
    MicoClassifier,
    NoisyOracle,
    Oracle,
    accuracy,
    cross_fit,
    length_classes,
    make_predictor,
    with_predictions,
)
from llmsched.online.priority import AgedShortestFirst, DeadlineFirst
from llmsched.online.registry import (
    iteration_policy_names,
    make_iteration_policy,
    make_request_policy,
    register_iteration_policy,
    register_request_policy,
    request_policy_names,
)
from llmsched.online.requests import HYBRID_OVERHEAD, LongestFirst, ShortestFirst, SortedPreemptive
from llmsched.online.text import TextRidge, cross_fit_text
from llmsched.online.tuning import TunedThreshold

__all__ = [
    "FCFS",
    "HYBRID_OVERHEAD",
    "AgedShortestFirst",
    "BatchWise",
    "BucketClassifier",
    "ConstantMean",
    "DeadlineFirst",
    "FreeClients",
    "Lagrangian",
    "LagrangianAsWritten",
    "LongestFirst",
    "MicoClassifier",
    "NoisyOracle",
    "OfflineQueues",
    "Oracle",
    "PrefillFirst",
    "RollingQueues",
    "SLOAware",
    "ShortestFirst",
    "SortedPreemptive",
    "StaticQueues",
    "TextRidge",
    "Threshold",
    "TunedThreshold",
    "accuracy",
    "check_sizes",
    "cross_fit",
    "cross_fit_text",
    "decode_sizes",
    "iteration_policy_names",
    "length_classes",
    "make_iteration_policy",
    "make_predictor",
    "make_request_policy",
    "offline_queues",
    "register_iteration_policy",
    "register_request_policy",
    "request_policy_names",
    "threshold_k",
    "with_predictions",
]
