"""Bad input is refused before any work, with the same rules in every entry point.

Each case comes from an audit: an input that ran (to a schedule of infinite makespan, to times
the validator cannot check, out of memory) or was silently accepted, and is now refused with a
ValueError (or a TypeError for the wrong type) that says what was wrong and what is allowed.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import Any

import numpy as np
import pytest

import llmsched
from llmsched import ContextCostModel, LinearCostModel, Workload
from llmsched.cli import main
from llmsched.core.instance import check_instance
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.validate import validate_fused
from llmsched.experiments.sweep import sweep
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.provision import provision, provision_disaggregated
from llmsched.fleet.simulate import simulate_fleet
from llmsched.fleet.validate import validate_fleet
from llmsched.online.tuning import TunedThreshold
from llmsched.workloads import exegpt_task, gsm8k, prepare

PAPER = LinearCostModel.paper()
# Decoding reads 1e305 s per context token: every decode iteration with context is infinite.
HUGE_CONTEXT = ContextCostModel(0.01, 1e-4, 0, 0.01, 1e-4, 1e305)
SMALL = Workload([100] * 20, [50] * 20)


def _cluster(cost: Any = PAPER, **changes: Any) -> DisaggregatedCluster:
    fields = {"token_clients": 8, "kv_bytes_per_token": 1e6, "kv_bandwidth": 100.0, **changes}
    return DisaggregatedCluster(1, 1, cost, cost, **fields)


# ---------------------------------------------------------------- 1. the largest stage is finite

ENTRY_POINTS = {
    "simulate": lambda wl, cost: llmsched.simulate(wl, cost, 8),
    "simulate_fusion": lambda wl, cost: llmsched.simulate_fusion(wl, cost, 8),
    "simulate_disaggregated": lambda wl, cost: llmsched.simulate_disaggregated(wl, _cluster(cost)),
    "simulate_fleet": lambda wl, cost: simulate_fleet(wl, [Engine(cost, 8)]),
    "provision": lambda wl, cost: provision(wl, [Engine(cost, 8, name="a")], 2, slo_ttft=1.0),
    "provision_disaggregated": lambda wl, cost: provision_disaggregated(
        wl, _cluster(cost), 2, 2, slo_ttft=1.0
    ),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_cost_model_whose_longest_decode_iteration_is_out_of_range_is_refused(entry: str) -> None:
    """Every entry point refuses a cost model whose longest decode iteration the workload can
    reach (8 clients at 149 context tokens: 1.19e308 s) cannot be timed next to its shortest
    stage (it used to run to a schedule of infinite makespan), naming the call; an engine of a
    fleet refuses it already for one client at one context token (1e305 s)."""
    with pytest.raises(
        ValueError,
        match=r"ContextCostModel gives decode_iteration_time\((8, 1192|1, 1)\) = 1\.?\d*e\+30\d s .*"
        "beyond the precision the validator can check",
    ):
        ENTRY_POINTS[entry](SMALL, HUGE_CONTEXT)


def test_a_stage_that_is_not_finite_is_refused() -> None:
    """A decode iteration of infinite time at the workload's largest context is named as such."""
    cost = ContextCostModel(0.01, 1e-4, 0, 0.01, 1e-4, 1e306)
    with pytest.raises(ValueError, match=r"gave decode_iteration_time\(8, 1192\) = inf \(the longest"):
        llmsched.simulate(SMALL, cost, 8)


def test_a_kv_link_whose_transfer_is_infinite_or_too_long_is_refused() -> None:
    """A KV link of 1e-300 GB/s (a transfer of 1e299 s: the cluster used to end there) or of
    5e-324 GB/s (an infinite transfer) is refused with the figure, before the cluster runs."""
    for run in (llmsched.simulate_disaggregated, disaggregated_lower_bounds):
        with pytest.raises(
            ValueError, match=r"KV transfers of up to 2e\+300 s.*beyond the precision.*a larger kv_bandwidth"
        ):
            run(SMALL, _cluster(kv_bandwidth=1e-300))
        with pytest.raises(ValueError, match=r"KV transfer of a 100-token prompt takes inf s"):
            run(SMALL, _cluster(kv_bandwidth=5e-324))


# ---------------------------------------------------------------- 2. one precision rule everywhere

LATE = Workload([100, 50], [10, 20], arrival=[1e12, 1e12 + 1])


@pytest.mark.parametrize(
    "run",
    [
        lambda: llmsched.simulate(LATE, PAPER, 8),
        lambda: llmsched.simulate_fusion(LATE, PAPER, 8),
        lambda: llmsched.simulate_disaggregated(LATE, _cluster()),
        lambda: simulate_fleet(LATE, [Engine(PAPER, 8)]),
        lambda: simulate_fleet(LATE, [Engine(PAPER, 8, mode="fusion")]),
        lambda: provision(LATE, [Engine(PAPER, 8, name="a")], 2, slo_ttft=1.0),
    ],
    ids=["simulate", "fusion", "disaggregated", "fleet", "fused-fleet", "provision"],
)
def test_arrivals_beyond_double_precision_are_refused_everywhere(run) -> None:
    """Arrivals at 1e12 s cannot time a 25 ms stage in float64: the fleet (and provisioning)
    refuse them as simulate does, instead of a prefill of 0.026245 s for 0.0263 s."""
    with pytest.raises(ValueError, match=r"beyond the precision the validator can check.*subtract the first"):
        run()


def test_a_backoff_delay_beyond_double_precision_is_refused() -> None:
    """A backoff delay of 1e300 s puts pulled requests where no stage can be timed: refused."""
    wl = Workload([10, 20, 30], [30, 40, 50])
    with pytest.raises(ValueError, match=r"beyond the precision.*backoff delays"):
        simulate_fleet(wl, [Engine(PAPER, 1), Engine(PAPER, 1)], "jsq", Backoff(delay=1e300))


def test_a_kv_link_too_slow_for_double_precision_is_refused() -> None:
    """A KV link of 1e-290 GB/s gives finite transfers of 1e287 s, past any precision: refused."""
    with pytest.raises(ValueError, match=r"beyond the precision.*KV transfers"):
        llmsched.simulate_disaggregated(SMALL, _cluster(kv_bandwidth=1e-290))


def test_the_fleet_command_refuses_an_arrival_rate_beyond_precision(capsys) -> None:
    """llmsched fleet --arrivals poisson:1e-300 used to report a makespan of 4.5e301 s."""
    assert main(["fleet", "--requests", "20", "--workload", "exegpt:S", "--arrivals", "poisson:1e-300"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmsched: error: ") and "beyond the precision the validator can check" in err


def test_the_precision_rule_keeps_real_loads() -> None:
    """The rule refuses only what it must: GSM8K on 200 clients, an hour of Poisson arrivals
    and a fleet with backoff all run."""
    wl = gsm8k(0)
    check_instance(wl, PAPER, 200)
    stream = prepare(wl, arrivals="poisson:0.4", seed=0)
    assert float(stream.arrival.max()) > 3000
    check_instance(stream, PAPER, 200)
    small = Workload([10, 20, 30], [5, 6, 7], arrival=[0.0, 1.0, 2.0])
    assert validate_fleet(simulate_fleet(small, [Engine(PAPER, 1)] * 2, "jsq", Backoff(0.5))) == []


# ---------------------------------------------------------------- 3. memory does not grow with idle clients


def _peak_mib(run) -> float:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_disaggregated_clients_cost_nothing_until_busy() -> None:
    """A token machine's clients are built as requests take them: 100 machines of 100,000
    clients each (which used to allocate every client of every machine up front) run 40
    requests in a few MiB, and the schedule and its bounds are valid."""
    wl = exegpt_task("T", 40, 0)
    cluster = DisaggregatedCluster(1, 100, PAPER, PAPER, 10**5, 1e6, 100.0)
    out: dict[str, Any] = {}

    def run() -> None:
        out["schedule"] = llmsched.simulate_disaggregated(wl, cluster)
        out["bounds"] = disaggregated_lower_bounds(wl, cluster)

    assert _peak_mib(run) < 16
    assert validate_disaggregated(out["schedule"]) == []
    assert out["schedule"].makespan >= out["bounds"].strong


def test_a_hundred_million_token_clients_run() -> None:
    """token_clients=10**8 (a MemoryError at 3.9 GB) runs, on the library's path and through
    the command line with a million clients on each of 1,000 token machines."""
    wl = Workload([100] * 40, [20] * 40)
    schedule = llmsched.simulate_disaggregated(wl, _cluster(token_clients=10**8))
    assert validate_disaggregated(schedule) == []
    argv = ["simulate", "--workload", "exegpt:T", "--requests", "40", "--mode", "disaggregated"]
    assert main([*argv, "--clients", "1000000", "--token-machines", "1000", "--json"]) == 0


def test_fused_and_fleet_clients_cost_nothing_until_busy() -> None:
    """Fusion (its loop and its lower bound) and a fleet of engines hold nothing per idle
    client either: ten million clients run three requests in a few MiB."""
    wl = Workload([10, 20, 30], [3, 1, 4])
    out: dict[str, Any] = {}

    def run() -> None:
        out["fused"] = llmsched.simulate_fusion(wl, PAPER, 10**7)
        out["bound"] = fused_lower_bounds(wl, PAPER, 10**7, 512)
        out["fleet"] = simulate_fleet(wl, [Engine(PAPER, 10**7, mode="fusion"), Engine(PAPER, 10**7)], "jsq")

    assert _peak_mib(run) < 16
    assert validate_fused(out["fused"]) == [] and out["fused"].makespan >= out["bound"].strong
    assert validate_fleet(out["fleet"]) == []


# ---------------------------------------------------------------- 4. silently accepted


@pytest.mark.parametrize("limit", [-1, math.nan, "10"])
def test_a_fleet_time_limit_must_be_seconds(limit: Any) -> None:
    """simulate_fleet's time_limit (the qcmax router's) is a number of seconds >= 0 or inf."""
    with pytest.raises(ValueError, match=r"time_limit must be a number of seconds >= 0, got .* \(inf for no"):
        simulate_fleet(SMALL, [Engine(PAPER, 2)], time_limit=limit)


@pytest.mark.parametrize(("budget", "error"), [(-7, ValueError), (1, ValueError), ("512", TypeError)])
def test_an_engine_token_budget_is_checked_in_every_mode(budget: Any, error: type) -> None:
    """A competition engine does not use its token_budget, but a bad one is refused all the
    same (as in fusion) rather than carried along unchecked."""
    for mode in ("competition", "fusion"):
        with pytest.raises(error, match="token_budget"):
            Engine(PAPER, 2, mode=mode, token_budget=budget)


@pytest.mark.parametrize("jobs", ["2", 1.5, -100, 0, True])
def test_provision_n_jobs_is_minus_one_or_a_count(jobs: Any) -> None:
    """provision's n_jobs is -1 (every core) or a count >= 1, as sweep's and the study's:
    joblib would read "2" as 2, run 1.5 and run -100 on one worker."""
    kinds = [Engine(PAPER, 2, name="a")]
    with pytest.raises(ValueError, match=r"n_jobs must be a nonzero integer: -1 \(every core\) or a count"):
        provision(SMALL, kinds, 1, slo_ttft=1.0, method="exhaustive", n_jobs=jobs)
    with pytest.raises(ValueError, match="n_jobs"):
        provision_disaggregated(SMALL, _cluster(), 1, 1, slo_ttft=1.0, n_jobs=jobs)
    stream = SMALL.replace(arrival=np.arange(20.0))
    with pytest.raises(ValueError, match="n_jobs"):
        sweep(stream, PAPER, 2, [("fcfs", "prefill-first")], [1.0], n_jobs=jobs, progress=False)


@pytest.mark.parametrize("command", ["provision", "sweep", "study"])
def test_the_jobs_flag_is_minus_one_or_a_count(capsys, command: str) -> None:
    """--jobs -1000 was accepted (joblib runs it on one worker); -1 and counts >= 1 are allowed."""
    assert main([command, "--jobs", "-1000"]) == 2
    err = capsys.readouterr().err
    assert "argument --jobs: must be -1 (every core) or a worker count >= 1, got -1000" in err


TRACES = {
    "csv": ("prompt_tokens,output_tokens,prompt_tokens\n10,3,20\n", "prompt_tokens"),
    "vidur": (
        "arrived_at,num_prefill_tokens,num_decode_tokens,num_decode_tokens\n0,10,3,4\n",
        "num_decode_tokens",
    ),
    "splitwise": (
        "arrival_timestamp,prompt_size,token_size,arrival_timestamp\n0,10,3,1\n",
        "arrival_timestamp",
    ),
    "azure": (
        "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n2023-11-16 18:17:03.97,10,3,20\n",
        "ContextTokens",
    ),
}


@pytest.mark.parametrize("kind", TRACES)
def test_a_duplicated_column_is_refused_by_name(tmp_path, kind: str) -> None:
    """A column the loader reads, given twice, is ambiguous (the first used to win silently):
    refused with its name, by the library and on the command line."""
    text, column = TRACES[kind]
    path = tmp_path / "w.csv"
    path.write_text(text)
    loader = {"csv": "from_csv", "vidur": "from_vidur_trace", "splitwise": "from_splitwise_trace"}
    load = getattr(llmsched.workloads, loader.get(kind, "from_azure_trace"))
    with pytest.raises(ValueError, match=rf"w.csv: the column {column!r} appears 2 times in the header"):
        load(path)
    assert main(["simulate", "--workload", f"{kind}:{path}"]) == 2


SIMULATE_FLAGS = [
    (["--token-budget", "256"], "--token-budget applies to --mode fusion only"),
    (["--mode", "disaggregated", "--token-budget", "256"], "--token-budget applies to --mode fusion only"),
    (
        ["--mode", "fusion", "--prompt-machines", "2"],
        "--prompt-machines applies to --mode disaggregated only",
    ),
    (["--token-machines", "2"], "--token-machines applies to --mode disaggregated only"),
    (["--kv-bandwidth", "10"], "--kv-bandwidth applies to --mode disaggregated only"),
    (["--kv-bytes-per-token", "100"], "--kv-bytes-per-token applies to --mode disaggregated only"),
    (["--mode", "fusion", "--layers", "40"], "--layers applies to --mode disaggregated only"),
    (["--no-kv-overlap"], "--no-kv-overlap applies to --mode disaggregated only"),
    (["--mixed-pool"], "--mixed-pool applies to --mode disaggregated only"),
    (
        ["--mode", "fusion", "--iteration-policy", "lagrangian"],
        "--iteration-policy applies to --mode competition",
    ),
    (
        ["--mode", "disaggregated", "--iteration-policy", "threshold"],
        "--iteration-policy applies to --mode comp",
    ),
    (
        ["--mode", "disaggregated", "--clairvoyant"],
        "--clairvoyant applies to --mode competition, fusion, vllm, sarathi, orca or padded only",
    ),
]
FLEET_FLAGS = [
    (["provision", "--kv-bandwidth", "10"], "--kv-bandwidth applies to --mode disaggregated only"),
    (["provision", "--kv-bandwidth", "inf"], "--kv-bandwidth: must be a finite number > 0, got inf"),
    (["provision", "--kv-bytes-per-token", "100"], "--kv-bytes-per-token applies to --mode disaggregated"),
    (["provision", "--layers", "40"], "--layers applies to --mode disaggregated only"),
    (["provision", "--no-kv-overlap"], "--no-kv-overlap applies to --mode disaggregated only"),
    (["provision", "--mixed-pool"], "--mixed-pool applies to --mode disaggregated only"),
    (["provision", "--prompt-price", "2"], "--prompt-price applies to --mode disaggregated only"),
    (["provision", "--token-price", "2"], "--token-price applies to --mode disaggregated only"),
    (
        ["provision", "--mode", "disaggregated", "--router", "jsq"],
        "--router applies to --mode competition, fusion, vllm, sarathi, orca or padded only",
    ),
    (
        ["provision", "--mode", "disaggregated", "--backoff"],
        "--backoff applies to --mode competition, fusion, vllm, sarathi, orca or padded only",
    ),
    (
        ["provision", "--mode", "disaggregated", "--backoff-delay", "1"],
        "--backoff-delay applies to --mode competition, fusion, vllm, sarathi, orca or padded",
    ),
    (["provision", "--mode", "disaggregated", "--backoff-threshold", "2"], "--backoff-threshold applies to"),
    (
        ["provision", "--mode", "disaggregated", "--request-policy", "fcfs"],
        "--request-policy applies to --mode",
    ),
    (
        ["provision", "--mode", "disaggregated", "--iteration-policy", "lagrangian"],
        "--iteration-policy applies",
    ),
    (
        ["fleet", "--mode", "disaggregated"],
        "fleet runs --mode competition, fusion, vllm, sarathi, orca or padded, not --mode disaggregated",
    ),
    (
        ["provision", "--mode", "disaggregated", "--token-budget", "64"],
        "--token-budget applies to --mode fusion only",
    ),
    (
        ["provision", "--mode", "disaggregated", "--predictor", "mico"],
        "--predictor applies to --mode competition, fusion, vllm, sarathi, orca or padded only",
    ),
    (["provision", "--token-budget", "64"], "--token-budget applies to --mode fusion only"),
    (
        ["provision", "--mode", "fusion", "--iteration-policy", "threshold"],
        "--iteration-policy applies to",
    ),
    (["provision", "--kind", "a:2", "--clients", "8"], "--clients applies only without --kind"),
    (["fleet", "--token-budget", "64"], "--token-budget applies to --mode fusion only"),
    (
        ["fleet", "--mode", "fusion", "--iteration-policy", "lagrangian"],
        "--iteration-policy applies to",
    ),
    (["fleet", "--engine", "a:2", "--clients", "8"], "--clients applies only without --engine"),
    (["fleet", "--sizes", "oracle"], "--sizes applies to --router least-work, qcmax or mico only"),
]


@pytest.mark.parametrize(("flags", "message"), SIMULATE_FLAGS)
def test_simulate_refuses_a_flag_of_another_mode(capsys, flags: list[str], message: str) -> None:
    """A flag given explicitly that the chosen --mode ignores (it used to be echoed, unused) is an
    error, status 2, before any work."""
    assert main(["simulate", "--workload", "exegpt:S", "--requests", "20", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmsched: error: ") and message in err and "it would be ignored" in err


@pytest.mark.parametrize(("argv", "message"), FLEET_FLAGS)
def test_fleet_and_provision_refuse_a_flag_of_another_mode(capsys, argv: list[str], message: str) -> None:
    """fleet and provision refuse, by name, a flag their mode (--mode, the default engine or
    the router) ignores, and fleet a mode it cannot run."""
    assert main([*argv, "--requests", "20", "--workload", "exegpt:S", "--slo-ttft", "1"]) == 2
    err = capsys.readouterr().err
    assert f"llmsched: error: {message}" in err or f"llmsched: error: argument {message}" in err


def test_flags_of_the_chosen_mode_still_run(capsys) -> None:
    """The same flags with their own mode run (the refusal is of the mode, not the flag)."""
    base = ["simulate", "--workload", "exegpt:S", "--requests", "20", "--clients", "4", "--json"]
    assert main([*base, "--mode", "fusion", "--token-budget", "64", "--request-policy", "fcfs"]) == 0
    assert (
        main([*base, "--mode", "disaggregated", "--kv-bandwidth", "10", "--layers", "40", "--mixed-pool"])
        == 0
    )
    fleet = ["fleet", "--workload", "exegpt:S", "--requests", "20", "--arrivals", "poisson:4", "--json"]
    assert main([*fleet, "--mode", "fusion", "--token-budget", "64"]) == 0
    assert main([*fleet, "--router", "least-work", "--predictor", "mico", "--sizes", "oracle"]) == 0
    capsys.readouterr()


# ---------------------------------------------------------------- 5. tuning keeps the predictions


@pytest.mark.parametrize(
    "policy", ["hybrid", "offline", "sorted-preemptive", "longest-first", "shortest-first"]
)
def test_tuned_threshold_trials_keep_the_predictions(policy: str) -> None:
    """TunedThreshold's trials run on the predicted lengths with the predictions attached, so a
    request policy that plans with predictions runs in them (it raised 'the workload has no
    predicted_output')."""
    rng = np.random.default_rng(0)
    wl = Workload(
        rng.integers(10, 200, 40), rng.integers(5, 80, 40), predicted_output=rng.integers(5, 80, 40)
    )
    tuned = TunedThreshold(request_policy=policy)
    schedule = llmsched.simulate(wl, PAPER, 8, policy, tuned)
    assert llmsched.validate(schedule) == [] and tuned.trials and tuned.k in tuned.trials


def test_a_cluster_takes_the_request_policy_and_predictor_it_is_given(capsys) -> None:
    """--mode disaggregated runs each prompt machine's stages through --request-policy, with
    --predictor's predictions: what it reports is what ran."""
    argv = ["simulate", "--workload", "exegpt:S", "--requests", "20", "--mode", "disaggregated", "--json"]
    assert main([*argv, "--request-policy", "shortest-first", "--predictor", "mico"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["request_policy"] == "shortest-first" and report["iteration_policy"] is None
