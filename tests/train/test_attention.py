"""The DFlash mask and the two attention paths (flex_attention vs dense-mask SDPA).

Runs on CPU here; on a machine with CUDA the same tests also run on cuda (compiled flex), which
is how equivalence is checked on the device machine:
    python -m pytest tests/train/test_attention.py -q
"""

from __future__ import annotations


import pytest
import torch

from dflash_train.attention import (FlexAttention, SdpaAttention, choose_backend,
                                    compiled_flex_attention, dense_mask)
from dflash_train.config import ModelConfig
from dflash_train.model.drafter import build_drafter
from dflash_train.model.target import TargetModel
from dflash_train.objective import build_noise_blocks

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# Eager flex on CPU warns that it is unfused; that is the point of the CPU check.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True, scope="module")
def room_for_every_compiled_shape():
    # Each (shape, device, grad mode) here is one compiled entry of the one flex function; past
    # dynamo's default limit of 8 it would silently run eager and test the wrong thing.
    import torch._dynamo

    names = [n for n in ("recompile_limit", "cache_size_limit") if hasattr(torch._dynamo.config, n)]
    before = {n: getattr(torch._dynamo.config, n) for n in names}
    for n in names:
        setattr(torch._dynamo.config, n, 64)
    yield
    for n, v in before.items():
        setattr(torch._dynamo.config, n, v)


def reference_mask(anchors: torch.Tensor, ctx_len: int, block: int) -> torch.Tensor:
    """The mask as DESIGN.md words it, by plain loops: independent of dflash_mask_mod."""
    b, a = anchors.shape
    q_len = a * block
    out = torch.zeros(b, 1, q_len, ctx_len + q_len, dtype=torch.bool)
    for bi in range(b):
        for i in range(a):
            for k in range(block):
                q = i * block + k
                out[bi, 0, q, :int(anchors[bi, i])] = True             # context before the anchor
                out[bi, 0, q, ctx_len + i * block: ctx_len + (i + 1) * block] = True  # own block
    return out


def test_dense_mask_matches_the_written_rule():
    anchors = torch.tensor([[1, 5, 20], [3, 4, 30]])
    got = dense_mask(anchors, ctx_len=40, block_size=4)
    assert torch.equal(got, reference_mask(anchors, 40, 4))
    # No query row is fully masked (SDPA would return NaN): every query sees its own block.
    assert got.any(-1).all()


def test_block_mask_materialises_to_the_same_mask():
    anchors = torch.tensor([[2, 17, 33], [9, 10, 40]])
    flex = FlexAttention(compiled=False).build_mask(anchors, 48, 8)
    dense = flex.to_dense()  # [B, H, q_blocks, kv_blocks] at flex's block granularity
    expect = reference_mask(anchors, 48, 8)
    bs_q, bs_kv = flex.BLOCK_SIZE
    # A flex block is kept iff any element inside it is allowed.
    b, _, q, kv = expect.shape
    padded = torch.zeros(b, 1, -(-q // bs_q) * bs_q, -(-kv // bs_kv) * bs_kv, dtype=torch.bool)
    padded[..., :q, :kv] = expect
    blocks = padded.view(b, 1, padded.shape[2] // bs_q, bs_q, padded.shape[3] // bs_kv, bs_kv)
    assert torch.equal(dense.bool(), blocks.any(dim=(3, 5)))


def _qkv(device, dtype, b=2, hq=4, hkv=2, ctx=64, anchors_per=3, block=16, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q_len = anchors_per * block
    q = torch.randn(b, hq, q_len, d, generator=g)
    k = torch.randn(b, hkv, ctx + q_len, d, generator=g)
    v = torch.randn(b, hkv, ctx + q_len, d, generator=g)
    anchors = torch.stack([torch.randperm(ctx - 1, generator=g)[:anchors_per].sort().values + 1
                           for _ in range(b)])
    to = dict(device=device, dtype=dtype)
    return q.to(**to), k.to(**to), v.to(**to), anchors.to(device)


def _flex_for(device: str) -> FlexAttention:
    # CPU: eager flex (forward only, no inductor build); CUDA: the real compiled kernel.
    return FlexAttention(compiled=device == "cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_attention_alone_flex_equals_sdpa(device):
    q, k, v, anchors = _qkv(device, torch.float32)
    flex, sdpa = _flex_for(device), SdpaAttention()
    with torch.no_grad():
        out_flex = flex(q, k, v, flex.build_mask(anchors, 64, 16))
        out_sdpa = sdpa(q, k, v, sdpa.build_mask(anchors, 64, 16))
    tol = 1e-5 if device == "cpu" else 2e-3  # CUDA: TF32 matmuls in the fused kernel
    torch.testing.assert_close(out_flex, out_sdpa, atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_whole_drafter_forward_flex_equals_sdpa(device):
    cfg = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)
    target = TargetModel(cfg)  # random weights are enough: this compares two attention paths
    drafter = build_drafter(cfg, target, seed=3, device=device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 64), generator=g)
    taps = torch.randn(2, 64, cfg.tap_size, generator=g).to(device)
    anchors = torch.tensor([[3, 20, 40, 47], [1, 2, 30, 33]])
    noise = build_noise_blocks(ids, anchors, cfg.block_size, cfg.mask_token_id).to(device)
    with torch.no_grad():
        a = drafter(taps, noise, anchors.to(device), _flex_for(device))
        b = drafter(taps, noise, anchors.to(device), SdpaAttention())
    tol = 1e-4 if device == "cpu" else 5e-3
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.slow
def test_compiled_flex_forward_on_cpu_equals_sdpa():
    # torch 2.13 compiles flex_attention for CPU (forward only; ~10 s of inductor build).
    q, k, v, anchors = _qkv("cpu", torch.float32)
    flex = FlexAttention(compiled=True)
    with torch.no_grad():
        out = flex(q, k, v, flex.build_mask(anchors, 64, 16))
        ref = SdpaAttention()(q, k, v, dense_mask(anchors, 64, 16))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flex_equals_sdpa_in_bf16_with_gradients_on_cuda():
    q, k, v, anchors = _qkv("cuda", torch.bfloat16, b=1, hq=8, hkv=2, ctx=512, anchors_per=16,
                            d=64)
    outs, grads = [], []
    for backend in (FlexAttention(compiled=True), SdpaAttention()):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out = backend(qq, kk, vv, backend.build_mask(anchors, 512, 16))
        out.float().square().sum().backward()
        outs.append(out.float())
        grads.append([t.grad.float() for t in (qq, kk, vv)])
    torch.testing.assert_close(outs[0], outs[1], atol=2e-2, rtol=2e-2)
    for ga, gb in zip(*grads):
        torch.testing.assert_close(ga, gb, atol=5e-2, rtol=5e-2)


def test_flex_refuses_cpu_backward_with_a_clear_message():
    q, k, v, anchors = _qkv("cpu", torch.float32)
    q.requires_grad_()
    flex = FlexAttention(compiled=False)
    with pytest.raises(RuntimeError, match="attention 'sdpa'"):
        flex(q, k, v, flex.build_mask(anchors, 64, 16))


def test_choose_backend():
    assert isinstance(choose_backend("auto", "cpu"), SdpaAttention)
    assert isinstance(choose_backend("sdpa", "cpu"), SdpaAttention)
    assert isinstance(choose_backend("flex", "cpu"), FlexAttention)
    if torch.cuda.is_available():
        assert isinstance(choose_backend("auto", "cuda:0"), FlexAttention)
    with pytest.raises(ValueError, match="unknown attention backend 'xla'.*auto, flex, sdpa"):
        choose_backend("xla", "cpu")


def test_one_compiled_flex_per_process():
    # The compile gate controls compiles only if every caller shares one compiled object.
    assert compiled_flex_attention() is compiled_flex_attention()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_new_anchors_each_step_do_not_recompile_flex(device):
    # The trainer builds a fresh mask_mod closure (over new anchors) every step. If that forced
    # a recompile, workers under fail_on_recompile would die every step: prove it does not
    # (CPU: forward; CUDA: forward and backward, as in training).
    flex = FlexAttention(compiled=True)
    grad = device == "cuda"

    def call(seed):
        q, k, v, anchors = _qkv(device, torch.float32, seed=seed)
        q.requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            out = flex(q, k, v, flex.build_mask(anchors, 64, 16))
            if grad:
                out.sum().backward()
        ref = SdpaAttention()(q.detach(), k, v, dense_mask(anchors, 64, 16))
        tol = 1e-5 if device == "cpu" else 2e-3
        torch.testing.assert_close(out.detach(), ref, atol=tol, rtol=tol)

    call(0)  # the one compile (warm-up)
    with torch.compiler.set_stance("fail_on_recompile"):
        for seed in (1, 2, 3):
            call(seed)


@pytest.mark.parametrize("batch, ctx, n_anchors", [(2, 64, 3), (1, 300, 20), (3, 1000, 40)])
def test_block_mask_has_the_same_tiles_as_torchs_create_block_mask(batch, ctx, n_anchors):
    from dflash_train.attention.masks import dflash_block_mask, reference_block_mask

    g = torch.Generator().manual_seed(ctx)
    anchors = torch.stack([torch.randperm(ctx - 16, generator=g)[:n_anchors].sort().values + 1
                           for _ in range(batch)])
    mine, ref = dflash_block_mask(anchors, ctx, 16), reference_block_mask(anchors, ctx, 16)
    assert mine.seq_lengths == ref.seq_lengths
    for num, idx in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices"),
                     ("q_num_blocks", "q_indices"), ("full_q_num_blocks", "full_q_indices")):
        a_num, b_num = getattr(mine, num), getattr(ref, num)
        assert torch.equal(a_num, b_num), num
        a_idx, b_idx = getattr(mine, idx), getattr(ref, idx)
        for pos in torch.nonzero(a_num >= 0).tolist():
            n = int(a_num[tuple(pos)])
            assert torch.equal(a_idx[tuple(pos)][:n].long(), b_idx[tuple(pos)][:n].long()), idx
