"""One GPU host's samples for the fleet: one request for all its runs against one per run.

    .venv/bin/python benchmarks/gpu_sample_runs_cost.py [--runs 5] [--gpus 8] [--periods 300]

A real agent on this machine (the host's GPU probe, as the fleet opens it: gpu/oneshot.py) reads
the fake NVML (--gpus GPUs, one real run's trainer on each of the first --runs GPUs; the runs
are real session leaders with a child, as launch.sh makes them). Per host period (the fleet's
`gpu_interval`) it takes either one `sample_runs` for all --runs runs (one gpu.sample request
with `runs`) or one `sample` per run (one request each, what the fleet did before), alternated
in blocks so a drift of the machine's load weighs on both alike, and reports the CPU of this
process (the dashboard's side) and of the agent (the host's side) per host period, and the
wall time of a period's samples.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks.harness import proc_cpu_s  # noqa: E402
from dflash_tui.gpu.nspid import read_stat  # noqa: E402
from dflash_tui.gpu.oneshot import OneShotGpuProbe  # noqa: E402
from dflash_tui.gpu.sources import ENV_NVML_SPEC, RunRef  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402

RUN_SRC = ("import subprocess, sys, time; "
           "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']); "
           "print(p.pid, flush=True); time.sleep(3600)")


async def measure(args) -> dict:
    leaders, trainers = [], []
    for _ in range(args.runs):
        p = subprocess.Popen([sys.executable, "-c", RUN_SRC], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
        leaders.append(p)
        trainers.append(int(p.stdout.readline()))
    runs = [RunRef(p.pid, read_stat(p.pid).start_ticks) for p in leaders]
    os.environ[ENV_NVML_SPEC] = "dflash_tui.gpu.fake_nvml:from_env"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DFLASH_FAKE_NVML_GPUS": str(args.gpus),
           "DFLASH_FAKE_NVML_PROCS": ",".join(f"{i % args.gpus}:{t}:{(10 + i) << 30}" for i, t in enumerate(trainers))}
    probe = OneShotGpuProbe(LocalTarget(env=env), python=sys.executable)

    async def per_run():
        return [await probe.sample(r) for r in runs]

    ways = {"one request for all runs": lambda: probe.sample_runs(runs), "one request per run": per_run}
    try:
        snaps = await probe.sample_runs(runs)
        assert all(s.error is None for s in snaps), snaps[0].error
        assert [sum(p.is_run_process for g in s.gpus for p in g.processes) for s in snaps] == [1] * args.runs
        agent = probe._source._primary._ops.info["pid"]   # the host's probe agent (a child here)
        totals = {w: {"cpu": 0.0, "agent": 0.0, "wall": 0.0, "n": 0} for w in ways}
        block = max(1, args.periods // 6)
        for i in range(6):
            for way in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
                c0, a0, w0 = time.process_time(), proc_cpu_s(agent), time.monotonic()
                for _ in range(block):
                    await ways[way]()
                t = totals[way]
                t["cpu"] += time.process_time() - c0
                t["agent"] += proc_cpu_s(agent) - a0
                t["wall"] += time.monotonic() - w0
                t["n"] += block
        return totals
    finally:
        await probe.close()
        for p in leaders:
            os.killpg(p.pid, 9)
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--periods", type=int, default=300)
    args = ap.parse_args()
    totals = asyncio.run(measure(args))
    load = os.getloadavg()[0]
    print(f"{args.runs} runs on one host with {args.gpus} fake GPUs, {totals[next(iter(totals))]['n']} host "
          f"periods each way, alternated in 6 blocks; load average {load:.1f} at the end\n")
    print("| per host period | dashboard CPU | agent CPU (the host) | wall time of the samples |")
    print("| --- | ---: | ---: | ---: |")
    for way, t in totals.items():
        n = t["n"]
        print(f"| {way} | {1000 * t['cpu'] / n:.2f} ms | {1000 * t['agent'] / n:.2f} ms | {1000 * t['wall'] / n:.1f} ms |")
    a, b = totals["one request for all runs"], totals["one request per run"]
    print(f"| ratio (all / per run) | {a['cpu'] / b['cpu']:.2f} | {a['agent'] / b['agent']:.2f} | {a['wall'] / b['wall']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
