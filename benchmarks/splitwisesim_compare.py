"""SplitwiseSim beside llmsched's engine simulator: the same machines, model, performance table,
trace and rates.

SplitwiseSim (the simulator of the Splitwise paper, Patel et al., ISCA 2024; MIT licence) is not
part of this repository: this script runs a checkout of it, unchanged, in a subprocess, when one is
given (``--splitwisesim DIR`` and ``--splitwisesim-python PATH``, or the environment variables
``SPLITWISESIM_DIR`` and ``SPLITWISESIM_PYTHON``; its python needs hydra-core, omegaconf, numpy,
pandas, scipy and networkx, not ray). Without one it prints the figures recorded in
``benchmarks/data/splitwisesim/``.

Both setups serve Llama-2-70B (fp16) with tensor parallelism 8 on DGX-H100 machines, timed by
SplitwiseSim's own profiled table (``performance_model=db``, ``data/perf_model.csv``):

* ``baseline``: four machines, each one SplitwiseSim ``Splitwise`` instance (prompt and token
  phases mixed; at most 512 requests and 2,048 tokens a batch), requests routed by ``token_jsq``
  (the configuration of ``configs/experiment/baseline_h100_costopt.yaml``);
* ``splitwise-hh``: Splitwise-HH on four machines, two prompt and two token machines, routed by
  the ``mixed_pool`` scheduler (``configs/experiment/splitwise_hh_costopt.yaml``).

The requests: Poisson arrivals at each rate, with (prompt, output) pairs of the Azure code trace of
2023 (``../shared/data/azure-llm-2023`` beside the repository, or ``--trace``); see
:func:`make_trace`. For each setup and rate the script prints TTFT, TBT and end-to-end latency
(p50 and p99), throughput and the simulator's wall time; with ``--llmsched`` it also runs
:func:`run_llmsched` on the same requests and prints each figure of both simulators side by side,
with the relative difference and the ratio of simulation times.

    python benchmarks/splitwisesim_compare.py [--llmsched]          # the recorded figures
    python benchmarks/splitwisesim_compare.py --splitwisesim DIR --splitwisesim-python PY \\
        [--setup baseline] [--rates 5:30:1] [--requests 4000] [--llmsched] [--record] [--frames DIR]
        [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "data" / "splitwisesim"
AZURE_CODE = HERE.parents[1] / "shared" / "data" / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"

#: Requests per rate and the rates (requests per second) of the recorded sweep.
REQUESTS = 4000
RATES = tuple(float(r) for r in range(5, 31))

#: SplitwiseSim's command-line overrides for each setup (hydra syntax, on top of the primary
#: config that :func:`run_splitwisesim` writes).
SETUPS: dict[str, tuple[str, ...]] = {
    "baseline": (
        "cluster=half_half",
        "cluster.servers.0.count=0",
        "cluster.servers.1.count=4",
        "start_state=baseline",
        "applications.0.scheduler=token_jsq",
    ),
    "splitwise-hh": (
        "cluster=half_half",
        "cluster.servers.0.count=0",
        "cluster.servers.1.count=4",
        "start_state=splitwise",
        "start_state.split_type=homogeneous",
        "start_state.prompt.num_instances=2",
        "start_state.token.num_instances=2",
        "applications.0.scheduler=mixed_pool",
    ),
}
COMMON = (
    "performance_model=db",
    "applications.0.model_architecture=llama2-70b",
    "applications.0.model_size=llama2-70b-fp16",
    "seed=0",
)

# The groups of SplitwiseSim's configs/config.yaml (cluster, performance model and start state
# set to the ones the setups use), less its ray launcher, which would need ray and a ray cluster:
# hydra's basic launcher runs the one job in the process.
PRIMARY_CONFIG = """\
defaults:
  - cluster: half_half
  - router: noop
  - arbiter: noop
  - hardware_repo: default
  - model_repo: default
  - orchestrator_repo: default
  - performance_model: db
  - power_model: constant
  - applications: solo
  - trace: test_trace
  - start_state: baseline
  - _self_

end_time: 86400
debug: false
seed: 0

hydra:
  searchpath:
    - file://{configs}
  job:
    chdir: true
"""

METRICS = (
    "ttft_p50",
    "ttft_p99",
    "tbt_p50",
    "tbt_p99",
    "e2e_p50",
    "e2e_p99",
    "throughput_rps",
    "throughput_tps",
    "offered_rps",
    "split_share",
    "prompt_on_token",
    "token_on_prompt",
    "completed",
)
#: The machines of each setup's prompt pool, numbered first (SplitwiseSim's instance ids and
#: llmsched's machines alike); the baseline has no pools.
PROMPT_MACHINES = {"baseline": None, "splitwise-hh": 2}


def make_trace(rate: float, requests: int, seed: int = 0, trace: Path | str | None = None) -> pd.DataFrame:
    """The requests of one rate: Poisson arrivals with the Azure code trace's lengths.

    Arrival gaps are exponential with mean ``1 / rate`` (``numpy.random.default_rng(seed)``,
    ``rng.exponential``), the first arrival one gap after time 0; then the (prompt, output) pairs
    are the trace's rows in the order of ``rng.permutation`` of all its rows (each row at most
    once while ``requests`` does not exceed the trace's 8,819 rows; the permutation repeats beyond
    that). The pairs stay as the trace has them, so a request's prompt and output belong together.

    Parameters
    ----------
    rate : float
        Requests per second.
    requests : int
        Number of requests.
    seed : int
        Seed of the generator; the same seed gives the same rows on any machine.
    trace : path, optional
        The Azure code trace (``TIMESTAMP,ContextTokens,GeneratedTokens``); by default the copy in
        ``../shared/data/azure-llm-2023`` beside the repository.

    Returns
    -------
    pandas.DataFrame
        One row per request, in arrival order: ``arrival_timestamp`` (seconds), ``prompt_size``
        and ``token_size`` (tokens).
    """
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive number, got {rate!r}")
    if requests < 1:
        raise ValueError(f"requests must be at least 1, got {requests!r}")
    source = pd.read_csv(AZURE_CODE if trace is None else trace)
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=requests))
    order = rng.permutation(len(source))
    rows = np.resize(order, requests)
    return pd.DataFrame(
        {
            "arrival_timestamp": arrivals,
            "prompt_size": source["ContextTokens"].to_numpy(dtype=np.int64)[rows],
            "token_size": source["GeneratedTokens"].to_numpy(dtype=np.int64)[rows],
        }
    )


def splitwisesim_trace(trace_frame: pd.DataFrame) -> pd.DataFrame:
    """``trace_frame`` in SplitwiseSim's trace format (``trace.py``, ``Request.from_dict``).

    Request ids are the row positions; every request is a generative LLM request (type 2) of
    application 0 with batch size 1.
    """
    n = len(trace_frame)
    return pd.DataFrame(
        {
            "request_id": np.arange(n),
            "request_type": np.full(n, 2),
            "application_id": np.zeros(n, dtype=np.int64),
            "arrival_timestamp": trace_frame["arrival_timestamp"].to_numpy(dtype=float),
            "batch_size": np.ones(n, dtype=np.int64),
            "prompt_size": trace_frame["prompt_size"].to_numpy(dtype=np.int64),
            "token_size": trace_frame["token_size"].to_numpy(dtype=np.int64),
        }
    )


def run_splitwisesim(
    checkout: Path | str, python: Path | str, trace_frame: pd.DataFrame, setup: str
) -> tuple[pd.DataFrame, float]:
    """Run SplitwiseSim on ``trace_frame`` in ``setup``; one row per completed request.

    SplitwiseSim runs as ``python run.py`` from ``checkout`` (it reads its configs and
    performance table there) with a primary config written to a temporary directory (the groups
    of its ``configs/config.yaml``, without the ray launcher) and that directory as hydra's run
    directory, where it writes its outputs; the checkout is left as it was.

    SplitwiseSim's figures (``scheduler.py``, ``Scheduler.get_results``; ``task.py``), all in
    simulated seconds from the request's arrival (routing delay is 0):

    * ``ttft``: until the end of the iteration that completes the prompt (which produces the
      first token), queueing included (``PromptTask.complete``);
    * ``e2e``: until the last token (the router's response time);
    * ``tbt``: ``(e2e - ttft) / token_size``: the time after the first token divided by *all*
      output tokens, not by ``token_size - 1`` (the token phase generates ``token_size - 1``
      tokens; for a transferred request it includes the KV-cache transfer).

    Parameters
    ----------
    checkout : path
        SplitwiseSim's checkout (the folder holding ``run.py``).
    python : path
        A python with SplitwiseSim's requirements.
    trace_frame : pandas.DataFrame
        As :func:`make_trace` returns.
    setup : str
        A key of :data:`SETUPS`.

    Returns
    -------
    tuple of (pandas.DataFrame, float)
        Columns ``request_id`` (the row of ``trace_frame``), ``arrival``, ``ttft``, ``e2e``,
        ``tbt``, ``prompt_size``, ``token_size``, then ``prompt_instance`` and ``token_instance``
        (SplitwiseSim's instance ids: one instance a machine, numbered in the order of the
        machines, the prompt machines first) and ``kv_transfer`` (seconds from the end of the
        prompt to the end of the KV-cache transfer, waits for memory included; 0 where both
        phases ran on one instance), ordered by request id; and the wall seconds of the
        subprocess (start-up and hydra's composition included).
    """
    checkout = Path(checkout).resolve()
    if setup not in SETUPS:
        raise ValueError(f"unknown setup {setup!r}; one of {sorted(SETUPS)}")
    if not (checkout / "run.py").is_file():
        raise FileNotFoundError(f"no SplitwiseSim run.py in {checkout}")
    with tempfile.TemporaryDirectory(prefix="splitwisesim-") as tmp:
        work = Path(tmp)
        conf = work / "conf"
        conf.mkdir()
        (conf / "compare.yaml").write_text(PRIMARY_CONFIG.format(configs=checkout / "configs"))
        trace_path = work / "trace.csv"
        splitwisesim_trace(trace_frame).to_csv(trace_path, index=False, float_format="%.17g")
        out = work / "out"
        command = [
            str(python),
            "run.py",
            "--config-path",
            str(conf),
            "--config-name",
            "compare",
            *SETUPS[setup],
            *COMMON,
            f"trace.path={trace_path}",
            f"hydra.run.dir={out}",
        ]
        start = time.perf_counter()
        env = os.environ | {"PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        detailed = out / "detailed" / "0.csv"
        if done.returncode != 0 or not detailed.is_file():
            raise RuntimeError(
                f"SplitwiseSim failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
        result = pd.read_csv(detailed)
        nodes = pd.read_csv(out / "request_nodes.csv")
    arrivals = trace_frame["arrival_timestamp"].to_numpy(dtype=float)
    ids = result["request_ids"].to_numpy(dtype=np.int64)
    frame = pd.DataFrame(
        {
            "request_id": ids,
            "arrival": arrivals[ids],
            "ttft": result["ttft_times"].to_numpy(dtype=float),
            "e2e": result["response_times"].to_numpy(dtype=float),
            "tbt": result["tbt_times"].to_numpy(dtype=float),
            "prompt_size": result["prompt_sizes"].to_numpy(dtype=np.int64),
            "token_size": result["token_sizes"].to_numpy(dtype=np.int64),
        }
    ).set_index("request_id")
    # Where each phase ran ("<processor>_<instance id>") and, for a request whose KV cache moved,
    # the time from the end of its prompt to the end of the transfer (waits for memory included).
    for phase in ("PROMPT", "TOKEN"):
        runs = nodes[nodes["node_type"] == phase].set_index("request_id")["runner"]
        frame[f"{phase.lower()}_instance"] = runs.str.rsplit("_", n=1).str[1].astype(np.int64)
    flows = nodes[nodes["node_type"] == "KVCacheTransfer"].set_index("request_id")
    prompts = nodes[nodes["node_type"] == "PROMPT"].set_index("request_id")["completion_timestamp"]
    frame["kv_transfer"] = (flows["completion_timestamp"] - prompts.reindex(flows.index)).reindex(
        frame.index, fill_value=0.0
    )
    return frame.reset_index().sort_values("request_id", ignore_index=True), seconds


#: llmsched's side of each setup: the machines and rules closest to SplitwiseSim's.
CLIENTS = 128  # batch slots: SplitwiseSim's 512 are never reached below saturation here, and
# the measured table prices decode batches up to twice its 64 (llmsched.preset(...).cost(...)).
BATCH_TOKENS = 2048  # SplitwiseSim's max_batch_tokens
LEND_ABOVE = 8192  # SplitwiseSim's prompt_max_pending_batch_tokens: past it a token machine joins prompts
KV_GBPS = 200 * 2**30 / 1e9  # SplitwiseSim's DummyLink: 200 GiB/s, no contention


_WARM: set[str] = set()  # the setups run once already (warmed up)

#: The cost model of llmsched's side: the measurements as SplitwiseSim reads them (the default,
#: so that the comparison is of the engines), or as the preset models them (``--cost preset``).
COSTS = {
    "splitwisesim": lambda: __import__("llmsched").preset("llama2-70b/h100/tp8").splitwisesim_cost(),
    "preset": lambda: __import__("llmsched").preset("llama2-70b/h100/tp8").cost(prompt_count=False),
}
COST_READING = "splitwisesim"
#: llmsched's Splitwise-HH: SplitwiseSim's mixed pool as it runs it (``mixed-pool``, the default:
#: :mod:`llmsched.fleet.mixed_pool`), or llmsched's own disaggregated cluster (``disaggregated``,
#: ``--hh-cluster disaggregated``).
HH_CLUSTER = "mixed-pool"


def llmsched_workload(trace_frame: pd.DataFrame) -> Any:
    """``trace_frame``'s requests as a llmsched workload: SplitwiseSim's ``token_size`` counts the
    token the prompt phase makes, so each request decodes ``token_size - 1`` (at least one)."""
    import llmsched

    return llmsched.Workload(
        trace_frame["prompt_size"].to_numpy(dtype=np.int64),
        np.maximum(trace_frame["token_size"].to_numpy(dtype=np.int64) - 1, 1),
        arrival=trace_frame["arrival_timestamp"].to_numpy(dtype=float),
        name="azure-code",
    )


def run_llmsched(trace_frame: pd.DataFrame, setup: str) -> tuple[pd.DataFrame, float]:
    """Run llmsched's engine simulator on ``trace_frame`` in ``setup``.

    Both setups price iterations by the same measurements as SplitwiseSim reads them
    (``llmsched.preset("llama2-70b/h100/tp8").splitwisesim_cost()``: every time keyed by the
    batch's tokens; a decode iteration of k requests read from the token times at k tokens,
    31.5 ms at one request to 29.9 ms at 128; a mixed iteration 1.1x the prompt curve), so that what
    differs is the engines; ``--cost preset`` prices them by the preset's table instead
    (``cost(prompt_count=False)``: decode by batch size and context, 55 ms at 64 requests of 1,024 tokens).

    * ``baseline``: a fleet of four engines batching as Orca does (whole prompts first, then
      decoding requests, up to 2,048 tokens an iteration, the rest sitting it out;
      ``mode="orca"``), requests routed
      as SplitwiseSim's ``token_jsq`` does (``token-jsq``: the fewest prompt tokens not yet
      prefilled plus a token a request);
    * ``splitwise-hh``: SplitwiseSim's mixed pool as it runs it
      (:func:`llmsched.fleet.mixed_pool.simulate_mixed_pool`): four machines batching as Orca
      does, two in the prompt pool and two in the token pool, each request's prompt and token
      machines picked at its arrival by SplitwiseSim's rules (a token machine joins the mixed
      pool once the prompt machines' queues pass 8,192 pending tokens, and returns when it
      holds no request), keys and values moved at 200 GiB/s after the prompt;
    * ``splitwise-hh`` with ``--hh-cluster disaggregated``: llmsched's own disaggregated
      cluster of two prompt and two token machines, prompt
      stages of several prompts capped at 2,048 tokens (a longer prompt alone), KV caches moved
      at 200 GiB/s after the prompt, with a mixed pool close to SplitwiseSim's: a token
      machine, busy or not, takes prompt stages once every prompt machine holds more than
      8,192 prompt tokens (``lend_busy_above``), pausing its decoding for them, where
      SplitwiseSim mixes them into its decode iterations; llmsched decodes a lent stage's
      requests where they were prefilled, SplitwiseSim on the token machine its router picks.

    Returns
    -------
    tuple of (pandas.DataFrame, float)
        The frame :func:`run_splitwisesim` returns (``ttft``, ``e2e`` and ``tbt`` as
        SplitwiseSim defines them: TBT is ``(e2e - ttft) / token_size``) and the process CPU
        seconds of the simulation (the wall clock of a shared machine swings), after a first
        untimed run of each setup on 20 requests (imports and the preset's fit).
    """
    import llmsched

    workload = llmsched_workload(trace_frame)
    cost = COSTS[COST_READING]()
    if setup not in _WARM:  # a first run on a few requests: imports and caches, not timed
        _WARM.add(setup)
        run_llmsched(trace_frame.head(20), setup)
    start = time.process_time()
    if setup == "baseline":
        engine = llmsched.Engine(cost, CLIENTS, mode="orca", max_num_batched_tokens=BATCH_TOKENS)
        schedule: Any = llmsched.simulate_fleet(workload, [engine] * 4, router="token-jsq")
    elif setup == "splitwise-hh" and HH_CLUSTER == "mixed-pool":
        from llmsched.experiments.splitwise import splitwise_cluster
        from llmsched.fleet.mixed_pool import simulate_mixed_pool

        schedule = simulate_mixed_pool(workload, splitwise_cluster(2, 2, cost))
    elif setup == "splitwise-hh":
        cluster = llmsched.DisaggregatedCluster(
            prompt_machines=2,
            token_machines=2,
            prompt_cost=cost,
            token_cost=cost,
            token_clients=CLIENTS,
            kv_bytes_per_token=llmsched.preset("llama2-70b/h100/tp8").kv_bytes_per_token,
            kv_bandwidth=KV_GBPS,
            overlap=False,
            mixed=True,
            prompt_batch_tokens=BATCH_TOKENS,
            lend_busy_above=LEND_ABOVE,
        )
        schedule = llmsched.simulate_disaggregated(workload, cluster)
    else:
        raise ValueError(f"unknown setup {setup!r}; expected one of {sorted(SETUPS)}")
    seconds = time.process_time() - start
    violations = schedule.validate()
    if violations:
        raise RuntimeError(f"llmsched's {setup} schedule is invalid: {violations[:3]}")
    requests = schedule.request_frame()
    frame = pd.DataFrame(
        {
            "request_id": np.arange(len(workload)),
            "arrival": workload.arrival,
            "ttft": requests["ttft"].to_numpy(dtype=float),
            "e2e": requests["e2e"].to_numpy(dtype=float),
            "prompt_size": trace_frame["prompt_size"].to_numpy(dtype=np.int64),
            "token_size": trace_frame["token_size"].to_numpy(dtype=np.int64),
        }
    )
    frame["tbt"] = (frame["e2e"] - frame["ttft"]) / frame["token_size"]
    # Where each phase ran, machines numbered as SplitwiseSim's instances (prompt machines first).
    if setup == "baseline":
        frame["prompt_instance"] = frame["token_instance"] = schedule.request_engine
    elif HH_CLUSTER == "mixed-pool":
        frame["prompt_instance"] = schedule.prompt_machine
        frame["token_instance"] = schedule.token_machine
    else:
        frame["prompt_instance"] = schedule.stage_machine[schedule.request_stage]
        frame["token_instance"] = schedule.request_machine
    return frame, seconds


def summarize(frame: pd.DataFrame, prompt_machines: int | None = None) -> dict[str, float]:
    """Percentiles and throughput of one run's per-request frame.

    Percentiles are numpy's (linear interpolation), as in SplitwiseSim's ``summary.csv``.
    Throughput counts completions (a request completes at ``arrival + e2e``) inside a window, as
    SplitwiseSim's notebooks do (``find_throughput``: TOKEN nodes completed in a window over the
    window's length): here the window runs from a tenth of the arrival span after the first
    arrival to the last arrival, which leaves out the start, when the first requests have not had
    time to finish, and the drain after the last arrival. ``throughput_rps`` is the requests
    completed in the window per second, ``throughput_tps`` their output tokens (all
    ``token_size`` of each) per second, and ``offered_rps`` the arrivals in the same window per
    second: below saturation the first follows the last; past it, it stays at the capacity.
    ``split_share`` is the share of requests whose prompt and token phases ran on different
    instances (NaN when the frame does not say where they ran); with ``prompt_machines`` (the
    machines numbered first that make the prompt pool), ``prompt_on_token`` is the share
    prefilled on a token machine (the mixed pool lending it to the prompt pool) and
    ``token_on_prompt`` the share decoded on a prompt machine (NaN without pools).

    Parameters
    ----------
    frame : pandas.DataFrame
        As :func:`run_splitwisesim` returns.

    Returns
    -------
    dict
        ``ttft_p50``, ``ttft_p99``, ``tbt_p50``, ``tbt_p99``, ``e2e_p50``, ``e2e_p99`` (seconds),
        ``throughput_rps``, ``throughput_tps``, ``offered_rps``, ``split_share``,
        ``prompt_on_token``, ``token_on_prompt`` and ``completed`` (all completed requests).
    """
    if len(frame) == 0:
        return {name: float("nan") for name in METRICS if name != "completed"} | {"completed": 0}
    figures: dict[str, float] = {}
    for name in ("ttft", "tbt", "e2e"):
        values = frame[name].to_numpy(dtype=float)
        figures[f"{name}_p50"] = float(np.percentile(values, 50))
        figures[f"{name}_p99"] = float(np.percentile(values, 99))
    arrival = frame["arrival"].to_numpy(dtype=float)
    finish = arrival + frame["e2e"].to_numpy(dtype=float)
    start = arrival.min() + (arrival.max() - arrival.min()) / 10
    stop = arrival.max()
    span = stop - start
    inside = (finish > start) & (finish <= stop)
    if span > 0:
        figures["throughput_rps"] = float(inside.sum()) / span
        figures["throughput_tps"] = float(frame["token_size"].to_numpy(dtype=float)[inside].sum()) / span
        figures["offered_rps"] = float(((arrival > start) & (arrival <= stop)).sum()) / span
    else:
        figures["throughput_rps"] = figures["throughput_tps"] = figures["offered_rps"] = float("nan")
    figures["split_share"] = figures["prompt_on_token"] = figures["token_on_prompt"] = float("nan")
    if {"prompt_instance", "token_instance"} <= set(frame.columns):
        prompt_at = frame["prompt_instance"].to_numpy()
        token_at = frame["token_instance"].to_numpy()
        figures["split_share"] = float(np.mean(prompt_at != token_at))
        if prompt_machines is not None:
            figures["prompt_on_token"] = float(np.mean(prompt_at >= prompt_machines))
            figures["token_on_prompt"] = float(np.mean(token_at < prompt_machines))
    figures["completed"] = len(frame)
    return figures


def _format(value: float) -> str:
    """Counts with thousands separators, other figures to four significant digits."""
    value = float(value)
    if value.is_integer() and abs(value) >= 100:
        return f"{int(value):,}"
    return f"{value:.4g}"


def print_side_by_side(
    setup: str,
    rate: float,
    splitwisesim: dict[str, float],
    sws_seconds: float,
    llmsched: dict[str, float] | None = None,
    llm_seconds: float | None = None,
) -> None:
    """Print each metric of one setup and rate: SplitwiseSim's, llmsched's (when given), the
    relative difference (llmsched / SplitwiseSim - 1), and the ratio of simulation times."""
    print(f"\n{setup} at {rate:g} requests/s")
    if llmsched is None:
        print(f"  {'metric':<16}{'SplitwiseSim':>14}")
        for name in METRICS:
            print(f"  {name:<16}{_format(splitwisesim.get(name, math.nan)):>14}")
        print(f"  {'sim seconds':<16}{sws_seconds:>14.2f}")
        return
    print(f"  {'metric':<16}{'SplitwiseSim':>14}{'llmsched':>14}{'rel diff':>10}")
    for name in METRICS:  # a recorded run may predate a metric: NaN
        a, b = float(splitwisesim.get(name, math.nan)), float(llmsched[name])
        rel = b / a - 1 if a else float("nan")
        print(f"  {name:<16}{_format(a):>14}{_format(b):>14}{rel:>+10.1%}")
    assert llm_seconds is not None
    print(
        f"  {'sim seconds':<16}{sws_seconds:>14.2f}{llm_seconds:>14.3f}"
        f"   SplitwiseSim / llmsched = {sws_seconds / llm_seconds:.1f}x"
    )


def _rates(text: str) -> list[float]:
    """``5:20:1`` (start, stop inclusive, step) or ``5,10,20``."""
    if ":" in text:
        start, stop, step = (float(x) for x in text.split(":"))
        count = round((stop - start) / step) + 1
        return [round(start + i * step, 9) for i in range(count)]
    return [float(x) for x in text.split(",")]


#: What the verdict holds to, below saturation: the relative difference of these metrics.
WITHIN = {
    **dict.fromkeys(("ttft_p50", "ttft_p99", "tbt_p50", "tbt_p99", "e2e_p50", "e2e_p99"), 0.10),
    "throughput_rps": 0.02,
    "throughput_tps": 0.02,
}
SATURATED = 10.0  # a side saturates at the first rate whose TTFT p99 passes this x its uncontended one
#: Each simulator's time is the fastest of this many runs (``--timing-runs``): llmsched's CPU
#: time, SplitwiseSim's wall time, start-up included (both are deterministic: every run gives the
#: same figures). On a shared machine one run's time swings by up to two times, and what swings
#: it (other work) only ever adds time: the fastest run is the closest to each one's own cost.
TIMING_RUNS = 5
#: SplitwiseSim's start-up (imports, configuration) is timed as its run of this many requests.
STARTUP_REQUESTS = 20


def _show(
    setup: str,
    rate: float,
    figures: dict,
    seconds: float,
    trace_frame: pd.DataFrame | None,
    results: list,
    seed: int = 0,
) -> None:
    """Print one setup, rate and seed; beside llmsched's figures when ``trace_frame`` is given
    (kept in ``results`` for :func:`print_verdict`)."""
    if seed:
        print(f"\n(seed {seed})", end="")
    if trace_frame is None:
        print_side_by_side(setup, rate, figures, seconds)
    else:
        llm_frame, llm_seconds = run_llmsched(trace_frame, setup)
        times = [llm_seconds] + [run_llmsched(trace_frame, setup)[1] for _ in range(TIMING_RUNS - 1)]
        llm_seconds = min(times)
        mine = summarize(llm_frame, PROMPT_MACHINES[setup])
        print_side_by_side(setup, rate, figures, seconds, mine, llm_seconds)
        results.append((setup, rate, figures, seconds, mine, llm_seconds, seed))
    sys.stdout.flush()


#: What :func:`plot_comparison` draws: per panel, its title and the metrics (p50 and p99).
PANELS = (
    ("TTFT", ("ttft_p50", "ttft_p99")),
    ("TBT", ("tbt_p50", "tbt_p99")),
    ("E2E", ("e2e_p50", "e2e_p99")),
)


def plot_comparison(results: list, path: Path | str) -> None:
    """Write a figure of both simulators' TTFT, TBT and end-to-end latency (p50 and p99, log
    scale) against the rate, a row per setup, SplitwiseSim's lines solid and llmsched's dashed,
    from :func:`_show`'s ``results``; it returns nothing and leaves pyplot's state alone."""
    from matplotlib.figure import Figure

    results = _seed_means(results)
    setups = list(dict.fromkeys(row[0] for row in results))
    figure = Figure(figsize=(12, 3.2 * len(setups)), layout="constrained")
    axes = figure.subplots(len(setups), len(PANELS), squeeze=False)
    for i, setup in enumerate(setups):
        rows = sorted((row for row in results if row[0] == setup), key=lambda row: row[1])
        rates = [row[1] for row in rows]
        for j, (title, metrics) in enumerate(PANELS):
            ax = axes[i][j]
            for metric, color in zip(metrics, ("tab:blue", "tab:red"), strict=True):
                label = metric.split("_")[1]
                ax.plot(rates, [row[2][metric] for row in rows], color=color, label=f"SplitwiseSim {label}")
                ax.plot(rates, [row[4][metric] for row in rows], "--", color=color, label=f"llmsched {label}")
            ax.set_yscale("log")
            ax.set_title(f"{setup}: {title}")
            ax.set_xlabel("requests/s")
            ax.set_ylabel("seconds")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize="small")
    figure.savefig(path, dpi=100)


def _plot(results: list, path: str | None) -> None:
    if path is None:
        return
    if not results:
        print("--plot draws the two simulators side by side: give --llmsched")
        return
    plot_comparison(results, path)
    print(f"figure written to {path}")


def _seed_means(results: list) -> list:
    """``results`` of several seeds as one seed's: per setup and rate, each side's figures the
    mean over the seeds run (every figure), its seconds the mean; seed -1. Results of one seed
    are returned as they are."""
    if len({r[6] for r in results}) <= 1:
        return results
    merged = []
    for setup, rate in dict.fromkeys((r[0], r[1]) for r in results):
        group = [r for r in results if r[0] == setup and r[1] == rate]
        theirs = {
            name: float(np.mean([r[2][name] for r in group])) for name in group[0][2] if name in METRICS
        }
        mine = {name: float(np.mean([r[4][name] for r in group])) for name in group[0][4]}
        seconds = float(np.mean([r[3] for r in group]))
        merged.append((setup, rate, theirs, seconds, mine, float(np.mean([r[5] for r in group])), -1))
    return merged


def print_verdict(results: list, same_run: bool, startup: dict[str, float] | None = None) -> None:
    """Per setup: where each side saturates (the first rate whose TTFT p99 passes
    :data:`SATURATED` times its value at the lowest rate run, the uncontended one), and, over
    the rates where neither has, every metric of :data:`WITHIN` outside its tolerance, and the
    least ratio of simulation times (``same_run``: SplitwiseSim ran in this run); with
    ``startup`` (SplitwiseSim's seconds for a run of :data:`STARTUP_REQUESTS` requests, per
    setup: its start-up, imports and configuration), the ratio without it too.

    With several seeds, the verdict of each seed, then that of the means over the seeds: each
    figure of each side averaged over the seeds at each setup and rate, so that the tails of
    one seed's 4,000 requests (a p99 swings by 20% from seed to seed) weigh less."""
    seeds = sorted({r[6] for r in results})
    if len(seeds) > 1:
        for seed in seeds:
            print(f"\n(seed {seed})", end="")
            _verdict([r for r in results if r[6] == seed], same_run, startup)
        print(f"\n(the means over seeds {', '.join(str(seed) for seed in seeds)})", end="")
        _verdict(_seed_means(results), same_run, None)
        return
    _verdict(results, same_run, startup)


def _verdict(results: list, same_run: bool, startup: dict[str, float] | None) -> None:
    for setup in dict.fromkeys(r[0] for r in results):
        rows = sorted((r for r in results if r[0] == setup), key=lambda r: r[1])
        if not rows:
            continue
        base_s, base_l = rows[0][2]["ttft_p99"], rows[0][4]["ttft_p99"]
        sat_s = next((r[1] for r in rows if r[2]["ttft_p99"] > SATURATED * base_s), None)
        sat_l = next((r[1] for r in rows if r[4]["ttft_p99"] > SATURATED * base_l), None)
        below = [
            r
            for r in rows
            if r[2]["ttft_p99"] <= SATURATED * base_s and r[4]["ttft_p99"] <= SATURATED * base_l
        ]
        misses = []
        for _, rate, theirs, _, mine, _, _ in below:
            for name, tolerance in WITHIN.items():
                rel = float(mine[name]) / float(theirs[name]) - 1
                if abs(rel) > tolerance:
                    misses.append(f"{name} {rel:+.1%} at {rate:g}")
        ratios = [r[3] / r[5] for r in rows]
        print(f"\nverdict, {setup}: rates {rows[0][1]:g}-{rows[-1][1]:g}")
        shown = ["none" if sat is None else f"{sat:g}" for sat in (sat_s, sat_l)]
        print(
            f"  saturation (TTFT p99 > {SATURATED:g}x that at {rows[0][1]:g}/s): SplitwiseSim at "
            f"{shown[0]}, llmsched at {shown[1]}"
        )
        print(
            f"  below it ({', '.join(f'{r[1]:g}' for r in below) or 'no rate'}): "
            + (
                "every metric within tolerance"
                if not misses
                else f"{len(misses)} outside: " + "; ".join(misses)
            )
        )
        print(
            f"  simulation time, SplitwiseSim / llmsched (the fastest of {TIMING_RUNS} runs each): "
            f"{min(ratios):.1f}x to {max(ratios):.1f}x"
            + ("" if same_run else " (SplitwiseSim's recorded seconds, not this run's)")
        )
        if startup and setup in startup:
            fixed = startup[setup]
            bare = [(r[3] - fixed) / r[5] for r in rows]
            print(
                f"  without SplitwiseSim's start-up ({fixed:.2f} s, its run of {STARTUP_REQUESTS} "
                f"requests): {min(bare):.1f}x to {max(bare):.1f}x"
            )


def main() -> int:
    # The reading run_llmsched uses, chosen once here.
    global COST_READING, HH_CLUSTER, TIMING_RUNS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splitwisesim", default=os.environ.get("SPLITWISESIM_DIR"), help="checkout")
    parser.add_argument(
        "--splitwisesim-python",
        default=os.environ.get("SPLITWISESIM_PYTHON", sys.executable),
        help="python with SplitwiseSim's requirements",
    )
    parser.add_argument("--setup", choices=sorted(SETUPS), action="append", help="default: both")
    parser.add_argument(
        "--rates", help=f"start:stop:step or a,b,c (default {RATES[0]:g}:{RATES[-1]:g}:1, or all recorded)"
    )
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument(
        "--timing-runs",
        type=int,
        default=TIMING_RUNS,
        help=f"runs of each simulator whose fastest is its time (default {TIMING_RUNS}; SplitwiseSim's "
        "recorded seconds are one run's)",
    )
    parser.add_argument(
        "--seed",
        "--seeds",
        dest="seeds",
        default="0",
        help="the seed of the requests' arrivals and sizes, or several (a,b,c or first:last): the "
        "verdict is then each seed's and that of the means over them (default 0)",
    )
    parser.add_argument("--trace", default=str(AZURE_CODE), help="the Azure code trace")
    parser.add_argument("--llmsched", action="store_true", help="also run run_llmsched side by side")
    parser.add_argument("--record", action="store_true", help=f"write the summaries to {RECORDED}")
    parser.add_argument("--frames", help="also write each run's per-request frame (gzipped CSV) here")
    parser.add_argument(
        "--plot", help="with --llmsched: write a figure of both simulators' latencies against the rate here"
    )
    parser.add_argument(
        "--cost",
        choices=sorted(COSTS),
        default=COST_READING,
        help="llmsched's cost model: the measurements as SplitwiseSim reads them (decode keyed by the "
        "batch's tokens; default), or the preset's table (decode by batch size and context)",
    )
    parser.add_argument(
        "--hh-cluster",
        choices=("mixed-pool", "disaggregated"),
        default=HH_CLUSTER,
        help="llmsched's Splitwise-HH: SplitwiseSim's mixed pool as it runs it (default), or "
        "llmsched's own disaggregated cluster",
    )
    args = parser.parse_args()
    seeds = [int(seed) for seed in _rates(args.seeds if ":" not in args.seeds else f"{args.seeds}:1")]
    COST_READING = args.cost
    if args.timing_runs < 1:
        parser.error(f"--timing-runs must be at least 1, got {args.timing_runs}")
    TIMING_RUNS = args.timing_runs
    HH_CLUSTER = args.hh_cluster
    setups = args.setup or list(SETUPS)
    if args.llmsched and not Path(args.trace).is_file():
        print(f"the Azure code trace is not at {args.trace}; give it with --trace")
        return 1

    if not args.splitwisesim or not (Path(args.splitwisesim) / "run.py").is_file():
        # The recorded runs: REQUESTS requests a rate and seed; llmsched gets the same requests.
        recorded = RECORDED / "summary.csv"
        print("no SplitwiseSim checkout given (--splitwisesim or SPLITWISESIM_DIR); recorded figures")
        print(f"({recorded}; {RECORDED / 'README.md'} tells how they were made)")
        table = read_recorded(recorded)
        results: list = []
        wanted = None if args.rates is None else set(_rates(args.rates))
        missing = sorted(set(seeds) - set(table["seed"]))
        if missing:
            print(
                f"no recorded run of seed {', '.join(map(str, missing))}; recorded seeds: "
                f"{', '.join(map(str, sorted(set(table['seed']))))}"
            )
            return 1
        for (setup, rate, seed), row in table.groupby(["setup", "rate", "seed"], sort=False):
            if setup in setups and (wanted is None or rate in wanted) and seed in seeds:
                figures = row.iloc[0].to_dict()
                trace_frame = (
                    make_trace(rate, REQUESTS, int(seed), trace=args.trace) if args.llmsched else None
                )
                _show(setup, rate, figures, float(figures["sim_seconds"]), trace_frame, results, int(seed))
        print_verdict(results, same_run=False)
        _plot(results, args.plot)
        return 0
    if not Path(args.trace).is_file():
        print(f"the Azure code trace is not at {args.trace}; give it with --trace")
        return 1

    rows = []
    results = []
    startup: dict[str, float] = {}
    rates = _rates(args.rates or f"{RATES[0]:g}:{RATES[-1]:g}:1")
    for setup in setups:
        if args.llmsched:
            tiny = make_trace(rates[0], STARTUP_REQUESTS, seeds[0], trace=args.trace)
            startup[setup] = min(
                run_splitwisesim(args.splitwisesim, args.splitwisesim_python, tiny, setup)[1]
                for _ in range(TIMING_RUNS)
            )
        for seed in seeds:
            for rate in rates:
                trace_frame = make_trace(rate, args.requests, seed, trace=args.trace)
                frame, seconds = run_splitwisesim(
                    args.splitwisesim, args.splitwisesim_python, trace_frame, setup
                )
                if args.llmsched:  # timed: the fastest of TIMING_RUNS runs (the figures are the same)
                    again = (args.splitwisesim, args.splitwisesim_python, trace_frame, setup)
                    seconds = min([seconds] + [run_splitwisesim(*again)[1] for _ in range(TIMING_RUNS - 1)])
                figures = summarize(frame, PROMPT_MACHINES[setup])
                if args.frames:
                    Path(args.frames).mkdir(parents=True, exist_ok=True)
                    name = f"{setup}_{rate:g}_{args.requests}_{seed}.csv.gz"
                    frame.to_csv(Path(args.frames) / name, index=False, float_format="%.9g")
                rows.append({"setup": setup, "rate": rate, "seed": seed, **figures, "sim_seconds": seconds})
                _show(setup, rate, figures, seconds, trace_frame if args.llmsched else None, results, seed)
    print_verdict(results, same_run=True, startup=startup)
    _plot(results, args.plot)
    if args.record:
        if args.requests != REQUESTS:
            print(f"not recorded: the recording holds runs of {REQUESTS} requests")
            return 1
        record(RECORDED / "summary.csv", pd.DataFrame(rows))
    return 0


def read_recorded(path: Path) -> pd.DataFrame:
    """The recorded summaries, with a ``seed`` column (0 where a recording predates it)."""
    table = pd.read_csv(path)
    if "seed" not in table.columns:
        table.insert(2, "seed", 0)
    table["seed"] = table["seed"].fillna(0).astype(int)
    return table


def record(path: Path, rows: pd.DataFrame) -> None:
    """Merge ``rows`` into the recording at ``path``: a run of the same setup, rate and seed is
    replaced, the others kept; rows in setup, seed and rate order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = read_recorded(path) if path.is_file() else rows.iloc[:0]
    key = ["setup", "rate", "seed"]
    kept = table.merge(rows[key], on=key, how="left", indicator=True)
    kept = table[(kept["_merge"] == "left_only").to_numpy()]
    merged = pd.concat([kept, rows], ignore_index=True)
    order = {setup: i for i, setup in enumerate(SETUPS)}
    merged = merged.sort_values(
        ["setup", "seed", "rate"], key=lambda col: col.map(order) if col.name == "setup" else col
    )
    merged[[*key, *(c for c in merged.columns if c not in key)]].to_csv(
        path, index=False, float_format="%.6g"
    )


if __name__ == "__main__":
    sys.exit(main())
