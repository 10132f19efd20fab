"""The GPU probe's own cost inside the persistent agent, against a one-shot process per sample.

    .venv/bin/python benchmarks/gpu_agent_cost.py                 # fake NVML, 8 GPUs (any machine)
    python3 benchmarks/gpu_agent_cost.py --nvml real               # the host's real NVML (GPU host)

In one run it measures:
  A. this project's way: the agent (the same program the dashboard starts on a GPU host, here
     on the local machine) answering `gpu.sample` at 1 Hz for --seconds; its CPU time comes
     from /proc/<agent pid>/stat (utime+stime, all threads, 10 ms ticks), plus a burst of
     --burst back-to-back samples for a precise CPU-per-sample figure;
  B. the alternative: a new process per sample. With real NVML it is the real
     `nvidia-smi --query-gpu=...`; with the fake it is a fresh python that loads the same fake
     and samples once (what starting any `nvidia-smi`-like tool per sample costs at least).
Targets: A at most 0.5 % of one core at 1 Hz, sample latency under 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks.harness import pctl, proc_cpu_s  # noqa: E402
from dflash_tui.gpu.agent_probe import OP_NAME, gpu_agent_sources  # noqa: E402
from dflash_tui.gpu.smi import gpu_query_argv  # noqa: E402
from dflash_tui.remote.agent import AgentOps  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402


ONE_SHOT_FAKE = (
    "import sys; sys.path.insert(0, {src!r}); "
    "from dflash_tui.gpu import fake_nvml; from dflash_tui.gpu.nvml_reader import NvmlReader; "
    "import json; print(json.dumps(NvmlReader(fake_nvml.from_env).sample()))"
)


async def agent_way(spec: str, env: dict, seconds: float, burst: int) -> dict:
    ops = await AgentOps.start(LocalTarget(env=env), extra_sources=gpu_agent_sources(spec),
                               python=sys.executable)
    try:
        pid = int(ops.info["pid"])
        first = await ops.call(OP_NAME)
        if first.get("error"):
            raise SystemExit(f"the probe could not read NVML: {first['error']['message']}")
        n_gpus = len(first["gpus"])
        # Burst: CPU per sample, precisely (many samples per clock tick of resolution).
        c0 = proc_cpu_s(pid)
        for _ in range(burst):
            await ops.call(OP_NAME)
        per_sample_ms = (proc_cpu_s(pid) - c0) / burst * 1000
        # 1 Hz, as the dashboard runs it: latency per call and the agent's CPU share.
        lat, probe_ms = [], []
        c0, w0 = proc_cpu_s(pid), time.monotonic()
        next_t = w0
        while time.monotonic() - w0 < seconds:
            t = time.perf_counter()
            snap = await ops.call(OP_NAME, run_pid=os.getpid(), run_start_ticks=None)
            lat.append((time.perf_counter() - t) * 1000)
            probe_ms.append(snap["latency_ms"])
            next_t += 1.0
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        wall = time.monotonic() - w0
        cpu = proc_cpu_s(pid) - c0
        return {"gpus": n_gpus, "per_sample_cpu_ms": per_sample_ms, "cpu_1hz_pct": cpu / wall * 100,
                "cpu_1hz_s": cpu, "wall_s": wall, "samples": len(lat),
                "lat_med": statistics.median(lat), "lat_p95": pctl(lat, 0.95),
                "probe_med": statistics.median(probe_ms), "probe_p95": pctl(probe_ms, 0.95)}
    finally:
        await ops.close()


def one_shot_way(argv: list[str], env: dict, n: int) -> dict:
    walls = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        t = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, env=env, timeout=60)
        walls.append((time.perf_counter() - t) * 1000)
        if out.returncode != 0:
            raise SystemExit(f"{argv[0]} failed: {out.stderr.decode(errors='replace').strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / n * 1000
    return {"per_sample_cpu_ms": cpu_ms, "cpu_1hz_pct": cpu_ms / 10.0,
            "lat_med": statistics.median(walls), "lat_p95": pctl(walls, 0.95)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvml", choices=("fake", "real"), default="fake")
    ap.add_argument("--gpus", type=int, default=8, help="fake GPUs (with --nvml fake)")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the 1 Hz run")
    ap.add_argument("--burst", type=int, default=300, help="back-to-back samples for CPU/sample")
    ap.add_argument("--one-shots", type=int, default=10)
    args = ap.parse_args()

    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), DFLASH_FAKE_NVML_GPUS=str(args.gpus))
    if args.nvml == "fake":
        spec = "dflash_tui.gpu.fake_nvml:from_env"
        alt_argv = [sys.executable, "-c", ONE_SHOT_FAKE.format(src=str(ROOT / "src"))]
        alt_name = "new python process per sample (fake NVML)"
    else:
        spec = "pynvml"
        alt_argv = gpu_query_argv(None)
        alt_name = "nvidia-smi --query-gpu one-shot per sample"

    a = asyncio.run(agent_way(spec, env, args.seconds, args.burst))
    b = one_shot_way(alt_argv, env, args.one_shots)
    print(f"# GPU probe cost, {a['gpus']} GPU(s), NVML={args.nvml}, python {sys.version.split()[0]}")
    print(f"{'way':52} {'CPU/sample ms':>13} {'CPU @1Hz % core':>16} {'latency med/p95 ms':>20}")
    print(f"{'agent gpu.sample (burst ' + str(args.burst) + ')':52} {a['per_sample_cpu_ms']:13.3f} "
          f"{a['per_sample_cpu_ms'] / 10:16.3f} {'':>20}")
    print(f"{'agent gpu.sample at 1 Hz for %.0f s (%d samples)' % (a['wall_s'], a['samples']):52} "
          f"{a['cpu_1hz_s'] * 1000 / a['samples']:13.3f} {a['cpu_1hz_pct']:16.3f} "
          f"{a['lat_med']:9.2f}/{a['lat_p95']:.2f}")
    print(f"{'  (inside the probe: NVML reads + NSpid marking)':52} {'':>13} {'':>16} "
          f"{a['probe_med']:9.2f}/{a['probe_p95']:.2f}")
    print(f"{alt_name:52} {b['per_sample_cpu_ms']:13.1f} {b['cpu_1hz_pct']:16.2f} "
          f"{b['lat_med']:9.1f}/{b['lat_p95']:.1f}")
    ratio = b["per_sample_cpu_ms"] / max(a["per_sample_cpu_ms"], 1e-9)
    print(f"ratio CPU per sample (one-shot / agent): {ratio:.0f}x; latency: "
          f"{b['lat_med'] / a['lat_med']:.0f}x")
    ok_cpu = max(a["cpu_1hz_pct"], a["per_sample_cpu_ms"] / 10) <= 0.5
    ok_lat = a["lat_p95"] < 5.0
    print(f"target <= 0.5% of one core at 1 Hz: {'met' if ok_cpu else 'MISSED'}; "
          f"sample latency p95 < 5 ms: {'met' if ok_lat else 'MISSED'}")
    return 0 if ok_cpu and ok_lat else 1


if __name__ == "__main__":
    sys.exit(main())
