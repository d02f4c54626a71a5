"""Splitwise's evaluation (Patel et al., ISCA 2024, Secs. V-VI) on the measured tables.

* **Designs** (Table V): Baseline-A100 and Baseline-H100 (every machine batching prompts and
  tokens together, as Orca does), and Splitwise-AA, -HH, -HHcap and -HA: prompt machines of one
  kind, token machines of another, under SplitwiseSim's mixed-pool rules
  (:func:`~llmsched.fleet.mixed_pool.simulate_mixed_pool`). Llama-2-70B at tensor parallelism 8,
  each machine priced by the measurements as SplitwiseSim reads them
  (:meth:`~llmsched.core.hardware.Preset.splitwisesim_cost`). Cost and power relative to a
  DGX-A100: an H100 costs 2.35x as a prompt machine and 2.5x as a token machine (a Baseline-H100
  machine as a token machine) and draws 1.75x the power, 1.23x when power-capped.
* **SLOs** (Table VI): each request's TTFT, TBT and end-to-end latency over what it takes alone
  on a DGX-A100 (its prompt's time, and the token time at its prompt's tokens, as SplitwiseSim's
  notebooks read the table), at P50, P90 and P99: below 2x, 3x and 6x for TTFT, 1.25x, 1.5x
  and 5x for TBT and E2E (strictly, as SplitwiseSim's notebooks test them). A design serves a
  load when all nine hold.
* **Highest load** (:func:`max_load`): the largest Poisson rate at which the design meets the
  nine SLOs, found by doubling then bisection to a set resolution.
* **Iso-power and iso-cost provisioning** (:func:`provision_equal`): under the power (or the
  cost) of ``budget`` DGX-H100s (the paper: 40), each baseline takes as many machines as fit,
  and each Splitwise design the split of prompt and token machines (filling the budget) that
  serves the highest load; :func:`splitwise_summary` sets them side by side relative to
  Baseline-A100, as Fig. 18 does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int, real
from llmsched.core.progress import progress_bar
from llmsched.core.workload import Workload

__all__ = [
    "DESIGNS",
    "MACHINES",
    "SLOS",
    "Design",
    "code_trace_sizes",
    "max_load",
    "provision_equal",
    "run_design",
    "slo_report",
    "splitwise_cluster",
    "splitwise_summary",
    "trace_sizes",
]

#: Machine kinds: (preset, price as a prompt machine, price as a token machine, power), relative
#: to a DGX-A100 (Table V).
MACHINES = {
    "a100": ("llama2-70b/a100/tp8", 1.0, 1.0, 1.0),
    "h100": ("llama2-70b/h100/tp8", 2.35, 2.5, 1.75),
    "h100-pcap": ("llama2-70b/h100-pcap/tp8", 2.35, 2.5, 1.23),
}
#: Table VI: what each percentile of a slowdown must stay below.
SLOS = {
    ("ttft", 50): 2.0,
    ("ttft", 90): 3.0,
    ("ttft", 99): 6.0,
    ("tbt", 50): 1.25,
    ("tbt", 90): 1.5,
    ("tbt", 99): 5.0,
    ("e2e", 50): 1.25,
    ("e2e", 90): 1.5,
    ("e2e", 99): 5.0,
}
_CLIENTS = 128  # requests a machine holds (SplitwiseSim's 512 are never reached below saturation)
_BATCH_TOKENS = 2048  # SplitwiseSim's max_batch_tokens
_BACKLOG = 8192  # SplitwiseSim's prompt_max_pending_batch_tokens
_KV_GBPS = 200 * 2**30 / 1e9  # SplitwiseSim's links


@dataclass(frozen=True)
class Design:
    """A cluster design of Table V: the kind of its prompt machines and of its token machines
    (None: a baseline, every machine doing both)."""

    name: str
    prompt_kind: str
    token_kind: str | None

    @property
    def baseline(self) -> bool:
        return self.token_kind is None

    def power(self, prompt: int, token: int = 0) -> float:
        """The provisioned power of ``prompt`` (or, for a baseline, all) and ``token`` machines."""
        return (
            prompt * MACHINES[self.prompt_kind][3] + token * MACHINES[self.token_kind or self.prompt_kind][3]
        )

    def price(self, prompt: int, token: int = 0) -> float:
        """Their cost; a baseline machine is priced as a token machine."""
        if self.token_kind is None:
            return prompt * MACHINES[self.prompt_kind][2]
        return prompt * MACHINES[self.prompt_kind][1] + token * MACHINES[self.token_kind][2]


DESIGNS = {
    d.name: d
    for d in (
        Design("baseline-a100", "a100", None),
        Design("baseline-h100", "h100", None),
        Design("splitwise-aa", "a100", "a100"),
        Design("splitwise-hh", "h100", "h100"),
        Design("splitwise-hhcap", "h100", "h100-pcap"),
        Design("splitwise-ha", "h100", "a100"),
    )
}


def trace_sizes(trace: str = "code") -> tuple[np.ndarray, np.ndarray]:
    """An Azure trace's (prompt, output) pairs as the simulators take them (``"code"`` or
    ``"conversation"``, :func:`llmsched.workloads.azure_sizes`): a request decodes its
    ``GeneratedTokens`` less the one its prompt phase makes (at least one)."""
    from llmsched.workloads import azure_sizes

    prompt, generated = azure_sizes(trace)
    return prompt, np.maximum(generated - 1, 1)


def code_trace_sizes() -> tuple[np.ndarray, np.ndarray]:
    """:func:`trace_sizes` of the code trace."""
    return trace_sizes("code")


def _design(design: Design | str) -> Design:
    if isinstance(design, Design):
        return design
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; one of {', '.join(DESIGNS)}")
    return DESIGNS[design]


def _cost(kind: str) -> Any:
    from llmsched.core.hardware import preset

    return preset(MACHINES[kind][0]).splitwisesim_cost()


def splitwise_cluster(
    prompt: int, token: int, cost: Any, token_cost: Any = None, model: str = "llama2-70b/h100/tp8"
) -> Any:
    """A :class:`~llmsched.fleet.mixed_pool.MixedPoolCluster` of ``prompt`` and ``token``
    machines as SplitwiseSim runs them: 128 requests a machine, 2,048 tokens an iteration, a
    token machine lent past 8,192 pending prompt tokens, keys and values moved at 200 GiB/s,
    the memory, weights and KV bytes of ``model`` (a preset)."""
    from llmsched.core.hardware import preset
    from llmsched.fleet.mixed_pool import MixedPoolCluster

    found = preset(model)
    return MixedPoolCluster(
        positive_int("prompt", prompt),
        positive_int("token", token),
        cost,
        clients=_CLIENTS,
        max_batch_tokens=_BATCH_TOKENS,
        prompt_backlog=_BACKLOG,
        kv_bytes_per_token=found.kv_bytes_per_token,
        kv_bandwidth=_KV_GBPS,
        machine_memory=found.gpu_memory_bytes * found.gpus,
        weights=found.weights_bytes,
        token_cost=token_cost,
    )


def run_design(design: Design | str, prompt: int, token: int, workload: Workload) -> dict[str, np.ndarray]:
    """Run ``workload`` on ``design`` with ``prompt`` prompt machines and ``token`` token
    machines (a baseline: ``prompt`` machines, ``token`` 0); every schedule is validated.
    Returns each request's ``ttft`` and ``e2e`` (seconds)."""
    import llmsched
    from llmsched.fleet.mixed_pool import simulate_mixed_pool

    design = _design(design)
    if design.baseline:
        if token:
            raise ValueError(f"{design.name} has no token machines; give its machines as prompt")
        engine = llmsched.Engine(
            _cost(design.prompt_kind), _CLIENTS, mode="orca", max_num_batched_tokens=_BATCH_TOKENS
        )
        schedule: Any = llmsched.simulate_fleet(
            workload, [engine] * positive_int("prompt", prompt), "token-jsq"
        )
    else:
        assert design.token_kind is not None
        token_cost = None if design.token_kind == design.prompt_kind else _cost(design.token_kind)
        cluster = splitwise_cluster(
            prompt, token, _cost(design.prompt_kind), token_cost, MACHINES[design.prompt_kind][0]
        )
        schedule = simulate_mixed_pool(workload, cluster)
    violations = schedule.validate()
    if violations:
        raise RuntimeError(f"{design.name}: invalid schedule: {violations[:3]}")
    frame = schedule.request_frame()
    return {"ttft": frame["ttft"].to_numpy(dtype=float), "e2e": frame["e2e"].to_numpy(dtype=float)}


def slo_report(workload: Workload, latencies: dict[str, np.ndarray]) -> dict[str, Any]:
    """Table VI's nine percentiles of the slowdowns of ``latencies`` (as :func:`run_design`
    returns them) over each request alone on a DGX-A100, and whether all nine hold.

    A request decodes ``output`` tokens after its prompt's first (SplitwiseSim's ``token_size``
    less one); its TBT is ``(e2e - ttft) / (output + 1)`` and its time alone
    ``ttft_0 + tbt_0 * output``, as SplitwiseSim's notebooks compute them.
    """
    reference = _cost("a100")
    prompt = workload.prompt_tokens
    sizes = workload.output_tokens + 1
    ttft0 = np.asarray([float(reference.prefill_time(int(p))) for p in prompt])
    tbt0 = np.asarray([float(reference.decode_iteration_time(int(p))) for p in prompt])
    ttft, e2e = latencies["ttft"], latencies["e2e"]
    slowdown = {
        "ttft": ttft / ttft0,
        "tbt": (e2e - ttft) / sizes / tbt0,
        "e2e": e2e / (ttft0 + tbt0 * (sizes - 1)),
    }
    percentiles = {f"{metric}_p{q}": float(np.percentile(slowdown[metric], q)) for metric, q in SLOS}
    met = all(percentiles[f"{metric}_p{q}"] < limit for (metric, q), limit in SLOS.items())
    return {"percentiles": percentiles, "met": met}


def _requests(prompt: np.ndarray, output: np.ndarray, rate: float, n: int, seed: int) -> Workload:
    """``n`` requests of the (prompt, output) pairs, drawn in a seeded order, Poisson at ``rate``."""
    from llmsched.workloads import poisson_arrivals

    rng = np.random.default_rng(seed)
    rows = np.resize(rng.permutation(len(prompt)), n)
    return Workload(
        prompt[rows], output[rows], arrival=poisson_arrivals(n, rate, rng), name=f"poisson-{rate:g}"
    )


def max_load(
    design: Design | str,
    prompt: int,
    token: int,
    sizes: tuple[Any, Any],
    requests: int = 4000,
    seed: int = 0,
    start: float = 1.0,
    resolution: float = 0.02,
    limit: float = 1e5,
) -> dict[str, Any]:
    """The highest Poisson rate (requests a second) at which ``design`` with ``prompt`` and
    ``token`` machines meets Table VI's nine SLOs on ``requests`` requests of the (prompt,
    output) pairs ``sizes`` (drawn in the order of ``seed``).

    The rate doubles from ``start`` until an SLO fails, then bisects until the bracket is
    within ``resolution`` of its lower end (the SLOs are taken to hold below a rate that meets
    them). Returns ``rate`` (0.0 when even ``start`` fails), ``percentiles`` there, ``fails_at``
    (the least rate tried that fails) and ``runs`` (the simulations it took). A ValueError when
    the rate passes ``limit`` and every SLO still holds.
    """
    design = _design(design)
    prompt_sizes = np.asarray(sizes[0], dtype=np.int64)
    output_sizes = np.asarray(sizes[1], dtype=np.int64)
    if prompt_sizes.shape != output_sizes.shape or prompt_sizes.ndim != 1 or not prompt_sizes.size:
        raise ValueError("sizes must be two arrays of prompt and output tokens of one length")
    requests = positive_int("requests", requests)
    real("start", start, low=0, low_open=True)
    real("resolution", resolution, low=0, low_open=True)
    real("limit", limit, low=start)
    runs = 0

    def meets(rate: float) -> dict[str, Any]:
        nonlocal runs
        runs += 1
        workload = _requests(prompt_sizes, output_sizes, rate, requests, seed)
        return slo_report(workload, run_design(design, prompt, token, workload))

    low, high = 0.0, start
    best: dict[str, Any] | None = None
    while True:
        report = meets(high)
        if not report["met"]:
            break
        if high > limit:
            raise ValueError(f"{design.name} meets every SLO at {high:g} requests/s, past limit={limit:g}")
        low, best, high = high, report, 2 * high
    while low > 0 and high - low > resolution * low:
        middle = 0.5 * (low + high)
        report = meets(middle)
        if report["met"]:
            low, best = middle, report
        else:
            high = middle
    percentiles = best["percentiles"] if best else None
    return {"rate": low, "percentiles": percentiles, "fails_at": high, "runs": runs}


def provision_equal(
    design: Design | str,
    budget: float,
    sizes: tuple[Any, Any],
    requests: int = 4000,
    seed: int = 0,
    splits: Any = None,
    resolution: float = 0.02,
    by: str = "power",
) -> dict[str, Any]:
    """``design`` under ``budget`` of ``by`` (``power`` or ``cost``, in DGX-A100s): a baseline
    takes as many machines as fit; a Splitwise design tries each split of prompt and token
    machines that fills the budget (``splits``: the prompt-machine counts to try; all of them
    by default) and keeps the one that serves the highest load (on a tie, the cheaper, then the
    one drawing less power); past 12 splits, every ``ceil(n / 8)``-th one, then those within
    that step of the best (a search that assumes one peak). Returns ``prompt``, ``token``,
    ``rate``, ``power``, ``cost`` and ``tried`` (each split's rate)."""
    design = _design(design)
    budget = real("budget", budget, low=0, low_open=True)
    if by not in ("power", "cost"):
        raise ValueError(f"by must be 'power' or 'cost', got {by!r}")
    # What one machine takes of the budget: its power, or its price (a baseline machine's is a
    # token machine's).
    unit = design.power(1) if by == "power" else design.price(1)
    if design.baseline:
        machines = math.floor(budget / unit + 1e-9)
        if machines < 1:
            raise ValueError(f"a budget of {budget:g} holds no {design.prompt_kind} machine")
        found = max_load(design, machines, 0, sizes, requests, seed, resolution=resolution)
        return {
            "design": design.name,
            "prompt": machines,
            "token": 0,
            "rate": found["rate"],
            "power": design.power(machines),
            "cost": design.price(machines),
            "tried": {machines: found["rate"]},
        }
    assert design.token_kind is not None
    token_unit = design.power(0, 1) if by == "power" else design.price(0, 1)
    candidates = []
    for prompt in range(1, int(budget / unit) + 1):
        token = math.floor((budget - prompt * unit) / token_unit + 1e-9)
        if token >= 1:
            candidates.append((prompt, token))
    if splits is not None:
        wanted = {positive_int("splits[i]", p) for p in splits}
        candidates = [c for c in candidates if c[0] in wanted]
    if not candidates:
        raise ValueError(f"a budget of {budget:g} holds no split of {design.name}'s machines")
    tried: dict[int, float] = {}

    def attempt(chosen: list[tuple[int, int]]) -> None:
        for prompt, token in chosen:
            if prompt not in tried:
                found = max_load(design, prompt, token, sizes, requests, seed, resolution=resolution)
                tried[prompt] = found["rate"]

    # More than 12 splits: every step-th first, then every split within a step of the best.
    step = max(1, math.ceil(len(candidates) / 8)) if len(candidates) > 12 else 1
    attempt(candidates[step // 2 :: step])
    if step > 1:
        best = max(tried, key=tried.__getitem__)
        attempt([c for c in candidates if abs(c[0] - best) < step])
    prompt, token = max(
        ((p, t) for p, t in candidates if p in tried),
        key=lambda c: (tried[c[0]], -design.price(*c), -design.power(*c)),
    )
    return {
        "design": design.name,
        "prompt": prompt,
        "token": token,
        "rate": tried[prompt],
        "power": design.power(prompt, token),
        "cost": design.price(prompt, token),
        "tried": tried,
    }


def splitwise_summary(
    sizes: tuple[Any, Any],
    budget_h100: float = 40,
    designs: Any = tuple(DESIGNS),
    requests: int = 4000,
    seed: int = 0,
    splits: dict[str, Any] | None = None,
    resolution: float = 0.02,
    progress: bool = False,
    by: str = "power",
) -> dict[str, Any]:
    """Fig. 18 on ``sizes``: every design provisioned at the power (``by="power"``, Fig. 18a) or
    the cost (``"cost"``, Fig. 18b) of ``budget_h100`` Baseline-H100 machines, its highest load,
    cost and power, and each relative to Baseline-A100's. ``splits`` maps a design's name to
    the prompt-machine counts to try."""
    scale = real("budget_h100", budget_h100, low=0, low_open=True)
    h100 = DESIGNS["baseline-h100"]
    budget = scale * (h100.power(1) if by == "power" else h100.price(1))
    rows = []
    with progress_bar(progress, len(designs), "splitwise", unit="design") as bar:
        for name in designs:
            bar.set_postfix_str(name)
            rows.append(
                provision_equal(name, budget, sizes, requests, seed, (splits or {}).get(name), resolution, by)
            )
            bar.update()
    base = next((r for r in rows if r["design"] == "baseline-a100"), None)
    for row in rows:
        for key in ("rate", "cost", "power"):
            row[f"{key}_vs_a100"] = row[key] / base[key] if base and base[key] else None
    return {"by": by, "budget": budget, "requests": requests, "seed": seed, "rows": rows}
