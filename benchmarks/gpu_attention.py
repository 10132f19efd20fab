"""Item (c): compiled flex_attention against the dense-mask SDPA path, bf16, on one GPU.

  python3 benchmarks/gpu_attention.py             # the device run (CUDA), prints two tables
  python3 benchmarks/gpu_attention.py --smoke     # tiny shapes on CPU: checks the script runs

Part 1, attention alone, forward + backward, at DFlash shapes: 32 query heads x 128 (8 KV
heads, Qwen3-8B's GQA), 256 or 512 anchors x block 16 over 2k/4k/8k context; the mask is the
DFlash mask of the trainer (attention/masks.py) with anchors sampled as in training.
Part 2, the whole drafter step (objective.drafter_loss_full_logits forward + backward + AdamW step) of the
dflash-8b-like preset with random taps, each backend, same anchors.

TFLOP/s are "effective": the attention FLOPs that the mask allows (4*H*D per allowed query-key
pair forward, 2.5x that backward), divided by the measured time, for both paths alike, so the
ratio of TFLOP/s is the ratio of speeds. Compile (warm-up) time is reported apart, not mixed
into step times. Works on torch 2.11 (the device machine) and 2.13.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

from dflash_train.attention import FlexAttention, SdpaAttention  # noqa: E402
from dflash_train.attention.masks import reference_block_mask  # noqa: E402
from dflash_train.config import ModelConfig  # noqa: E402
from dflash_train.model.drafter import DFlashDrafter, build_drafter  # noqa: E402
from dflash_train.model.target import TargetModel  # noqa: E402
from dflash_train.objective import (TargetBatch, build_noise_blocks,  # noqa: E402
                                    drafter_loss_full_logits, sample_anchors)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, iters, warmup):
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sdpa_kernel_name(backend, q, k, v, mask) -> str:
    """Which fused SDPA kernel serves the dense-mask path: a fair baseline must not be the
    math fallback. Probed by allowing only the memory-efficient kernel once."""
    if q.device.type != "cuda":
        return "cpu"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    try:
        with torch.no_grad(), sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            backend(q, k, v, mask)
        return "memory-efficient"
    except RuntimeError:
        return "NOT memory-efficient (math or other fallback)"


def allowed_pairs(anchors: torch.Tensor, block: int) -> int:
    # Each query of the block anchored at a sees a context positions and its block of `block`.
    return int(((anchors + block) * block).sum())


def attention_case(device, dtype, ctx, num_anchors, heads, kv_heads, head_dim, block, iters,
                   warmup, fwd_only_flex):
    g = torch.Generator().manual_seed(ctx * 1000 + num_anchors)
    loss_mask = torch.ones(1, ctx, dtype=torch.bool)
    anchors, _ = sample_anchors(loss_mask, num_anchors, block, g)
    anchors = anchors.to(device)
    q_len = num_anchors * block
    make = dict(device=device, dtype=dtype)
    q = torch.randn(1, heads, q_len, head_dim, **make)
    k = torch.randn(1, kv_heads, ctx + q_len, head_dim, **make)
    v = torch.randn(1, kv_heads, ctx + q_len, head_dim, **make)
    grad_out = torch.randn(1, heads, q_len, head_dim, **make)
    fwd_flops = 4 * heads * head_dim * allowed_pairs(anchors.cpu(), block)
    rows = []
    for backend in (FlexAttention(compiled=True), SdpaAttention()):
        backward = not (fwd_only_flex and backend.name == "flex")
        mask = backend.build_mask(anchors, ctx, block)  # first build warms vmap up (flex)
        # The trainer rebuilds the mask every step (anchors change): its cost is part of a step.
        mask_s = timed(lambda: backend.build_mask(anchors, ctx, block), device, 3, 0)
        ref_mask_s = None
        if backend.name == "flex":  # the alternative: torch's create_block_mask (vmap)
            reference_block_mask(anchors, ctx, block)
            ref_mask_s = timed(lambda: reference_block_mask(anchors, ctx, block), device, 3, 0)
        qq, kk, vv = (t.clone().requires_grad_(backward) for t in (q, k, v))

        def step():
            if backward:
                out = backend(qq, kk, vv, mask)
                out.backward(grad_out)
            else:
                with torch.no_grad():
                    backend(qq, kk, vv, mask)

        kernel = "flex (compiled)" if backend.name == "flex" else sdpa_kernel_name(backend, q, k, v, mask)
        t0 = time.perf_counter()
        step()  # first call compiles (flex) or picks kernels (sdpa)
        sync(device)
        first_s = time.perf_counter() - t0
        sec = timed(step, device, iters, warmup)
        flops = fwd_flops * (3.5 if backward else 1.0)
        rows.append(dict(part="attention", backend=backend.name, ctx=ctx, anchors=num_anchors,
                         q_len=q_len, kv_len=ctx + q_len, pass_="fwd+bwd" if backward else "fwd",
                         ms=sec * 1e3, tflops=flops / sec / 1e12, first_call_s=first_s,
                         mask_ms=mask_s * 1e3, kernel=kernel,
                         create_block_mask_ms=ref_mask_s and ref_mask_s * 1e3))
    return rows


class _SharedWeights:
    """What build_drafter reads from a target: the frozen embedding and LM head. Random here,
    on the device: the step's cost does not depend on their values."""

    def __init__(self, cfg, device, dtype):
        self.embed = torch.randn(cfg.vocab_size, cfg.hidden_size, device=device, dtype=dtype) * 0.02
        self.head = self.embed if cfg.tie_embeddings else torch.randn_like(self.embed) * 0.02


def drafter_step_case(device, dtype, cfg, ctx, iters, warmup, fwd_only_flex):
    shared = _SharedWeights(cfg, device, dtype)
    with torch.device(device):
        drafter = DFlashDrafter(cfg, shared.embed, shared.head)  # default init, on the device
    drafter = drafter.to(dtype)
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-5)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(cfg.vocab_size, 256), (1, ctx), generator=g).to(device)
    tb = TargetBatch(ids, torch.ones_like(ids, dtype=torch.bool),
                     torch.randn(1, ctx, cfg.tap_size, generator=g).to(device, dtype),
                     torch.randint(0, min(cfg.vocab_size, 256), (1, ctx), generator=g).to(device))
    anchors, _ = sample_anchors(tb.loss_mask, cfg.anchors_per_seq, cfg.block_size,
                                torch.Generator().manual_seed(0))
    attn_flops = (4 * cfg.num_heads * cfg.head_dim * allowed_pairs(anchors, cfg.block_size)
                  * cfg.num_drafter_layers)
    rows = []
    for backend in (FlexAttention(compiled=True), SdpaAttention()):
        backward = not (fwd_only_flex and backend.name == "flex")

        def step():
            gen = torch.Generator().manual_seed(0)  # same anchors every step, both backends
            if backward:
                loss, _ = drafter_loss_full_logits(drafter, tb, gen, backend)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            else:
                with torch.no_grad():
                    drafter_loss_full_logits(drafter, tb, gen, backend)

        t0 = time.perf_counter()
        step()
        sync(device)
        first_s = time.perf_counter() - t0
        sec = timed(step, device, iters, warmup)
        rows.append(dict(part="drafter step", backend=backend.name, ctx=ctx,
                         anchors=cfg.anchors_per_seq, layers=cfg.num_drafter_layers,
                         pass_="fwd+bwd+adamw" if backward else "fwd", ms=sec * 1e3,
                         attn_tflops=attn_flops * (3.5 if backward else 1.0) / sec / 1e12,
                         first_call_s=first_s))
    del drafter, opt, shared
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def max_diff(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def equivalence_checks(device, grads: bool) -> bool:
    """Same inputs through both paths: attention alone (fp32 forward; bf16 forward and
    gradients at a DFlash shape) and the whole drafter forward. The pytest-free twin of
    tests/train/test_attention.py for a machine without pytest. Returns True when all pass."""
    flex, sdpa = FlexAttention(compiled=True), SdpaAttention()
    g = torch.Generator().manual_seed(0)
    results = []

    def attention_pair(dtype, hq, hkv, ctx, n_anchors, d, with_grad):
        anchors, _ = sample_anchors(torch.ones(1, ctx, dtype=torch.bool), n_anchors, 16, g)
        anchors = anchors.to(device)
        q_len = n_anchors * 16
        base = [torch.randn(1, h, n, d, generator=g).to(device, dtype)
                for h, n in ((hq, q_len), (hkv, ctx + q_len), (hkv, ctx + q_len))]
        outs = []
        for backend in (flex, sdpa):
            qkv = [t.clone().requires_grad_(with_grad) for t in base]
            with torch.set_grad_enabled(with_grad):
                out = backend(*qkv, backend.build_mask(anchors, ctx, 16))
                if with_grad:
                    out.float().square().sum().backward()
            outs.append((out.detach(), [t.grad for t in qkv] if with_grad else []))
        return outs

    (fo, _), (so, _) = attention_pair(torch.float32, 4, 2, 256, 8, 64, False)
    results.append(("attention fwd, fp32, 4/2 heads x 64, ctx 256, 8 anchors", max_diff(fo, so), 2e-3))
    if device.type == "cuda":
        (fo, fg), (so, sg) = attention_pair(torch.bfloat16, 32, 8, 1024, 64, 128, grads)
        scale = float(so.float().abs().max())
        results.append(("attention fwd, bf16, 32/8 heads x 128, ctx 1024, 64 anchors",
                        max_diff(fo, so) / scale, 2e-2))
        for name, a, b in zip("qkv", fg, sg):
            results.append((f"attention d{name}, bf16 (relative to max |grad|)",
                            max_diff(a, b) / float(b.float().abs().max()), 5e-2))
    cfg = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)
    drafter = build_drafter(cfg, TargetModel(cfg), seed=0, device=device)
    ids = torch.randint(0, 256, (2, 128), generator=g)
    anchors, _ = sample_anchors(torch.ones(2, 128, dtype=torch.bool), cfg.anchors_per_seq, 16, g)
    noise = build_noise_blocks(ids, anchors, 16, cfg.mask_token_id).to(device)
    taps = torch.randn(2, 128, cfg.tap_size, generator=g).to(device)
    with torch.no_grad():
        a = drafter(taps, noise, anchors.to(device), flex)
        b = drafter(taps, noise, anchors.to(device), sdpa)
    results.append(("whole drafter forward, tiny preset, fp32 (logits)", max_diff(a, b), 5e-3))

    print("\n### Same inputs through both paths (max |flex - sdpa|)\n")
    print("| case | max diff | tolerance | result |")
    print("| --- | ---: | ---: | --- |")
    ok = True
    for name, diff, tol in results:
        good = diff <= tol
        ok &= good
        print(f"| {name} | {diff:.2e} | {tol:.0e} | {'PASS' if good else 'FAIL'} |")
    return ok


def ratio_table(rows, keys, title, flops_key):
    print(f"\n### {title}\n")
    print("| " + " | ".join(keys) + " | pass | flex ms | sdpa ms | speed-up of flex | flex TFLOP/s "
          "| sdpa TFLOP/s | flex first call s |")
    print("|" + " --- |" * (len(keys) + 7))
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), {})[r["backend"]] = r
    for key, pair in groups.items():
        f, s = pair["flex"], pair["sdpa"]
        passes = f["pass_"] if f["pass_"] == s["pass_"] else f"{f['pass_']} / {s['pass_']}"
        print("| " + " | ".join(str(k) for k in key) + f" | {passes}"
              + f" | {f['ms']:.2f} | {s['ms']:.2f} | {s['ms'] / f['ms']:.2f}x"
              + f" | {f[flops_key]:.1f} | {s[flops_key]:.1f} | {f['first_call_s']:.1f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, to check the script")
    ap.add_argument("--ctx", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--anchors", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--step-ctx", type=int, nargs="+", default=[2048, 4096],
                    help="contexts for the whole drafter step")
    ap.add_argument("--step-anchors", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write every row as JSON lines here")
    ap.add_argument("--check-only", action="store_true",
                    help="only the flex-vs-SDPA equivalence checks (no timing)")
    args = ap.parse_args(argv)

    if args.smoke:
        device, dtype = torch.device("cpu"), torch.float32
        heads, kv_heads, head_dim = 4, 2, 16
        ctxs, anchor_counts, step_ctxs = [64], [2], [64]
        cfg = ModelConfig.preset("tiny").with_(anchors_per_seq=2)
        iters, warmup = 2, 1
    else:
        if not torch.cuda.is_available():
            print("gpu_attention: no CUDA device; run with --smoke for the CPU check", file=sys.stderr)
            return 2
        device, dtype = torch.device("cuda"), torch.bfloat16
        heads, kv_heads, head_dim = 32, 8, 128
        ctxs, anchor_counts, step_ctxs = args.ctx, args.anchors, args.step_ctx
        cfg = ModelConfig.preset("dflash-8b-like").with_(anchors_per_seq=args.step_anchors)
        iters, warmup = args.iters, args.warmup
    # Every (shape) is its own compiled entry (dynamic=False); past the recompile limit (8 by
    # default) dynamo would silently fall back to eager flex and the table would lie.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    # CPU flex_attention has no backward (torch 2.13): the smoke run times its forward only.
    fwd_only_flex = device.type == "cpu"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"gpu_attention: torch {torch.__version__}, {name}, {dtype}")
    if fwd_only_flex:
        print("smoke run: flex is timed forward-only on CPU, so its ratios are NOT a measurement")

    equivalent = equivalence_checks(device, grads=not fwd_only_flex)
    if args.check_only:
        return 0 if equivalent else 1
    rows = []
    for ctx in ctxs:
        for a in anchor_counts:
            rows += attention_case(device, dtype, ctx, a, heads, kv_heads, head_dim, 16, iters,
                                   warmup, fwd_only_flex)
            print(f"  attention ctx={ctx} anchors={a} done", file=sys.stderr, flush=True)
    ratio_table([r for r in rows if r["part"] == "attention"], ["ctx", "anchors"],
                f"Attention alone ({heads} heads x {head_dim}, {kv_heads} KV heads, block 16)",
                "tflops")
    step_rows = []
    for ctx in step_ctxs:
        step_rows += drafter_step_case(device, dtype, cfg, ctx, max(2, iters // 2), warmup,
                                       fwd_only_flex)
        print(f"  drafter step ctx={ctx} done", file=sys.stderr, flush=True)
    ratio_table(step_rows, ["ctx", "anchors", "layers"],
                "Whole drafter step (attention TFLOP/s shown; the rest is the same in both)",
                "attn_tflops")
    print("\nMask build per step (BlockMask for flex, dense bool for sdpa):")
    for r in rows:
        print(f"  mask build {r['backend']:5s} ctx={r['ctx']} anchors={r['anchors']}: "
              f"{r['mask_ms']:.1f} ms (median of 3, after a warm-up build); kernel: {r['kernel']}"
              + (f"; torch create_block_mask: {r['create_block_mask_ms']:.1f} ms"
                 if r["create_block_mask_ms"] else ""))
    if args.json:
        with args.json.open("w") as fh:
            for r in rows + step_rows:
                fh.write(json.dumps(r) + "\n")
    if not equivalent:
        print("\nFAIL: flex and SDPA disagree beyond tolerance (table above)")
    return 0 if equivalent else 1


if __name__ == "__main__":
    sys.exit(main())
