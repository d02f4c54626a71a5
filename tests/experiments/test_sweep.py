"""Latency-load sweeps: rows, backends, progress, the figure and the ``llmsched sweep`` command."""

from __future__ import annotations

import json
import re
import time

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from llmsched import LinearCostModel, Workload, simulate, workloads
from llmsched.cli import main
from llmsched.core.memory import KVMemory
from llmsched.experiments.sweep import COLUMNS, parse_policy, plot_sweep, run_case, sweep
from llmsched.workloads import prepare

COST = LinearCostModel.paper()
POLICIES = ["fcfs/prefill-first", ("hybrid-oracle", "lagrangian")]
RATES = [0.5, 1.0, 2.0]


@pytest.fixture(scope="module")
def workload() -> Workload:
    return prepare(workloads.gsm8k_like(60, seed=3), arrivals="poisson:2", seed=1)


@pytest.fixture(scope="module")
def frame(workload) -> pd.DataFrame:
    return sweep(workload, COST, 8, POLICIES, RATES, slo_ttft=1.0, slo_tbt=0.05, progress=False)


def test_one_row_per_rate_and_policy_in_order(frame, workload) -> None:
    """Rows run over the rates as given, and within each over the policies; each row is the
    summary of the schedule simulated on arrivals divided by the multiplier."""
    assert list(frame.columns) == list(COLUMNS)
    assert frame["rate_scale"].tolist() == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]
    assert frame["request_policy"].tolist() == ["fcfs", "hybrid-oracle"] * 3
    assert frame["iteration_policy"].tolist() == ["prefill-first", "lagrangian"] * 3
    row = frame.iloc[5]
    schedule = simulate(
        workload.replace(arrival=workload.arrival / 2.0), COST, 8, "hybrid-oracle", "lagrangian"
    )
    summary = schedule.summary(slo_ttft=1.0, slo_tbt=0.05)
    for key in ("makespan_s", "ttft_p99_s", "tbt_p99_s", "e2e_p50_s", "goodput_rps", "slo_attainment"):
        assert row[key] == summary[key], key
    assert (row["slo_ttft_s"], row["slo_tbt_s"]) == (1.0, 0.05)
    # The offered load doubles with the multiplier; the trace's own rate is about 2 requests/s.
    offered = frame["offered_rps"].to_numpy()
    np.testing.assert_allclose(offered[2:4] / offered[0:2], 2.0)
    np.testing.assert_allclose(offered[4:6] / offered[0:2], 4.0)
    assert 1.0 < offered[2] < 4.0


def test_an_idle_engine_gives_each_request_its_own_prefill_and_decode_times() -> None:
    """Requests a hundred seconds apart never meet: each TTFT is its prefill time, every gap
    between tokens one single-client iteration, and all requests meet generous targets."""
    prompts = [50, 400, 120, 900, 3]
    load = Workload(prompts, [5, 1, 9, 2, 4], arrival=np.arange(5.0))
    row = sweep(load, COST, 4, "fcfs/prefill-first", [0.01], slo_ttft=1.0, slo_tbt=0.1, progress=False).iloc[
        0
    ]
    ttft = [COST.prefill_time(p) for p in prompts]
    assert row["ttft_p50_s"] == pytest.approx(np.percentile(ttft, 50), rel=1e-12)
    assert row["ttft_p99_s"] == pytest.approx(np.percentile(ttft, 99), rel=1e-12)
    one = COST.decode_iteration_time(1)
    for key in ("tbt_mean_s", "tbt_p50_s", "tbt_p99_s"):
        assert row[key] == pytest.approx(one, rel=1e-9)
    assert row["slo_attainment"] == 1.0 and row["offered_rps"] == pytest.approx(0.01)


@pytest.mark.parametrize(("n_jobs", "backend"), [(2, "threading"), (2, "loky")])
def test_rows_do_not_depend_on_the_backend(frame, workload, n_jobs, backend) -> None:
    """The same rows, in the same order, in threads or in worker processes."""
    again = sweep(
        workload, COST, 8, POLICIES, RATES, slo_ttft=1.0, slo_tbt=0.05, n_jobs=n_jobs, backend=backend,
        progress=False,
    )  # fmt: skip
    pd.testing.assert_frame_equal(again, frame)


def _children() -> set[int]:
    """Processes below this one, but multiprocessing's resource tracker: one per interpreter,
    started with the first worker process and kept until the interpreter exits."""
    import psutil

    return {
        child.pid
        for child in psutil.Process().children(recursive=True)
        if "multiprocessing.resource_tracker" not in " ".join(child.cmdline())
    }


def _wait_gone(pids: set[int], timeout: float = 20.0) -> set[int]:
    import psutil

    deadline = time.monotonic() + timeout
    alive = {pid for pid in pids if psutil.pid_exists(pid)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {pid for pid in alive if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"}
    return alive


def test_a_dask_cluster_gives_the_serial_rows_and_is_shut_down(frame, workload) -> None:
    """On a two-worker Dask cluster (worker processes) the cases run as Dask tasks and give
    the serial rows; once closed, no worker process is left."""
    distributed = pytest.importorskip("distributed")
    before = _children()
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        started = _children() - before
        assert len(started) >= 2
        with distributed.get_task_stream(client) as tasks:
            on_dask = sweep(
                workload, COST, 8, POLICIES, RATES, slo_ttft=1.0, slo_tbt=0.05, backend="dask",
                progress=False,
            )  # fmt: skip
        assert len(tasks.data) >= 1
        workers = {task["worker"] for task in tasks.data}
        assert workers <= set(client.scheduler_info()["workers"])
    pd.testing.assert_frame_equal(on_dask, frame)
    assert _wait_gone(started) == set()


def test_progress_bar_counts_finished_cases(workload, capsys) -> None:
    """The bar runs to the number of cases, in this process and with workers; progress=False
    prints nothing."""
    sweep(workload, COST, 8, POLICIES, RATES, progress=True)
    assert "6/6" in capsys.readouterr().err
    sweep(workload, COST, 8, POLICIES, RATES, n_jobs=2, backend="threading", progress=True)
    assert "6/6" in capsys.readouterr().err
    sweep(workload, COST, 8, POLICIES, [1.0], progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"policies": ["fcfs"]}, ValueError, "a policy spec is 'REQUEST/ITERATION'"),
        ({"policies": ["fcfs/prefill-first/x"]}, ValueError, "a policy spec is 'REQUEST/ITERATION'"),
        ({"policies": ["sjf/prefill-first"]}, ValueError, "unknown request policy 'sjf'"),
        ({"policies": [("fcfs", "sometimes")]}, ValueError, "unknown iteration policy 'sometimes'"),
        ({"policies": [("fcfs",)]}, TypeError, "a policy must be a"),
        ({"policies": [("fcfs", 3)]}, TypeError, "iteration policy must be a str"),
        ({"policies": []}, ValueError, "policies is empty"),
        ({"policies": ["fcfs/prefill-first", ("fcfs", "prefill-first")]}, ValueError, "given twice"),
        ({"rates": [0.5, 0.0]}, ValueError, r"rates\[1\] is 0.0; values must be > 0"),
        ({"rates": [1.0, np.nan]}, ValueError, "values must be finite"),
        ({"rates": []}, ValueError, "rates is empty"),
        ({"rates": [1, 1.0]}, ValueError, "rates holds a multiplier twice"),
        ({"slo_ttft": 0.0}, ValueError, "slo_ttft must be a number > 0"),
        ({"slo_tbt": "fast"}, TypeError, "slo_tbt must be a number > 0"),
        ({"n_jobs": 0}, ValueError, "n_jobs must be a nonzero integer"),
        ({"clients": 0}, ValueError, "clients must be at least 1"),
        ({"progress": "yes"}, TypeError, "progress must be True or False"),
        ({"memory": KVMemory(2, 4)}, ValueError, "more than the .* KV-cache memory"),
        (
            {"memory": KVMemory(900, 4), "policies": ["hybrid/prefill-first"]},
            ValueError,
            "plans over the whole workload",
        ),
        ({"memory": KVMemory(900, 4), "mode": "disaggregated"}, ValueError, "machines have no KV-cache"),
        ({"chunked_prefill": True}, ValueError, "chunked_prefill applies to vllm"),
        ({"chunked_prefill": True, "mode": "fusion", "policies": ["fcfs"]}, ValueError, "mode fusion would"),
    ],
)
def test_bad_arguments_are_refused_before_any_case(workload, kwargs, error, message) -> None:
    """Each bad argument is refused by name, before a case runs."""
    args = {"policies": POLICIES, "rates": RATES, "clients": 8, "progress": False, **kwargs}
    with pytest.raises(error, match=message):
        sweep(workload, COST, **args)


def test_an_offline_batch_has_no_rate_to_scale() -> None:
    """A workload whose requests all arrive at once cannot be swept over rates (every row
    would be the same); at its own rate alone it runs, with no offered rate."""
    batch = workloads.gsm8k_like(20, seed=0)
    with pytest.raises(ValueError, match=r"all arrive at once.*poisson:RATE"):
        sweep(batch, COST, 4, POLICIES, RATES, progress=False)
    frame = sweep(batch, COST, 4, POLICIES, [1], progress=False)
    assert len(frame) == 2 and frame["offered_rps"].isna().all()
    with pytest.raises(ValueError, match="offered_rps is undefined"):
        plot_sweep(frame, x="offered_rps")


def test_an_invalid_schedule_is_an_error(workload, monkeypatch) -> None:
    """A schedule the validator refuses stops the sweep with the case and the violations."""
    import importlib

    from llmsched.core.violations import Violation

    # The package's name ``validate`` is the function; the module is in sys.modules.
    monkeypatch.setattr(
        importlib.import_module("llmsched.engines.competition.validate"),
        "validate",
        lambda schedule: [Violation("capacity", "too many")],
    )
    with pytest.raises(RuntimeError, match=r"fcfs/prefill-first at rate x0.5: invalid schedule.*too many"):
        run_case(workload, COST, 8, "fcfs", "prefill-first", 0.5)


def test_parse_policy_accepts_pairs_and_specs() -> None:
    """A spec and a pair name the same policies."""
    assert (
        parse_policy("hybrid/lagrangian")
        == parse_policy(("hybrid", "lagrangian"))
        == ("hybrid", "lagrangian")
    )


# ------------------------------------------------------------------ the figure
def test_plot_sweep_draws_one_line_per_policy_without_pyplot(frame, svg_backend, tmp_path) -> None:
    """One line per policy over the rates (sorted), the TTFT target dashed; the figure is not
    registered with pyplot and the caller's backend stays."""
    figures = plt.get_fignums()
    fig = plot_sweep(frame, metric="ttft_p99_s")
    assert isinstance(fig, Figure) and plt.get_fignums() == figures
    assert matplotlib.get_backend() == svg_backend
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"fcfs/prefill-first", "hybrid-oracle/lagrangian", "TTFT target"}
    fcfs = lines["fcfs/prefill-first"]
    assert list(fcfs.get_xdata()) == RATES
    assert list(fcfs.get_ydata()) == frame[frame["request_policy"] == "fcfs"]["ttft_p99_s"].tolist()
    assert list(lines["TTFT target"].get_ydata()) == [1.0, 1.0]
    fig.savefig(tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    offered = plot_sweep(frame, metric="goodput_rps", x="offered_rps", log_y=True).axes[0]
    assert offered.get_xlabel() == "offered load (requests/s)" and offered.get_yscale() == "log"
    assert "TTFT target" not in [line.get_label() for line in offered.get_lines()]


def test_plot_sweep_on_the_callers_axes(frame) -> None:
    """Given axes, the curves go there and their figure comes back."""
    fig, axes = plt.subplots(1, 2)
    assert plot_sweep(frame, metric="tbt_p99_s", ax=axes[1], title="TBT") is fig
    assert axes[0].get_lines() == [] and axes[1].get_title() == "TBT"
    assert "TBT target" in [line.get_label() for line in axes[1].get_lines()]
    plt.close(fig)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": "request_policy"}, "metric must be a numeric column"),
        ({"metric": "p99"}, "metric must be a numeric column"),
        ({"x": "time"}, r"x must be one of \['rate_scale', 'offered_rps'\]"),
    ],
)
def test_plot_sweep_refuses_bad_columns(frame, kwargs, message) -> None:
    """Unknown metrics and axes are refused, naming what is allowed."""
    with pytest.raises(ValueError, match=message):
        plot_sweep(frame, **kwargs)


def test_plot_sweep_wants_a_sweep_frame() -> None:
    """Anything but a sweep's frame is refused."""
    with pytest.raises(TypeError, match="frame must be a DataFrame"):
        plot_sweep([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected the DataFrame of sweep"):
        plot_sweep(pd.DataFrame({"rate_scale": [1.0]}))


# ------------------------------------------------------------------ the command
SWEEP = ["sweep", "--workload", "exegpt:S", "--requests", "60", "--clients", "8", "--arrivals", "poisson:3"]
SWEEP += ["--policy", "fcfs/prefill-first", "--policy", "hybrid-oracle/lagrangian"]
SWEEP += ["--rates", "0.5,1,2"]


def test_sweep_command_json_and_plot(capsys, tmp_path) -> None:
    """--json prints the settings and one row per (rate, policy); --plot writes the figure."""
    png = tmp_path / "sweep.png"
    argv = [*SWEEP, "--slo-ttft", "1", "--slo-tbt-mean", "0.1", "--jobs", "1", "--json", "--no-progress"]
    assert main([*argv, "--plot", str(png), "--metric", "e2e_p99_s"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert captured.err == ""
    assert report["policies"] == ["fcfs/prefill-first", "hybrid-oracle/lagrangian"]
    assert report["rates"] == [0.5, 1.0, 2.0] and report["arrivals"] == "poisson:3"
    assert len(report["rows"]) == 6 and list(report["rows"][0]) == list(COLUMNS)
    assert [row["rate_scale"] for row in report["rows"]] == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]
    assert report["rows"][0]["slo_ttft_s"] == 1.0 and 0 <= report["rows"][0]["slo_attainment"] <= 1
    assert png.read_bytes()[:4] == b"\x89PNG" and report["plot"] == str(png)


def test_sweep_command_text(capsys) -> None:
    """The text report is a table of the rows, with goodput when targets are given."""
    assert main([*SWEEP, "--jobs", "1", "--no-progress", "--slo-ttft", "2"]) == 0
    text = capsys.readouterr().out
    assert "6 cases" in text and "hybrid-oracle/lagrangian" in text and "goodput_rps" in text


def test_sweep_command_on_a_local_dask_cluster(capsys) -> None:
    """--backend dask without an address starts a local cluster of --jobs workers, gives the
    rows the serial run gives, and leaves no process behind."""
    pytest.importorskip("distributed")
    argv = [*SWEEP, "--json", "--no-progress"]
    assert main([*argv, "--jobs", "1"]) == 0
    serial = json.loads(capsys.readouterr().out)["rows"]
    before = _children()
    assert main([*argv, "--jobs", "2", "--backend", "dask"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == serial
    assert _wait_gone(_children() - before) == set()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rates", "0.5,0"], "argument --rates: each rate must be a finite number > 0, got '0'"),
        (["--rates", "1,fast"], "argument --rates: must be comma-separated numbers > 0"),
        (["--slo-ttft", "0"], r"argument --slo-ttft: must be a finite number > 0, got 0"),
        (["--arrivals", "poisson:inf"], r"argument --arrivals: .*rate must be a finite number > 0"),
        (["--backend", "spark"], "argument --backend: invalid choice: 'spark'"),
        (["--metric", "speed"], "argument --metric: invalid choice: 'speed'"),
        (["--policy", "fcfs"], "a policy spec is 'REQUEST/ITERATION'"),
        (["--policy", "sjf/prefill-first"], "unknown request policy 'sjf'"),
        (["--dask-address", "tcp://127.0.0.1:1"], "--dask-address needs --backend dask"),
        (["--plot", "/nonexistent-folder/s.png"], "--plot '/nonexistent-folder/s.png': folder"),
    ],
)
def test_sweep_command_refuses_bad_arguments(capsys, argv, message) -> None:
    """Bad flags give status 2 and a message naming the flag."""
    assert main([*SWEEP, "--jobs", "1", "--no-progress", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_sweep_command_checks_before_the_work(capsys, monkeypatch) -> None:
    """A --plot folder that does not exist is refused before any case runs, and an offline
    workload without --arrivals is told what to pass."""
    import llmsched.experiments.sweep

    def no_work(*args, **kwargs):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(llmsched.experiments.sweep, "sweep", no_work)
    assert main([*SWEEP, "--plot", "/nonexistent-folder/s.png"]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.undo()
    assert main(["sweep", "--workload", "gsm8k", "--clients", "8", "--no-progress", "--jobs", "1"]) == 2
    assert "--arrivals poisson:RATE" in capsys.readouterr().err


def test_sweep_command_attaches_predictions_and_clips(capsys) -> None:
    """--predictor gives the policies that plan with predictions something to plan with, as
    simulate's does; a policy that plans with the truth refuses a predictor it would not use."""
    argv = [
        "sweep",
        "--workload",
        "exegpt:S",
        "--requests",
        "40",
        "--arrivals",
        "poisson:2",
        "--clients",
        "6",
    ]
    argv += ["--policy", "hybrid/lagrangian", "--rates", "1,2", "--jobs", "1", "--json", "--no-progress"]
    assert main([*argv, "--predictor", "mico", "--max-prompt", "300"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["predictor"] == "mico" and report["max_prompt"] == 300 and len(report["rows"]) == 2
    assert main(argv) == 2  # hybrid without predictions
    assert "no predicted_output" in capsys.readouterr().err
    assert main([*argv[:-8], "--policy", "hybrid-oracle/lagrangian", "--predictor", "mico", "--json"]) == 2
    assert "would go unused" in capsys.readouterr().err


def test_missing_predictions_are_refused_before_any_case(workload, monkeypatch) -> None:
    """A policy that plans with predictions on a workload without any is refused up front,
    not when its case comes up."""
    calls = []
    monkeypatch.setattr("llmsched.experiments.sweep.run_case", lambda *args: calls.append(args))
    with pytest.raises(ValueError, match="no predicted_output"):
        sweep(workload, COST, 8, ["fcfs/prefill-first", "hybrid/lagrangian"], [1.0], progress=False)
    assert not calls


def test_the_slo_rule_serves_the_sweeps_ttft_target(workload) -> None:
    """With a TTFT target, the slo rule runs with it (and differs from its default of 1 s)."""
    tight = run_case(workload, COST, 8, "fcfs", "slo", 1.0, slo_ttft=0.05)
    default = run_case(workload, COST, 8, "fcfs", "slo", 1.0)
    assert tight["ttft_p99_s"] < default["ttft_p99_s"]


# ------------------------------------------------------------------ other engine modes
def test_a_fused_sweep_runs_each_request_policy_on_a_fused_engine(workload) -> None:
    """mode="fusion": one row per (rate, request policy), no iteration policy; each row is the
    fused engine's summary on the scaled arrivals, at the sweep's budget."""
    from llmsched import simulate_fusion

    frame = sweep(
        workload, COST, 8, ["fcfs", "shortest-first-oracle"], RATES, slo_ttft=1.0, progress=False,
        mode="fusion", token_budget=256,
    )  # fmt: skip
    assert frame["request_policy"].tolist() == ["fcfs", "shortest-first-oracle"] * 3
    assert frame["iteration_policy"].isna().all()
    scaled = workload.replace(arrival=workload.arrival / 2.0)
    summary = simulate_fusion(scaled, COST, 8, "shortest-first-oracle", 256).summary(slo_ttft=1.0)
    row = frame.iloc[5]
    for key in ("makespan_s", "ttft_p99_s", "tbt_p99_s", "goodput_rps", "utilization"):
        assert row[key] == summary[key], key
    competition = sweep(workload, COST, 8, ["fcfs/prefill-first"], [2.0], slo_ttft=1.0, progress=False)
    assert competition.iloc[0]["makespan_s"] != frame.iloc[4]["makespan_s"]
    lines = [line.get_label() for line in plot_sweep(frame).axes[0].get_lines()]
    assert lines[:2] == ["fcfs", "shortest-first-oracle"]


def test_a_disaggregated_sweep_runs_the_cluster_at_each_rate(workload) -> None:
    """mode="disaggregated": one row per rate and request policy on the cluster (each prompt
    machine takes its stages through the policy), each its schedule's summary; more prompt
    machines shorten the TTFT under load."""
    from llmsched import simulate_disaggregated
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

    cluster = DisaggregatedCluster(1, 2, COST, COST, 8, 2621440.0, 25.0)
    frame = sweep(
        workload,
        COST,
        8,
        ["fcfs", "shortest-first-oracle"],
        RATES,
        progress=False,
        mode="disaggregated",
        cluster=cluster,
    )
    assert frame["request_policy"].tolist() == ["fcfs", "shortest-first-oracle"] * 3
    assert frame["iteration_policy"].isna().all()
    scaled = workload.replace(arrival=workload.arrival / 2.0)
    summary = simulate_disaggregated(scaled, cluster).summary()
    shortest = simulate_disaggregated(scaled, cluster, "shortest-first-oracle").summary()
    assert frame.iloc[5]["ttft_p99_s"] == shortest["ttft_p99_s"]
    for key in ("makespan_s", "ttft_p99_s", "tbt_p99_s", "e2e_p50_s"):
        assert frame.iloc[4][key] == summary[key], key
    wider = DisaggregatedCluster(3, 2, COST, COST, 8, 2621440.0, 25.0)
    more = sweep(workload, COST, 8, ["fcfs"], [2.0], progress=False, mode="disaggregated", cluster=wider)
    assert more.iloc[0]["ttft_p99_s"] < frame.iloc[4]["ttft_p99_s"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "sideways"}, ValueError, "mode must be one of"),
        ({"mode": "fusion"}, ValueError, "a fused engine or a cluster has no iteration policy"),
        (
            {"mode": "fusion", "policies": ["fcfs"], "token_budget": 1},
            ValueError,
            "token_budget must be at least 2",
        ),
        ({"mode": "disaggregated"}, ValueError, "a fused engine or a cluster has no iteration policy"),
        (
            {"mode": "disaggregated", "policies": ["fcfs"]},
            TypeError,
            "cluster must be a DisaggregatedCluster",
        ),
        ({"policies": ["fcfs/prefill-first"], "cluster": "split"}, ValueError, "cluster is a disaggregated"),
    ],
)
def test_a_mode_its_arguments_do_not_make_is_refused_before_any_case(
    workload, kwargs, error, message
) -> None:
    """An unknown mode, an iteration policy for a fused engine or a cluster, a budget below 2, no
    cluster for a disaggregated sweep, a cluster for another mode: refused up front."""
    args = {"policies": POLICIES, "rates": RATES, "clients": 8, "progress": False, **kwargs}
    with pytest.raises(error, match=message):
        sweep(workload, COST, **args)


def test_a_cluster_must_have_the_sweeps_cost_and_clients(workload) -> None:
    """The cluster's token machines are the sweep's clients and cost model; another cluster
    is refused, and so is a fused engine of a cost model that cannot price a chunk."""
    from llmsched import LevelCostModel
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

    cluster = DisaggregatedCluster(1, 1, COST, COST, 4, 2621440.0, 25.0)
    with pytest.raises(ValueError, match="got 8 clients against the cluster's 4"):
        sweep(workload, COST, 8, ["fcfs"], RATES, progress=False, mode="disaggregated", cluster=cluster)
    levels = LevelCostModel([(5000, 0.675)], 0.071)
    with pytest.raises(TypeError, match="fusion prices a chunk by its tokens"):
        sweep(workload, levels, 8, ["fcfs"], RATES, progress=False, mode="fusion")
