"""A steady fleet target whose run goes quiet: the time from its silence to STALLED, with the
cadence's progress rule and without it, side by side in one run.

    .venv/bin/python benchmarks/fleet_stall_cadence.py [--limit 7] [--runs 3]

--runs local `run_standins.py beat` runs (a step every 0.5 s, stall_after_s = --limit) on this
machine's agent, watched by a FleetPoller at its defaults (1 s, 3 s while steady). For each run
in turn: wait until the target is steady, wait for the end of one poll, SIGSTOP the run's process
group (alive, silent), time the poller's row to STALLED, SIGKILL it. Then the same again on new
runs with fleet/cadence.py's `progressing` replaced by "always" (a RUNNING run steady whatever
the age of its last progress), the rule's alternative. Prints one line per side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import dflash_tui.fleet.cadence as cadence_rule  # noqa: E402
from dflash_tui.fleet.poller import FleetPoller  # noqa: E402
from dflash_tui.run.verdict.checklist import Verdict  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402
from tests.support.runs import standin_profile  # noqa: E402


async def until(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("fleet_stall_cadence: a state was not reached in time")
        await asyncio.sleep(0.005)


async def one_side(work: Path, limit: float, runs: int) -> list[float]:
    profiles = [standin_profile(work / f"r{i}", "beat", "--interval=0.5", name=f"p{i}",
                                stall_after_s=limit, compile_stall_after_s=limit) for i in range(runs)]
    for p in profiles:
        async with Session(p) as s:
            out = await s.launch()
            if not out.run_id:
                raise SystemExit(f"launch of {p.name} failed: {out.checklist.summary}")
    times: list[float] = []
    async with FleetPoller(profiles, gpu_interval=None) as poller:
        (key,) = poller.cadence
        cadence, polls = poller.cadence[key], poller.latencies[key]
        try:
            for p in profiles:
                await until(lambda: cadence.pause() == cadence.steady_interval, 60)
                n = len(polls)
                await until(lambda: len(polls) != n, 10)      # one poll just ended
                pid = poller.watches[p.name].last.launch.pid
                t0 = time.monotonic()
                os.killpg(pid, signal.SIGSTOP)
                await until(lambda: poller.rows[p.name].verdict is Verdict.STALLED, limit + 30)
                times.append(time.monotonic() - t0)
                os.killpg(pid, signal.SIGKILL)
                await until(lambda: poller.rows[p.name].verdict is Verdict.KILLED, 10)
        finally:
            for p in profiles:
                last = poller.watches[p.name].last
                if last is not None and last.launch is not None:
                    try:
                        os.killpg(last.launch.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, default=7.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dflash-stall-cadence-"))
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    with_rule = asyncio.run(one_side(work / "rule", args.limit, args.runs))
    cadence_rule.progressing = lambda report, within_s: True
    without = asyncio.run(one_side(work / "always", args.limit, args.runs))
    for name, ts in (("with the progress rule", with_rule), ("steady whatever the last progress", without)):
        print(f"{name}: SIGSTOP just after a steady poll -> STALLED in "
              f"{', '.join(f'{t:.2f}' for t in ts)} s (median {statistics.median(ts):.2f}; "
              f"stall_after_s {args.limit:g})")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
