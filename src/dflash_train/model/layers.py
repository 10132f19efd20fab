"""Building blocks shared by the target and the drafter (Qwen3/Llama style)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32: bf16 squares lose too much for the mean.
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class AttentionProjections(nn.Module):
    """The Qwen3 attention weights (q/k/v/o projections, per-head q/k RMSNorm), shared by the
    target's causal attention and the drafter's context-injected attention: the two differ only
    in what they attend to, not in their weights."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(d, cfg.rms_eps) if cfg.qk_norm else nn.Identity()


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables for integer positions of any shape: returns [..., head_dim]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32).unsqueeze(-1) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, L, D]; cos/sin: [B, L, D] (per-row positions) or [L, D]."""
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + _rotate_half(x) * sin


def init_weights(module: nn.Module, generator: torch.Generator, std: float | None = 0.02) -> None:
    """Deterministic init from one generator, independent of torch's global RNG so that
    building a model never disturbs or depends on the caller's random state.

    std=0.02 is HF's scheme (right for hidden sizes in the thousands); std=None scales each
    linear by fan_in^-1/2, which small models need: with 0.02 at hidden 64 the layers' outputs
    start ~50x smaller than the frozen embeddings they add to, and training stalls for
    hundreds of steps before the drafter starts to use its context."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            s = std if std is not None or isinstance(m, nn.Embedding) else m.weight.shape[1] ** -0.5
            s = 0.02 if s is None else s
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator) * s)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
        elif isinstance(m, RMSNorm):
            with torch.no_grad():
                m.weight.fill_(1.0)
