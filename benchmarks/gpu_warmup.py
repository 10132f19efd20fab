"""Compile warm-up cost of N drafter threads against one.

Each configuration is a fresh `python -m dflash_train` process (as the dashboard launches it),
with inductor's on-disk caches disabled so every run compiles from scratch; the trainer's own
telemetry gives the warm-up seconds (main thread, every (device, bucket)), the graphs compiled
and the time from process start to the first finished step.

    python3 benchmarks/gpu_warmup.py              # on the GPU box: 1 vs 8 drafter threads
    python3 benchmarks/gpu_warmup.py --smoke      # tiny, on CPU, checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_trainer(opts, n_threads: int) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"warmup-{n_threads}-"))
    devices = opts.devices
    drafters = ",".join(devices[i % len(devices)] for i in range(n_threads))
    per_gpu = max(sum(1 for i in range(n_threads) if devices[i % len(devices)] == d) for d in devices)
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), "--preset", opts.preset,
           "--target-devices", devices[0], "--drafter-devices", drafters, "--threads-per-gpu", str(per_gpu),
           "--steps", str(opts.steps), "--batch-size", "1", "--buckets", opts.buckets, "--eval-every", "0",
           "--checkpoint-every", "100000", "--log-every", "1", *opts.extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "DFLASH_RUN_ID": f"warmup-{n_threads}"}
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=opts.timeout)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    warm = next((e for e in events if e.get("state") == "warmup_done"), None)
    first_step = next((e for e in events if e["kind"] == "step"), None)
    per_thread = {}
    for e in events:
        if e["kind"] == "compile" and e.get("state") == "end" and e.get("thread", "").startswith("drafter"):
            per_thread[e["thread"]] = per_thread.get(e["thread"], 0.0) + e.get("seconds", 0.0)
    return {
        "threads": n_threads, "drafter_devices": drafters, "rc": proc.returncode,
        "warmup_s": warm["seconds"] if warm else None, "graphs": warm["graphs"] if warm else None,
        "first_step_s": round(first_step["time"] - t0, 1) if first_step else None,
        "compile_s_by_thread": {k: round(v, 2) for k, v in sorted(per_thread.items())},
        "cmd": " ".join(cmd), "stderr_tail": proc.stderr[-1500:] if proc.returncode else "",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--threads", default="1,8", help="drafter thread counts to compare (first is the baseline)")
    p.add_argument("--devices", default="", help="comma list (default: every visible GPU)")
    p.add_argument("--preset", default="small")
    p.add_argument("--buckets", default="1024,2048,4096")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--timeout", type=int, default=280)
    opts = p.parse_args()
    opts.extra = []
    counts = [int(x) for x in opts.threads.split(",")]
    if opts.smoke:
        opts.devices, opts.preset, opts.buckets = ["cpu"], "tiny", "64,128"
        counts = [1, 2]
        opts.extra = ["--compile", "aot_eager"]
    else:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: run on the GPU box, or pass --smoke for the CPU check", file=sys.stderr)
            return 2
        opts.devices = opts.devices.split(",") if opts.devices else [f"cuda:{i}" for i in range(torch.cuda.device_count())]

    rows = []
    for n in counts:
        r = run_trainer(opts, n)
        rows.append(r)
        print(json.dumps(r), flush=True)
    base = rows[0]["warmup_s"]
    print("\n| drafter threads | devices | warm-up s | graphs | process start -> first step s | x vs "
          f"{rows[0]['threads']} thread(s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = f"{r['warmup_s'] / base:.2f}" if base and r["warmup_s"] else "-"
        print(f"| {r['threads']} | {r['drafter_devices']} | {r['warmup_s']} | {r['graphs']} | "
              f"{r['first_step_s']} | {ratio} |")
    failed = [r for r in rows if r["rc"] != 0]
    for r in failed:
        print(f"run with {r['threads']} threads failed (rc {r['rc']}):\n{r['stderr_tail']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
