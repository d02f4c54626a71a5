"""Online heuristics: request policies, iteration policies, and output-length predictors."""

from llmsched.online.iteration import Lagrangian, Threshold, TunedThreshold, threshold_k
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
from llmsched.online.requests import HYBRID_OVERHEAD, LongestFirst, ShortestFirst, SortedPreemptive

__all__ = [
    "HYBRID_OVERHEAD",
    "BucketClassifier",
    "ConstantMean",
    "Lagrangian",
    "LongestFirst",
    "MicoClassifier",
    "NoisyOracle",
    "Oracle",
    "ShortestFirst",
    "SortedPreemptive",
    "Threshold",
    "TunedThreshold",
    "accuracy",
    "cross_fit",
    "length_classes",
    "make_predictor",
    "threshold_k",
    "with_predictions",
]
