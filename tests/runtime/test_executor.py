"""The runtime adapter on the CPU: the model, the slot cache, insertion modes, execution."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched import LinearCostModel, Workload, simulate, validate  # noqa: E402
from llmsched.runtime import (  # noqa: E402
    PRESETS,
    Engine,
    LlamaConfig,
    LlamaModel,
    execute_schedule,
    fit_cost,
    load_pretrained,
    profile,
    run_alone,
    run_insertion,
    run_policies,
    scaled_gsm8k,
    stage_errors,
)
from llmsched.runtime.executor import make_prompts  # noqa: E402

torch.set_num_threads(1)
MODEL = LlamaModel(PRESETS["tiny"], seed=0)
WORKLOAD = Workload([5, 17, 9, 30, 3, 12, 7, 21], [6, 20, 11, 4, 15, 9, 1, 13], name="mixed")
PROMPTS = make_prompts(WORKLOAD, PRESETS["tiny"].vocab_size, seed=4)
COST = LinearCostModel(0.002, 2e-5, 0.0015, 1e-4, 64)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(MODEL, 3, 128)


@pytest.fixture(scope="module")
def alone(engine: Engine) -> list[list[int]]:
    return run_alone(engine, WORKLOAD, PROMPTS)


def _rotate_half(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), -1)


def _naive_greedy(model: LlamaModel, prompt: list[int], steps: int) -> list[int]:
    """Full recomputation of the whole sequence each step, written out plainly."""
    cfg = model.config
    tokens = list(prompt)
    out = []
    for _ in range(steps):
        ids = torch.tensor(tokens)
        x = model.model.embed_tokens(ids)
        cos, sin = model.rotary(torch.arange(len(tokens)))
        for layer in model.model.layers:
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(len(tokens), cfg.num_attention_heads, cfg.head_dim)
            k = a.k_proj(h).view(len(tokens), cfg.num_key_value_heads, cfg.head_dim)
            v = a.v_proj(h).view(len(tokens), cfg.num_key_value_heads, cfg.head_dim)
            q = q * cos[:, None] + _rotate_half(q) * sin[:, None]
            k = k * cos[:, None] + _rotate_half(k) * sin[:, None]
            rep = cfg.num_attention_heads // cfg.num_key_value_heads
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            scores = torch.einsum("qhd,khd->hqk", q, k) / cfg.head_dim**0.5
            scores = scores.masked_fill(torch.ones(len(tokens), len(tokens)).triu(1).bool(), float("-inf"))
            o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(len(tokens), -1)
            x = x + a.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = model.lm_head(model.model.norm(x[-1]))
        out.append(int(logits.argmax()))
        tokens.append(out[-1])
    return out


def test_cached_decoding_equals_full_recomputation(alone: list[list[int]]) -> None:
    """The slot cache gives the tokens that recomputing the whole sequence gives."""
    with torch.no_grad():
        for i in (0, 3, 5):
            assert alone[i] == _naive_greedy(MODEL, PROMPTS[i], int(WORKLOAD.output_tokens[i]))


def test_matches_the_transformers_llama() -> None:
    """Where transformers is installed, its Llama with our weights generates the same tokens."""
    transformers = pytest.importorskip("transformers")
    cfg = PRESETS["tiny"]
    hf_cfg = transformers.LlamaConfig(
        **{k: v for k, v in cfg.to_dict().items()}, attention_bias=False, mlp_bias=False
    )
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    hf.load_state_dict(MODEL.state_dict())
    ids = torch.tensor([PROMPTS[1]])
    with torch.no_grad():
        ref = hf.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)[0, ids.shape[1] :]
    engine = Engine(MODEL, 1, 64)
    engine.prefill([PROMPTS[1]], [0])
    assert [engine.decode([0])[0] for _ in range(12)] == ref.tolist()


@pytest.mark.parametrize("mode", ["static", "padded", "apart"])
def test_tokens_do_not_depend_on_the_batch(engine: Engine, alone: list[list[int]], mode: str) -> None:
    """Every request's greedy tokens are the same alone and in a busy batch with insertions."""
    result = run_insertion(engine, WORKLOAD, mode, PROMPTS)  # type: ignore[arg-type]
    assert result.tokens == alone
    assert [len(t) for t in result.tokens] == WORKLOAD.output_tokens.tolist()


def test_insertion_modes_count_their_waste(engine: Engine) -> None:
    """Prefill apart computes exactly the prompts and outputs; static batching pays idle
    tokens (finished requests computing to the end of their batch) and pads."""
    out = WORKLOAD.output_tokens.tolist()
    prompt = WORKLOAD.prompt_tokens.tolist()
    apart = run_insertion(engine, WORKLOAD, "apart", PROMPTS)
    assert apart.padded_tokens == apart.idle_tokens == 0
    assert apart.forward_tokens == sum(prompt) + sum(out)
    static = run_insertion(engine, WORKLOAD, "static", PROMPTS)
    batches = [list(range(b, min(b + 3, len(out)))) for b in range(0, len(out), 3)]
    assert static.idle_tokens == sum(max(out[i] for i in b) - out[i] for b in batches for i in b)
    assert static.padded_tokens == sum(max(prompt[i] for i in b) - prompt[i] for b in batches for i in b)
    padded = run_insertion(engine, WORKLOAD, "padded", PROMPTS)
    assert padded.padded_tokens > 0
    # Real tokens through the layers: every prompt token and every output token fed once
    # (plus, for static batching, the idle ones).
    assert padded.forward_tokens - padded.padded_tokens == sum(prompt) + sum(out)
    assert static.forward_tokens - static.padded_tokens == sum(prompt) + sum(out) + static.idle_tokens
    assert padded.output_tokens == static.output_tokens == apart.output_tokens == sum(out)


@pytest.mark.parametrize(("rp", "ip"), [("fcfs", "prefill-first"), ("hybrid-oracle", "lagrangian")])
def test_executed_schedules_pass_the_validator(
    engine: Engine, alone: list[list[int]], rp: str, ip: str
) -> None:
    """A simulated schedule run on the engine, and the same policies driven live, give
    measured schedules that pass every rule but stage_time, with the same tokens."""
    predicted = simulate(WORKLOAD, COST, 3, rp, ip)
    run = execute_schedule(predicted, engine, PROMPTS)
    assert run.measured.measured and validate(run.measured, skip=("stage_time",)) == []
    assert run.tokens == alone
    assert np.array_equal(run.measured.request_client, predicted.request_client)
    assert np.array_equal(run.measured.stage_iterations, predicted.stage_iterations)
    live = run_policies(WORKLOAD, engine, COST, 3, rp, ip, PROMPTS)
    assert validate(live.measured, skip=("stage_time",)) == []
    assert live.tokens == alone and live.measured.makespan > 0


def test_live_policies_follow_the_simulator_and_arrivals() -> None:
    """Driven live, time-independent policies make the simulator's decisions (same stages,
    clients and iterations as the prediction returned beside the measurement); requests
    that arrive later are prefilled only after they arrive, and the schedule validates."""
    engine = Engine(MODEL, 3, 128)
    run = run_policies(WORKLOAD, engine, COST, 3, "fcfs", "prefill-first", PROMPTS)
    assert run.predicted is not None
    for field in ("stage_kind", "stage_iterations", "request_client", "request_prefill_stage"):
        assert np.array_equal(getattr(run.measured, field), getattr(run.predicted, field)), field
    late = Workload(
        WORKLOAD.prompt_tokens, WORKLOAD.output_tokens, arrival=[0, 0, 0.05, 0.05, 0.1, 0.1, 0.12, 0.3]
    )
    for execution in (
        run_policies(late, engine, COST, 3, "fcfs", "prefill-first", PROMPTS),
        execute_schedule(simulate(late, COST, 3), engine, PROMPTS),
    ):
        assert validate(execution.measured, skip=("stage_time",)) == []
        starts = execution.measured.stage_start[execution.measured.request_prefill_stage]
        assert np.all(starts >= late.arrival)
    with pytest.raises(ValueError, match="offline batch"):
        run_insertion(engine, late, "apart", PROMPTS)


def test_profile_fit_and_errors(engine: Engine) -> None:
    """The profiler returns one row per measurement; the fit is a valid linear model; the
    error of an exact model on synthetic rows is zero and of a doubled one is 100%."""
    rows = profile(engine, [8, 24, 40], [1, 2, 3], prompt_len=16, context=20, repeats=2)
    assert len(rows) == 12 and set(rows.kind) == {"prefill", "decode"} and (rows.seconds > 0).all()
    cost = fit_cost(rows, 48)
    assert cost.prefill_capacity == 48 and stage_errors(cost, rows)["mape"] >= 0
    exact = LinearCostModel(0.01, 1e-3, 0.02, 1e-3, 100)
    synthetic = rows.copy()
    synthetic["seconds"] = np.where(
        synthetic.kind == "prefill",
        exact.prefill_time(synthetic["size"].to_numpy(float)),
        exact.decode_iteration_time(synthetic["size"].to_numpy(float)),
    )
    assert stage_errors(exact, synthetic)["mape"] == pytest.approx(0.0, abs=1e-12)
    doubled = LinearCostModel(0.02, 2e-3, 0.04, 2e-3, 100)
    assert stage_errors(doubled, synthetic)["mape"] == pytest.approx(1.0)
    refit = fit_cost(synthetic, 100)
    assert refit.prefill_per_token == pytest.approx(1e-3) and refit.decode_base == pytest.approx(0.02)


def test_engine_rejects_misuse() -> None:
    """Busy slots, empty slots, overflowing slots, unknown tokens and missing devices are refused."""
    eng = Engine(MODEL, 2, 16)
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.255"):
        eng.prefill([[1, 256]], [1])
    static = Workload([28, 2], [2, 28])
    with pytest.raises(ValueError, match="static batching needs 56 cache positions"):
        run_insertion(Engine(MODEL, 2, 31), static, "static")
    eng.prefill([[1, 2, 3]], [0])
    with pytest.raises(ValueError, match="busy"):
        eng.prefill([[4]], [0])
    with pytest.raises(ValueError, match="no prefilled request"):
        eng.decode([1])
    with pytest.raises(ValueError, match="more than max_len"):
        eng.prefill([list(range(20))], [1])
    with pytest.raises(ValueError, match="out of range"):
        eng.decode([5])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            Engine(MODEL, 1, 16, device="cuda")
    with pytest.raises(ValueError, match="max_len"):
        run_alone(Engine(MODEL, 1, 8), WORKLOAD, PROMPTS)
    with pytest.raises(ValueError, match="not a multiple"):
        LlamaConfig(hidden_size=60, num_attention_heads=8)
    with pytest.raises(ValueError, match="key/value groups"):
        LlamaConfig(num_attention_heads=4, num_key_value_heads=3)


def test_parameter_count_and_checkpoint_round_trip(tmp_path) -> None:
    """The config counts the model's parameters; a saved checkpoint directory loads back."""
    assert PRESETS["tiny"].parameters_count() == sum(p.numel() for p in MODEL.parameters())
    safetensors = pytest.importorskip("safetensors.torch")
    (tmp_path / "config.json").write_text(json.dumps({**PRESETS["tiny"].to_dict(), "model_type": "llama"}))
    safetensors.save_file(
        {k: v.contiguous() for k, v in MODEL.state_dict().items()}, tmp_path / "model.safetensors"
    )
    loaded = load_pretrained(tmp_path)
    for (name, a), (_, b) in zip(MODEL.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match=r"config\.json"):
        load_pretrained(tmp_path / "missing")
    raw = {**PRESETS["tiny"].to_dict(), "model_type": "llama", "rope_scaling": {"rope_type": "llama3"}}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="rope_scaling"):
        load_pretrained(tmp_path)


def test_scaled_workload() -> None:
    """GSM8K shape, lengths scaled, at least one token each."""
    wl = scaled_gsm8k(50, 0.125, seed=2)
    assert len(wl) == 50 and wl.prompt_tokens.min() >= 1 and wl.output_tokens.max() <= 64
    with pytest.raises(ValueError, match="scale"):
        scaled_gsm8k(5, 0)


def test_cli_runtime_validate_json() -> None:
    """llmsched runtime validate --json reports predicted and measured makespans, the token
    check and the fit's error."""
    from llmsched.cli import main

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from llmsched.cli import main; sys.exit(main(sys.argv[1:]))",
            "runtime",
            "validate",
            "--model",
            "tiny",
            "--device",
            "cpu",
            "--requests",
            "10",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tokens_match"] is True and out["valid"] is True
    assert out["predicted_makespan_s"] > 0 and out["measured_makespan_s"] > 0
    assert 0 <= out["fit_error"] < 10
    assert main(["runtime", "validate", "--model", "huge"]) == 2
    assert main(["runtime", "validate", "--clients", "1"]) == 2


def test_without_torch_the_rest_works_and_the_command_says_why() -> None:
    """With torch hidden, llmsched imports and simulates; llmsched runtime names the missing package."""
    code = (
        "import sys, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('no torch here')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import llmsched, llmsched.runtime\n"
        "from llmsched import simulate, workloads, LinearCostModel\n"
        "s = simulate(workloads.exegpt_task('S', 50), LinearCostModel.paper(), 8)\n"
        "assert s.makespan > 0 and not llmsched.runtime.torch_available()\n"
        "from llmsched.cli import main\n"
        "sys.exit(main(['runtime', 'validate']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "needs PyTorch" in proc.stderr and "llmsched[runtime]" in proc.stderr
