"""Two interchangeable attention paths for the drafter, with the same call signature:

    mask = backend.build_mask(anchors, ctx_len, block_size)   # once per forward
    out = backend(q, k, v, mask)    # q [B, Hq, Q, D]; k, v [B, Hkv, KV, D] -> [B, Hq, Q, D]

FlexAttention runs flex_attention with a BlockMask (CUDA: compiled, block-sparse). SdpaAttention
runs scaled_dot_product_attention with the dense boolean mask: it works everywhere, including CPU
training, where flex_attention has no backward (torch 2.13).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from .masks import dense_mask, dflash_block_mask

_compiled_flex = None
_compiled_flex_lock = threading.Lock()


def compiled_flex_attention():
    """The ONE compiled flex_attention of the process, created on first use.

    Every caller shares this object, so the runtime's compile gate (warm-up in the main thread,
    fail_on_recompile in workers) governs every compile it does; a second torch.compile wrapper
    elsewhere would escape the gate. Creating the wrapper compiles nothing: compiles happen on
    calls with new shapes/devices.
    """
    global _compiled_flex
    with _compiled_flex_lock:
        if _compiled_flex is None:
            from torch.nn.attention.flex_attention import flex_attention
            _compiled_flex = torch.compile(flex_attention, dynamic=False, fullgraph=True)
        return _compiled_flex


class AttentionBackend:
    name = "?"

    def build_mask(self, anchors: torch.Tensor, ctx_len: int, block_size: int):
        raise NotImplementedError

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SdpaAttention(AttentionBackend):
    name = "sdpa"

    def build_mask(self, anchors, ctx_len, block_size):
        return dense_mask(anchors, ctx_len, block_size)

    def __call__(self, q, k, v, mask):
        groups = q.shape[1] // k.shape[1]
        if groups > 1 and q.device.type == "cuda":
            # The fused kernel that takes an arbitrary mask (memory-efficient attention) does
            # not take enable_gqa in every torch we support; SDPA would then drop to the math
            # path (full fp32 score matrix, many GB at 8k context). Expanding K/V costs far less.
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=groups > 1)


class FlexAttention(AttentionBackend):
    """compiled=False runs flex_attention eagerly: slow, but lets a CPU test check the flex
    forward against SDPA without an inductor build."""

    name = "flex"

    def __init__(self, compiled: bool = True) -> None:
        self.compiled = compiled

    def build_mask(self, anchors, ctx_len, block_size):
        return dflash_block_mask(anchors, ctx_len, block_size)

    def __call__(self, q, k, v, mask):
        if q.device.type == "cpu" and torch.is_grad_enabled() and (
                q.requires_grad or k.requires_grad or v.requires_grad):
            raise RuntimeError("flex_attention has no backward on CPU in this torch; "
                               "train on CPU with attention 'sdpa' (or 'auto')")
        if self.compiled and not torch.compiler.is_compiling():
            fn = compiled_flex_attention()
        else:
            # Eager on purpose, or inside a compiled region (the whole objective step): there
            # the enclosing compile lowers flex itself, and the shared wrapper's lock would
            # break the graph.
            from torch.nn.attention.flex_attention import flex_attention as fn
        return fn(q, k, v, block_mask=mask, enable_gqa=q.shape[1] != k.shape[1])

    def __repr__(self) -> str:
        return f"FlexAttention(compiled={self.compiled})"


BACKEND_NAMES = ("auto", "flex", "sdpa")


def choose_backend(name: str, device: torch.device | str) -> AttentionBackend:
    """auto: flex on CUDA, sdpa elsewhere (CPU flex has no backward)."""
    device = torch.device(device)
    if name == "auto":
        name = "flex" if device.type == "cuda" else "sdpa"
    if name == "flex":
        return FlexAttention(compiled=True)
    if name == "sdpa":
        return SdpaAttention()
    raise ValueError(f"unknown attention backend {name!r}; choose one of: {', '.join(BACKEND_NAMES)}")
