"""The threads-and-torch.compile race, and the gate that prevents it, in ONE run on the device machine.

(a) The naive pattern fails on this machine:
    a1  one shared torch.compile(flex_attention), first called by several threads at once;
    a2  the same function warmed up in the main thread, then new sequence lengths in 8 threads.
    Failures are counted by kind; the FX-tracing race error is the one from the incident.
(a') The same a2 workload through dflash_train's CompileGate (warm-up in main, fail_on_recompile,
    exclusive recompiles): must show zero failures, side by side with a2.
(b) dflash_train itself: 8 drafter threads, varying sequence lengths (warmed buckets plus "cold"
    lengths that are deliberately not warmed, so recompiles happen mid-run through the gate),
    >= 2000 thread-steps; FX-tracing errors counted from the trainer's own telemetry and log.

    python3 benchmarks/gpu_compile_race.py            # on the GPU box (torch >= 2.9, CUDA)
    python3 benchmarks/gpu_compile_race.py --smoke    # tiny, on CPU (aot_eager), checks the script

Exit status: 0 when (a') and (b) show zero FX-tracing errors (whatever (a) shows), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dflash_train.compile_gate import (  # noqa: E402
    CompileGate,
    TorchCompileControl,
    is_fx_race_error,
    is_recompile_error,
)


def classify(exc: BaseException) -> str:
    if is_fx_race_error(exc):
        return "fx_tracing_race"
    if is_recompile_error(exc):
        return "recompile_refused"
    return f"other:{type(exc).__name__}"


def make_fn(backend: str):
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    return torch.compile(flex_attention, backend=backend, dynamic=False, fullgraph=True)


def causal_mask(length: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q, k):
        return q >= k

    return create_block_mask(causal, None, None, length, length, device=device)


def qkv(length: int, device: str, heads: int, dim: int, dtype):
    g = torch.Generator(device="cpu").manual_seed(length)
    t = torch.randn(1, heads, length, dim, generator=g).to(device=device, dtype=dtype)
    return t, t.clone(), t.clone()


def run_threads(n: int, body) -> list[BaseException]:
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(n)

    def wrap(i):
        try:
            start.wait()
            body(i)
        except BaseException as exc:  # noqa: BLE001 - counted
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,), name=f"w{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def part_a1(opts) -> dict:
    """Shared compiled flex_attention, first called by several threads at once."""
    kinds: Counter = Counter()
    failed_trials = 0
    for _ in range(opts.a1_trials):
        fn = make_fn(opts.backend)
        length = opts.lengths[0]
        masks = {d: causal_mask(length, d) for d in opts.devices}
        inputs = [qkv(length, opts.devices[i % len(opts.devices)], opts.heads, opts.dim, opts.dtype)
                  for i in range(opts.a1_threads)]

        def body(i):
            q, k, v = inputs[i]
            fn(q, k, v, block_mask=masks[q.device.type if q.device.type == "cpu" else str(q.device)])

        errs = run_threads(opts.a1_threads, body)
        failed_trials += bool(errs)
        kinds.update(classify(e) for e in errs)
    return {"trials": opts.a1_trials, "threads": opts.a1_threads, "failed_trials": failed_trials,
            "thread_calls": opts.a1_trials * opts.a1_threads, "failed_calls": sum(kinds.values()),
            "kinds": dict(kinds)}


def _a2_workload(opts, fn, i, call):
    """Thread i: its own new length once, then the warmed length, a few times."""
    dev = opts.devices[i % len(opts.devices)]
    new_len = opts.lengths[1 + i % (len(opts.lengths) - 1)]
    for length in (new_len,) + (opts.lengths[0],) * opts.a2_repeats:
        q, k, v = qkv(length, dev, opts.heads, opts.dim, opts.dtype)
        mask = causal_mask(length, dev)
        call(lambda: fn(q, k, v, block_mask=mask))


def part_a2(opts, gated: bool) -> dict:
    kinds: Counter = Counter()
    failed_trials = 0
    recompiles = 0
    control = TorchCompileControl()
    for _ in range(opts.a2_trials):
        fn = make_fn(opts.backend)
        control.default_stance()
        control.apply_thread_compile_config()
        for dev in opts.devices:                       # main-thread warm-up of the first length
            q, k, v = qkv(opts.lengths[0], dev, opts.heads, opts.dim, opts.dtype)
            fn(q, k, v, block_mask=causal_mask(opts.lengths[0], dev))
        if gated:
            control.fail_on_recompile()
            gate = CompileGate(allow_compile=control.allow_compile)

            def body(i, gate=gate, fn=fn):
                control.apply_thread_compile_config()
                _a2_workload(opts, fn, i, lambda f: gate.run(f"w{i}", f))
        else:
            def body(i, fn=fn):
                _a2_workload(opts, fn, i, lambda f: f())
        try:
            errs = run_threads(opts.a2_threads, body)
        finally:
            control.default_stance()
        if gated:
            recompiles += gate.stats.recompiles
        failed_trials += bool(errs)
        kinds.update(classify(e) for e in errs)
    return {"trials": opts.a2_trials, "threads": opts.a2_threads, "failed_trials": failed_trials,
            "thread_runs": opts.a2_trials * opts.a2_threads, "failed_runs": sum(kinds.values()),
            "kinds": dict(kinds), "gate_recompiles": recompiles if gated else None}


def part_b(opts) -> dict:
    """The trainer: subprocess, exactly as the dashboard launches it."""
    run_dir = Path(tempfile.mkdtemp(prefix="race-b-"))
    n = opts.b_threads
    drafters = ",".join(opts.devices[i % len(opts.devices)] for i in range(n))
    per_gpu = max(sum(1 for i in range(n) if opts.devices[i % len(opts.devices)] == d) for d in opts.devices)
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir),
           "--preset", opts.b_preset, "--target-devices", opts.devices[0], "--drafter-devices", drafters,
           "--threads-per-gpu", str(per_gpu), "--steps", str(opts.b_steps), "--batch-size", "1",
           "--buckets", opts.b_buckets, "--cold-buckets", opts.b_cold, "--eval-every", "0",
           "--checkpoint-every", str(10 * opts.b_steps), "--log-every", str(max(1, opts.b_steps // 10))]
    if opts.smoke:
        cmd += ["--compile", "aot_eager", "--attention", "sdpa"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DFLASH_RUN_ID": "gpu-compile-race-b"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=opts.b_timeout)
    wall = time.monotonic() - t0
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    steps = [e for e in events if e["kind"] == "step"]
    exits = [e for e in events if e["kind"] == "exit"]
    gate = (exits[-1].get("gate") or {}) if exits else {}
    log = (run_dir / "train.log").read_text() if (run_dir / "train.log").exists() else ""
    warm = [e for e in events if e.get("state") == "warmup_done"]
    fx_in_log = log.count("Detected that you are using FX to symbolically trace")
    return {
        "cmd": " ".join(cmd), "rc": proc.returncode, "wall_s": round(wall, 1),
        "drafter_threads": n, "steps": len(steps), "thread_steps": len(steps) * n,
        "recompiles_through_gate": gate.get("recompiles"), "fx_race_errors_gate": gate.get("fx_race_errors"),
        "fx_race_errors_in_log": fx_in_log, "gate_waits": gate.get("waits"),
        "warmup_s": warm[0]["seconds"] if warm else None, "run_dir": str(run_dir),
        "stderr_tail": proc.stderr[-1500:] if proc.returncode else "",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (aot_eager) to check the script")
    p.add_argument("--devices", default="", help="comma list (default: every visible GPU)")
    p.add_argument("--a1-trials", type=int, default=8)
    p.add_argument("--a1-threads", type=int, default=4)
    p.add_argument("--a2-trials", type=int, default=4)
    p.add_argument("--a2-threads", type=int, default=8)
    p.add_argument("--a2-repeats", type=int, default=20)
    p.add_argument("--b-threads", type=int, default=8)
    p.add_argument("--b-steps", type=int, default=250, help="optimizer steps; thread-steps = steps x threads")
    p.add_argument("--b-preset", default="small")
    p.add_argument("--b-buckets", default="1024,2048")
    p.add_argument("--b-cold", default="1536,3072")
    p.add_argument("--b-timeout", type=int, default=480)
    p.add_argument("--skip", default="", help="parts to skip, e.g. b or a1,a2")
    opts = p.parse_args()

    if opts.smoke:
        opts.devices = ["cpu"]
        opts.backend, opts.dtype, opts.heads, opts.dim = "aot_eager", torch.float32, 2, 16
        opts.lengths = (128, 256, 384)
        opts.a1_trials, opts.a1_threads, opts.a2_trials, opts.a2_threads, opts.a2_repeats = 1, 2, 1, 2, 2
        opts.b_threads, opts.b_steps, opts.b_preset = 2, 4, "tiny"
        opts.b_buckets, opts.b_cold = "64,128", "96"
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run on the GPU box, or pass --smoke for the CPU check", file=sys.stderr)
            return 2
        opts.devices = opts.devices.split(",") if opts.devices else [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        opts.backend, opts.dtype, opts.heads, opts.dim = "inductor", torch.bfloat16, 8, 64
        # a new length per thread: several distinct compiles racing the warmed calls of others
        opts.lengths = (1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048)
    skip = set(filter(None, opts.skip.split(",")))
    print(f"torch {torch.__version__}, devices {opts.devices}, backend {opts.backend}", flush=True)

    results = {}
    if "a1" not in skip:
        results["a1"] = part_a1(opts)
        print("a1", json.dumps(results["a1"]), flush=True)
    if "a2" not in skip:
        results["a2"] = part_a2(opts, gated=False)
        print("a2", json.dumps(results["a2"]), flush=True)
        results["a2_gated"] = part_a2(opts, gated=True)
        print("a2_gated", json.dumps(results["a2_gated"]), flush=True)
    if "b" not in skip:
        results["b"] = part_b(opts)
        print("b", json.dumps(results["b"]), flush=True)

    print("\n| part | pattern | runs | failed | FX-tracing errors | other |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key, label, runs, failed in (
        ("a1", "naive: shared compiled flex, first call by {threads} threads at once", "thread_calls", "failed_calls"),
        ("a2", "naive: warm-up, then new lengths in {threads} threads", "thread_runs", "failed_runs"),
        ("a2_gated", "same as a2 through CompileGate ({threads} threads)", "thread_runs", "failed_runs"),
    ):
        r = results.get(key)
        if r:
            fx = r["kinds"].get("fx_tracing_race", 0)
            print(f"| {key} | {label.format(threads=r['threads'])} | {r[runs]} ({r['trials']} trials) | "
                  f"{r[failed]} ({r['failed_trials']} trials) | {fx} | {r[failed] - fx} |")
    b = results.get("b")
    if b:
        fx = (b["fx_race_errors_gate"] or 0) + b["fx_race_errors_in_log"]
        print(f"| b | dflash_train, {b['drafter_threads']} drafter threads, cold lengths {opts.b_cold} | "
              f"{b['thread_steps']} thread-steps ({b['steps']} steps, rc {b['rc']}, {b['wall_s']} s, "
              f"warm-up {b['warmup_s']} s) | {'0' if b['rc'] == 0 else 'run failed'} | {fx} | "
              f"recompiles via gate: {b['recompiles_through_gate']} |")
        if b["rc"] != 0:
            print(b["stderr_tail"])
    ok = True
    if "a2_gated" in results:
        ok &= results["a2_gated"]["failed_runs"] == 0
    if b:
        ok &= b["rc"] == 0 and (b["fx_race_errors_gate"] or 0) == 0 and b["fx_race_errors_in_log"] == 0
        if not opts.smoke:
            ok &= b["thread_steps"] >= 2000
    print("\nRESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
