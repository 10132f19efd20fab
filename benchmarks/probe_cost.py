"""The run probe's cost: the bundled trainer's tokens/s with and without it, side by side.

    .venv/bin/python benchmarks/probe_cost.py [--pairs 4] [--steps 120] [--starts 20] [--append]

Runs the bundled trainer (CPU: one target thread, two drafter threads, dynamo's eager
compile) in `--pairs` pairs, one run with the probe and one without, the two of a pair at the
same time (so the shared machine's load hits both alike), each in a fresh run dir with the environment launch.sh
gives it (DFLASH_RUN_DIR, DFLASH_RUN_ID; the probe first on PYTHONPATH or not at all). Reports:
- tokens/s: the mean of the trainer's step events after the first quarter of steps, per run;
  median per side and the ratio with/without;
- the probe's own CPU per process (probe_cpu_s of its last report over the process's life);
- the start-up cost per Python process: `python -c pass`, `--starts` times each way;
- the dashboard's cost of reading the reports per poll (`--polls` polls through the agent).
--append writes the section into benchmarks/RESULTS.md (replacing an earlier one of this script).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.harness import replace_section  # noqa: E402
from dflash_tui.contract.rundir import EVENTS_JSONL, PROBE_DIR, parse_events, parse_probe  # noqa: E402
from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.contract.rundir import ProbeReport, ProbeThread, probe_report_name, to_json  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402
from dflash_tui.run.evidence.observe import gather  # noqa: E402
from dflash_tui.run.evidence.probe_files import gather_probes  # noqa: E402
from dflash_tui.run.launch.probe_install import write_probe_dir  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402

HEADING = "## probe: the run probe's cost on the bundled trainer (benchmarks/probe_cost.py)"


def env_for(run_dir: Path, probe: bool) -> dict[str, str]:
    env = dict(os.environ, DFLASH_RUN_DIR=str(run_dir), DFLASH_RUN_ID=run_dir.name)
    env.pop("PYTHONPATH", None)
    if probe:
        write_probe_dir(run_dir / PROBE_DIR)
        env["PYTHONPATH"] = str(run_dir / PROBE_DIR)
    return env


def start_training(run_dir: Path, probe: bool, steps: int) -> tuple[subprocess.Popen, float]:
    run_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), "--target-devices", "cpu",
            "--drafter-devices", "cpu,cpu", "--steps", str(steps), "--eval-every", "0",
            "--checkpoint-every", str(steps * 10)]
    with open(run_dir / "out.txt", "wb") as out:
        proc = subprocess.Popen(argv, env=env_for(run_dir, probe), stdout=out, stderr=subprocess.STDOUT)
    return proc, time.monotonic()


def finish_training(run_dir: Path, probe: bool, steps: int, proc: subprocess.Popen, t0: float) -> dict:
    _, status, usage = os.wait4(proc.pid, 0)     # this child's own CPU, not its twin's
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    cpu = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed ({proc.returncode}): {(run_dir / 'out.txt').read_text()[-2000:]}")
    events = parse_events((run_dir / EVENTS_JSONL).read_text().splitlines()).events
    rates = [e["tokens_per_s"] for e in events if e["kind"] == "step" and e.get("tokens_per_s")
             and e["step"] > steps // 4]
    # CPU seconds per step moves far less with the load of other jobs than tokens/s does.
    out = {"tokens_per_s": statistics.fmean(rates), "wall_s": wall, "cpu_ms_per_step": 1000 * cpu / steps}
    if probe:
        reports = [parse_probe(p.read_text()) for p in (run_dir / PROBE_DIR).glob("[0-9]*.json")]
        out["reports"] = len(reports)
        out["probe_cpu_pct"] = [100 * r.probe_cpu_s / max(1e-9, r.time - r.start_time) for r in reports]
        out["probe_cpu_s"] = sum(r.probe_cpu_s for r in reports)
        out["cpu_s"] = sum(r.cpu_s for r in reports)
        out["ended"] = all(r.ended for r in reports)
    return out


def start_cost(base: Path, probe: bool, n: int) -> list[float]:
    run_dir = base / ("start-probe" if probe else "start-bare")
    run_dir.mkdir(exist_ok=True)
    env = env_for(run_dir, probe)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        times.append(time.perf_counter() - t0)
    return times


async def poll_cost(base: Path, polls: int) -> dict[int, tuple[float, float]]:
    """Median wall ms of gather_probes and of a whole gather() through the agent, for a probe
    dir with 0, 4, 16 and 32 reports of 8 threads each (torchrun with 8 ranks is ~10)."""
    run_dir = base / "poll"
    run_dir.mkdir()
    session = Session(Profile(name="poll", run_dir=str(run_dir), python=sys.executable),
                      targets=(LocalTarget(), LocalTarget()))
    ops = await session.ops()
    threads = [ProbeThread(name=f"thread-{i}", ident=i, frames=[f"/x/train.py:{i} step"] * 6) for i in range(8)]
    out = {}
    try:
        for n in (0, 4, 16, 32):
            (run_dir / PROBE_DIR).mkdir(exist_ok=True)
            for pid in range(1000, 1000 + n):
                (run_dir / PROBE_DIR / probe_report_name(pid)).write_text(to_json(ProbeReport(
                    run_id="poll", pid=pid, time=time.time(), threads=threads)))
            probes, whole = [], []
            for _ in range(polls):
                t = time.perf_counter()
                got = await gather_probes(ops, str(run_dir), "poll")
                probes.append(time.perf_counter() - t)
                t = time.perf_counter()
                await gather(ops, str(run_dir))
                whole.append(time.perf_counter() - t)
            assert len(got) == n
            out[n] = (1000 * statistics.median(probes), 1000 * statistics.median(whole))
    finally:
        await session.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--polls", type=int, default=300)
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    runs: dict[bool, list[dict]] = {True: [], False: []}
    starts: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="probe-cost-") as tmp:
        base = Path(tmp)
        for i in range(args.pairs):
            # The two of a pair run at the same time, so the load of other jobs hits both.
            order = (True, False) if i % 2 == 0 else (False, True)
            started = {probe: start_training(base / f"run{i}-{'probe' if probe else 'bare'}", probe, args.steps)
                       for probe in order}
            for probe in order:
                r = finish_training(base / f"run{i}-{'probe' if probe else 'bare'}", probe, args.steps,
                                    *started[probe])
                runs[probe].append(r)
                print(f"pair {i} probe={probe}: {r['tokens_per_s']:,.0f} tok/s, {r['wall_s']:.1f} s, "
                      f"{r['cpu_ms_per_step']:.1f} CPU ms/step"
                      + (f", {r['reports']} report(s), probe CPU {max(r['probe_cpu_pct']):.3f} % of a core"
                         if probe else ""), flush=True)
        for i in range(args.starts):
            for probe in ((True, False) if i % 2 == 0 else (False, True)):
                starts[probe].extend(start_cost(base, probe, 1))
        polls = asyncio.run(poll_cost(base, args.polls))
    load_after = os.getloadavg()[0]

    with_tps = [r["tokens_per_s"] for r in runs[True]]
    bare_tps = [r["tokens_per_s"] for r in runs[False]]
    ratio = statistics.median(with_tps) / statistics.median(bare_tps)
    pair_ratios = [w / b for w, b in zip(with_tps, bare_tps)]
    cpu_ratio = (statistics.median(r["cpu_ms_per_step"] for r in runs[True])
                 / statistics.median(r["cpu_ms_per_step"] for r in runs[False]))
    probe_pct = [p for r in runs[True] for p in r["probe_cpu_pct"]]
    start_with, start_bare = statistics.median(starts[True]), statistics.median(starts[False])
    command = "`.venv/bin/python benchmarks/probe_cost.py" + (
        f" --pairs {args.pairs} --steps {args.steps} --starts {args.starts}" if
        (args.pairs, args.steps, args.starts) != (4, 120, 20) else "") + (
        f" --polls {args.polls}" if args.polls != 300 else "") + " --append`"
    rows = "\n".join(
        f"| {i} | {b['tokens_per_s']:,.0f} | {w['tokens_per_s']:,.0f} | {w['tokens_per_s'] / b['tokens_per_s']:.3f} "
        f"| {b['cpu_ms_per_step']:.1f} | {w['cpu_ms_per_step']:.1f} "
        f"| {max(w['probe_cpu_pct']):.3f} % | {w['probe_cpu_s'] * 1000:.1f} ms of {w['cpu_s']:.1f} s |"
        for i, (w, b) in enumerate(zip(runs[True], runs[False])))
    section = f"""{HEADING}

Command: {command}

Machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared), CPython {platform.python_version()}.
The bundled trainer on CPU (`--target-devices cpu --drafter-devices cpu,cpu`, {args.steps} steps,
dynamo eager compile), {args.pairs} pairs of runs, one with the probe and one without, the two
of a pair at the same time (so other jobs' load hits both alike; which starts first alternates);
tokens/s is the mean of its step events after the first quarter, CPU per step the process
tree's own (wait4). Load average {load_before:.1f}
before, {load_after:.1f} after (other jobs share the cores: absolute numbers move, the ratio is
from the same run).

| pair | tokens/s without | tokens/s with probe | ratio | CPU ms/step without | with | probe CPU (of one core) | probe CPU / process CPU |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
{rows}

Median tokens/s with the probe / without: **{ratio:.3f}** (per-pair ratios {min(pair_ratios):.3f} to
{max(pair_ratios):.3f}; target: no measurable loss, the probe's thread at most 1 % of one core).
Median CPU time per step (the whole process tree, start-up included) with / without: **{cpu_ratio:.3f}**.
The probe's own CPU per process, over the process's life: median {statistics.median(probe_pct):.3f} %,
max {max(probe_pct):.3f} % of one core. Every process's last report was marked ended:
{all(r['ended'] for r in runs[True])}.
Start-up of one Python process (`python -c pass`, {args.starts} each, alternating): median
{start_bare * 1000:.1f} ms bare, {start_with * 1000:.1f} ms with the probe (+{(start_with - start_bare) * 1000:.1f} ms, under the
load above: importing dataclasses, typing, enum and json and building the contract's records,
once per process, in the main thread at start-up, so that the probe's thread never imports
anything while the program does; next to `import torch` it is noise).

Reading the reports, per poll, through the agent on this machine ({args.polls} polls each; one
listing of probe/, then one read per report, concurrently; at most 32 are read):

| reports in probe/ | gather_probes, median | whole gather() (it included), median |
| ---: | ---: | ---: |
""" + "\n".join(f"| {n} | {p:.2f} ms | {w:.2f} ms |" for n, (p, w) in polls.items()) + "\n"
    print(section)
    if args.append:
        replace_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
