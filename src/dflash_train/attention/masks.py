"""The DFlash mask, written once as a flex `mask_mod` and materialised from that same function
as a dense boolean mask, so the two attention paths cannot disagree about who sees what.

Key/value layout of a drafter layer: [context 0..ctx_len-1 | noise blocks, block_size each].
Queries are the noise blocks. A query in block i (anchored at a_i) sees the context positions
< a_i and every position of its own block (both directions); nothing else.
"""

from __future__ import annotations

import torch


def dflash_mask_mod(anchors: torch.Tensor, ctx_len: int, block_size: int):
    """mask_mod(b, h, q_idx, kv_idx) -> bool for anchors [B, A] (one anchor per block)."""

    def mask_mod(b, h, q_idx, kv_idx):
        block = q_idx // block_size
        sees_context = kv_idx < anchors[b, block]
        in_own_block = (kv_idx >= ctx_len) & ((kv_idx - ctx_len) // block_size == block)
        return sees_context | in_own_block

    return mask_mod


def mask_shape(anchors: torch.Tensor, ctx_len: int, block_size: int) -> tuple[int, int, int]:
    if anchors.dim() != 2:
        raise ValueError(f"anchors must be [batch, num_anchors] (got shape {tuple(anchors.shape)})")
    batch, num_anchors = anchors.shape
    q_len = num_anchors * block_size
    return batch, q_len, ctx_len + q_len


def dense_mask(anchors: torch.Tensor, ctx_len: int, block_size: int) -> torch.Tensor:
    """[B, 1, Q, KV] bool (True = may attend), evaluated from dflash_mask_mod by broadcasting."""
    batch, q_len, kv_len = mask_shape(anchors, ctx_len, block_size)
    dev = anchors.device
    b = torch.arange(batch, device=dev).view(batch, 1, 1, 1)
    h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=dev)
    q = torch.arange(q_len, device=dev).view(1, 1, q_len, 1)
    kv = torch.arange(kv_len, device=dev).view(1, 1, 1, kv_len)
    return dflash_mask_mod(anchors, ctx_len, block_size)(b, h, q, kv)


def dflash_block_mask(anchors: torch.Tensor, ctx_len: int, block_size: int):
    """The flex BlockMask for the same mask. Built eagerly (not compiled): compiling it would
    add a second per-shape torch.compile call in every worker, outside the compile gate."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, q_len, kv_len = mask_shape(anchors, ctx_len, block_size)
    return create_block_mask(dflash_mask_mod(anchors, ctx_len, block_size), batch, None,
                             q_len, kv_len, device=anchors.device)
