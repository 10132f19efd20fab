"""The incident's layout, launched and watched by dflash-tui's own library.

Target threads on some GPUs, drafter threads on others, launched through `Session.launch()`
(preflight, detached wrapper, verified), then watched with `HostWatch` + `GpuStream` (local NVML)
exactly as the dashboard does, once every `--every` seconds until the run ends. Afterwards it
prints the per-thread compile state, the per-GPU NVML samples of the run's processes, the
FX-tracing error count, and the throughput against the same run with one drafter thread.

    python3 benchmarks/layout_run.py --target-devices cuda:0 --drafter-devices cuda:1,cuda:1,cuda:1 \
        --threads-per-gpu 3 --steps 1000 --baseline-steps 300        # nvidia-h200-x2, scaled down
    python3 benchmarks/layout_run.py --target-devices cuda:0,cuda:1,cuda:2,cuda:3,cuda:4 \
        --drafter-devices cuda:5,cuda:6,cuda:7 --steps 1000           # the incident's 8-GPU box
    python3 benchmarks/layout_run.py --smoke                         # CPU, tiny, checks the script

Writes samples.jsonl (one line per poll: verdict, step, threads, GPUs) to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from dflash_tui.config import load_config
from dflash_tui.gpu.sources import open_gpu_source, run_ref_from_launch
from dflash_tui.gpu.stream import GpuStream
from dflash_tui.remote.local import LocalTarget
from dflash_tui.watch.session import Session
from dflash_tui.watch import HostWatch

FX_RACE = "symbolically trace a dynamo-optimized function"


def _profile_toml(name: str, run_dir: str, train_args: list[str]) -> str:
    args = ", ".join(json.dumps(a) for a in train_args)
    return (f"[profile.{name}]\nrun_dir = {json.dumps(run_dir)}\npython = {json.dumps(sys.executable)}\n"
            f"train_args = [{args}]\nstall_after_s = 120\n")


async def watch_run(name: str, train_args: list[str], out: Path, every: float, limit_s: float) -> dict:
    run_dir = str(out / name)
    cfg_path = out / f"{name}.toml"
    cfg_path.write_text(_profile_toml(name, run_dir, train_args))
    profile = load_config(cfg_path).profile(name)
    session = Session(profile)
    t0 = time.monotonic()
    outcome = await session.launch(relaunch=True)
    launched_s = time.monotonic() - t0
    print(f"[{name}] launch: {outcome.checklist.verdict.value} in {launched_s:.2f}s "
          f"({outcome.checklist.summary})", flush=True)
    stream = GpuStream(await open_gpu_source(LocalTarget()), interval=1.0)
    stream.start()
    monitor = HostWatch(session, interval=every)
    monitor.gpus.lend(lambda: stream.latest)
    samples = out / f"{name}.samples.jsonl"
    last = None
    first_step_t = None
    with samples.open("w") as fh:
        while time.monotonic() - t0 < limit_s:
            report = await monitor.poll()
            if report.launch is not None and stream.run is None:
                stream.set_run(run_ref_from_launch(report.launch))
            snap = stream.latest
            st = report.status
            if st and st.step > 0 and first_step_t is None:
                first_step_t = time.monotonic()
            row = {
                "t": round(time.monotonic() - t0, 2),
                "verdict": report.checklist.verdict.value,
                "checks": {c.id: c.state.value for c in report.checklist.checks},
                "step": st.step if st else None, "phase": st.phase if st else None,
                "tokens_per_s": st.tokens_per_s if st else None, "tau": st.tau if st else None,
                "threads": [asdict(t) for t in st.threads] if st else [],
                "gpus": [{"index": g.index, "util_sm_pct": g.util_sm_pct, "mem_used_bytes": g.mem_used_bytes,
                          "power_w": g.power_w, "run_procs": [(p.pid, p.used_memory_bytes) for p in g.processes if p.is_run_process]}
                         for g in (snap.gpus if snap else ())],
                "gpu_error": snap.error.message if snap and snap.error else None,
            }
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            last = (report, row)
            verdict = report.checklist.verdict
            if verdict.failing or verdict.value == "FINISHED":
                break
            await asyncio.sleep(every)
    await stream.stop()
    await session.close()
    report, row = last
    log = Path(run_dir, "train.log").read_text(errors="replace") if Path(run_dir, "train.log").exists() else ""
    events = Path(run_dir, "events.jsonl").read_text(errors="replace") if Path(run_dir, "events.jsonl").exists() else ""
    st = report.status
    run_pids_seen = {tuple(p) for r in [row] for g in r["gpus"] for p in g["run_procs"]}
    return {
        "name": name, "verdict": report.checklist.verdict.value, "summary": report.checklist.summary,
        "steps": st.step if st else None, "tokens_per_s": st.tokens_per_s if st else None,
        "tau": st.tau if st else None, "wall_s": round(time.monotonic() - t0, 1),
        "fx_race_errors": log.count(FX_RACE) + events.count(FX_RACE),
        "threads": [(t.name, t.role, t.device, t.compile_state, t.graphs, t.recompiles,
                     round(t.compile_seconds, 1), t.step) for t in (st.threads if st else [])],
        "gpus_last": row["gpus"], "gpu_error": row["gpu_error"], "run_pids_on_gpus": sorted(run_pids_seen),
        "samples": str(samples),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target-devices", default="cuda:0")
    ap.add_argument("--drafter-devices", default="cuda:1,cuda:1,cuda:1")
    ap.add_argument("--threads-per-gpu", default="3")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--baseline-steps", type=int, default=300, help="steps of the 1-drafter-thread run (0: skip)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--buckets", default="1024,2048")
    ap.add_argument("--cold-buckets", default="1536", help="lengths not warmed: recompiles go through the gate")
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--limit", type=float, default=400.0, help="seconds per run at most")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="layout-"))
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run to check the script")
    a = ap.parse_args()
    if a.smoke:
        a.target_devices, a.drafter_devices, a.threads_per_gpu = "cpu", "cpu,cpu", "1"
        a.steps, a.baseline_steps, a.preset, a.buckets, a.cold_buckets = 30, 10, "tiny", "64", ""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def args_for(drafters: str, steps: int) -> list[str]:
        args = ["--target-devices", a.target_devices, "--drafter-devices", drafters,
                "--steps", str(steps), "--preset", a.preset, "--buckets", a.buckets,
                "--batch-size", "1", "--eval-every", "0", "--checkpoint-every", str(max(steps, 1)),
                "--log-every", "25"]
        if not a.smoke:
            args += ["--threads-per-gpu", a.threads_per_gpu]
        if a.cold_buckets:
            args += ["--cold-buckets", a.cold_buckets]
        return args

    results = [asyncio.run(watch_run("layout", args_for(a.drafter_devices, a.steps), out, a.every, a.limit))]
    if a.baseline_steps:
        one = a.drafter_devices.split(",")[0]
        results.append(asyncio.run(watch_run("one_drafter", args_for(one, a.baseline_steps), out, a.every, a.limit)))
    for r in results:
        print(json.dumps(r, default=str))
    main_r = results[0]
    print(f"\n| run | drafter threads | verdict | steps | tokens/s | FX-tracing errors | wall s |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for r in results:
        n = len([t for t in r["threads"] if t[1] == "drafter"])
        print(f"| {r['name']} | {n} | {r['verdict']} | {r['steps']} | {r['tokens_per_s'] or 0:.0f} | "
              f"{r['fx_race_errors']} | {r['wall_s']} |")
    if len(results) == 2 and results[1]["tokens_per_s"]:
        print(f"\nscaling: {main_r['tokens_per_s'] / results[1]['tokens_per_s']:.2f}x tokens/s "
              f"with {len([t for t in main_r['threads'] if t[1] == 'drafter'])} drafter threads vs 1")
    print("\nper-thread compile state (name, role, device, state, graphs, recompiles, compile s, step):")
    for t in main_r["threads"]:
        print("  ", t)
    print("per-GPU at the last poll:", json.dumps(main_r["gpus_last"]))
    ok = all(r["verdict"] == "FINISHED" and r["fx_race_errors"] == 0 for r in results)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
