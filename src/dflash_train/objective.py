"""The DFlash training objective: target pass, anchors, noise blocks, decay-weighted loss.

Labels are the target's greedy tokens: greedy[:, t] is the token the target would put at
position t given the real prefix < t. Block position k (k >= 1) of the block anchored at a is
trained towards greedy[:, a + k] with weight exp(-(k-1)/gamma); position 0 holds the anchor
token itself and is never scored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from .data import Batch


@dataclass
class TargetBatch:
    input_ids: torch.Tensor  # [B, T] int64
    loss_mask: torch.Tensor  # [B, T] bool
    taps: torch.Tensor       # [B, T, tap_size]
    greedy: torch.Tensor     # [B, T] int64

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "TargetBatch":
        return TargetBatch(*(getattr(self, f.name).to(device, non_blocking=non_blocking)
                             for f in fields(self)))

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def _module_device(module: torch.nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    for b in module.buffers():
        return b.device
    return torch.device("cpu")


def target_forward(target: torch.nn.Module, batch: Batch) -> TargetBatch:
    """Runs in a target thread. no_grad, not inference_mode: the taps feed the drafter's
    autograd graph, and inference tensors cannot be saved for backward."""
    device = _module_device(target)
    ids = batch.input_ids.to(device, non_blocking=True)
    with torch.no_grad():
        out = target(ids)
        greedy = torch.cat([ids[:, :1], out.logits[:, :-1].argmax(-1)], dim=1)
    return TargetBatch(ids, batch.loss_mask.to(device, non_blocking=True), out.taps, greedy)


def check_anchor_room(seq_len: int, num_anchors: int, block_size: int) -> None:
    room = seq_len - block_size  # anchors 1..T-block keep the whole block inside the sequence
    if room < 1:
        raise ValueError(f"sequence of {seq_len} tokens is too short for a block of {block_size}; "
                         "use longer sequence buckets")
    if num_anchors > room:
        raise ValueError(f"{num_anchors} anchors per sequence do not fit: a sequence of {seq_len} "
                         f"tokens has only {room} anchor positions for block {block_size}; "
                         "lower anchors_per_seq or use longer sequence buckets")


def sample_anchors(loss_mask: torch.Tensor, num_anchors: int, block_size: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct anchors per row, sorted, drawn uniformly from loss positions a in [1, T-block].

    Returns (anchors [B, A] int64, valid [B, A] bool) on the CPU. A row with fewer than A loss
    positions fills up with other in-range positions marked invalid (weight 0), so the shape
    (and the compiled kernel) stays fixed for any data.
    """
    loss_mask = loss_mask.cpu()
    b, t = loss_mask.shape
    check_anchor_room(t, num_anchors, block_size)
    scores = torch.rand(b, t, generator=generator)
    in_range = torch.zeros(t, dtype=torch.bool)
    in_range[1:t - block_size + 1] = True
    candidate = loss_mask & in_range
    # Candidates score in (1, 2), in-range fillers in (0, 1), out-of-range -1: top-k prefers
    # candidates and never picks a position whose block would leave the sequence.
    scores = torch.where(candidate, scores + 1.0, torch.where(in_range, scores, -1.0))
    top = scores.topk(num_anchors, dim=1)
    anchors, order = top.indices.sort(dim=1)
    valid = top.values.gather(1, order) > 1.0
    return anchors, valid


def build_noise_blocks(input_ids: torch.Tensor, anchors: torch.Tensor, block_size: int,
                       mask_token_id: int) -> torch.Tensor:
    """[B, A*block]: each block is [token at anchor, MASK x (block-1)]."""
    anchors = anchors.to(input_ids.device)
    blocks = torch.full((*anchors.shape, block_size), mask_token_id, dtype=input_ids.dtype,
                        device=input_ids.device)
    blocks[:, :, 0] = input_ids.gather(1, anchors)
    return blocks.flatten(1)


def decay_weights(block_size: int, gamma: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """[block]: 0 at k=0 (the anchor is given), exp(-(k-1)/gamma) for k >= 1."""
    k = torch.arange(block_size, dtype=torch.float32, device=device)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def drafter_loss(drafter: torch.nn.Module, tb: TargetBatch, generator: torch.Generator,
                 attention) -> tuple[torch.Tensor, dict]:
    """(loss, metrics): loss is the decay-weighted CE (differentiable); metrics holds floats
    loss, acc (all scored positions), acc_per_pos (list, block positions 1..block-1) and
    positions (how many were scored). One host sync for all metrics."""
    cfg = drafter.cfg
    blk = cfg.block_size
    anchors, valid = sample_anchors(tb.loss_mask, cfg.anchors_per_seq, blk, generator)
    dev = tb.input_ids.device
    anchors, valid = anchors.to(dev, non_blocking=True), valid.to(dev, non_blocking=True)
    noise = build_noise_blocks(tb.input_ids, anchors, blk, cfg.mask_token_id)
    logits = drafter(tb.taps, noise, anchors, attention)

    b, a = anchors.shape
    pos = (anchors[:, :, None] + torch.arange(blk, device=dev)).flatten(1)
    labels = tb.greedy.gather(1, pos).view(b, a, blk)
    scored = (tb.loss_mask.gather(1, pos).view(b, a, blk) & valid[:, :, None])
    scored[:, :, 0] = False
    weights = decay_weights(blk, cfg.loss_gamma, dev) * scored

    logits = logits.view(b, a, blk, -1)
    ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none")
    ce = ce.view(b, a, blk)
    loss = (ce * weights).sum() / weights.sum().clamp_min(1e-6)

    with torch.no_grad():
        hit = (logits.argmax(-1) == labels) & scored
        per_pos_hit = hit.sum(dim=(0, 1))[1:].float()
        per_pos_n = scored.sum(dim=(0, 1))[1:].float()
        packed = torch.cat([loss.detach().float().view(1), per_pos_hit, per_pos_n]).tolist()
    n = blk - 1
    hits, counts = packed[1:1 + n], packed[1 + n:]
    total = sum(counts)
    metrics = {
        "loss": packed[0],
        "acc": sum(hits) / total if total else 0.0,
        "acc_per_pos": [h / c if c else 0.0 for h, c in zip(hits, counts)],
        "positions": int(total),
    }
    return loss, metrics
