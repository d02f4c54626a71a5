"""Policies and schedules on the torch engine, through the one decision loop."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched import Workload, simulate, validate  # noqa: E402
from llmsched.engines.loop import run_loop, simulate_policies  # noqa: E402
from llmsched.online import make_iteration_policy, make_request_policy  # noqa: E402
from llmsched.runtime import Engine, EngineExecutor, execute_schedule, run_policies  # noqa: E402
from tests.runtime.conftest import COST, WORKLOAD  # noqa: E402


@pytest.mark.parametrize(("rp", "ip"), [("fcfs", "prefill-first"), ("hybrid-oracle", "lagrangian")])
def test_executed_schedules_pass_the_validator(
    engine: Engine, prompts, alone: list[list[int]], rp: str, ip: str
) -> None:
    """A simulated schedule run on the engine, and the same policies driven live, give
    measured schedules that pass every rule but stage_time, with the same tokens."""
    predicted = simulate(WORKLOAD, COST, 3, rp, ip)
    run = execute_schedule(predicted, engine, prompts)
    assert run.measured.measured and validate(run.measured, skip=("stage_time",)) == []
    assert run.tokens == alone
    assert np.array_equal(run.measured.request_client, predicted.request_client)
    assert np.array_equal(run.measured.stage_iterations, predicted.stage_iterations)
    assert run.measured.info == {**predicted.info, "executed": True, "device": "cpu"}
    live = run_policies(WORKLOAD, engine, COST, 3, rp, ip, prompts)
    assert validate(live.measured, skip=("stage_time",)) == []
    assert live.tokens == alone and live.measured.makespan > 0


def test_live_policies_follow_the_simulator_and_arrivals(model, prompts) -> None:
    """Driven live, time-independent policies make the simulator's decisions (same stages,
    clients and iterations as the prediction returned beside the measurement); requests
    that arrive later are prefilled only after they arrive, and the schedule validates."""
    engine = Engine(model, 3, 128)
    run = run_policies(WORKLOAD, engine, COST, 3, "fcfs", "prefill-first", prompts)
    assert run.predicted is not None
    for field in ("stage_kind", "stage_iterations", "request_client", "request_prefill_stage"):
        assert np.array_equal(getattr(run.measured, field), getattr(run.predicted, field)), field
    late = Workload(
        WORKLOAD.prompt_tokens, WORKLOAD.output_tokens, arrival=[0, 0, 0.05, 0.05, 0.1, 0.1, 0.12, 0.3]
    )
    for execution in (
        run_policies(late, engine, COST, 3, "fcfs", "prefill-first", prompts),
        execute_schedule(simulate(late, COST, 3), engine, prompts),
    ):
        assert validate(execution.measured, skip=("stage_time",)) == []
        starts = execution.measured.stage_start[execution.measured.request_prefill_stage]
        assert np.all(starts >= late.arrival)


class _Recording:
    """Wraps a request policy and an iteration policy and logs every call the loop makes."""

    def __init__(self, requests, iterations):
        self.requests, self.iterations = requests, iterations
        self.log: list[tuple] = []
        outer = self

        class Requests:
            sizes = getattr(requests, "sizes", None)  # an oracle policy is told the lengths

            def start(self, known, clients):
                requests.start(known, clients)

            def arrive(self, request):
                outer.log.append(("arrive", request))
                requests.arrive(request)

            def release(self, client):
                outer.log.append(("release", client))
                requests.release(client)

            def ready(self):
                answer = requests.ready()
                outer.log.append(("ready", answer))
                return answer

            def take(self, capacity):
                answer = requests.take(capacity)
                outer.log.append(("take", capacity, tuple(answer)))
                return answer

        class Iterations:
            def start(self, workload, cost, clients):
                iterations.start(workload, cost, clients)

            def decide(self, engine):
                answer = iterations.decide(engine)
                seen = (engine.active, engine.free, engine.ready, engine.iterations_to_finish)
                outer.log.append(("decide", seen, engine.stage_iterations, engine.just_prefilled, answer))
                return answer

        self.pair = (Requests(), Iterations())


@pytest.mark.parametrize(
    ("rp", "ip"),
    [("fcfs", "prefill-first"), ("hybrid-oracle", "threshold"), ("sorted-preemptive-rr-oracle", "threshold")],
)
def test_the_engine_and_the_clock_run_the_same_loop(engine: Engine, prompts, rp: str, ip: str) -> None:
    """The torch executor and the cost clock, driven by the same (time-independent)
    policies, see the same calls in the same order and make the same decisions: same
    stages, same clients, same iterations per stage."""
    on_clock = _Recording(make_request_policy(rp), make_iteration_policy(ip))
    predicted = simulate_policies(WORKLOAD, COST, 3, *on_clock.pair)
    on_engine = _Recording(make_request_policy(rp), make_iteration_policy(ip))
    engine.reset()
    executor = EngineExecutor(engine, prompts)
    measured = run_loop(WORKLOAD, COST, 3, *on_engine.pair, executor)
    assert on_engine.log == on_clock.log
    assert any(entry[0] == "take" for entry in on_clock.log)
    for field in ("stage_kind", "stage_iterations", "request_client", "request_prefill_stage"):
        assert np.array_equal(getattr(measured, field), getattr(predicted, field)), field
    assert measured.measured and not predicted.measured
    # The engine runs and times every iteration: one decode run each, tiling its stage (each
    # starts where the one before it in the stage ended); the clock has one run per jump.
    assert measured.num_iterations == predicted.num_iterations == measured.run_start.size
    assert np.all(measured.run_iterations == 1) and predicted.run_start.size < predicted.num_iterations
    opens = np.isin(np.arange(measured.num_iterations), measured.stage_first_iteration)
    run_end = measured.run_start + measured.run_iteration_time
    np.testing.assert_allclose(
        measured.run_start[1:][~opens[1:]], run_end[:-1][~opens[1:]], rtol=0, atol=1e-12
    )
    assert np.all(measured.run_iteration_time > 0)
    assert [len(t) for t in executor.tokens] == WORKLOAD.output_tokens.tolist()


def test_the_loop_checks_policies_on_the_engine_too(engine: Engine, prompts) -> None:
    """A request policy breaking its contract is reported on the engine as on the clock."""
    from llmsched.online import FCFS

    class Twice(FCFS):
        def take(self, capacity):
            pairs = super().take(capacity)
            return pairs + pairs[:1]

    with pytest.raises(ValueError, match=r"Twice.take\(64\) is invalid: request 0 appears twice"):
        run_policies(WORKLOAD, engine, COST, 3, Twice(), "prefill-first", prompts)


def test_bad_arguments_are_refused(engine: Engine, prompts) -> None:
    """A non-schedule, more clients than slots and wrong prompts are refused before work."""
    with pytest.raises(TypeError, match=r"schedule must be a llmsched\.Schedule"):
        execute_schedule("schedule", engine, prompts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="uses 4 clients; the engine has 3 slots"):
        execute_schedule(simulate(WORKLOAD, COST, 4), engine, prompts)
    with pytest.raises(ValueError, match=r"clients must be an integer in 1..3"):
        run_policies(WORKLOAD, engine, COST, 4, prompts=prompts)
    with pytest.raises(ValueError, match="7 prompts for 8 requests"):
        run_policies(WORKLOAD, engine, COST, 3, prompts=prompts[:7])


@pytest.mark.parametrize(
    ("batching", "budget"), [("sarathi", 16), ("vllm", 64), ("orca", 24), ("padded", 64)]
)
def test_every_batching_rule_runs_on_the_engine_with_each_request_s_own_tokens(
    engine: Engine, prompts, alone: list[list[int]], batching: str, budget: int
) -> None:
    """Chunked prefill (chunks of a prompt over several iterations beside decoding requests),
    vLLM, Orca's mixed iterations (decoding requests sitting out past the cap) and padded
    insertion run through the loop on the torch engine: every request gets the tokens it gets
    alone, the measured schedule passes its validator but stage_time, and it makes the
    simulator's decisions (the same chunks in the same runs; the rules read no clock)."""
    from llmsched.engines.fusion.schedule import FusedSchedule
    from llmsched.engines.fusion.validate import validate_fused
    from llmsched.runtime import run_batching

    run = run_batching(WORKLOAD, engine, COST, 3, batching, "fcfs", budget, prompts)
    assert run.tokens == alone
    measured, predicted = run.measured, run.predicted
    if isinstance(measured, FusedSchedule):
        assert validate_fused(measured, skip=("stage_time",)) == []
        assert np.array_equal(measured.chunk_request, predicted.chunk_request)

        def chunk_iteration(s: FusedSchedule) -> np.ndarray:  # runs differ: one per measured iteration
            first = np.cumsum(s.run_iterations) - s.run_iterations
            return first[s.chunk_run]

        assert np.array_equal(chunk_iteration(measured), chunk_iteration(predicted))
        assert measured.padded == (batching == "padded")
        if batching == "sarathi":  # some prompt was cut into chunks
            assert len(measured.chunk_request) > len(set(measured.chunk_request.tolist()))
    else:
        assert validate(measured, skip=("stage_time",)) == []
    assert measured.makespan > 0 and engine.counters.forwards > 0


def test_a_mixed_step_checks_its_slots_before_any_work(engine: Engine, prompts) -> None:
    engine.reset()
    with pytest.raises(ValueError, match="slot 0 has no prefilled request to decode"):
        engine.mixed_step([0], [])
    engine.prefill([prompts[0]], [0])
    with pytest.raises(ValueError, match="slot 0 is decoding"):
        engine.mixed_step([], [(0, [1, 2])])
    with pytest.raises(ValueError, match="slots repeat"):
        engine.mixed_step([0], [(1, [1]), (1, [2])])
    with pytest.raises(ValueError, match="needs at least one token"):
        engine.mixed_step([0], [(1, [])])
    assert engine.counters.forwards == 1  # the prefill alone
    engine.reset()


LONG = Workload([4, 6, 5, 7, 3, 8], [40, 36, 30, 25, 38, 20], name="long outputs")


@pytest.fixture(scope="module")
def long_prompts(model) -> list[list[int]]:
    from llmsched.runtime.executor import make_prompts

    return make_prompts(LONG, model.config.vocab_size, seed=4)


@pytest.fixture(scope="module")
def long_alone(model, long_prompts) -> list[list[int]]:
    from llmsched.runtime import run_alone

    return run_alone(Engine(model, 1, 64), LONG, long_prompts)


@pytest.mark.parametrize("rule", ["competition", "vllm", "sarathi", "orca", "padded"])
def test_a_pool_too_small_preempts_recomputes_and_finishes_every_request(
    model, long_prompts, long_alone, rule: str
) -> None:
    """On a paged engine whose pool cannot hold three growing requests, every rule admits by
    free blocks and preempts by recompute when decoding runs out, for real: the engine's pool
    is the loop's memory (the executor checks, at each preemption, that the pool could not run
    the next iteration), the victims' slots are freed, and their prompts and tokens so far are
    prefilled anew. Every request ends with the tokens it makes alone, the measured schedule
    passes the memory rule, the simulator predicted the same preemptions, and the engine's peak
    of blocks is the schedule's."""
    from llmsched.runtime import run_batching

    engine = Engine(model, 3, 64, block_size=4, blocks=20)
    if rule == "competition":
        run = run_policies(LONG, engine, COST, 3, "fcfs", "prefill-first", long_prompts)
    else:
        run = run_batching(LONG, engine, COST, 3, rule, "fcfs", 64, long_prompts)
    measured, predicted = run.measured, run.predicted
    assert run.tokens == long_alone
    assert measured.memory is not None and measured.memory.blocks == 20
    assert measured.validate(skip=("stage_time",)) == []
    pieces = len(measured.workload) - len(LONG)
    assert run.info["preemptions"] == pieces == len(predicted.workload) - len(LONG) > 0
    # A continuation's prompt is its request's prompt and the tokens made before it stopped.
    assert run.info["recomputed_tokens"] == int(measured.workload.prompt_tokens[len(LONG) :].sum())
    assert run.info["peak_blocks"] == int(measured.memory_in_use()["blocks"].max()) == 20
    assert engine.blocks_in_use == 0  # every request finished, every block back


def test_the_loop_s_memory_must_be_the_engine_s_pool(model, long_prompts) -> None:
    """A memory that is not the paged engine's pool is refused before any work; a loop that
    preempts while the engine's pool has room (its memory smaller than the pool) is caught at
    the first preemption."""
    from llmsched import KVMemory
    from llmsched.engines.batching import batching_rule
    from llmsched.runtime import run_batching

    with pytest.raises(ValueError, match=r"needs an engine with that pool .* the engine has no block pool"):
        unpaged = Engine(model, 3, 64)
        run_batching(LONG, unpaged, COST, 3, "vllm", prompts=long_prompts, memory=KVMemory(20, 4))
    paged = Engine(model, 3, 64, block_size=4, blocks=40)
    with pytest.raises(ValueError, match="the engine has 40 blocks of 4"):
        run_batching(LONG, paged, COST, 3, "vllm", prompts=long_prompts, memory=KVMemory(20, 4))
    executor = EngineExecutor(paged, long_prompts)
    rule = batching_rule("vllm", 64, memory=KVMemory(20, 4))
    with pytest.raises(RuntimeError, match="while the engine's pool had room"):
        run_loop(LONG, COST, 3, make_request_policy("fcfs"), None, executor, False, rule)


def test_a_probe_inside_a_run_is_left_out_of_its_clock(engine: Engine, prompts, alone) -> None:
    """A measurement of the machine run every 10 steps of a run (here a half-second sleep)
    takes none of the run's time: the measured schedule is as if it had not run."""
    import time

    from llmsched.runtime import run_batching

    calls = []

    def probe() -> None:
        calls.append(1)
        time.sleep(0.5)

    run = run_batching(WORKLOAD, engine, COST, 3, "sarathi", "fcfs", 16, prompts, probe=probe)
    assert len(calls) >= 1 and run.tokens == alone
    assert run.measured.makespan < 0.5 * len(calls)
    assert run.wall_s >= 0.5 * len(calls)
    with pytest.raises(ValueError, match="probe_every"):
        EngineExecutor(engine, prompts, probe, probe_every=0)
