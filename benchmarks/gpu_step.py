"""The whole drafter step on one GPU: today's step, the dense SDPA path and the compiled chunked
step, side by side in one run; then the trainer itself (small preset GPU utilisation, warm-up),
and whether CUDA graphs (inductor's reduce-overhead) survive the trainer's threads.

  python3 benchmarks/gpu_step.py --out $OUT            # the device run (CUDA), all parts
  python3 benchmarks/gpu_step.py --part step           # only the three dflash-8b-like shapes
  python3 benchmarks/gpu_step.py --smoke               # tiny shapes on CPU: checks the script

Part "step" (dflash-8b-like preset, bf16, batch 1, random taps, greedy labels over the vocab):
- today:  objective.drafter_loss_full_logits (eager drafter, the shared compiled flex kernel,
          whole fp32 logits, one cross_entropy), AdamW (foreach), as the trainer ran it;
- dense:  the same with the dense-mask SDPA attention;
- new:    objective.drafter_loss with compiled_objective("inductor"): drafter forward, flex and
          the chunked LM-head cross-entropy as one graph, then fused AdamW; the metrics read
          back once after backward, as the trainer does.
Same weights and anchors for all three; before any optimizer step the script compares the new
step's loss and gradients with today's (and, as the bf16 noise floor, dense against today).
ms = median of --iters steps (host clock after a device sync, i.e. whole steps), after the
first call (compile: reported apart) and --warmup more. MFU = useful FLOPs (perf.py; the
matmul part checked against torch's FlopCounterMode once per shape) / time / peak. Peak memory
= torch.cuda.max_memory_allocated over the timed steps (weights, grads and Adam state included)
and the same minus what was allocated before the step ("step" column).

Part "trainer": `python -m dflash_train` processes (as the dashboard launches them) with the
small preset, target and drafter on cuda:0, batch 8, buckets 1024,2048,4096, inductor caches
off: --compile off (today: eager step, compiled flex) against --compile auto (the whole step
compiled). GPU utilisation is NVML's utilization.gpu sampled every 0.1 s while status.json says
training; step time, MFU, warm-up seconds and graphs from the run's own events. With 2+ GPUs
the warm-up is also measured with a drafter on each GPU (ratio against one).

Part "sync": one compiled step of the small preset under torch.cuda.set_sync_debug_mode("error"):
no host sync up to the optimizer step; the metrics read after it is the one.

Part "graphs": inductor's CUDA graphs (mode="reduce-overhead", CUDAGraph Trees) warmed in the
main thread, then called from one and from two worker threads, as the trainer would: do they run?
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

from dflash_train.attention import FlexAttention, SdpaAttention  # noqa: E402
from dflash_train.config import ModelConfig  # noqa: E402
from dflash_train.model.drafter import DFlashDrafter  # noqa: E402
from dflash_train.objective import (TargetBatch, compiled_objective, drafter_loss,  # noqa: E402
                                    drafter_loss_full_logits)
from dflash_train.perf import assumed_peak_tflops  # noqa: E402

SHAPES = ((2048, 256), (4096, 256), (4096, 512))
VARIANTS = ("today", "dense", "new")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def emit(out: Path | None, row: dict) -> None:
    print(json.dumps(row), flush=True)
    if out is not None:
        with (out / "gpu_step.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")


# -- part "step" ---------------------------------------------------------------------------

def make_batch(cfg, ctx, device, dtype):
    g = torch.Generator().manual_seed(ctx)
    ids = torch.randint(0, min(cfg.vocab_size, 256), (1, ctx), generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    greedy = torch.randint(0, cfg.vocab_size, (1, ctx), generator=g)
    taps = torch.randn(1, ctx, cfg.tap_size, generator=g)
    return TargetBatch(ids.to(device), mask.to(device), taps.to(device, dtype), greedy.to(device),
                       host_loss_mask=mask)


def step_fns(variant, drafter, tb, device, compile_backend):
    """(loss_and_grads, full_step) closures of one variant; each call uses the same anchors."""
    flex = FlexAttention(compiled=device.type == "cuda")
    attention = SdpaAttention() if variant == "dense" or device.type == "cpu" else flex
    step = compiled_objective(compile_backend) if variant == "new" else None
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6, **({"fused": True} if variant == "new" and device.type == "cuda" else {}))

    def loss_and_grads():
        gen = torch.Generator().manual_seed(0)
        drafter.zero_grad(set_to_none=True)
        if variant == "new":
            loss, metrics = drafter_loss(drafter, tb, gen, attention, step=step)
            loss.backward()
            return metrics["loss"], metrics.flops
        loss, metrics = drafter_loss_full_logits(drafter, tb, gen, attention)
        loss.backward()
        return metrics["loss"], None

    def full_step():
        loss_and_grads()
        opt.step()

    return loss_and_grads, full_step, opt


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
    return statistics.median(times), min(times), max(times)


def matmul_flops_counted(drafter, tb, device) -> dict:
    """torch's FlopCounterMode over one plain step with dense SDPA, by op."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    gen = torch.Generator().manual_seed(0)
    with counter:
        loss, _ = drafter_loss_full_logits(drafter, tb, gen, SdpaAttention())
        loss.backward()
    drafter.zero_grad(set_to_none=True)
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts()["Global"].items()}
    return by_op


def step_case(cfg, ctx, anchors, device, dtype, iters, warmup, peak, out, compile_backend):
    cfg = cfg.with_(anchors_per_seq=anchors)
    torch.manual_seed(0)
    embed = torch.randn(cfg.vocab_size, cfg.hidden_size, device=device, dtype=dtype) * 0.02
    head = embed if cfg.tie_embeddings else torch.randn_like(embed) * 0.02
    with torch.device(device):
        drafter = DFlashDrafter(cfg, embed, head)
    drafter = drafter.to(dtype).train()
    tb = make_batch(cfg, ctx, device, dtype)
    base = dict(ctx=ctx, anchors=anchors, layers=cfg.num_drafter_layers, vocab=cfg.vocab_size)

    # 1. same weights, same anchors: losses and gradients before any optimizer step
    ref = {}
    flops = None
    for variant in VARIANTS:
        loss_and_grads, _, opt = step_fns(variant, drafter, tb, device, compile_backend)
        t0 = time.perf_counter()
        loss, f = loss_and_grads()
        sync(device)
        first_s = time.perf_counter() - t0
        flops = f or flops
        grads = torch.cat([p.grad.float().flatten() for p in drafter.parameters() if p.requires_grad])
        ref[variant] = (loss, grads, first_s)
        del opt
    today_loss, today_grads, _ = ref["today"]
    for variant in ("dense", "new"):
        loss, grads, _ = ref[variant]
        emit(out, dict(base, part="equivalence", variant=variant, against="today",
                       loss=loss, today_loss=today_loss, loss_abs_diff=abs(loss - today_loss),
                       loss_rel_diff=abs(loss - today_loss) / abs(today_loss),
                       grad_rel_diff=float((grads - today_grads).norm() / today_grads.norm())))
    first_call = {v: ref[v][2] for v in VARIANTS}
    del ref, today_grads
    drafter.zero_grad(set_to_none=True)

    counted = matmul_flops_counted(drafter, tb, device)
    mm = sum(v for k, v in counted.items() if k.split(".")[-1].split("_")[0] in ("mm", "addmm", "bmm"))
    emit(out, dict(base, part="flops", analytic_matmul=flops.matmul, analytic_attention=flops.attention,
                   flopcounter_matmul=mm, flopcounter_by_op=counted))

    # 2. timing, each variant with its own optimizer state (freed before the next)
    rows = {}
    for variant in VARIANTS:
        loss_and_grads, full_step, opt = step_fns(variant, drafter, tb, device, compile_backend)
        full_step()  # Adam state exists from here on
        sync(device)
        if device.type == "cuda":
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        ms, lo, hi = (x * 1e3 for x in timed(full_step, device, iters, warmup))
        peak_gib = step_gib = None
        if device.type == "cuda":
            peak_b = torch.cuda.max_memory_allocated(device)
            peak_gib, step_gib = peak_b / 2**30, (peak_b - before) / 2**30
        fb_ms = timed(loss_and_grads, device, max(3, iters // 2), 1)[0] * 1e3
        mfu = flops.total / (ms / 1e3) / (peak * 1e12) if peak else None
        rows[variant] = dict(base, part="step", variant=variant, ms=ms, ms_min=lo, ms_max=hi,
                             fwd_bwd_ms=fb_ms, optimizer_ms=ms - fb_ms, mfu=mfu,
                             tflops=flops.total / (ms / 1e3) / 1e12, peak_gib=peak_gib,
                             step_gib=step_gib, first_call_s=first_call[variant])
        emit(out, rows[variant])
        del opt
        drafter.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    del drafter, embed, head, tb
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def part_step(args, device, dtype, peak, out):
    if args.smoke:
        cfg = ModelConfig.preset("tiny")
        shapes = ((128, 4), (128, 8))
        backend = "eager"
    else:
        cfg = ModelConfig.preset("dflash-8b-like")
        shapes = SHAPES
        backend = "inductor"
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    torch._dynamo.config.automatic_dynamic_shapes = False
    all_rows = []
    for ctx, anchors in shapes:
        all_rows.append(step_case(cfg, ctx, anchors, device, dtype, args.iters, args.warmup, peak,
                                  out, backend))
    print(f"\n### Whole drafter step ({'tiny, CPU smoke' if args.smoke else 'dflash-8b-like'}, "
          f"fwd + bwd + AdamW; MFU against {peak} TFLOP/s)\n")
    print("| ctx / anchors | today ms | today MFU | dense ms | dense MFU | new ms | new MFU | new vs today "
          "| peak GiB today / dense / new | step GiB today / dense / new | new compile s |")
    print("| --- |" + " ---: |" * 10)
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    for rows in all_rows:
        t, d, n = rows["today"], rows["dense"], rows["new"]
        print(f"| {t['ctx']} / {t['anchors']} | {t['ms']:.1f} | {fmt(t['mfu'], '.1%')} | {d['ms']:.1f} | "
              f"{fmt(d['mfu'], '.1%')} | {n['ms']:.1f} | {fmt(n['mfu'], '.1%')} | {t['ms'] / n['ms']:.2f}x | "
              f"{fmt(t['peak_gib'], '.1f')} / {fmt(d['peak_gib'], '.1f')} / {fmt(n['peak_gib'], '.1f')} | "
              f"{fmt(t['step_gib'], '.1f')} / {fmt(d['step_gib'], '.1f')} / {fmt(n['step_gib'], '.1f')} | "
              f"{n['first_call_s']:.0f} |")


# -- part "trainer" --------------------------------------------------------------------------

def gpu_util_sampler(index: int, stop: threading.Event, run_dir: Path, samples: list) -> None:
    try:
        import pynvml
    except ImportError:
        return
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    status = run_dir / "status.json"
    while not stop.wait(0.1):
        try:
            phase = json.loads(status.read_text()).get("phase")
        except (OSError, ValueError):
            continue
        if phase == "training":
            samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def run_trainer(mode: str, drafters: str, opts, out, cache_dir: str | None = None, label: str = "") -> dict:
    """One trainer process. cache_dir None: inductor's caches off (every graph compiled from
    scratch); else inductor and Triton cache there (a relaunch of the same run finds them)."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"gpu-step-{mode}-"))
    n_drafters = len(drafters.split(","))
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), "--preset", opts.preset,
           "--target-devices", opts.trainer_device, "--drafter-devices", drafters, "--compile", mode,
           "--steps", str(opts.trainer_steps), "--batch-size", str(opts.batch), "--buckets", opts.buckets,
           "--eval-every", "0", "--checkpoint-every", "100000", "--log-every", "50", *opts.extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DFLASH_RUN_ID": f"gpu-step-{mode}", "NCCL_NVLS_ENABLE": "0"}
    if cache_dir is None:
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    else:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        env["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    samples: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=gpu_util_sampler, args=(0, stop, run_dir, samples), daemon=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler.start()
    try:
        log, _ = proc.communicate(timeout=opts.trainer_timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        log, _ = proc.communicate()
    stop.set()
    sampler.join(2)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    warm = next((e for e in events if e.get("state") == "warmup_done"), {})
    steps = [e for e in events if e["kind"] == "step"]
    later = steps[len(steps) // 4:]  # past the first quarter: queue filled, caches warm
    step_s = [e["step_time_s"] for e in later if e.get("step_time_s")]
    mfus = [e["mfu"] for e in later if e.get("mfu") is not None]
    busy = samples[len(samples) // 4:]
    row = dict(part="trainer", compile=mode, caches=label or "off", drafter_devices=drafters, drafters=n_drafters,
               batch=opts.batch, rc=proc.returncode, warmup_s=warm.get("seconds"), graphs=warm.get("graphs"),
               first_step_s=round(steps[0]["time"] - t0, 1) if steps else None, steps=len(steps),
               step_ms_median=statistics.median(step_s) * 1e3 if step_s else None,
               mfu_median=statistics.median(mfus) if mfus else None,
               gpu_util_mean=statistics.mean(busy) if busy else None, util_samples=len(busy),
               cmd=" ".join(cmd))
    if proc.returncode:
        row["log_tail"] = log[-2000:]
    emit(out, row)
    return row


def part_trainer(opts, out):
    rows = []
    for spec in opts.trainer_modes.split(","):
        if spec == "auto+cache":  # the same launch twice over one fresh cache: cold, then warm
            cache = tempfile.mkdtemp(prefix="gpu-step-cache-")
            rows.append(run_trainer("auto", opts.trainer_device, opts, out, cache, "cold"))
            rows.append(run_trainer("auto", opts.trainer_device, opts, out, cache, "warm"))
        else:
            rows.append(run_trainer(spec, opts.trainer_device, opts, out))
    if opts.trainer_device != "cpu" and torch.cuda.device_count() >= 2:
        rows.append(run_trainer("auto", "cuda:0,cuda:1", opts, out))
    print(f"\n### Trainer, {opts.preset} preset, batch {opts.batch}, buckets {opts.buckets}, "
          "target + drafter on cuda:0\n")
    print("| --compile | inductor caches | drafter devices | rc | GPU util % | step ms | warm-up s | graphs | start -> first step s |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        util = "-" if r["gpu_util_mean"] is None else f"{r['gpu_util_mean']:.0f}"
        ms = "-" if r["step_ms_median"] is None else f"{r['step_ms_median']:.1f}"
        print(f"| {r['compile']} | {r['caches']} | {r['drafter_devices']} | {r['rc']} | {util} | {ms} | {r['warmup_s']} | "
              f"{r['graphs']} | {r['first_step_s']} |")
    multi = [r for r in rows if r["drafters"] > 1]
    single = [r for r in rows if r["drafters"] == 1 and r["compile"] == "auto" and r["caches"] == "off"]
    if multi and single and single[0]["warmup_s"] and multi[0]["warmup_s"]:
        print(f"\nwarm-up, 2 devices against 1: {multi[0]['warmup_s'] / single[0]['warmup_s']:.2f}x")


# -- part "graphs" ---------------------------------------------------------------------------

def part_graphs(device, out):
    """reduce-overhead (CUDAGraph Trees) warmed in the main thread, then run in one worker
    thread, then in two at once: the trainer's pattern (warm-up in main, steps in workers)."""
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).to(device)
    fn = torch.compile(model, mode="reduce-overhead")
    result = {}

    def step():
        # as the trainer does: grads set to None (a grad living in the graph's pool would be
        # overwritten by the next replay), one mark per step
        model.zero_grad(set_to_none=True)
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(8, 256, device=device, requires_grad=True)
        y = fn(x)
        y.sum().backward()
        return float(y.detach().sum())

    def attempt(key, n_threads):
        errors = []

        def worker():
            try:
                with torch.compiler.set_stance("fail_on_recompile"):
                    for _ in range(5):
                        step()
            except Exception as exc:  # noqa: BLE001 - the outcome is what we report
                errors.append(f"{type(exc).__name__}: {str(exc)[:400]}")

        threads = [threading.Thread(target=worker, name=f"drafter{i}") for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        result[key] = errors[0] if errors else "ok"

    try:
        for _ in range(3):
            step()
        result["main_thread"] = "ok"
    except Exception as exc:  # noqa: BLE001
        result["main_thread"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    print(json.dumps(dict(part="graphs-progress", **result)), flush=True)
    attempt("one_worker_thread", 1)
    print(json.dumps(dict(part="graphs-progress", **result)), flush=True)
    attempt("two_worker_threads", 2)
    print(json.dumps(dict(part="graphs-progress", **result)), flush=True)


def part_graphs_isolated(out):
    """part_graphs in its own process: a failure there may abort the process, not raise."""
    proc = subprocess.run([sys.executable, __file__, "--part", "graphs-probe"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    progress = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"part": "graphs-progress"')]
    last = progress[-1] if progress else {}
    err = [line for line in proc.stderr.splitlines() if "what()" in line or "Error" in line][:3]
    emit(out, dict(part="graphs", torch=torch.__version__, rc=proc.returncode,
                   **{k: v for k, v in last.items() if k != "part"},
                   died_with=" | ".join(err) if proc.returncode else None))


def part_sync(device, out):
    """One compiled step of the small preset under torch.cuda.set_sync_debug_mode("error"):
    everything up to and including backward and the optimizer step must not synchronise; the
    metrics read afterwards is the step's one sync and must raise there."""
    cfg = ModelConfig.preset("small")
    embed = torch.randn(cfg.vocab_size, cfg.hidden_size, device=device, dtype=torch.bfloat16) * 0.02
    with torch.device(device):
        drafter = DFlashDrafter(cfg, embed, embed)
    drafter = drafter.to(torch.bfloat16).train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (8, 2048), generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    tb = TargetBatch(ids.to(device), mask.to(device),
                     torch.randn(8, 2048, cfg.tap_size, generator=g).to(device, torch.bfloat16),
                     torch.randint(0, 256, (8, 2048), generator=g).to(device), host_loss_mask=mask)
    opt = torch.optim.AdamW(drafter.parameters(), lr=1e-5, fused=True)
    step = compiled_objective("inductor")
    attention = FlexAttention()

    def one(seed):
        loss, metrics = drafter_loss(drafter, tb, torch.Generator().manual_seed(seed), attention, step=step)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return metrics

    one(0)["loss"]  # compile, Adam state
    sync(device)
    row = dict(part="sync")
    torch.cuda.set_sync_debug_mode("error")
    try:
        metrics = one(1)
        row["step_without_sync"] = "ok"
        try:
            metrics["loss"]
            row["metrics_read"] = "did not sync (unexpected)"
        except RuntimeError as exc:
            row["metrics_read"] = f"synchronised, as expected: {str(exc)[:120]}"
    except RuntimeError as exc:
        row["step_without_sync"] = f"FAILED: {traceback.format_exc()[-1500:]}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    emit(out, row)


def part_small(device, out, iters):
    """The small preset's drafter step alone (batch 8, lengths cycling 1024/2048/4096 as the
    trainer's buckets do): wall time per step against the GPU's kernel time in it (torch
    profiler), with and without a second thread running one eager target forward per step
    (the trainer's target thread, competing for the GIL)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from dflash_train.data import Batch
    from dflash_train.model.drafter import build_drafter
    from dflash_train.model.target import build_target
    from dflash_train.objective import target_forward

    dtype = torch.bfloat16
    cfg = ModelConfig.preset("small").with_(target_pretrain_steps=0)
    target = build_target(cfg, seed=0, device=device, dtype=dtype)
    drafter = build_drafter(cfg, target, 0, device, dtype).train()
    g = torch.Generator().manual_seed(0)
    batches = []
    for length in (1024, 2048, 4096):
        ids = torch.randint(0, 256, (8, length), generator=g)
        batches.append(Batch(ids, torch.ones_like(ids, dtype=torch.bool)))
    tbs = [target_forward(target, b) for b in batches]
    rows = []
    for variant in ("today", "new"):
        attention = FlexAttention()
        step = compiled_objective("inductor") if variant == "new" else None
        opt = torch.optim.AdamW(drafter.parameters(), lr=1e-6, **({"fused": True} if variant == "new" else {}))

        def one(i):
            tb = tbs[i % 3]
            gen = torch.Generator().manual_seed(i)
            drafter.zero_grad(set_to_none=True)
            if variant == "new":
                loss, metrics = drafter_loss(drafter, tb, gen, attention, step=step)
            else:
                loss, metrics = drafter_loss_full_logits(drafter, tb, gen, attention)
            loss.backward()
            opt.step()
            return metrics["loss"]

        for i in range(6):
            one(i)
        sync(device)
        for contention in (False, True):
            stop = threading.Event()
            go = threading.Semaphore(0)

            def target_loop():
                i = 0
                while not stop.is_set():
                    if go.acquire(timeout=0.2):
                        target_forward(target, batches[i % 3])
                        i += 1

            t = threading.Thread(target=target_loop, name="target0", daemon=True)
            if contention:
                t.start()
            t0 = time.perf_counter()
            for i in range(iters):
                go.release()
                one(i)
            sync(device)
            wall = (time.perf_counter() - t0) / iters
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for i in range(6):
                    go.release()
                    one(i)
                sync(device)
            stop.set()
            if contention:
                t.join(5)
            kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
            gpu_s = sum(e.self_device_time_total for e in kernels) / 1e6 / 6
            row = dict(part="small", variant=variant, with_target_thread=contention, wall_ms=wall * 1e3,
                       gpu_ms=gpu_s * 1e3, gpu_busy=gpu_s / wall,
                       kernels_per_step=sum(e.count for e in kernels) / 6)
            rows.append(row)
            emit(out, row)
        del opt
    print("\n### Small preset drafter step alone (batch 8, lengths 1024/2048/4096 in turn)\n")
    print("| step | + target thread | wall ms | GPU kernel ms | GPU busy | kernels/step |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['variant']} | {r['with_target_thread']} | {r['wall_ms']:.1f} | {r['gpu_ms']:.1f} | "
              f"{r['gpu_busy']:.0%} | {r['kernels_per_step']:.0f} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, to check the script")
    p.add_argument("--part", default="step,sync,graphs,small,trainer")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=0.0, help="default: perf.PEAK_BF16_TFLOPS by device")
    p.add_argument("--out", type=Path, help="also append every row as JSON lines to OUT/gpu_step.jsonl")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--buckets", default="1024,2048,4096")
    p.add_argument("--trainer-steps", type=int, default=200)
    p.add_argument("--trainer-timeout", type=int, default=200)
    p.add_argument("--trainer-modes", default="off,auto",
                   help="--compile values to run; 'auto+cache' runs auto twice over one fresh "
                        "inductor cache (cold, then a relaunch)")
    opts = p.parse_args()
    opts.extra = []
    opts.trainer_device = "cuda:0"
    parts = set(opts.part.split(","))
    if opts.smoke:
        device, dtype = torch.device("cpu"), torch.float32
        opts.iters, opts.warmup = 2, 1
        opts.trainer_device, opts.preset, opts.buckets, opts.batch = "cpu", "tiny", "64,128", 2
        opts.trainer_steps = 20
    else:
        if not torch.cuda.is_available():
            print("gpu_step: no CUDA device; run with --smoke for the CPU check", file=sys.stderr)
            return 2
        device, dtype = torch.device("cuda"), torch.bfloat16
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = assumed_peak_tflops(name, opts.peak_tflops) or (1.0 if opts.smoke else None)
    if opts.out:
        opts.out.mkdir(parents=True, exist_ok=True)
    print(f"gpu_step: torch {torch.__version__}, {name}, {dtype}, peak {peak} TFLOP/s", flush=True)
    if "step" in parts:
        part_step(opts, device, dtype, peak, opts.out)
    if "sync" in parts and device.type == "cuda":
        part_sync(device, opts.out)
    if "graphs-probe" in parts:
        part_graphs(device, None)
    if "graphs" in parts and device.type == "cuda":
        part_graphs_isolated(opts.out)
    if "small" in parts and device.type == "cuda":
        part_small(device, opts.out, opts.iters * 3)
    if "trainer" in parts:
        part_trainer(opts, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
