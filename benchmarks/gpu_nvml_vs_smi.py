"""Device verification: this project's NVML samples against nvidia-smi, under a matmul load.

Run on a GPU host (needs torch with CUDA, pynvml, nvidia-smi):

    python3 benchmarks/gpu_nvml_vs_smi.py [--seconds 20] [--rounds 12]

It starts a bf16 matmul load on GPU 0 in a child process, waits for it to warm up, then
alternates one sample from `NvmlReader` (the code the dashboard and the host agent run) with one
`nvidia-smi --query-gpu` and `--query-compute-apps`, and compares each field within the
tolerances printed in the table. Exit status 1 on any disagreement, 2 when it cannot run.

It also records fresh nvidia-smi CSV fixtures (idle, under load, a streaming -lms run, compute
apps) into $OUT/fixtures/nvidia_smi/ (or --fixtures DIR) for tests/fixtures/nvidia_smi/.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dflash_tui.gpu.nspid import RunPidMapper, read_stat  # noqa: E402
from dflash_tui.gpu.nvml_reader import NvmlReader  # noqa: E402
from dflash_tui.gpu.smi import (apps_query_argv, gpu_query_argv, parse_app_line,  # noqa: E402
                                parse_gpu_line)
from dflash_tui.gpu.sources import (LocalNvmlSource, RunRef, SmiStreamSource,  # noqa: E402
                                    local_annotator)
from dflash_tui.gpu.stream import GpuStream  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402

MIB = 1024 * 1024

LOAD = r"""
import sys, time, torch
seconds = float(sys.argv[1])
torch.cuda.set_device(0)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
hold = torch.empty(8 * 1024**3, dtype=torch.uint8, device="cuda")   # 8 GiB, a stable footprint
torch.cuda.synchronize()
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""

# field: (tolerance description, comparison(nvml, smi) -> bool). None on both sides agrees.
def _abs(tol):
    return lambda a, b: abs(a - b) <= tol


def _rel(frac, floor):
    return lambda a, b: abs(a - b) <= max(floor, frac * max(abs(a), abs(b)))


TOLERANCES = {
    "name": ("exact", lambda a, b: a == b),
    "uuid": ("exact", lambda a, b: a == b),
    "mem_total_bytes": ("<= 1 MiB (smi rounds to MiB)", _abs(MIB)),
    "mem_used_bytes": ("<= 64 MiB", _abs(64 * MIB)),
    "util_sm_pct": ("<= 10 points", _abs(10)),
    "util_mem_pct": ("<= 15 points", _abs(15)),
    "temperature_c": ("<= 2 C", _abs(2)),
    "power_w": ("<= 10% or 30 W", _rel(0.10, 30)),
    "power_limit_w": ("<= 0.5 W", _abs(0.5)),
    "sm_clock_mhz": ("<= 5% or 30 MHz", _rel(0.05, 30)),
    "sm_clock_max_mhz": ("exact", lambda a, b: a == b),
    "mem_clock_mhz": ("<= 1 MHz", _abs(1)),
    "ecc_errors_uncorrected": ("exact", lambda a, b: a == b),
}


def run_cmd(argv: list[str]) -> tuple[str, float, float]:
    """stdout, wall ms, CPU ms of the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000
    if out.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout, wall, cpu


def record_stream(argv: list[str], seconds: float) -> str:
    try:
        out = subprocess.run(["timeout", str(seconds)] + argv, capture_output=True, text=True)
    except FileNotFoundError:
        return ""
    return out.stdout


def write_fixture(folder: Path, name: str, argv: list[str], text: str, driver: str, gpu: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    header = (f"# recorded on {gpu}, driver {driver}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC,\n"
              f"# by benchmarks/gpu_nvml_vs_smi.py: {' '.join(argv)}\n")
    (folder / name).write_text(header + text)


async def compare_streams(run: RunRef, seconds: float) -> list[tuple[str, str, object, object, bool]]:
    """Phase 2: the product's async path. GpuStream over in-process NVML and GpuStream over the
    streaming nvidia-smi source run side by side; their latest snapshots must agree too."""
    import asyncio

    nvml = GpuStream(LocalNvmlSource(), interval=0.5, run=run)
    smi = GpuStream(SmiStreamSource(LocalTarget(), interval_ms=500, annotate=local_annotator()),
                    interval=0.5, run=run)
    async with nvml, smi:
        await asyncio.sleep(seconds)
        a, b = nvml.latest, smi.latest
    rows = []
    if a is None or b is None or a.error or b.error:
        return [("-", "stream error", a and a.error, b and b.error, False)]
    for ga, gb in zip(a.gpus, b.gpus):
        for key, (_, ok) in TOLERANCES.items():
            x, y = getattr(ga, key), getattr(gb, key)
            rows.append((f"GPU{ga.index}", key, x, y,
                         (x is None and y is None) or (x is not None and y is not None and ok(x, y))))
        ra = [p for p in ga.processes if p.is_run_process]
        rb = [p for p in gb.processes if p.is_run_process]
        rows.append((f"GPU{ga.index}", "run processes", len(ra), len(rb), len(ra) == len(rb)))
    rows.append(("all", "history samples", len(nvml.history(0)), len(smi.history(0)),
                 len(nvml.history(0)) >= 3 and len(smi.history(0)) >= 3))
    return rows


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=25.0, help="length of the matmul load")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--fixtures", default=os.path.join(os.environ.get("OUT", "."), "fixtures", "nvidia_smi"))
    args = ap.parse_args()
    try:
        import pynvml
    except ImportError:
        print("pynvml is not importable: pip install nvidia-ml-py", file=sys.stderr)
        return 2
    reader = NvmlReader(lambda: pynvml)
    first = reader.sample()
    if first["error"] or not first["gpus"]:
        print(f"NVML unavailable: {first['error']}", file=sys.stderr)
        return 2
    driver, gpu_name = first["driver_version"], first["gpus"][0]["name"]
    fixtures = Path(args.fixtures)

    # Idle recordings first, before the load starts.
    q1 = gpu_query_argv(None)
    idle, _, _ = run_cmd(q1)
    write_fixture(fixtures, "idle_query_gpu.csv", q1, idle, driver, gpu_name)
    apps_idle, _, _ = run_cmd(apps_query_argv(None))
    write_fixture(fixtures, "idle_compute_apps.csv", apps_query_argv(None), apps_idle, driver, gpu_name)

    load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.seconds)], stdout=subprocess.PIPE, text=True)
    try:
        if load.stdout.readline().strip() != "ready":
            print("the matmul load did not start (torch with CUDA needed)", file=sys.stderr)
            return 2
        time.sleep(3.0)   # utilisation and power settle
        ticks = read_stat(load.pid).start_ticks
        mapper = RunPidMapper()
        rows: list[tuple[str, str, object, object, bool]] = []
        nvml_ms, nvml_cpu_ms, smi_ms, smi_cpu_ms = [], [], [], []
        failures = 0
        proc_checks = []
        throttle_same = 0   # informational: the mask can change between the two reads
        for _ in range(args.rounds):
            c0 = time.process_time()
            snap = reader.sample()
            nvml_cpu_ms.append((time.process_time() - c0) * 1000)
            nvml_ms.append(snap["latency_ms"])
            procs = [p for g in snap["gpus"] for p in g["processes"]]
            mapper.annotate(procs, load.pid, ticks)
            text, wall, cpu = run_cmd(q1)
            smi_ms.append(wall)
            smi_cpu_ms.append(cpu)
            apps_text, _, _ = run_cmd(apps_query_argv(None))
            smi = {g["index"]: g for g in map(parse_gpu_line, text.strip().splitlines())}
            apps = [parse_app_line(line) for line in apps_text.strip().splitlines() if line.strip()]
            for g in snap["gpus"]:
                s = smi[g["index"]]
                for key, (_, ok) in TOLERANCES.items():
                    a, b = g[key], s[key]
                    good = (a is None and b is None) or (a is not None and b is not None and ok(a, b))
                    failures += not good
                    rows.append((f"GPU{g['index']}", key, a, b, good))
            throttle_same += all(g["throttle_reasons"] == smi[g["index"]]["throttle_reasons"]
                                 for g in snap["gpus"])
            xids = [g["xid_errors"] for g in snap["gpus"]]
            nv_load = [p for p in procs if p["pid"] == load.pid]
            smi_load = [a for a in apps if a["pid"] == load.pid]
            ok = (len(nv_load) == 1 and len(smi_load) == 1 and nv_load[0]["is_run_process"]
                  and abs(nv_load[0]["used_memory_bytes"] - smi_load[0]["used_memory_bytes"]) <= MIB)
            proc_checks.append(ok)
            failures += not ok
            time.sleep(0.5)
        import asyncio

        stream_rows = asyncio.run(compare_streams(RunRef(load.pid, ticks), 4.0))
        failures += sum(not r[4] for r in stream_rows)
        # Recordings under load: one-shot and a streaming -lms run.
        write_fixture(fixtures, "load_query_gpu.csv", q1, run_cmd(q1)[0], driver, gpu_name)
        stream_argv = gpu_query_argv(500)
        write_fixture(fixtures, "load_query_gpu_lms.csv", stream_argv, record_stream(stream_argv, 2.6),
                      driver, gpu_name)
        apps_argv = apps_query_argv(500)
        write_fixture(fixtures, "load_compute_apps_lms.csv", apps_argv, record_stream(apps_argv, 2.6),
                      driver, gpu_name)
    finally:
        load.kill()
        load.wait()

    # Per field: worst disagreement over the rounds, and whether every round agreed.
    print(f"# NvmlReader vs nvidia-smi on {gpu_name}, driver {driver}, bf16 matmul load, "
          f"{args.rounds} rounds")
    print(f"{'gpu':5} {'field':24} {'tolerance':28} {'nvml (last)':>16} {'smi (last)':>16} {'agree':>7}")
    by_field: dict[tuple[str, str], list] = {}
    for gpu, key, a, b, good in rows:
        by_field.setdefault((gpu, key), []).append((a, b, good))
    for (gpu, key), vals in by_field.items():
        a, b, _ = vals[-1]
        agree = sum(v[2] for v in vals)
        print(f"{gpu:5} {key:24} {TOLERANCES[key][0]:28} {str(a):>16} {str(b):>16} {agree:>3}/{len(vals)}")
    print(f"{'GPU0':5} {'load process':24} {'pid found, run-marked, <=1 MiB':28} {'':>16} {'':>16} "
          f"{sum(proc_checks):>3}/{len(proc_checks)}")
    print(f"{'GPU*':5} {'throttle_reasons':24} {'informational (changes fast)':28} "
          f"{','.join(snap['gpus'][0]['throttle_reasons']) or '-':>16} {'':>16} {throttle_same:>3}/{args.rounds}")
    print(f"Xid events observable through NVML events: "
          f"{'yes, counts ' + str(xids) if all(x is not None for x in xids) else 'no (registration refused): ' + str(xids)}")
    print()
    print("# phase 2: GpuStream(LocalNvmlSource) vs GpuStream(SmiStreamSource -lms 500), 4 s, latest snapshots")
    for gpu, key, a, b, good in stream_rows:
        print(f"{gpu:5} {key:24} {TOLERANCES.get(key, ('same count',))[0]:28} {str(a):>16} {str(b):>16} "
              f"{'ok' if good else 'DIFF':>7}")
    print()
    print(f"sample latency  NvmlReader all GPUs: median {statistics.median(nvml_ms):.3f} ms, "
          f"p95 {pct(nvml_ms, 0.95):.3f} ms, CPU {statistics.median(nvml_cpu_ms):.3f} ms")
    print(f"sample latency  nvidia-smi one-shot: median {statistics.median(smi_ms):.1f} ms, "
          f"p95 {pct(smi_ms, 0.95):.1f} ms, CPU {statistics.median(smi_cpu_ms):.1f} ms")
    print(f"ratio (smi / nvml) wall: {statistics.median(smi_ms) / statistics.median(nvml_ms):.0f}x, "
          f"CPU: {statistics.median(smi_cpu_ms) / max(statistics.median(nvml_cpu_ms), 1e-6):.0f}x")
    print(f"fixtures written to {fixtures}")
    if failures:
        print(f"DISAGREEMENT: {failures} comparison(s) outside tolerance", file=sys.stderr)
        return 1
    print("all fields agree within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
