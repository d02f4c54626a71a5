"""What makes (workload, cost model, clients) an instance, and what a cost model may answer.

Every consumer of an instance (the decision loop, the lower bounds, the solvers) checks it
here, before any work: the core never asks the simulator whether an instance is valid.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    LinearCostModel,
    context_rate,
    decode_seconds,
    is_context_aware,
    prefill_seconds,
    request_context,
)
from llmsched.core.workload import Workload

__all__ = [
    "HORIZON_ULPS",
    "PRECISION_ULPS",
    "WorkBound",
    "WorkloadTotals",
    "check_cost_model",
    "check_horizon",
    "check_instance",
    "check_stage_time",
    "decode_work_bound",
    "prefill_work_bound",
]


def check_stage_time(cost: CostModel, call: str, value: Any, why: str = "") -> float:
    """``value`` as a float if it is a finite time >= 0 that ``cost`` gave for ``call``.

    Parameters
    ----------
    cost
        The cost model that answered (named in the error).
    call
        What it was asked, e.g. ``"prefill_time(120)"``.
    value
        Its answer.
    why
        What that call stands for, said in the error (e.g. the longest iteration a workload
        can reach).

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
            f"cost model {type(cost).__name__} gave {call} = {shown!r}"
            + (f" ({why})" if why else "")
            + "; stage times must be finite numbers of seconds >= 0"
        )
    return seconds


#: A stage must span at least this many units in the last place of the latest arrival: the
#: loop compares the clock with arrivals to a few units in the last place, and an arrival is
#: an exact input (the rule that ``simulate`` has always applied).
PRECISION_ULPS = 1e6
#: ... and at least this many units in the last place of every time a run can reach, a bound
#: (often far) above its makespan: the validator allows 64 units in the last place of the
#: latest time, which this keeps under 1% of the shortest stage.
HORIZON_ULPS = 1e4


class WorkBound(NamedTuple):
    """A bound on the seconds of one kind of stage a run spends, and its longest stage."""

    seconds: float
    longest: float
    stage: str  # the longest stage, said: "cost model M gives CALL (WHAT IT IS)"


class WorkloadTotals(NamedTuple):
    """The figures of a workload that bound the work of any run of it (computed once)."""

    requests: int
    latest: float
    longest_prompt: int
    longest_context: int
    prompt_tokens: int
    prompt_squares: int
    output_tokens: int
    context_tokens: float

    @classmethod
    def of(cls, workload: Workload) -> WorkloadTotals:
        """The totals of ``workload`` (a non-empty :class:`~llmsched.Workload`)."""
        prompt, output = workload.prompt_tokens, workload.output_tokens
        return cls(
            requests=len(workload),
            latest=float(workload.arrival.max()),
            longest_prompt=int(prompt.max()),
            # A request holds at most its prompt and all but its last token when it decodes.
            longest_context=int((prompt + output).max()) - 1,
            prompt_tokens=int(prompt.sum()),
            prompt_squares=int(np.sum(prompt.astype(np.float64) ** 2)),
            output_tokens=int(output.sum()),
            context_tokens=float(np.sum(request_context(prompt, output), dtype=np.float64)),
        )


def check_cost_model(workload: Workload, cost: CostModel, clients: int) -> float:
    """Check the types, ``clients``, the prefill capacity against the prompts and the times
    of one token and one client; return the smallest positive of those two times (0.0 when
    both are 0), the shortest stage a run must be able to time."""
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
    # A stage of no time needs no resolution, so only positive times set the precision needed.
    positive = [t for t in times if t > 0]
    return min(positive) if positive else 0.0


def _is_affine(cost: CostModel) -> bool:
    # A stage's time a_p + b_p tokens (+ c_p squares): prefilling requests together never
    # costs more than prefilling them apart.
    return isinstance(cost, (LinearCostModel, ContextCostModel))


def prefill_work_bound(
    totals: WorkloadTotals, cost: CostModel, token_budget: int | None = None, clients: int | None = None
) -> WorkBound:
    """Seconds of prefill an engine of ``cost`` spends, at most, on a workload of ``totals``.

    Under competition every stage prefills at least one request, so there are at most as
    many stages as requests, none longer than a full stage of the longest prompts (checked
    finite here). Under fusion (``token_budget`` given) every iteration that carries prompt
    chunks carries at least one prompt token and at most the budget, so there are at most as
    many such iterations as prompt tokens. Under the linear and context models each pays the
    prefill's fixed cost once, and the tokens' and squares' terms add up over the chunks to
    the prompts' own (a chunked prompt's squares add up to its square); any other model's
    iteration is bounded by the longest. A model that prices a mixed iteration itself
    (``mixed_iteration_time``, as a table does) may charge an iteration's decoding requests as
    prompt tokens (SplitwiseSim's rule): its longest is taken as the longer of two iterations
    the engine can run, one decoding request (or as many as ``clients`` and the requests
    allow) beside the largest chunk the budget leaves room for; the decoding requests' own
    time is the decode bound's.

    Raises
    ------
    ValueError
        When the cost model's time for the largest prefill stage (or mixed iteration) the
        workload can ask for is not a finite number of seconds >= 0, naming the call.
    """
    longest = totals.longest_prompt
    if token_budget is None:
        tokens = min(int(cost.prefill_capacity), totals.prompt_tokens)
        squares = min(tokens * longest, totals.prompt_squares)
        why = f"a full stage of {tokens} prompt tokens, prompts of up to {longest}"
    else:
        tokens = min(int(token_budget), totals.prompt_tokens)
        squares = min(2 * tokens * longest, totals.prompt_squares)
        why = f"a fused iteration's chunks of {tokens} prompt tokens, prompts of up to {longest}"
    call = f"prefill_time({tokens}, {squares})" if is_context_aware(cost) else f"prefill_time({tokens})"
    largest = check_stage_time(cost, call, prefill_seconds(cost, tokens, squares), why)
    price: Any = cost
    if token_budget is not None and callable(getattr(cost, "mixed_iteration_time", None)):
        budget = int(token_budget)
        most = min(totals.requests, budget - 1, 1 if clients is None else int(clients))
        for decoding in sorted({1, most}):
            chunk = min(budget - decoding, totals.prompt_tokens)
            mixed_call = f"mixed_iteration_time({decoding}, 0, {chunk}, 0)"
            mixed_why = f"a fused iteration of {decoding} decoding and {chunk} prompt tokens"
            seconds = price.mixed_iteration_time(decoding, 0, chunk, 0)
            mixed = check_stage_time(cost, mixed_call, seconds, mixed_why)
            if mixed > largest:
                largest, call, why = mixed, mixed_call, mixed_why
    stage = f"cost model {type(cost).__name__} gives {call} = {largest:.6g} s ({why})"
    # A stage prefills a request at least; a fused iteration with chunks, a prompt token.
    stages = totals.requests if token_budget is None else totals.prompt_tokens
    if not _is_affine(cost):
        return WorkBound(stages * largest, largest, stage)
    seconds = (
        stages * float(price.prefill_base)
        + float(price.prefill_per_token) * totals.prompt_tokens
        + float(getattr(price, "prefill_per_square", 0.0)) * totals.prompt_squares
    )
    return WorkBound(seconds, largest, stage)


def decode_work_bound(totals: WorkloadTotals, cost: CostModel, clients: int) -> WorkBound:
    """Seconds of decoding an engine of ``cost`` with ``clients`` clients spends, at most, on
    a workload of ``totals``.

    Every decode iteration produces a token for each of its ``a >= 1`` active requests in
    ``decode_iteration_time(a)`` plus ``c_d`` per context token read, so the iterations
    take at most the output tokens times the largest ``decode_iteration_time(a) / a`` over
    the batches that can occur (``a`` up to the clients and the requests), plus ``c_d``
    times the context every request reads (a property of the workload). The longest
    iteration, every client busy at the largest context the workload can reach, is checked
    finite here.

    Raises
    ------
    ValueError
        When the cost model's time for a batch or for the longest iteration is not a finite
        number of seconds >= 0, naming the call.
    """
    most = min(int(clients), totals.requests)
    batches = np.arange(1, most + 1)
    times = np.asarray(decode_seconds(cost, batches, 0), dtype=np.float64)
    if times.shape != batches.shape:
        times = np.broadcast_to(times, batches.shape)
    if not (times.min() >= 0 and times.max() < math.inf):  # NaN fails both
        bad = int(np.flatnonzero(~(np.isfinite(times) & (times >= 0)))[0])
        largest = getattr(cost, "max_batch", None)
        why = f"{bad + 1} of the {clients} clients decoding together" + (
            f"; it prices batches of up to {largest} requests: give an engine at most {largest} clients"
            if isinstance(largest, int)
            else ""
        )
        check_stage_time(cost, f"decode_iteration_time({bad + 1})", times[bad], why)
    rate = context_rate(cost)
    if is_context_aware(cost):
        check_stage_time(cost, "decode_per_context", rate)
    slowest = int(times.argmax()) + 1
    context = slowest * totals.longest_context if rate else 0
    call = f"decode_iteration_time({slowest}, {context})" if rate else f"decode_iteration_time({slowest})"
    why = f"the longest decode iteration this workload can reach: {slowest} client{'s' * (slowest != 1)}" + (
        f" at up to {totals.longest_context} context tokens each" if rate else ""
    )
    largest = check_stage_time(cost, call, decode_seconds(cost, slowest, context), why)
    stage = f"cost model {type(cost).__name__} gives {call} = {largest:.6g} s ({why})"
    per_token = float(np.max(times / batches))
    return WorkBound(totals.output_tokens * per_token + rate * totals.context_tokens, largest, stage)


def _resolves(time: float, shortest: float, ulps: float = HORIZON_ULPS) -> bool:
    return math.isfinite(time) and float(np.spacing(time)) * ulps <= shortest


def check_horizon(
    totals: WorkloadTotals,
    shortest: float,
    work: float,
    delays: float = 0.0,
    delays_are: str = "delays",
    stages: tuple[WorkBound, ...] = (),
    shorten: str = "",
) -> None:
    """Refuse a run whose times could leave float64 too little precision to time a stage.

    Times are absolute seconds in float64; far from 0 they cannot resolve a stage, and the
    validator cannot check it. A ``shortest`` stage must span at least
    :data:`PRECISION_ULPS` units in the last place of the latest arrival, and at least
    :data:`HORIZON_ULPS` of every time the run can reach: the latest arrival, plus ``delays``
    (``delays_are`` names them: backoff delays, KV transfers), plus ``work`` (a bound on the
    seconds of stages). A stage of no time needs no resolution. A longest stage of
    ``stages`` that alone breaks the rule is named; ``shorten`` says how to shorten the
    delays when they are what reaches too far.

    Raises
    ------
    ValueError
        Saying how far the times may reach, of what, and what to change.
    """
    if shortest <= 0:
        return
    for bound in stages:
        if not _resolves(bound.longest, shortest):
            raise ValueError(
                f"{bound.stage}: next to its shortest stage of {shortest:.3g} s that is beyond the "
                "precision the validator can check (double precision cannot time the one after the "
                "other); use a cost model whose stages are not this far apart"
            )
    latest = totals.latest
    horizon = latest + delays + work
    if _resolves(latest, shortest, PRECISION_ULPS) and _resolves(horizon, shortest):
        return
    parts = [f"the latest arrival {latest:.6g} s"]
    if delays:
        parts.append(f"{delays_are} of up to {delays:.6g} s")
    parts.append(f"at most {work:.6g} s of stages")
    if not _resolves(latest, shortest, PRECISION_ULPS) or latest >= max(delays, work):
        fix = "subtract the first arrival so that times start near 0"
    elif delays >= work:
        fix = f"shorten the {delays_are}" + (f" ({shorten})" if shorten else "")
    else:
        fix = "run fewer requests, or use a cost model whose stages are not this far apart"
    raise ValueError(
        f"times up to {horizon:.6g} s ({' + '.join(parts)}) are beyond the precision the validator "
        f"can check: double precision cannot time stages of {shortest:.3g} s there; {fix}"
    )


def check_instance(
    workload: Workload, cost: CostModel, clients: int, *, token_budget: int | None = None
) -> None:
    """Raise ValueError (or TypeError) unless (workload, cost, clients) is a valid instance.

    Checks the types, that there is a request, that ``clients`` is a positive integer, that
    the cost model's ``prefill_capacity`` is an integer >= 1 and every prompt fits in one
    prefill stage, that the cost model's times for one token and one client, for the
    largest prefill stage and for the longest decode iteration the workload can ask for are
    finite and >= 0, and that every time the run can reach (the latest arrival plus a bound
    on its stages, :func:`prefill_work_bound` and :func:`decode_work_bound`) leaves float64
    enough precision to time the shortest stage (:func:`check_horizon`). With a
    ``token_budget`` the prefill is bounded as a fused engine's chunks.
    """
    shortest = check_cost_model(workload, cost, clients)
    totals = WorkloadTotals.of(workload)
    # The decode bound first: a batch past what the model prices is named as such.
    decode = decode_work_bound(totals, cost, clients)
    stages = (prefill_work_bound(totals, cost, token_budget, clients), decode)
    check_horizon(totals, shortest, sum(bound.seconds for bound in stages), stages=stages)
