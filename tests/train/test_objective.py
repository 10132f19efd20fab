"""The objective's pieces: anchors, noise blocks, decay weights, label alignment, target pass."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dflash_train.attention import SdpaAttention
from dflash_train.config import ModelConfig
from dflash_train.data import Batch
from dflash_train.model.target import TargetModel
from dflash_train.objective import (TargetBatch, build_noise_blocks, decay_weights, drafter_loss,
                                    sample_anchors, target_forward)

CFG = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)


def test_anchors_are_distinct_sorted_in_range_and_on_loss_positions():
    mask = torch.zeros(3, 64, dtype=torch.bool)
    mask[:, 10:40] = True
    anchors, valid = sample_anchors(mask, 8, 16, torch.Generator().manual_seed(0))
    assert anchors.shape == valid.shape == (3, 8) and valid.all()
    for row in anchors:
        assert row.tolist() == sorted(set(row.tolist()))
    assert ((anchors >= 10) & (anchors < 40) & (anchors <= 64 - 16)).all()
    again, _ = sample_anchors(mask, 8, 16, torch.Generator().manual_seed(0))
    assert torch.equal(anchors, again)


def test_rows_with_few_loss_positions_pad_with_invalid_anchors():
    mask = torch.zeros(2, 64, dtype=torch.bool)
    mask[0, 5:8] = True          # three candidates
    mask[1] = True
    anchors, valid = sample_anchors(mask, 6, 16, torch.Generator().manual_seed(1))
    assert valid[0].sum() == 3 and valid[1].all()
    assert set(anchors[0][valid[0]].tolist()) == {5, 6, 7}
    assert ((anchors >= 1) & (anchors <= 48)).all()  # fillers still keep the block in range


def test_too_many_anchors_is_a_clear_error():
    with pytest.raises(ValueError, match="only 48 anchor positions for block 16; lower anchors_per_seq"):
        sample_anchors(torch.ones(1, 64, dtype=torch.bool), 49, 16, torch.Generator())
    with pytest.raises(ValueError, match="too short for a block of 16"):
        sample_anchors(torch.ones(1, 16, dtype=torch.bool), 1, 16, torch.Generator())


def test_noise_blocks_and_decay_weights():
    ids = torch.arange(100, 164).view(1, 64)
    blocks = build_noise_blocks(ids, torch.tensor([[3, 30]]), 4, mask_token_id=259)
    assert blocks.tolist() == [[103, 259, 259, 259, 130, 259, 259, 259]]
    w = decay_weights(5, gamma=2.0)
    assert w[0] == 0 and torch.allclose(w[1:], torch.tensor([math.exp(-k / 2.0) for k in range(4)]))


def test_target_forward_greedy_is_the_targets_next_token():
    target = TargetModel(CFG).eval()
    ids = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(0))
    tb = target_forward(target, Batch(ids, torch.ones_like(ids, dtype=torch.bool)))
    logits = target(ids).logits
    assert torch.equal(tb.greedy[:, 0], ids[:, 0])
    assert torch.equal(tb.greedy[:, 1:], logits[:, :-1].argmax(-1))
    assert tb.taps.shape == (2, 64, CFG.tap_size) and not tb.taps.requires_grad


class OracleDrafter(nn.Module):
    """Hidden states that, through its identity LM head, put all mass on greedy[anchor + k +
    shift]: with shift 0 the loss must be ~0 and accuracy 1, which pins down the label
    alignment drafter_loss uses."""

    def __init__(self, greedy: torch.Tensor, shift: int) -> None:
        super().__init__()
        self.cfg = CFG
        self.greedy, self.shift = greedy, shift
        self.scale = nn.Parameter(torch.tensor(30.0))
        self.register_buffer("head_weight", torch.eye(CFG.vocab_size))

    def hidden_states(self, taps, noise_ids, anchors, attention, mask=None):
        blk = self.cfg.block_size
        pos = (anchors[:, :, None] + torch.arange(blk) + self.shift).clamp(max=self.greedy.shape[1] - 1)
        want = self.greedy.gather(1, pos.flatten(1))
        return nn.functional.one_hot(want, self.cfg.vocab_size).float() * self.scale

    def forward(self, taps, noise_ids, anchors, attention):
        return self.hidden_states(taps, noise_ids, anchors, attention) @ self.head_weight.t()


def _batch_with_structure():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (2, 64), generator=g)
    greedy = torch.randint(0, 256, (2, 64), generator=g)
    return TargetBatch(ids, torch.ones_like(ids, dtype=torch.bool),
                       torch.zeros(2, 64, CFG.tap_size), greedy)


def test_loss_labels_are_the_targets_greedy_tokens_at_anchor_plus_k():
    tb = _batch_with_structure()
    loss, m = drafter_loss(OracleDrafter(tb.greedy, 0), tb, torch.Generator().manual_seed(0), SdpaAttention())
    assert m["acc"] == 1.0 and m["loss"] < 1e-6 and m["acc_per_pos"] == [1.0] * 15
    assert m["positions"] == 2 * CFG.anchors_per_seq * 15
    loss.backward()  # differentiable
    _, off = drafter_loss(OracleDrafter(tb.greedy, 1), tb, torch.Generator().manual_seed(0), SdpaAttention())
    assert off["acc"] < 0.1 and off["loss"] > 10


def test_loss_ignores_positions_outside_the_loss_mask():
    tb = _batch_with_structure()
    tb.loss_mask[:, 40:] = False
    _, m = drafter_loss(OracleDrafter(tb.greedy, 0), tb, torch.Generator().manual_seed(0), SdpaAttention())
    # Blocks anchored before 40 still score their positions < 40, never any at or after 40.
    assert 0 < m["positions"] < 2 * CFG.anchors_per_seq * 15
