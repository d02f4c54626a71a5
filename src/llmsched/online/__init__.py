"""Online heuristics: request policies, iteration policies, and output-length predictors."""

from llmsched.online.iteration import Lagrangian, Threshold, TunedThreshold, threshold_k
from llmsched.online.predictors import (
    BucketClassifier,
    ConstantMean,
    NoisyOracle,
    Oracle,
    accuracy,
    cross_fit,
    make_predictor,
    with_predictions,
)
from llmsched.online.requests import LongestFirst, ShortestFirst, SortedPreemptive

__all__ = [
    "BucketClassifier",
    "ConstantMean",
    "Lagrangian",
    "LongestFirst",
    "NoisyOracle",
    "Oracle",
    "ShortestFirst",
    "SortedPreemptive",
    "Threshold",
    "TunedThreshold",
    "accuracy",
    "cross_fit",
    "make_predictor",
    "threshold_k",
    "with_predictions",
]
