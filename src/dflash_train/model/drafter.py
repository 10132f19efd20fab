"""The DFlash drafter (block diffusion).

Hidden states of several target layers (the taps) are concatenated, projected to the hidden
size and RMS-normalised once; every drafter layer then uses that context as extra keys/values
(through the layer's own k/v projections) next to the keys/values of the noise blocks. Queries
come only from the noise blocks [anchor token, MASK x (block-1)], placed at their true positions
(anchor + k) for RoPE. The mask (attention/masks.py) lets block i see context < anchor_i and its
own block. Embedding and LM head are the target's, frozen and copied to the drafter's device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention.backends import AttentionBackend
from ..config import ModelConfig
from .layers import AttentionProjections, RMSNorm, SwiGLU, apply_rope, init_weights, rope_cos_sin


class DrafterAttention(AttentionProjections):
    def forward(self, x, context, rope_q, rope_kv, mask, attention: AttentionBackend):
        b, q_len, _ = x.shape
        d = self.cfg.head_dim
        kv_in = torch.cat([context, x], dim=1)
        q = self.q_norm(self.q_proj(x).view(b, q_len, -1, d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(kv_in).view(b, kv_in.shape[1], -1, d)).transpose(1, 2)
        v = self.v_proj(kv_in).view(b, kv_in.shape[1], -1, d).transpose(1, 2)
        q, k = apply_rope(q, *rope_q), apply_rope(k, *rope_kv)
        out = attention(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


class DrafterLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.self_attn = DrafterAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x, context, rope_q, rope_kv, mask, attention):
        x = x + self.self_attn(self.input_layernorm(x), context, rope_q, rope_kv, mask, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    def __init__(self, cfg: ModelConfig, embed_weight: torch.Tensor, head_weight: torch.Tensor) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.tap_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.layers = nn.ModuleList(DrafterLayer(cfg) for _ in range(cfg.num_drafter_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        # Frozen target weights: buffers (moved with the module, never trained, never in
        # parameters()) and not persistent (checkpoints hold only what the drafter learns).
        # A tied head is the embedding itself: one buffer, so .to() cannot split it in two.
        self.tied = head_weight is embed_weight
        self.register_buffer("embed_weight", embed_weight.detach(), persistent=False)
        if not self.tied:
            self.register_buffer("untied_head_weight", head_weight.detach(), persistent=False)

    @property
    def head_weight(self) -> torch.Tensor:
        return self.embed_weight if self.tied else self.untied_head_weight

    def check_inputs(self, taps, noise_ids, anchors) -> None:
        cfg = self.cfg
        if taps.dim() != 3 or taps.shape[-1] != cfg.tap_size:
            raise ValueError(f"taps must be [batch, seq, {cfg.tap_size}] "
                             f"({len(cfg.target_layer_ids)} target layers x {cfg.hidden_size}); "
                             f"got {tuple(taps.shape)}")
        b, t = taps.shape[:2]
        if t > cfg.max_seq_len:
            raise ValueError(f"context of {t} positions exceeds max_seq_len {cfg.max_seq_len}: "
                             "use a shorter sequence bucket or a larger preset")
        if anchors.dim() != 2 or anchors.shape[0] != b:
            raise ValueError(f"anchors must be [{b}, num_anchors] (got {tuple(anchors.shape)})")
        expect = (b, anchors.shape[1] * cfg.block_size)
        if tuple(noise_ids.shape) != expect:
            raise ValueError(f"noise_ids must be {list(expect)} = [batch, num_anchors x block "
                             f"{cfg.block_size}] (got {list(noise_ids.shape)})")
        if anchors.device.type == "cpu" and anchors.numel() and not torch.compiler.is_compiling():
            # Value checks only where they cost no device sync, and never inside a traced graph:
            # dynamo would specialise on the values and recompile for every new set of anchors.
            lo, hi = int(anchors.min()), int(anchors.max())
            if lo < 0 or hi >= t:
                raise ValueError(f"anchors must lie in [0, {t - 1}] for a context of {t} "
                                 f"positions (got {lo}..{hi})")

    def hidden_states(self, taps: torch.Tensor, noise_ids: torch.Tensor, anchors: torch.Tensor,
                      attention: AttentionBackend, mask=None) -> torch.Tensor:
        """[B, A*block, hidden]: the final-normed states the LM head reads. `mask` is the
        backend's mask for these anchors, when the caller built it already (outside a
        compiled region, say); None builds it here."""
        self.check_inputs(taps, noise_ids, anchors)
        cfg = self.cfg
        dtype = self.fc.weight.dtype
        ctx_len = taps.shape[1]
        context = self.hidden_norm(self.fc(taps.to(dtype)))
        x = F.embedding(noise_ids, self.embed_weight).to(dtype)

        dev = noise_ids.device
        anchors = anchors.to(dev)
        noise_pos = (anchors[:, :, None] + torch.arange(cfg.block_size, device=dev)).flatten(1)
        ctx_pos = torch.arange(ctx_len, device=dev).expand(taps.shape[0], ctx_len)
        rope_q = rope_cos_sin(noise_pos, cfg.head_dim, cfg.rope_theta, dtype)
        rope_kv = rope_cos_sin(torch.cat([ctx_pos, noise_pos], dim=1), cfg.head_dim,
                               cfg.rope_theta, dtype)
        if mask is None:
            mask = attention.build_mask(anchors, ctx_len, cfg.block_size)
        for layer in self.layers:
            x = layer(x, context, rope_q, rope_kv, mask, attention)
        return self.norm(x)

    def forward(self, taps: torch.Tensor, noise_ids: torch.Tensor, anchors: torch.Tensor,
                attention: AttentionBackend) -> torch.Tensor:
        """taps [B, T, tap_size], noise_ids [B, A*block], anchors [B, A] -> logits [B, A*block, V]."""
        hidden = self.hidden_states(taps, noise_ids, anchors, attention)
        return F.linear(hidden, self.head_weight.to(hidden.dtype))


def build_drafter(cfg: ModelConfig, target: nn.Module, seed: int,
                  device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> DFlashDrafter:
    """Initialised on CPU from `seed` (so replicas on different devices start bit-identical),
    then moved to `device` in `dtype`, with the target's embedding and LM head copied there."""
    embed = target.input_embedding_weight().detach().to(device="cpu", dtype=torch.float32)
    head_src = target.output_head_weight()
    tied = head_src is target.input_embedding_weight()
    head = embed if tied else head_src.detach().to(device="cpu", dtype=torch.float32)
    if embed.shape != (cfg.vocab_size, cfg.hidden_size):
        raise ValueError(f"target embedding is {tuple(embed.shape)}, but the config says "
                         f"({cfg.vocab_size}, {cfg.hidden_size}): build both from one config")
    drafter = DFlashDrafter(cfg, embed, head)
    init_weights(drafter, torch.Generator().manual_seed(seed), std=None)
    return drafter.to(device=device, dtype=dtype)
