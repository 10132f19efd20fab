"""Useful FLOPs and MFU (perf.py): the analytic count is what torch's FlopCounterMode counts."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dflash_train.attention import SdpaAttention, dense_mask
from dflash_train.config import ModelConfig
from dflash_train.data import Batch
from dflash_train.model.drafter import build_drafter
from dflash_train.model.target import TargetModel
from dflash_train.objective import drafter_loss_full_logits, sample_anchors, target_forward
from dflash_train.perf import (StepFlops, allowed_pairs, assumed_peak_tflops, drafter_step_flops,
                               mfu)

TINY = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)


@pytest.mark.parametrize("cfg, batch, ctx", [
    (TINY, 2, 128),
    (TINY.with_(tie_embeddings=False, num_drafter_layers=3, anchors_per_seq=5), 3, 100),
])
def test_matmul_flops_are_what_flopcountermode_counts(cfg, batch, ctx):
    target = TargetModel(cfg).eval()
    drafter = build_drafter(cfg, target, seed=0)
    ids = torch.randint(0, 256, (batch, ctx), generator=torch.Generator().manual_seed(0))
    tb = target_forward(target, Batch(ids, torch.ones_like(ids, dtype=torch.bool)))
    counter = FlopCounterMode(display=False)
    with counter:
        loss, _ = drafter_loss_full_logits(drafter, tb, torch.Generator().manual_seed(1), SdpaAttention())
        loss.backward()
    by_op = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    anchors, _ = sample_anchors(tb.host_loss_mask, cfg.anchors_per_seq, cfg.block_size,
                                torch.Generator().manual_seed(1))
    flops = drafter_step_flops(cfg, batch, ctx, cfg.anchors_per_seq, allowed_pairs(anchors.tolist(), cfg.block_size))
    assert flops.matmul == by_op["aten.mm"]
    assert flops.attention > 0 and flops.total == flops.matmul + flops.attention


def test_allowed_pairs_count_the_dflash_mask():
    anchors = torch.tensor([[1, 7, 30], [2, 3, 40]])
    assert allowed_pairs(anchors.tolist(), 4) == int(dense_mask(anchors, 48, 4).sum())


def test_peak_and_mfu():
    assert assumed_peak_tflops("NVIDIA H200") == 789.0
    assert assumed_peak_tflops("NVIDIA H200", override=500) == 500.0
    assert assumed_peak_tflops("NVIDIA A10G") is None and assumed_peak_tflops("cpu") is None
    assert mfu(789e12 * 0.5, 1.0, 789.0) == pytest.approx(0.5)
    assert mfu(1e12, 0.5, 1.0, devices=2) == pytest.approx(1.0)
    assert mfu(1e12, 1.0, None) is None and mfu(1e12, 0.0, 789.0) is None
    assert (StepFlops(1, 2) + StepFlops(3, 4)).total == 10
