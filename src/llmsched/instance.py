"""What makes (workload, cost model, clients) an instance, and what a cost model may answer.

Every consumer of an instance (the decision loop, the lower bounds, the solvers) checks it
here, before any work: the core never asks the simulator whether an instance is valid.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from llmsched._checks import positive_int
from llmsched.cost import CostModel
from llmsched.workload import Workload

__all__ = ["check_instance", "check_stage_time"]


def check_stage_time(cost: CostModel, call: str, value: Any) -> float:
    """``value`` as a float if it is a finite time >= 0 that ``cost`` gave for ``call``.

    Parameters
    ----------
    cost
        The cost model that answered (named in the error).
    call
        What it was asked, e.g. ``"prefill_time(120)"``.
    value
        Its answer.

    Raises
    ------
    ValueError
        When the answer is not a finite number of seconds >= 0: a NaN or negative stage
        time would otherwise end up in the schedule's times.
    """
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0.0 <= seconds < math.inf:
        shown = value.item() if isinstance(value, np.generic) else value
        raise ValueError(
            f"cost model {type(cost).__name__} gave {call} = {shown!r}; stage times must be finite "
            "numbers of seconds >= 0"
        )
    return seconds


def check_instance(workload: Workload, cost: CostModel, clients: int) -> None:
    """Raise ValueError (or TypeError) unless (workload, cost, clients) is a valid instance.

    Checks the types, that there is a request, that ``clients`` is a positive integer, that
    the cost model's ``prefill_capacity`` is an integer >= 1 and every prompt fits in one
    prefill stage, that the cost model's times for one token and
    one client are finite and >= 0, and that the arrival times leave float64 enough
    precision to time a stage.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a llmsched.Workload, got {type(workload).__name__}")
    if len(workload) == 0:
        raise ValueError("the workload has no requests")
    if not isinstance(cost, CostModel):
        raise TypeError(
            "cost must be a cost model with prefill_capacity, prefill_time(tokens) and "
            f"decode_iteration_time(active), got {type(cost).__name__}"
        )
    positive_int("clients", clients)
    capacity = cost.prefill_capacity
    integral = isinstance(capacity, numbers.Integral) and not isinstance(capacity, (bool, np.bool_))
    if not integral or capacity < 1:
        # The loop and the validator count tokens against it as an int.
        raise (ValueError if integral else TypeError)(
            f"cost model {type(cost).__name__} has prefill_capacity = {capacity!r}; it must be an "
            "integer >= 1 (the most prompt tokens one prefill stage holds)"
        )
    longest = int(workload.prompt_tokens.argmax())
    if workload.prompt_tokens[longest] > capacity:
        too_long = int(np.count_nonzero(workload.prompt_tokens > capacity))
        raise ValueError(
            f"request {longest} has a prompt of {workload.prompt_tokens[longest]} tokens, more "
            f"than the prefill capacity of {capacity} tokens: no prefill stage can hold it "
            f"({too_long} of the {len(workload)} prompts are longer than {capacity}). Clip the "
            f"prompts with max_prompt={capacity} (llmsched.workloads.prepare or a trace loader; "
            f"--max-prompt {capacity} on the command line), or use a cost model with a prefill "
            f"capacity of at least {workload.prompt_tokens[longest]} (--cost "
            f"linear:A_P,B_P,A_D,B_D,{workload.prompt_tokens[longest]})"
        )
    times = (
        check_stage_time(cost, "decode_iteration_time(1)", cost.decode_iteration_time(1)),
        check_stage_time(cost, "prefill_time(1)", cost.prefill_time(1)),
    )
    # Times are absolute seconds in float64; far from 0 they cannot resolve a stage. A stage
    # of no time needs no resolution, so only positive times set the precision needed.
    positive = [t for t in times if t > 0]
    latest = float(workload.arrival.max())
    if positive and np.spacing(latest) * 1e6 > min(positive):
        raise ValueError(
            f"arrival times up to {latest:.6g}s are too large to time stages of {min(positive):.3g}s "
            "in double precision; subtract the first arrival so that times start near 0"
        )
