"""The training step as the trainer runs it: chunked LM-head cross-entropy, the one compiled
step unit, and its equality with the plain full-logits formulation.

Stated tolerances (CPU, float32): the chunked cross-entropy equals F.cross_entropy to 1e-6
relative (loss) and 1e-5 (gradient); the whole new step's loss equals the full-logits step's to
1e-5 relative, its metrics exactly, its gradients to 1e-4 relative (one reassociated sum: the
weights are normalised before the reduction instead of after). On the device machine (bf16,
dflash-8b-like) the same comparison gave loss within 7e-5 relative and gradients within 2.0%,
against 1.3-1.5% between the dense-SDPA and flex paths of the plain step (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from dflash_train.attention import FlexAttention, SdpaAttention
from dflash_train.config import ModelConfig
from dflash_train.data import Batch
from dflash_train.model.drafter import build_drafter
from dflash_train.model.target import TargetModel
from dflash_train.objective import (TargetBatch, ce_chunk_rows, chunked_head_cross_entropy,
                                    compiled_objective, drafter_loss, drafter_loss_full_logits,
                                    target_forward)

CFG = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 1000])
def test_chunked_cross_entropy_equals_full_cross_entropy(chunk_rows):
    g = torch.Generator().manual_seed(chunk_rows)
    n, h, v = 90, 16, 50
    hidden = torch.randn(n, h, generator=g, requires_grad=True)
    head = torch.randn(v, h, generator=g)
    labels = torch.randint(0, v, (n,), generator=g)
    weights = torch.rand(n, generator=g) * (torch.rand(n, generator=g) > 0.3)  # some rows unscored

    loss, hit = chunked_head_cross_entropy(hidden, head, labels, weights, chunk_rows)
    loss.backward()
    got_grad, hidden.grad = hidden.grad, None

    logits = hidden @ head.t()
    want = (F.cross_entropy(logits, labels, reduction="none") * weights).sum()
    want.backward()
    assert abs(float(loss) - float(want)) <= 1e-6 * abs(float(want))
    assert _rel(got_grad, hidden.grad) <= 1e-5
    assert torch.equal(hit, logits.argmax(-1) == labels)


def test_chunked_cross_entropy_never_holds_the_whole_logits():
    # Every tensor any op makes, forward and backward, is recorded: none may reach the size of
    # the [positions x vocab] logits; the largest is one chunk's.
    class LargestOutput(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    LargestOutput.largest = max(LargestOutput.largest, t.numel())
            return out

    n, h, v, rows = 256, 8, 1000, 32
    hidden = torch.randn(n, h, requires_grad=True)
    head = torch.randn(v, h)
    with LargestOutput():
        loss, _ = chunked_head_cross_entropy(hidden, head, torch.randint(0, v, (n,)),
                                             torch.ones(n) / n, rows)
        loss.backward()
    assert LargestOutput.largest == rows * v < n * v


def test_chunk_rows_bound_the_fp32_chunk():
    assert ce_chunk_rows(151936) == 1728                 # 1728 x 151,936 x 4 B <= 1 GiB
    assert ce_chunk_rows(151936) * 151936 * 4 <= 1 << 30
    assert ce_chunk_rows(260) >= 260 * 1000              # small vocab: one chunk in practice
    assert ce_chunk_rows(10**12) == 1


def test_a_trainable_head_is_refused():
    with pytest.raises(ValueError, match="LM head must be frozen"):
        chunked_head_cross_entropy(torch.randn(4, 3), torch.randn(5, 3, requires_grad=True),
                                   torch.zeros(4, dtype=torch.long), torch.ones(4), 2)


def _setup(seed=0, holes=False):
    target = TargetModel(CFG).eval()
    drafter = build_drafter(CFG, target, seed=seed)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (2, 128), generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    if holes:
        mask[0, 30:] = False          # row 0: few loss positions -> invalid (weight 0) anchors
        mask[1, ::3] = False
    return drafter, target_forward(target, Batch(ids, mask))


@pytest.mark.parametrize("holes", [False, True])
def test_new_step_equals_the_full_logits_step(holes):
    drafter, tb = _setup(holes=holes)
    attention = SdpaAttention()
    want, want_m = drafter_loss_full_logits(drafter, tb, torch.Generator().manual_seed(3), attention)
    want.backward()
    want_g = [p.grad.clone() for p in drafter.parameters()]
    drafter.zero_grad(set_to_none=True)

    got, got_m = drafter_loss(drafter, tb, torch.Generator().manual_seed(3), attention, chunk_rows=13)
    got.backward()
    assert abs(float(got) - float(want)) <= 1e-5 * abs(float(want))
    assert dict(got_m) == pytest.approx(want_m, rel=1e-5)
    assert got_m["positions"] == want_m["positions"] and got_m["acc_per_pos"] == want_m["acc_per_pos"]
    for p, w in zip(drafter.parameters(), want_g):
        assert _rel(p.grad, w) <= 1e-4


def test_step_reads_anchors_from_the_host_mask():
    # The device copy of the loss mask is never read back: anchors come from host_loss_mask.
    drafter, tb = _setup()
    assert tb.host_loss_mask is not None and tb.host_loss_mask.device.type == "cpu"
    moved = tb.to("cpu")
    assert moved.host_loss_mask is tb.host_loss_mask
    flipped = TargetBatch(tb.input_ids, torch.zeros_like(tb.loss_mask), tb.taps, tb.greedy,
                          host_loss_mask=tb.host_loss_mask)
    _, a = drafter_loss(drafter, tb, torch.Generator().manual_seed(1), SdpaAttention())
    _, b = drafter_loss(drafter, flipped, torch.Generator().manual_seed(1), SdpaAttention())
    assert a.flops == b.flops                      # same anchors drawn from the same host mask
    assert b["positions"] == 0                     # while scoring follows the device mask


@pytest.mark.slow
def test_compiled_step_equals_eager_and_new_anchors_do_not_recompile():
    import torch._dynamo

    torch._dynamo.reset()
    drafter, tb = _setup()
    step = compiled_objective("eager")
    assert compiled_objective("eager") is step    # one compiled unit per process and backend
    for attention, grad in ((SdpaAttention(), True), (FlexAttention(compiled=True), False)):
        def run(seed, fn):
            with torch.set_grad_enabled(grad):
                loss, m = drafter_loss(drafter, tb, torch.Generator().manual_seed(seed), attention, step=fn)
                if grad:
                    loss.backward()
                    drafter.zero_grad(set_to_none=True)
            return m["loss"]

        assert run(0, step) == pytest.approx(run(0, None), rel=1e-6)   # the one compile
        with torch.compiler.set_stance("fail_on_recompile"):
            for seed in (1, 2, 3):
                assert run(seed, step) == pytest.approx(run(seed, None), rel=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist only with a device")
def test_a_cuda_step_syncs_only_when_its_metrics_are_read():
    drafter, tb = _setup()
    drafter = drafter.cuda()
    tb = tb.to("cuda")
    opt = torch.optim.AdamW(drafter.parameters(), fused=True)

    def one(seed):
        loss, m = drafter_loss(drafter, tb, torch.Generator().manual_seed(seed), FlexAttention(),
                               step=compiled_objective("inductor"))
        loss.backward()
        opt.step()
        return m

    one(0)["loss"]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        m = one(1)
        with pytest.raises(RuntimeError, match="synchronizing"):
            m["loss"]
    finally:
        torch.cuda.set_sync_debug_mode("default")
