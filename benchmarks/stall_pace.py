"""From a hang to STALLED against the run's pace: the silence limit learned from it beside the
fixed `stall_after_s`, for runs that step every 0.5 s, 2 s and 10 s, all in one run.

    .venv/bin/python benchmarks/stall_pace.py [--stall-after 60] [--steps 14]

Six local runs at once, each a shell loop (no Python: nothing but its log to read, CPU-cheap)
that prints `step N loss X` every CADENCE seconds for --steps steps (and for at least 30 s, so
that a look a second sees its 10 intervals), then sleeps for good (alive,
silent, idle: a hang). Three learn their limit (learn_stall = true, the default), three keep
the fixed one (learn_stall = false); stall_after_s is --stall-after on all. Each is watched by
its own Session, looked at every second (the dashboard's pace). The time to STALLED is from the
run's last step (its log's mtime) to the first look that reads STALLED, on the target's clock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.run.verdict.checklist import Verdict  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402

CADENCES = (0.5, 2.0, 10.0)
LOOP = 'i=0; while [ $i -lt {steps} ]; do sleep {every}; i=$((i+1)); echo "step $i loss 0.5"; done; exec sleep 100000'


async def one(work: Path, every: float, learn: bool, steps: int, stall_after: float) -> tuple[float, float, str]:
    """(seconds from the last step to STALLED, the limit then, why)."""
    steps = max(steps, int(30 / every))
    p = Profile(name=f"pace-{every:g}-{'learned' if learn else 'fixed'}", run_dir=str(work / f"{every:g}-{learn}"),
                command=("sh", "-c", LOOP.format(steps=steps, every=every)), stall_after_s=stall_after,
                learn_stall=learn, min_free_gb=0.0, probe=False, stop_grace_s=1.0)
    async with Session(p) as s:
        out = await s.launch(preflight=False)
        if not out.run_id:
            raise SystemExit(f"launch of {p.name} failed: {out.checklist.summary}")
        try:
            deadline = time.monotonic() + steps * every + stall_after + 120
            while time.monotonic() < deadline:
                ev, cl = await s.check()
                if cl.verdict is Verdict.STALLED:
                    return ev.now - ev.activity.step_at, cl.stall_limit_s, cl.stall_limit_why
                if cl.verdict not in (Verdict.STARTING, Verdict.RUNNING):
                    raise SystemExit(f"{p.name}: {cl.verdict.value}: {cl.summary}")
                await asyncio.sleep(1.0)
            raise SystemExit(f"{p.name}: not STALLED in time")
        finally:
            await s.stop(grace_s=1.0)


async def main_async(args) -> list[tuple]:
    work = Path(tempfile.mkdtemp(prefix="dflash-stall-pace-"))
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    cases = [(every, learn) for every in CADENCES for learn in (True, False)]
    got = await asyncio.gather(*(one(work, every, learn, args.steps, args.stall_after) for every, learn in cases))
    return [(*case, *g) for case, g in zip(cases, got)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stall-after", type=float, default=60.0)
    ap.add_argument("--steps", type=int, default=14)
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = asyncio.run(main_async(args))
    print("| step every | learned: hang -> STALLED | its limit | fixed: hang -> STALLED | its limit |")
    print("| ---: | ---: | --- | ---: | --- |")
    for every in CADENCES:
        (_, _, tl, ll, wl), (_, _, tf, lf, wf) = [r for r in rows if r[0] == every]
        print(f"| {every:g} s | {tl:.1f} s | {ll:.0f} s ({wl}) | {tf:.1f} s | {lf:.0f} s ({wf}) |")
    print(f"stall_after_s {args.stall_after:g}, at least {args.steps} steps and 30 s of them each; {time.monotonic() - t0:.0f} s in all; "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
