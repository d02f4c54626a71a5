"""A decoder-only transformer of the Llama family, from a config and seeded random weights.

RMSNorm, rotary position embeddings, grouped-query attention and a SwiGLU MLP, with the
parameter names of the Hugging Face Llama checkpoints, so a local checkpoint directory loads
into it (:func:`load_pretrained`, when ``safetensors`` is installed). Nothing is downloaded.

The model itself has no cache and no batching logic: :mod:`llmsched.runtime.engine` calls
its pieces (``embed``, ``layers[i]``'s projections, ``norm``, ``lm_head``) on packed tokens
and keeps the keys and values in slots.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["PRESETS", "LlamaConfig", "LlamaModel", "apply_rotary", "load_pretrained"]


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of a Llama-family model (the names of a Hugging Face ``config.json``)."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 176
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"LlamaConfig.{f.name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of {self.num_attention_heads} heads"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{self.num_attention_heads} attention heads do not split into "
                f"{self.num_key_value_heads} key/value groups"
            )
        if self.head_dim % 2:
            raise ValueError(f"the head size {self.head_dim} must be even for rotary embeddings")
        if not (self.rope_theta > 0 and self.rms_norm_eps > 0):
            raise ValueError("rope_theta and rms_norm_eps must be positive")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def parameters_count(self) -> int:
        """Parameters of the model built from this config."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        kv = self.num_key_value_heads * self.head_dim
        layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else v * h
        return self.num_hidden_layers * layer + v * h + h + head

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LlamaConfig:
        known = {f.name for f in fields(cls)}
        args = {k: raw[k] for k in known if raw.get(k) is not None}
        if "num_key_value_heads" not in args and "num_attention_heads" in args:
            args["num_key_value_heads"] = args["num_attention_heads"]
        return cls(**args)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Sizes from a CPU test model to about a billion parameters.
#:
#: :meta hide-value:
PRESETS = {
    "tiny": LlamaConfig(),  # 0.1 M parameters: unit tests
    "small": LlamaConfig(  # 4 M: CPU benchmarks
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
    ),
    "125m": LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
    ),
    "1b": LlamaConfig(  # the shape of Llama 3.2 1B with a 32k vocabulary
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        rope_theta=500000.0,
        tie_word_embeddings=True,
    ),
}


class RMSNorm(nn.Module):
    """Root-mean-square layer norm, computed in float32 and scaled by a learned weight."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class Attention(nn.Module):
    """The projections of grouped-query attention; the engine runs the attention itself."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)


class MLP(nn.Module):
    """SwiGLU feed-forward: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One decoder layer's modules: attention, the MLP and the RMS norm before each."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class _Body(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaModel(nn.Module):
    """The model; ``LlamaModel(config, seed=0)`` has seeded random weights."""

    inv_freq: torch.Tensor

    def __init__(self, config: LlamaConfig, seed: int = 0):
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = config
        generator = torch.Generator().manual_seed(int(seed))
        with torch.device("cpu"):
            self.model = _Body(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        std = 1.0 / math.sqrt(config.hidden_size)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                continue
            with torch.no_grad():
                param.normal_(0.0, std, generator=generator)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", self._frequencies(), persistent=False)

    def _frequencies(self) -> torch.Tensor:
        cfg = self.config
        exponents = torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim
        return (1.0 / cfg.rope_theta**exponents).float()

    def reset_rotary(self) -> None:
        """Recompute the rotary frequencies in float32 on the model's device (casting the
        model to float16 would have rounded them: 0.9% for theta = 500,000)."""
        self.inv_freq = self._frequencies().to(self.model.embed_tokens.weight.device)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin, shape ``[tokens, head_dim]``, for integer ``positions``."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` of shape ``[tokens, heads, head_dim]`` (the Llama half-split convention)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :].to(x.dtype) + rotated * sin[:, None, :].to(x.dtype)


def _check_supported(raw: dict[str, Any], path: Path) -> None:
    """Refuse checkpoint settings this model does not implement, rather than compute wrongly."""
    if raw.get("rope_scaling"):
        raise ValueError(f"{path}: rope_scaling {raw['rope_scaling']!r} is not supported")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{path}: hidden_act {act!r} is not supported (only silu)")
    heads, hidden = raw.get("num_attention_heads"), raw.get("hidden_size")
    if raw.get("head_dim") is not None and heads and hidden and raw["head_dim"] != hidden // heads:
        raise ValueError(f"{path}: head_dim {raw['head_dim']} != hidden_size / heads is not supported")
    window, positions = raw.get("sliding_window"), raw.get("max_position_embeddings", 0)
    if window is not None and window < positions:
        raise ValueError(f"{path}: sliding-window attention ({window} tokens) is not supported")
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ValueError(f"{path}: attention or MLP biases are not supported")


def load_pretrained(directory: str | Path, dtype: torch.dtype = torch.float32) -> LlamaModel:
    """A Llama-family checkpoint directory (``config.json`` and ``*.safetensors``)."""
    path = Path(directory)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} has no config.json: not a Hugging Face checkpoint directory")
    try:
        from safetensors.torch import load_file
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("loading a checkpoint needs safetensors: pip install safetensors") from exc
    raw = json.loads((path / "config.json").read_text())
    arch = raw.get("model_type", "llama")
    if arch not in ("llama", "mistral"):
        raise ValueError(f"{path}: model_type {arch!r} is not a Llama-family decoder")
    _check_supported(raw, path)
    config = LlamaConfig.from_dict(raw)
    model = LlamaModel(config)
    state: dict[str, torch.Tensor] = {}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path} holds no .safetensors weights")
    for file in files:
        state.update(load_file(str(file)))
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing:
        raise ValueError(f"{path}: checkpoint lacks {missing[:5]}")
    if [k for k in unexpected if "rotary_emb" not in k]:
        raise ValueError(f"{path}: checkpoint has weights this model does not: {unexpected[:5]}")
    return model.to(dtype)
