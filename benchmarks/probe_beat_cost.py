"""What one beat of the run probe costs, this checkout's probe beside the probe of another git
revision, in one process and one run: the report of every thread's frames (and, in this probe,
since when each stack stands where it is), serialised and written, as the probe's thread does
every second.

The process holds 17 threads (16 in a loop of list work and 10 ms sleeps, one in a pure-Python
loop), as benchmarks/stack_sampling_cost.py's workload. Each probe gets its own run dir; their
beats alternate (A B A B ...) so that the machine's load falls on both alike. Measured: the
calling thread's CPU time (time.thread_time) per beat, and the report's size.

`.venv/bin/python benchmarks/probe_beat_cost.py [--against main] [--beats 400] [--append]`
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness import replace_section  # noqa: E402

HEADING = "## probe: the cost of one beat, this probe beside another revision's (benchmarks/probe_beat_cost.py)"
PROBE = "src/dflash_tui/contract/probe.py"
CONTRACT = "src/dflash_tui/contract/rundir.py"


def load_probe(name: str, probe_src: str, contract_src: str, tmp: Path):
    """The probe as a run dir holds it: `dflash_probe` beside its contract `dflash_rundir`."""
    d = tmp / name
    d.mkdir()
    (d / "dflash_rundir.py").write_text(contract_src)
    (d / "dflash_probe.py").write_text(probe_src)
    contract = importlib.util.spec_from_file_location("dflash_rundir", d / "dflash_rundir.py")
    rd = importlib.util.module_from_spec(contract)
    sys.modules["dflash_rundir"] = rd
    contract.loader.exec_module(rd)
    spec = importlib.util.spec_from_file_location(f"dflash_probe_{name}", d / "dflash_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)       # binds this contract as its `_rd`
    del sys.modules["dflash_rundir"]
    return mod


def workload(stop: threading.Event) -> list[threading.Thread]:
    def worker():
        data = []
        while not stop.is_set():
            data = [i * i for i in range(200)]
            time.sleep(0.01)
        return data

    def spin():
        x = 0
        while not stop.is_set():
            x = (x * 31 + 7) % 1000003

    threads = [threading.Thread(target=worker, name=f"worker-{i}", daemon=True) for i in range(16)]
    threads.append(threading.Thread(target=spin, name="spinner", daemon=True))
    for t in threads:
        t.start()
    return threads


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", default="main", help="git revision of the other probe")
    ap.add_argument("--beats", type=int, default=400)
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.against], check=True,
                         capture_output=True, text=True).stdout.strip()
    def show(path: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        mods = {"this": load_probe("this", (ROOT / PROBE).read_text(), (ROOT / CONTRACT).read_text(), tmp),
                rev: load_probe("other", show(PROBE), show(CONTRACT), tmp)}
        probes = {}
        for name, mod in mods.items():
            run_dir = tmp / f"run-{name}"
            (run_dir / "probe").mkdir(parents=True)
            probes[name] = mod._Probe(str(run_dir), "bench", 1.0)
        stop = threading.Event()
        workload(stop)
        time.sleep(0.5)
        cpu = {name: [] for name in probes}
        for i in range(args.beats):
            for name in (list(probes) if i % 2 == 0 else list(probes)[::-1]):
                t0 = time.thread_time()
                probes[name].beat()
                cpu[name].append(time.thread_time() - t0)
            time.sleep(0.005)
        stop.set()
        sizes = {name: os.path.getsize(p.report_path) for name, p in probes.items()}
        threads = {name: len(json.loads(Path(p.report_path).read_text())["threads"]) for name, p in probes.items()}
    load1 = os.getloadavg()[0]
    med = {name: statistics.median(v) * 1e3 for name, v in cpu.items()}
    mean = {name: statistics.fmean(v) * 1e3 for name, v in cpu.items()}
    rows = "\n".join(f"| {'this checkout' if name == 'this' else f'`{args.against}` ({rev})'} | {threads[name]} | "
                     f"{med[name]:.3f} ms | {mean[name]:.3f} ms | {sizes[name]} B | {mean[name] / 10:.4f} % |"
                     for name in probes)
    section = f"""{HEADING}

Command: `.venv/bin/python benchmarks/probe_beat_cost.py --against {args.against} --beats {args.beats}{' --append' if args.append else ''}`

Machine: x86_64, {os.cpu_count()} CPU cores (shared), CPython {sys.version.split()[0]}. Load average {load0:.1f} before,
{load1:.1f} after. One process, 17 busy threads; {args.beats} beats of each probe, alternating.

| probe | threads reported | CPU per beat (median) | mean | report size | at one beat a second (of one core) |
| --- | ---: | ---: | ---: | ---: | ---: |
{rows}

Ratio this / `{args.against}`: {mean['this'] / mean[rev]:.3f} (mean CPU per beat), {sizes['this'] / sizes[rev]:.3f} (report size).
"""
    print(section)
    if args.append:
        replace_section(HEADING, section)


if __name__ == "__main__":
    main()
