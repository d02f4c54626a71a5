"""The Llama-family model: cached decoding against full recomputation and transformers,
parameter counts, checkpoints and config checks."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from llmsched.runtime import PRESETS, Engine, LlamaConfig, LlamaModel, load_pretrained  # noqa: E402
from tests.runtime.conftest import WORKLOAD  # noqa: E402


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


def test_cached_decoding_equals_full_recomputation(model, prompts, alone: list[list[int]]) -> None:
    """The slot cache gives the tokens that recomputing the whole sequence gives."""
    with torch.no_grad():
        for i in (0, 3, 5):
            assert alone[i] == _naive_greedy(model, prompts[i], int(WORKLOAD.output_tokens[i]))


def test_matches_the_transformers_llama(model, prompts) -> None:
    """Where transformers is installed, its Llama with our weights generates the same tokens."""
    transformers = pytest.importorskip("transformers")
    cfg = PRESETS["tiny"]
    hf_cfg = transformers.LlamaConfig(
        **{k: v for k, v in cfg.to_dict().items()}, attention_bias=False, mlp_bias=False
    )
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    hf.load_state_dict(model.state_dict())
    ids = torch.tensor([prompts[1]])
    with torch.no_grad():
        ref = hf.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)[0, ids.shape[1] :]
    engine = Engine(model, 1, 64)
    engine.prefill([prompts[1]], [0])
    assert [engine.decode([0])[0] for _ in range(12)] == ref.tolist()


def test_parameter_count_and_checkpoint_round_trip(model, tmp_path) -> None:
    """The config counts the model's parameters; a saved checkpoint directory loads back."""
    assert PRESETS["tiny"].parameters_count() == sum(p.numel() for p in model.parameters())
    safetensors = pytest.importorskip("safetensors.torch")
    (tmp_path / "config.json").write_text(json.dumps({**PRESETS["tiny"].to_dict(), "model_type": "llama"}))
    safetensors.save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors"
    )
    loaded = load_pretrained(tmp_path)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match=r"config\.json"):
        load_pretrained(tmp_path / "missing")
    raw = {**PRESETS["tiny"].to_dict(), "model_type": "llama", "rope_scaling": {"rope_type": "llama3"}}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="rope_scaling"):
        load_pretrained(tmp_path)


def test_config_checks() -> None:
    """Head counts that do not divide the width or the key/value groups are refused."""
    with pytest.raises(ValueError, match="not a multiple"):
        LlamaConfig(hidden_size=60, num_attention_heads=8)
    with pytest.raises(ValueError, match="key/value groups"):
        LlamaConfig(num_attention_heads=4, num_key_value_heads=3)
