"""Acceptance length τ by real block verification (verify.py).

A counting target (next token = last token + 1) makes the right answer exact, so the
verification logic itself is checked: a perfect drafter gives τ = block, a wrong one τ = 1,
one right for the first n drafts τ = n + 1. Then the real models: τ is the same through both
attention paths, and stays within [1, block].
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dflash_train.attention import FlexAttention, SdpaAttention
from dflash_train.config import ModelConfig
from dflash_train.model.drafter import build_drafter
from dflash_train.model.target import TargetModel, TargetOutput
from dflash_train.verify import acceptance_length, acceptance_stats, eval_context_len

CFG = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)
V = CFG.vocab_size


class CountingTarget(nn.Module):
    cfg = CFG

    def forward(self, ids):
        nxt = (ids + 1) % 256
        taps = ids[..., None].float().expand(*ids.shape, CFG.tap_size)
        return TargetOutput(nn.functional.one_hot(nxt, V).float(), taps)


class CountingDrafter(nn.Module):
    """Drafts anchor+1, anchor+2, ... and gets every draft after the first `right` wrong."""

    cfg = CFG

    def __init__(self, right: int) -> None:
        super().__init__()
        self.right = right

    def forward(self, taps, noise, anchors, attention):
        k = torch.arange(CFG.block_size)
        tok = (noise[:, :1] + k) % 256
        tok = torch.where(k > self.right, (tok + 7) % 256, tok)
        # The context handed over must be padded to a fixed length and show the real prefix.
        assert taps.shape[1] == self.expected_ctx
        a = int(anchors[0, 0])
        assert torch.equal(taps[0, a - 1, 0], (noise[0, 0] - 1).float() % 256)
        return nn.functional.one_hot(tok, V).float()


@pytest.mark.parametrize("right, tau", [(15, 16.0), (0, 1.0), (3, 4.0), (7, 8.0)])
def test_tau_counts_accepted_prefix_plus_one(right, tau):
    prompts = torch.tensor([[10, 11, 12, 13], [40, 41, 42, 43]])
    drafter = CountingDrafter(right)
    drafter.expected_ctx = eval_context_len(4, 48, 16, CFG.max_seq_len)
    stats = acceptance_stats(CountingTarget(), drafter, prompts, None, max_new_tokens=48)
    assert stats.tau == tau
    assert stats.accepted_hist[right] == stats.steps
    assert stats.tokens >= 2 * 48


def test_prompts_and_lengths_are_validated():
    d = CountingDrafter(0)
    with pytest.raises(ValueError, match="exceeds max_seq_len 256"):
        acceptance_length(CountingTarget(), d, torch.zeros(1, 200, dtype=torch.long), None, 64)
    with pytest.raises(ValueError, match="one length"):
        acceptance_length(CountingTarget(), d, [torch.zeros(3), torch.zeros(4)], None, 8)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_real_models_tau_is_bounded_and_identical_through_both_attention_paths():
    torch.manual_seed(0)
    target = TargetModel(CFG).eval().requires_grad_(False)
    drafter = build_drafter(CFG, target, seed=0)
    # Eager flex on CPU is slow (about a second a call): a few steps are enough to compare.
    prompts = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(0))
    s = acceptance_stats(target, drafter, prompts, SdpaAttention(), max_new_tokens=4)
    f = acceptance_stats(target, drafter, prompts, FlexAttention(compiled=False), max_new_tokens=4)
    assert 1.0 <= s.tau <= CFG.block_size
    assert s == f
