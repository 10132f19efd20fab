"""Launch to first step of the bundled trainer: the code before (compile every bucket in the
main thread, then train) against this tree (train eagerly at once, the compiled step built in
the background and switched to at a step boundary), side by side in one run.

Every run is a fresh `python -m dflash_train` process, as the dashboard launches it, with
--steps far away: the benchmark watches its events.jsonl and stops it with SIGTERM (checkpoint,
exit 0) once every compile has ended and `--settle` steps ran after the last one, or at its
time cap. Measured from the launch (Popen) to: the first step event, the end of the last
compile, the first step in the compiled mode; the steady step time and MFU (median of the step
events after the last compile); the gate's counts from the exit event.

Parts:
  cold     the issue's configuration: small preset, 6 drafter threads and the target on one GPU,
           buckets 1024,2048,4096 + cold 1536,3072, default eval; cold compile caches (a fresh
           TORCHINDUCTOR_CACHE_DIR for the old code, the new run directory's own for the new),
           each tree in --trees order (the first on a fresh machine pays the target's pre-fit),
           then --warm-runs relaunches of each with --resume over the same caches (warm), the
           trees taking turns; with --cold-again, then a new run in a fresh run directory (cold
           compile caches, the target's pre-fit cached by the first run)
  threads  1, 3 and 6 drafter threads, bucket 2048 alone, cold caches: warm-up per thread count
  mfu      the compiled step (objective.py: the same file in both trees) at dflash-8b-like
           4096 ctx / 512 anchors, fused AdamW, as benchmarks/gpu_step.py times it, with
           torch.optim's AdamW and with the trainer's optimizer, taking turns

    python3 benchmarks/gpu_first_step.py --old-src OLD/src --part cold --out $OUT
    python3 benchmarks/gpu_first_step.py --old-src OLD/src --part threads,mfu --out $OUT
    python3 benchmarks/gpu_first_step.py --smoke --old-src OLD/src   # CPU, tiny: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT: Path | None = None    # --out: every row is appended to OUT/rows.jsonl as soon as it exists
PY_SPY = ""                # --py-spy


class Watch:
    """Reads a run's events.jsonl as it grows."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "events.jsonl"
        self.offset = 0
        self.events: list[dict] = []

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open() as fh:
            fh.seek(self.offset)
            text = fh.read()
        done, _, _ = text.rpartition("\n")
        self.offset += len(done) + 1 if done else 0
        for line in done.splitlines():
            if line.strip():
                self.events.append(json.loads(line))


def summarize(events: list[dict], t_launch: float) -> dict:
    steps = [e for e in events if e["kind"] == "step"]
    compiles = [e for e in events if e["kind"] == "compile" and e.get("state") in ("start", "end")]
    ends = [e for e in compiles if e["state"] == "end"]
    last_compile = max((e["time"] for e in ends), default=None)
    modes = [e for e in events if e["kind"] == "compile" and e.get("state") == "step_mode"]
    compiled_mode = [e for e in modes if e.get("mode") == "compiled"]
    warm = next((e for e in events if e.get("state") == "warmup_done"), None)
    exit_ev = next((e for e in reversed(events) if e["kind"] == "exit"), {})
    after = [e for e in steps if last_compile is not None and e["time"] > last_compile + 1.0][2:]
    times = [e["step_time_s"] for e in after if e.get("step_time_s")]
    mfus = [e["mfu"] for e in after if e.get("mfu") is not None]
    rel = lambda t: None if t is None else round(t - t_launch, 2)  # noqa: E731
    evals = [e for e in events if e["kind"] == "eval"]
    return {
        "first_event_s": rel(events[0]["time"]) if events else None,
        "first_compile_s": rel(min((e["time"] for e in compiles), default=None)),
        "first_eval_s": rel(evals[0]["time"]) if evals else None,
        "first_eval_seconds": evals[0].get("seconds") if evals else None,
        "first_step_s": rel(steps[0]["time"]) if steps else None,
        "first_step_s_field": next((e.get("first_step_s") for e in steps if e.get("first_step_s")), None),
        "all_compiled_s": rel(last_compile),
        "compiled_steps_from_s": rel(compiled_mode[-1]["time"]) if compiled_mode else None,
        "compiled_steps_from_step": compiled_mode[-1]["step"] + 1 if compiled_mode else None,
        "warmup_done_s": rel(warm["time"]) if warm else None,
        "warmup_seconds": warm.get("seconds") if warm else None,
        "graphs": sum(1 for e in ends if e.get("trigger", "DYNAMO") == "DYNAMO"),
        "steps": steps[-1]["step"] if steps else 0,
        "steady_steps": len(times),
        "steady_step_ms": round(1e3 * statistics.median(times), 2) if times else None,
        "steady_mfu": round(statistics.median(mfus), 5) if mfus else None,
        "gate": exit_ev.get("gate"),
        "mode_switches": [(e.get("mode"), e.get("step")) for e in modes],
    }


def run_trainer(label: str, src: Path, run_dir: Path, cache_dir: Path | None, args: list[str], cap_s: float,
                settle: int, resume: bool = False, stop_after_steps: int = 0) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(PYTHONPATH=str(src), PYTHONUNBUFFERED="1", DFLASH_RUN_ID=f"bench-{label}")
    if cache_dir is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), "--steps", "1000000",
           "--checkpoint-every", "1000000", "--log-every", "100", *args, *(["--resume"] if resume else [])]
    run_dir.mkdir(parents=True, exist_ok=True)
    log = (run_dir / f"stdout-{'resume' if resume else 'first'}.txt").open("w")
    watch = Watch(run_dir)
    watch.poll()
    skip = len(watch.events)     # a relaunch appends to the same events.jsonl
    t_launch = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))
    spy = None
    if PY_SPY and OUT is not None and label.startswith("new"):
        # sampled from outside, without pausing the process: where its seconds go, per thread
        spy = subprocess.Popen([PY_SPY, "record", "--pid", str(proc.pid), "--rate", "50", "--nonblocking",
                                "--threads", "--format", "raw", "--output", str(OUT / f"pyspy-{label}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stopped_by = "exit"
    while proc.poll() is None:
        time.sleep(0.5)
        watch.poll()
        ev = watch.events[skip:]
        now = time.time()
        if now - t_launch > cap_s:
            stopped_by = "cap"
            break
        steps = [e for e in ev if e["kind"] == "step"]
        if stop_after_steps and len(steps) >= stop_after_steps:
            stopped_by = f"{stop_after_steps} steps"
            break
        starts = sum(1 for e in ev if e["kind"] == "compile" and e.get("state") == "start")
        ends = [e["time"] for e in ev if e["kind"] == "compile" and e.get("state") == "end"]
        # settled: the warm-up's graphs are built (the new tree starts compiling only after the
        # first step, so "no compile in flight" alone is true before it begins), nothing is
        # compiling, and `settle` steps ran since the last compile
        warmed = any(e.get("state") == "warmup_done" for e in ev)
        if steps and warmed and starts == len(ends):
            last = max(ends, default=t_launch)
            if now - last >= 5 and sum(1 for e in steps if e["time"] > last) >= settle:
                stopped_by = "settled"
                break
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    watch.poll()
    log.close()
    if spy is not None:
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
    row = {"run": label, "rc": proc.returncode, "stopped_by": stopped_by, "wall_s": round(time.time() - t_launch, 1),
           **summarize(watch.events[skip:], t_launch), "cmd": " ".join(cmd[1:])}
    if proc.returncode != 0:
        row["tail"] = (run_dir / f"stdout-{'resume' if resume else 'first'}.txt").read_text()[-2000:]
    print(json.dumps(row), flush=True)
    if OUT is not None:
        with (OUT / "rows.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
    return row


def trainer_args(opts, threads: int, buckets: str, cold: str) -> list[str]:
    dev = opts.device
    a = ["--preset", opts.preset, "--target-devices", dev, "--drafter-devices", ",".join([dev] * threads),
         "--threads-per-gpu", str(max(threads, 1)), "--buckets", buckets, "--batch-size", str(opts.batch)]
    return a + (["--cold-buckets", cold] if cold else []) + opts.extra


def part_cold(opts, work: Path) -> list[dict]:
    """Each tree's cold run in --trees order (the first one on a fresh machine pays the target's
    pre-fit), then --warm-runs relaunches of each with --resume, the trees taking turns."""
    rows = []
    args = trainer_args(opts, opts.threads_cold, opts.buckets, opts.cold_buckets)
    dirs = {label: (work / f"cold-{label}", work / f"cache-{label}" if label == "old" else None)
            for label, _ in opts.trees}
    for label, src in opts.trees:
        run_dir, cache = dirs[label]
        rows.append(run_trainer(f"{label}-cold", src, run_dir, cache, args, opts.cap_cold, opts.settle))
    for i in range(opts.warm_runs):
        for label, src in opts.trees:
            run_dir, cache = dirs[label]
            rows.append(run_trainer(f"{label}-warm{i + 1}", src, run_dir, cache, args, opts.cap_warm, opts.settle,
                                    resume=True, stop_after_steps=opts.stop_after_steps))
    for label, src in opts.trees:
        run_dir, _ = dirs[label]
        if OUT is not None:
            (OUT / f"train-{label}.log").write_text((run_dir / "train.log").read_text())
        if opts.cold_again and label == "new":
            again = work / f"cold-again-{label}"
            rows.append(run_trainer(f"{label}-cold-again", src, again, None, args, opts.cap_warm, opts.settle))
            if OUT is not None:
                (OUT / f"train-{label}-cold-again.log").write_text((again / "train.log").read_text())
    return rows


def part_threads(opts, work: Path) -> list[dict]:
    rows = []
    for label, src in opts.trees:
        for n in opts.thread_counts:
            run_dir = work / f"threads-{label}-{n}"
            cache = work / f"cache-threads-{label}-{n}" if label == "old" else None
            rows.append(run_trainer(f"{label}-{n}threads", src, run_dir, cache,
                                    trainer_args(opts, n, opts.thread_bucket, "") + ["--eval-every", "0"],
                                    opts.cap_threads, opts.settle, stop_after_steps=opts.stop_after_steps))
    return rows


def part_mfu(opts) -> list[dict]:
    """The compiled step at dflash-8b-like, timed as gpu_step.py does (new variant): with
    torch.optim's fused AdamW as before, and with the trainer's optimizer (pool.replica_optimizer),
    the two taking turns, twice each."""
    sys.path[:0] = [str(opts.new_src), str(ROOT / "benchmarks")]
    import torch
    import gpu_step
    from dflash_train.config import ModelConfig
    from dflash_train.model.drafter import DFlashDrafter
    from dflash_train.perf import assumed_peak_tflops
    from dflash_train.pool import replica_optimizer

    device = torch.device(opts.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    preset = "tiny" if opts.smoke else "dflash-8b-like"
    peak = assumed_peak_tflops(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", 0.0) or 1.0
    rows = []
    for ctx, anchors in opts.mfu_shapes:
        cfg = ModelConfig.preset(preset).with_(anchors_per_seq=anchors)
        torch.manual_seed(0)
        embed = torch.randn(cfg.vocab_size, cfg.hidden_size, device=device, dtype=dtype) * 0.02
        with torch.device(device):
            drafter = DFlashDrafter(cfg, embed, embed if cfg.tie_embeddings else torch.randn_like(embed) * 0.02)
        drafter = drafter.to(dtype).train()
        tb = gpu_step.make_batch(cfg, ctx, device, dtype)
        backend = "inductor" if device.type == "cuda" else "eager"
        loss_and_grads, full_step, _ = gpu_step.step_fns("new", drafter, tb, device, backend)
        trainer_opt = replica_optimizer([p for p in drafter.parameters() if p.requires_grad], 1e-6, 0.0)

        def trainer_step():
            loss_and_grads()
            trainer_opt.step()

        t0 = time.perf_counter()
        _, flops = loss_and_grads()
        gpu_step.sync(device)
        compile_s = time.perf_counter() - t0
        turns = {"torch_optim": [], "trainer_optimizer": []}
        for _ in range(2):
            for name, fn in (("torch_optim", full_step), ("trainer_optimizer", trainer_step)):
                turns[name].append(gpu_step.timed(fn, device, 10, 2)[0] * 1e3)
        ms, ms_trainer = statistics.median(turns["torch_optim"]), statistics.median(turns["trainer_optimizer"])
        mfu = lambda ms: round(flops.total / (ms / 1e3) / (peak * 1e12), 4)  # noqa: E731
        row = {"run": "mfu", "preset": preset, "ctx": ctx, "anchors": anchors, "ms": round(ms, 2),
               "mfu": mfu(ms), "ms_trainer_optimizer": round(ms_trainer, 2), "mfu_trainer_optimizer": mfu(ms_trainer),
               "turns_ms": {k: [round(v, 2) for v in vs] for k, vs in turns.items()}, "peak_tflops": peak,
               "first_call_s": round(compile_s, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        del drafter, embed, tb, loss_and_grads, full_step, trainer_opt, trainer_step
    return rows


def table(rows: list[dict]) -> None:
    cols = ("run", "rc", "stopped_by", "first_step_s", "first_step_s_field", "compiled_steps_from_s",
            "all_compiled_s", "warmup_seconds", "graphs", "steps", "steady_step_ms", "steady_mfu")
    print("\n| " + " | ".join(cols) + " | gate recompiles / fx errors / exclusive s |")
    print("|" + " --- |" * (len(cols) + 1))
    for r in rows:
        if r["run"] == "mfu":
            continue
        g = r.get("gate") or {}
        gate = f"{g.get('recompiles')} / {g.get('fx_race_errors')} / {g.get('exclusive_seconds', 0):.1f}" if g else "-"
        print("| " + " | ".join(str(r.get(c)) for c in cols) + f" | {gate} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old-src", type=Path, required=True, help="the src/ of the code before")
    p.add_argument("--part", default="cold,threads,mfu")
    p.add_argument("--out", type=Path)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--settle", type=int, default=30, help="steps after the last compile before the stop")
    p.add_argument("--trees", default="new,old", help="which code to run: new, old or both")
    p.add_argument("--thread-counts", dest="thread_counts_arg", default="",
                   help="drafter threads of part threads (default 1,3,6)")
    p.add_argument("--cold-again", action="store_true",
                   help="part cold: also a new run in a fresh run dir after the first (pre-fit cached)")
    p.add_argument("--py-spy", default="", help="a py-spy to sample the new tree's trainer runs with (raw files in --out)")
    p.add_argument("--warm-runs", type=int, default=1,
                   help="part cold: relaunches (--resume) of each tree after the cold runs, the trees taking turns")
    p.add_argument("--stop-after-steps", type=int, default=0,
                   help="parts cold (its relaunches) and threads: stop a run once it has run this many "
                        "steps (default 0: once settled, or at its cap)")
    p.add_argument("--caps", default="", help="seconds a run may take: cold,warm,threads (default 215,45,75)")
    opts = p.parse_args()
    global OUT, PY_SPY
    OUT = opts.out
    PY_SPY = opts.py_spy
    if OUT is not None:
        OUT.mkdir(parents=True, exist_ok=True)
    opts.new_src = ROOT / "src"
    opts.old_src = opts.old_src.resolve()
    opts.extra = []
    if opts.smoke:
        opts.device, opts.preset, opts.batch = "cpu", "tiny", 2
        opts.buckets, opts.cold_buckets, opts.thread_bucket = "64,128", "96", "128"
        opts.threads_cold, opts.thread_counts = 2, (1, 2)
        opts.cap_cold = opts.cap_warm = opts.cap_threads = 90
        opts.mfu_shapes = ((128, 8),)
        opts.settle = 5
    else:
        opts.device, opts.preset, opts.batch = "cuda:0", "small", 4
        opts.buckets, opts.cold_buckets, opts.thread_bucket = "1024,2048,4096", "1536,3072", "2048"
        opts.threads_cold, opts.thread_counts = 6, (1, 3, 6)
        opts.cap_cold, opts.cap_warm, opts.cap_threads = 215, 45, 75
        opts.mfu_shapes = ((4096, 512),)
    opts.trees = [(t, opts.new_src if t == "new" else opts.old_src) for t in opts.trees.split(",")]
    if opts.thread_counts_arg:
        opts.thread_counts = tuple(int(x) for x in opts.thread_counts_arg.split(","))
    if opts.caps:
        opts.cap_cold, opts.cap_warm, opts.cap_threads = (float(x) for x in opts.caps.split(","))
    work = Path(tempfile.mkdtemp(prefix="first-step-"))
    parts = opts.part.split(",")
    rows: list[dict] = []
    if "cold" in parts:
        rows += part_cold(opts, work)
    if "threads" in parts:
        rows += part_threads(opts, work)
    if "mfu" in parts:
        rows += part_mfu(opts)
    table(rows)
    if opts.out:
        (opts.out / f"first_step_{'_'.join(parts)}.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("rc", 0) == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
