"""The DFlash mask, written once as a flex `mask_mod` and materialised from that same function
as a dense boolean mask, so the two attention paths cannot disagree about who sees what.

Key/value layout of a drafter layer: [context 0..ctx_len-1 | noise blocks, block_size each].
Queries are the noise blocks. A query in block i (anchored at a_i) sees the context positions
< a_i and every position of its own block (both directions); nothing else.
"""

from __future__ import annotations

import functools
import inspect

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


@functools.cache
def _from_kv_blocks_takes_seq_lengths() -> bool:
    from torch.nn.attention.flex_attention import BlockMask

    return "seq_lengths" in inspect.signature(BlockMask.from_kv_blocks).parameters


def _sparse_index(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., q_tiles, kv_tiles] bool -> (count per q tile, kv tile indices with the set ones
    first, in order): the layout BlockMask.from_kv_blocks takes."""
    num = tiles.sum(-1, dtype=torch.int32)
    order = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return num, order


def _allowed_per_query_and_kv_tile(anchors: torch.Tensor, ctx_len: int, block_size: int,
                                   q_tiles: int, kv_tiles: int, tile: int) -> torch.Tensor:
    """[B, q_tiles*tile, kv_tiles]: how many keys of each kv tile each query may see.

    The mask of a query in block i is two intervals, [0, a_i) and its own block
    [ctx + i*block, ctx + (i+1)*block), so its count in a tile is two interval overlaps: no
    [Q, KV] mask is ever built (that was 100 MB of bool plus its padding and reduction per
    step at 4k context / 512 anchors). Padding queries count 0."""
    batch, num_anchors = anchors.shape
    dev = anchors.device
    start = torch.arange(kv_tiles, device=dev) * tile          # [kv_tiles]
    end = start + tile

    def overlap(lo, hi):                                        # [B, A] intervals -> [B, A, kv_tiles]
        return (torch.minimum(hi[..., None], end) - torch.maximum(lo[..., None], start)).clamp_min(0)

    zero = torch.zeros_like(anchors)
    own = ctx_len + torch.arange(num_anchors, device=dev) * block_size
    per_block = overlap(zero, anchors) + overlap(own.expand_as(anchors), (own + block_size).expand_as(anchors))
    per_query = per_block.repeat_interleave(block_size, dim=1)  # [B, Q, kv_tiles]
    return torch.nn.functional.pad(per_query, (0, 0, 0, q_tiles * tile - per_query.shape[1]))


def dflash_block_mask(anchors: torch.Tensor, ctx_len: int, block_size: int, tile: int = 128):
    """The flex BlockMask for the same mask, from tile counts computed in closed form.

    Same block structure as create_block_mask(dflash_mask_mod(...)) (tested), without its vmap:
    that path materialises int64 intermediates of the full [Q, KV] size (GBs at 8k context), and
    compiling it instead would add a second per-shape torch.compile in every worker, outside the
    compile gate. Tiles are `full` (kernel skips mask_mod) or `partial` (kernel applies it).
    Every op is on the anchors' device and none reads a value back: no host sync."""
    from torch.nn.attention.flex_attention import BlockMask

    if not _from_kv_blocks_takes_seq_lengths():
        return reference_block_mask(anchors, ctx_len, block_size)  # older torch: its own way
    batch, q_len, kv_len = mask_shape(anchors, ctx_len, block_size)
    q_tiles, kv_tiles = -(-q_len // tile), -(-kv_len // tile)
    per_query = _allowed_per_query_and_kv_tile(anchors, ctx_len, block_size, q_tiles, kv_tiles, tile)
    counts = per_query.view(batch, 1, q_tiles, tile, kv_tiles).sum(dim=3)
    full = counts == tile * tile
    kv_num, kv_idx = _sparse_index((counts > 0) & ~full)
    full_num, full_idx = _sparse_index(full)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=tile,
                                    mask_mod=dflash_mask_mod(anchors, ctx_len, block_size),
                                    seq_lengths=(q_len, kv_len))


def reference_block_mask(anchors: torch.Tensor, ctx_len: int, block_size: int):
    """torch's own construction (create_block_mask over dflash_mask_mod), for comparison."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, q_len, kv_len = mask_shape(anchors, ctx_len, block_size)
    return create_block_mask(dflash_mask_mod(anchors, ctx_len, block_size), batch, None,
                             q_len, kv_len, device=anchors.device)
