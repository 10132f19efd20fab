"""The frozen target: a Qwen3/Llama-style causal LM that also returns tapped hidden states.

By default it is built from a fixed seed (no download) and briefly pre-fit on the synthetic
corpus so its greedy tokens carry structure (see pretrain.py). A local transformers checkpoint
directory can replace it (hf_target.py).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .hf_target import load_hf_target
from .layers import AttentionProjections, RMSNorm, SwiGLU, apply_rope, init_weights, rope_cos_sin
from .output import TargetOutput, check_token_batch, freeze
from .pretrain import load_or_pretrain


class CausalSelfAttention(AttentionProjections):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(b, t, -1, d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, -1, d)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=self.cfg.num_heads != self.cfg.num_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.self_attn = CausalSelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class TargetModel(nn.Module):
    """Frozen causal LM. forward(input_ids) -> TargetOutput(logits, taps)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_target_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def input_embedding_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight

    def output_head_weight(self) -> torch.Tensor:
        return self.lm_head.weight

    def forward(self, input_ids: torch.Tensor) -> TargetOutput:
        check_token_batch(input_ids, self.cfg)
        x = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        wanted = set(self.cfg.target_layer_ids)
        by_layer = {}
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin)
            if i in wanted:
                by_layer[i] = x
        taps = torch.cat([by_layer[i] for i in self.cfg.target_layer_ids], dim=-1)
        logits = self.lm_head(self.norm(x))
        return TargetOutput(logits=logits, taps=taps)


def build_target(cfg: ModelConfig, seed: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, checkpoint_dir: str | Path | None = None,
                 cache_dir: str | Path | None = None) -> nn.Module:
    """The frozen target on `device`.

    checkpoint_dir: a local transformers checkpoint (needs the optional `transformers`).
    Otherwise a fixed-seed init, pre-fit for cfg.target_pretrain_steps on the synthetic corpus;
    the pre-fit weights are cached by (config, seed, steps, device type) so every run and every
    resume of the same setup gets bit-identical target weights.
    """
    if checkpoint_dir is not None:
        return load_hf_target(checkpoint_dir, cfg, device, dtype)
    device = torch.device(device)
    model = TargetModel(cfg)
    init_weights(model, torch.Generator().manual_seed(seed))
    if cfg.target_pretrain_steps > 0:
        load_or_pretrain(model, cfg, seed, device, cache_dir)
    return freeze(model.to(device=device, dtype=dtype))
