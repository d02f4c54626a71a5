"""Disaggregated execution: a prompt engine and a token engine, each request's keys and values
copied from one to the other and the copy timed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched.engines.disaggregation.cluster import DisaggregatedCluster  # noqa: E402
from llmsched.fleet.disaggregated import simulate_disaggregated  # noqa: E402
from llmsched.runtime import Engine  # noqa: E402
from llmsched.runtime.disaggregated import execute_disaggregated, fit_link  # noqa: E402
from tests.runtime.conftest import COST, WORKLOAD  # noqa: E402


def _cluster(model, link, **changes) -> DisaggregatedCluster:
    fields = {
        "prompt_machines": 1,
        "token_machines": 1,
        "prompt_cost": COST,
        "token_cost": COST,
        "token_clients": 3,
        "kv_bytes_per_token": 2 * 2 * 2 * 16 * 4,
        "kv_bandwidth": link["bandwidth_gbs"],
        "kv_latency": link["latency_s"],
        "layers": model.config.num_hidden_layers,
        "overlap": False,
    }
    return DisaggregatedCluster(**{**fields, **changes})


@pytest.fixture(scope="module")
def link(model) -> dict:
    return fit_link(Engine(model, 3, 128), Engine(model, 4, 128, block_size=4), [4, 32, 96], repeats=3)


def test_a_disaggregated_schedule_runs_on_two_engines_with_its_copies_timed(
    model, prompts, alone, link
) -> None:
    """The prompt engine runs the schedule's stages, each request's keys and values are copied
    into a paged token engine (each copy timed, one at a time on the link), and the token
    engine decodes as the schedule says (its clients, their order): every request gets its
    tokens alone, the measured schedule passes every rule but the two that compare times with
    the models (its transfers arrive after their stages, its requests decode after their
    transfers, decoding never pauses for a late copy), and every block and slot is given
    back."""
    assert link["bandwidth_gbs"] > 0 and link["latency_s"] >= 0 and len(link["rows"]) == 3
    prompt_engine = Engine(model, 8, 128)
    token_engine = Engine(model, 8, 128, block_size=4)
    cluster = _cluster(model, link, kv_bytes_per_token=token_engine.kv_bytes_per_token)
    predicted = simulate_disaggregated(WORKLOAD, cluster)
    run = execute_disaggregated(predicted, prompt_engine, token_engine, prompts)
    measured = run.measured
    assert run.tokens == alone
    assert measured.validate(skip=("stage_time", "transfer_time")) == []
    assert measured.info["executed"] and run.predicted is predicted
    copy = np.array(run.info["copy_s"])
    assert np.all(copy > 0) and np.all(measured.transfer_time >= copy - 1e-12)
    assert run.info["copy_bytes"] == (WORKLOAD.prompt_tokens * token_engine.kv_bytes_per_token).tolist()
    assert run.info["predicted_copy_s"] == pytest.approx(
        cluster.transfer(WORKLOAD.prompt_tokens, 0.0).tolist()
    )
    assert np.array_equal(measured.request_stage, predicted.request_stage)  # the same stages
    # The executor chooses no request and no client: each request decodes on the schedule's
    # client, each client takes its requests in the schedule's order, none before its iteration.
    assert np.array_equal(measured.request_client, predicted.request_client)
    assert np.all(measured.request_decode_start >= predicted.request_decode_start)
    for client in np.unique(predicted.request_client).tolist():
        mine = predicted.request_client == client
        planned = np.argsort(predicted.request_decode_start[mine], kind="stable")
        assert np.array_equal(np.argsort(measured.request_decode_start[mine], kind="stable"), planned)
    assert np.all(measured.decode_begin >= measured.request_transfer_end)
    assert token_engine.blocks_in_use == 0 and 0 < run.info["peak_blocks"] <= token_engine.blocks


def test_disaggregated_execution_refuses_what_it_cannot_run(model, prompts, link) -> None:
    engine, other = Engine(model, 8, 128), Engine(model, 8, 128)
    two = simulate_disaggregated(WORKLOAD, _cluster(model, link, token_machines=2))
    with pytest.raises(ValueError, match="one prompt machine and one token machine"):
        execute_disaggregated(two, engine, other, prompts)
    one = simulate_disaggregated(WORKLOAD, _cluster(model, link))
    with pytest.raises(ValueError, match="must be two engines"):
        execute_disaggregated(one, engine, engine, prompts)
    with pytest.raises(ValueError, match="the token engine has 2 slots"):
        execute_disaggregated(one, engine, Engine(model, 2, 128), prompts)
    with pytest.raises(ValueError, match="the prompt engine has 1 slots"):
        execute_disaggregated(one, Engine(model, 1, 128), other, prompts)
    with pytest.raises(TypeError, match="DisaggregatedSchedule"):
        execute_disaggregated("schedule", engine, other, prompts)
    with pytest.raises(ValueError, match="positive token counts"):
        fit_link(engine, other, [])


def test_a_copy_later_than_predicted_delays_its_join_not_the_batch(
    model, prompts, alone, link, monkeypatch
) -> None:
    """A link that takes a tenth of a second more a copy than measured (the timed copy is made
    to say so), far more than a decode iteration: each copy ends later than the schedule has
    its request join, so the request joins at a later iteration, the decoding requests never
    wait for it (the measured schedule keeps the timeline rule), and each client still takes
    the schedule's requests in the schedule's order."""
    import llmsched.runtime.disaggregated as module

    timed = module._timed_copy

    def slow(*args: Any) -> tuple[float, int]:
        seconds, copied = timed(*args)
        return seconds + 0.1, copied

    monkeypatch.setattr(module, "_timed_copy", slow)
    prompt_engine = Engine(model, 8, 128)
    token_engine = Engine(model, 8, 128, block_size=4)
    cluster = _cluster(model, link, kv_bytes_per_token=token_engine.kv_bytes_per_token)
    predicted = simulate_disaggregated(WORKLOAD, cluster)
    run = execute_disaggregated(predicted, prompt_engine, token_engine, prompts)
    measured = run.measured
    assert run.tokens == alone
    assert measured.validate(skip=("stage_time", "transfer_time")) == []
    assert np.array_equal(measured.request_client, predicted.request_client)
    assert np.any(measured.request_decode_start > predicted.request_decode_start)
    assert np.all(measured.request_decode_start >= predicted.request_decode_start)
    assert np.all(measured.decode_begin >= measured.request_transfer_end)
