"""The DFlash training objective: target pass, anchors, noise blocks, decay-weighted loss.

Labels are the target's greedy tokens: greedy[:, t] is the token the target would put at
position t given the real prefix < t. Block position k (k >= 1) of the block anchored at a is
trained towards greedy[:, a + k] with weight exp(-(k-1)/gamma); position 0 holds the anchor
token itself and is never scored.

One step (`drafter_loss`) splits in two:
- on the host: anchors drawn from the batch's host copy of the loss mask, copied to the device
  in one pinned, non-blocking transfer, and the attention mask built from them on the device;
  nothing here waits for the device;
- on the device, `objective_terms`: drafter forward, labels, weights, and the cross-entropy of
  the LM head in row chunks (`chunked_head_cross_entropy`), so the fp32 logits
  [positions x vocab] never exist whole. This is the unit the trainer compiles
  (`compiled_objective`), under the compile gate like every other compiled function.
The metrics are read back once, lazily (`LazyStepMetrics`): after backward has been queued.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from .data import Batch
from .perf import StepFlops, allowed_pairs, drafter_step_flops


@dataclass
class TargetBatch:
    input_ids: torch.Tensor  # [B, T] int64
    loss_mask: torch.Tensor  # [B, T] bool
    taps: torch.Tensor       # [B, T, tap_size]
    greedy: torch.Tensor     # [B, T] int64
    # The loss mask as the data loader made it, on the CPU: anchors are drawn from it without
    # reading the device copy back (a host sync per step). None: read loss_mask instead.
    host_loss_mask: torch.Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "TargetBatch":
        moved = {f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                 for f in fields(self) if f.name != "host_loss_mask"}
        return TargetBatch(**moved, host_loss_mask=self.host_loss_mask)

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
    return TargetBatch(ids, batch.loss_mask.to(device, non_blocking=True), out.taps, greedy,
                       host_loss_mask=batch.loss_mask)


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
    loss_mask = loss_mask.cpu()  # a no-op for the host mask the trainer passes
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


# -- the LM head's cross-entropy, chunked -----------------------------------------------------

# Rows per chunk: at most this many bytes of fp32 logits at a time (1 GiB: 1,728 rows at vocab
# 151,936, so 5 chunks for 512 anchors x 15 scored positions; the 8 GB whole is never made).
CE_CHUNK_BYTES = 1 << 30


def ce_chunk_rows(vocab_size: int, chunk_bytes: int = CE_CHUNK_BYTES) -> int:
    rows = max(1, chunk_bytes // (4 * vocab_size))
    return rows - rows % 64 if rows >= 64 else rows


class _ChunkedHeadCrossEntropy(torch.autograd.Function):
    """sum_i w_i * CE(hidden_i @ head^T, label_i) with the head frozen.

    The gradient with respect to `hidden` is computed in the forward pass, chunk by chunk,
    while each chunk's logits exist anyway ((softmax - onehot) * w @ head), and saved: the
    backward only scales it. Same FLOPs as logits + their backward, no recompute, and the
    chunk's fp32 logits are the largest intermediate. Also returns argmax == label per row
    (for the accuracy metrics), from the same logits.
    """

    @staticmethod
    def forward(ctx, hidden, head, labels, weights, chunk_rows: int, need_grad: bool):
        losses, hits, grads = [], [], []
        for start in range(0, hidden.shape[0], chunk_rows):
            h = hidden[start:start + chunk_rows]
            lbl = labels[start:start + chunk_rows]
            w = weights[start:start + chunk_rows]
            logits = (h @ head.t()).float()
            lse = torch.logsumexp(logits, dim=-1)
            picked = logits.gather(1, lbl[:, None]).squeeze(1)
            losses.append(((lse - picked) * w).sum())
            hits.append(logits.argmax(-1) == lbl)
            if need_grad:
                g = torch.exp(logits - lse[:, None])
                g = g.scatter_add(1, lbl[:, None], torch.full_like(picked[:, None], -1.0))
                grads.append((g * w[:, None]).to(h.dtype) @ head)
        loss = torch.stack(losses).sum()
        hit = torch.cat(hits)
        ctx.mark_non_differentiable(hit)
        if need_grad:
            ctx.save_for_backward(torch.cat(grads))
        return loss, hit

    @staticmethod
    def backward(ctx, grad_loss, grad_hit):
        (grad_hidden,) = ctx.saved_tensors
        return grad_hidden * grad_loss.to(grad_hidden.dtype), None, None, None, None, None


def chunked_head_cross_entropy(hidden: torch.Tensor, head_weight: torch.Tensor, labels: torch.Tensor,
                               weights: torch.Tensor, chunk_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum_i weights_i * CE_i as an fp32 scalar, hit [N] bool) for hidden [N, H], a frozen
    head [V, H], labels [N], weights [N] fp32. Differentiable in `hidden` only."""
    if head_weight.requires_grad:
        raise ValueError("chunked_head_cross_entropy trains no head: the LM head must be frozen")
    need_grad = torch.is_grad_enabled() and hidden.requires_grad
    return _ChunkedHeadCrossEntropy.apply(hidden, head_weight.to(hidden.dtype), labels, weights,
                                          int(chunk_rows), need_grad)


# -- one step --------------------------------------------------------------------------------

def objective_terms(drafter: torch.nn.Module, taps: torch.Tensor, input_ids: torch.Tensor,
                    loss_mask: torch.Tensor, greedy: torch.Tensor, anchors: torch.Tensor,
                    valid: torch.Tensor, mask: Any, attention, chunk_rows: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The device half of a step, every tensor on the drafter's device: (loss, packed stats).

    packed = [loss, hits per block position 1..block-1, scored per position 1..block-1].
    Position 0 (the anchor itself) is never scored, so its row never reaches the LM head.
    Nothing here reads a value back to the host, so it compiles as one graph."""
    cfg = drafter.cfg
    blk = cfg.block_size
    b, a = anchors.shape
    dev = input_ids.device
    noise = build_noise_blocks(input_ids, anchors, blk, cfg.mask_token_id)
    hidden = drafter.hidden_states(taps, noise, anchors, attention, mask)
    pos = (anchors[:, :, None] + torch.arange(blk, device=dev)).flatten(1)
    labels = greedy.gather(1, pos).view(b, a, blk)[:, :, 1:]
    scored = loss_mask.gather(1, pos).view(b, a, blk)[:, :, 1:] & valid[:, :, None]
    weights = decay_weights(blk, cfg.loss_gamma, dev)[1:] * scored
    weights = weights / weights.sum().clamp_min(1e-6)
    rows = hidden.view(b, a, blk, -1)[:, :, 1:].reshape(b * a * (blk - 1), -1)
    loss, hit = chunked_head_cross_entropy(rows, drafter.head_weight, labels.reshape(-1),
                                           weights.reshape(-1), chunk_rows)
    hit = hit.view(b, a, blk - 1) & scored
    packed = torch.cat([loss.detach().view(1), hit.sum(dim=(0, 1)).float(),
                        scored.sum(dim=(0, 1)).float()])
    return loss, packed


_compiled_objectives: dict[str, Callable] = {}
_compiled_objectives_lock = threading.Lock()


def compiled_objective(backend: str) -> Callable:
    """The ONE compiled `objective_terms` of the process per compile backend (see
    attention.compiled_flex_attention: a second wrapper would escape the compile gate).
    fullgraph: a graph break would silently split the step into eager pieces."""
    with _compiled_objectives_lock:
        fn = _compiled_objectives.get(backend)
        if fn is None:
            fn = torch.compile(objective_terms, backend=backend, dynamic=False, fullgraph=True)
            _compiled_objectives[backend] = fn
        return fn


class LazyStepMetrics(Mapping):
    """The step's metrics (loss, acc, acc_per_pos, positions), read from the device on first
    access: the step's one host sync, which the trainer reaches after backward was queued.
    `flops` (useful FLOPs of the step) is known on the host and costs no sync."""

    def __init__(self, packed: torch.Tensor, block_size: int, flops: StepFlops) -> None:
        self._packed = packed
        self._n = block_size - 1
        self._values: dict[str, Any] | None = None
        self.flops = flops

    def _resolve(self) -> dict[str, Any]:
        if self._values is None:
            packed = self._packed.tolist()
            n = self._n
            hits, counts = packed[1:1 + n], packed[1 + n:]
            total = sum(counts)
            self._values = {
                "loss": packed[0],
                "acc": sum(hits) / total if total else 0.0,
                "acc_per_pos": [h / c if c else 0.0 for h, c in zip(hits, counts)],
                "positions": int(total),
            }
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._resolve()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())


def _anchors_to(device: torch.device, anchors: torch.Tensor, valid: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One host-to-device copy for both, from pinned memory and non-blocking on CUDA: the host
    goes on to build the next kernels while it lands."""
    if device.type != "cuda":
        return anchors.to(device), valid.to(device)
    a = anchors.shape[1]
    packed = torch.cat([anchors, valid.to(anchors.dtype)], dim=1).pin_memory()
    packed = packed.to(device, non_blocking=True)
    return packed[:, :a], packed[:, a:].bool()


def drafter_loss(drafter: torch.nn.Module, tb: TargetBatch, generator: torch.Generator,
                 attention, *, step: Callable | None = None,
                 chunk_rows: int | None = None) -> tuple[torch.Tensor, LazyStepMetrics]:
    """(loss, metrics) of one step: loss is the decay-weighted CE (differentiable); metrics
    (LazyStepMetrics) hold loss, acc (all scored positions), acc_per_pos (block positions
    1..block-1) and positions (how many were scored), and the step's useful FLOPs.

    `step` is `objective_terms` itself (default, eager) or its compiled form."""
    cfg = drafter.cfg
    blk = cfg.block_size
    host_mask = tb.host_loss_mask if tb.host_loss_mask is not None else tb.loss_mask
    anchors, valid = sample_anchors(host_mask, cfg.anchors_per_seq, blk, generator)
    b, t = host_mask.shape
    flops = drafter_step_flops(cfg, b, t, anchors.shape[1], allowed_pairs(anchors.tolist(), blk))
    dev = tb.input_ids.device
    anchors, valid = _anchors_to(dev, anchors, valid)
    mask = attention.build_mask(anchors, t, blk)
    rows = chunk_rows or ce_chunk_rows(cfg.vocab_size)
    loss, packed = (step or objective_terms)(drafter, tb.taps, tb.input_ids, tb.loss_mask, tb.greedy,
                                             anchors, valid, mask, attention, rows)
    return loss, LazyStepMetrics(packed, blk, flops)


def drafter_loss_full_logits(drafter: torch.nn.Module, tb: TargetBatch, generator: torch.Generator,
                             attention) -> tuple[torch.Tensor, dict]:
    """The plain formulation: the drafter's whole logits [B, A*block, V], cast to fp32, one
    cross_entropy over all of them. Same anchors, labels and weights as `drafter_loss`; kept
    as the reference the chunked step is tested and benchmarked against."""
    cfg = drafter.cfg
    blk = cfg.block_size
    host_mask = tb.host_loss_mask if tb.host_loss_mask is not None else tb.loss_mask
    anchors, valid = sample_anchors(host_mask, cfg.anchors_per_seq, blk, generator)
    dev = tb.input_ids.device
    anchors, valid = anchors.to(dev), valid.to(dev)
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
