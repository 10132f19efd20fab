"""What seeing it coming adds to a look (issue 46's target: at most 5 % of a look's cost): a
look's CPU with and without everything the issue added to it, side by side, at the dashboard's
own pace.

The run: a live program printing a step line every 50 ms with --procs - 1 child processes (as
DataLoader workers), launched detached through a Session as the dashboard would, in a run dir
holding --hf Hugging Face `checkpoint-N/` folders and --files torch.save zips (the run dir of
benchmarks/checkpoint_look_cost.py, 1,000 other files beside them). The ways of looking take
turns, one look each in a cycle of --gap seconds (1 s: `RunWatch.interval`, the dashboard's
look), so each way looks once a second and every cadence (5 s, 60 s) falls on its looks as on a
dashboard's; the order within a cycle turns by one every cycle:

- without: the look with none of it: no checkpoint search, no disk runway, no memory runway,
  and nothing of theirs riding in the look's first request (the folders' stat, the tree's PSS);
- with: the look as shipped (checkpoints and disk runway past their 5 s cadence, a search only
  when a watched folder moved or past the safety interval; the tree's PSS when its RSS moved or
  once a minute, the limit every 60 s);
- with, memory runway only / with, checkpoints and disk runway only (--parts): each alone, to
  see which part costs what.

GPU node health and energy are not in a look: they ride in the GPU sample
(benchmarks/gpu_health_cost.py measures their extra per sample); add that to the extra here.

Each look is timed as the CPU of this process's thread (`time.thread_time` around
`Session.check`) plus the CPU its agent used meanwhile, from the scheduler's nanosecond count
(/proc/PID/task/*/schedstat), so a look of a few ms is measured, not sampled in 10 ms ticks.
Looks of one cycle are a fraction of a second apart, so a busy moment of the shared machine, and
what drifts with time (the log, log_growth's sawtooth), falls on each way alike: the extra is
read per cycle, "with" against "without" in the same cycle. Printed: per way, the mean and median
CPU per look and the searches and why; the extra of "with" over "without" as a mean with a 95 %
bootstrap interval (the cycles resampled, the pairs kept), and the extra of the looks that
searched nothing, kept apart from what the searches cost.

`.venv/bin/python benchmarks/see_it_coming_cost.py [--hf 300] [--files 300] [--procs 9] [--cycles 600] [--gap 1.0] [--parts]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dflash_tui.import_warnings import quiet_third_party_imports  # noqa: E402

quiet_third_party_imports()

from benchmarks.checkpoint_look_cost import make_run_dir  # noqa: E402
from benchmarks.harness import children_cpu_ns  # noqa: E402
from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402
from dflash_tui.run.evidence import observe  # noqa: E402
from dflash_tui.run.evidence.checkpoints import CheckpointLooks  # noqa: E402
from dflash_tui.run.evidence.memory_runway import MemoryLooks  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402

PROGRAM = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]) for _ in range(int(sys.argv[1]))]
step = 0
while True:
    step += 1
    print(f"step {step} loss 1.0", flush=True)
    time.sleep(0.05)
"""

SHIPPED = {"checkpoints": observe._observe_checkpoints, "checkpoint folders": CheckpointLooks.prefetch,
           "memory": MemoryLooks.look, "memory reads": MemoryLooks.prefetch}


async def _no_checkpoints(ops, ev, tracker):
    return None


async def _no_memory(self, ops, ev, run_id):
    return None


def parts(checkpoints: bool, memory: bool) -> None:
    """Turn the issue's two look steps on or off, with what each asks in the first request."""
    observe._observe_checkpoints = SHIPPED["checkpoints"] if checkpoints else _no_checkpoints
    CheckpointLooks.prefetch = SHIPPED["checkpoint folders"] if checkpoints else (lambda self: [])
    MemoryLooks.look = SHIPPED["memory"] if memory else _no_memory
    MemoryLooks.prefetch = SHIPPED["memory reads"] if memory else (lambda self: {})


def bootstrap_extra(with_ms: list[float], without_ms: list[float], n: int = 2000) -> tuple[float, float]:
    """A 95 % interval of the mean extra in % of "without": the cycles resampled, each cycle's
    two looks together."""
    rng = random.Random(46)
    pairs = list(zip(with_ms, without_ms))
    out = []
    for _ in range(n):
        sample = rng.choices(pairs, k=len(pairs))
        o = statistics.fmean(b for _, b in sample)
        out.append(100 * (statistics.fmean(a for a, _ in sample) - o) / o)
    out.sort()
    return out[int(0.025 * n)], out[int(0.975 * n) - 1]


async def timed_look(s: Session) -> tuple[float, str]:
    """One look's CPU in ms, this thread's plus the agent's, and why it searched for checkpoints
    ("" when it did not)."""
    ckpt = s.progress.checkpoints
    ckpt.why_searched = ""
    c0, t0 = children_cpu_ns(), time.thread_time_ns()
    await s.check()
    t1 = time.thread_time_ns()
    await asyncio.sleep(0.02)     # the agent's share of the look is counted after its answer
    return (t1 - t0 + children_cpu_ns() - c0) / 1e6, ckpt.why_searched


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", type=int, default=300)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--procs", type=int, default=9)
    ap.add_argument("--cycles", type=int, default=600)
    ap.add_argument("--gap", type=float, default=1.0)
    ap.add_argument("--parts", action="store_true", help="also each part alone")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        run = make_run_dir(Path(tmp), args.hf, args.files)
        prof = Profile(name="bench", run_dir=str(run), python=sys.executable,
                       command=(sys.executable, "-c", PROGRAM, str(args.procs - 1)), train_args=(), min_free_gb=0.0)
        s = Session(prof, targets=(LocalTarget(), LocalTarget()))
        await s.launch()
        try:
            s.progress.checkpoints.every_s = 0.0
            for _ in range(200):    # warm: the agent started, the tree whole, every checkpoint judged
                ev, _ = await s.check()
                view = ev.checkpoints
                if (view is not None and view.found and not view.unjudged and ev.memory is not None
                        and ev.tree is not None and ev.tree.procs >= args.procs):
                    break
                await asyncio.sleep(0.1)
            s.progress.checkpoints.every_s = CheckpointLooks().every_s
            print(f"run dir: {len(view.found)} checkpoints found, {len(view.complete)} complete; "
                  f"tree {ev.tree.procs} processes; runway {ev.runway.to_json() if ev.runway else None}")
            ways = {"without": (False, False), "with": (True, True)}
            if args.parts:
                ways |= {"with, memory runway only": (False, True),
                         "with, checkpoints and disk runway only": (True, False)}
            names = list(ways)
            got: dict[str, list[float]] = {name: [] for name in ways}
            searched: dict[str, list[str]] = {name: [] for name in ways}
            slot = args.gap / len(names)
            for c in range(args.cycles):
                for name in names[c % len(names):] + names[:c % len(names)]:
                    began = time.monotonic()
                    parts(*ways[name])
                    ms, why = await timed_look(s)
                    got[name].append(ms)
                    searched[name].append(why)
                    await asyncio.sleep(max(0.0, slot - (time.monotonic() - began)))
            parts(True, True)
            base = statistics.fmean(got["without"])
            print(f"{args.cycles} cycles of {args.gap:g} s, one look of each way in a cycle; "
                  f"ms of CPU per look (app thread + agent)")
            for name, ms in got.items():
                whys = [w for w in searched[name] if w]
                line = (f"{name:40s} mean {statistics.fmean(ms):6.3f} ms  median {statistics.median(ms):6.3f} ms "
                        f"({len(ms)} looks, {len(whys)} searches)")
                if name != "without":
                    low, high = bootstrap_extra(ms, got["without"])
                    line += (f"  extra {100 * (statistics.fmean(ms) - base) / base:+.1f} % (mean; 95 %: "
                             f"{low:+.1f} to {high:+.1f} %)")
                print(line)
                if name != "without" and whys:
                    quiet = [(a, b) for a, b, w in zip(ms, got["without"], searched[name]) if not w]
                    q, qb = statistics.fmean(a for a, _ in quiet), statistics.fmean(b for _, b in quiet)
                    print(f"{'':40s} the {len(quiet)} looks that searched nothing: mean {q:6.3f} ms, "
                          f"extra {100 * (q - qb) / qb:+.1f} % over their cycles' \"without\"; the searches' "
                          f"share of the extra: {statistics.fmean(ms) - q:.3f} ms a look")
            for name, why in searched.items():
                whys = [w for w in why if w]
                if whys:
                    print(f"  {name}: searched because " + "; ".join(f"{w} ({whys.count(w)})" for w in sorted(set(whys))))
        finally:
            parts(True, True)
            await s.stop(grace_s=1)
            await s.close()


if __name__ == "__main__":
    asyncio.run(main())
