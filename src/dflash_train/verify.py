"""Acceptance length τ by real greedy block verification against the target.

Per step: the drafter proposes block-1 tokens after the current "bonus" token (the target's own
next token); the target scores [prefix, bonus, drafts] in one pass; the longest prefix of drafts
equal to the target's greedy tokens is accepted, and the target's token after it becomes the
next bonus. A step yields accepted + 1 tokens; τ is the mean of that over all steps. τ = 1 means
the drafter never helps; a loss that falls while τ stays at 1 is the classic DFlash bug, which
is why this measures τ for real instead of inferring it from per-position accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F

from .objective import _module_device


@dataclass
class AcceptanceStats:
    tau: float
    steps: int
    tokens: int
    # accepted_hist[n] = steps that accepted exactly n drafted tokens (0..block-1)
    accepted_hist: list[int] = field(default_factory=list)


def eval_context_len(prompt_len: int, max_new_tokens: int, block_size: int, max_seq_len: int) -> int:
    """The fixed context length every drafter call of an evaluation uses (taps are zero-padded
    to it; the mask hides the padding), so a compiled attention sees ONE shape per evaluation.
    The runtime can warm that shape up front."""
    need = prompt_len + max_new_tokens + block_size
    if need > max_seq_len:
        raise ValueError(f"prompt {prompt_len} + {max_new_tokens} new tokens + block {block_size} "
                         f"exceeds max_seq_len {max_seq_len}; use shorter prompts or fewer new tokens")
    return prompt_len + max_new_tokens


def _as_prompt_list(prompts) -> list[torch.Tensor]:
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() != 2:
            raise ValueError(f"prompts must be [n, length] (got shape {tuple(prompts.shape)})")
        return list(prompts)
    return [torch.as_tensor(p) for p in prompts]


@torch.no_grad()
def acceptance_stats(target: torch.nn.Module, drafter: torch.nn.Module,
                     prompts: torch.Tensor | Sequence[torch.Tensor], attention,
                     max_new_tokens: int = 64) -> AcceptanceStats:
    cfg = drafter.cfg
    blk = cfg.block_size
    plist = _as_prompt_list(prompts)
    if not plist:
        raise ValueError("acceptance_length needs at least one prompt")
    lengths = {int(p.numel()) for p in plist}
    if len(lengths) != 1 or min(lengths) < 1:
        raise ValueError(f"prompts must be non-empty and of one length (got lengths {sorted(lengths)})")
    prompt_len = lengths.pop()
    ctx_len = eval_context_len(prompt_len, max_new_tokens, blk, cfg.max_seq_len)
    t_dev, d_dev = _module_device(target), _module_device(drafter)

    hist = [0] * blk
    for prompt in plist:
        ids = prompt.to(t_dev, torch.long).view(1, -1)
        out = target(ids)
        taps = out.taps
        bonus = out.logits[0, -1].argmax()
        generated = 0
        while generated < max_new_tokens:
            a = ids.shape[1]  # position of the bonus token = the block's anchor
            ctx = F.pad(taps, (0, 0, 0, ctx_len - a)).to(d_dev)
            noise = torch.full((1, blk), cfg.mask_token_id, dtype=torch.long, device=d_dev)
            noise[0, 0] = bonus.to(d_dev)
            anchors = torch.tensor([[a]], dtype=torch.long, device=d_dev)
            drafts = drafter(ctx, noise, anchors, attention)[0, 1:].argmax(-1).to(t_dev)

            seq = torch.cat([ids, bonus.view(1, 1), drafts.view(1, -1)], dim=1)
            check = target(seq)
            greedy = check.logits[0, a:a + blk].argmax(-1)  # target's token for a+1 .. a+blk
            agree = (drafts == greedy[:blk - 1]).long()
            accepted = int(agree.cumprod(0).sum())
            hist[accepted] += 1
            keep = a + 1 + accepted
            ids, taps = seq[:, :keep], check.taps[:, :keep]
            bonus = greedy[accepted]
            generated += accepted + 1
    steps = sum(hist)
    tokens = sum((n + 1) * c for n, c in enumerate(hist))
    return AcceptanceStats(tau=tokens / steps, steps=steps, tokens=tokens, accepted_hist=hist)


def acceptance_length(target: torch.nn.Module, drafter: torch.nn.Module,
                      prompts: torch.Tensor | Sequence[torch.Tensor], attention,
                      max_new_tokens: int = 64) -> float:
    """τ: mean tokens per verification step (accepted drafts + the target's own token)."""
    return acceptance_stats(target, drafter, prompts, attention, max_new_tokens).tau
