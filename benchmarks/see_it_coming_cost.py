"""What seeing it coming adds to a look (issue 46's target: at most 5 % of a look's cost): a
look's CPU with and without everything the issue added to it, side by side, at the dashboard's
own pace.

The run: a live program printing a step line every 50 ms with --procs - 1 child processes (as
DataLoader workers), launched detached through a Session as the dashboard would, in a run dir
holding --hf Hugging Face `checkpoint-N/` folders and --files torch.save zips (the run dir of
benchmarks/checkpoint_look_cost.py, 1,000 other files beside them). Ways of looking alternate in
blocks of --looks looks, --gap seconds apart (1 s: `RunWatch.interval`, the dashboard's look),
--rounds times:

- without: the look with none of it: no checkpoint search, no disk runway, no memory runway,
  and nothing of theirs riding in the look's first request (the folders' stat, the tree's PSS);
- with: the look as shipped (checkpoints and disk runway past their 5 s cadence, a search only
  when a watched folder moved or every 60 s; the tree's PSS every 5 s, the limit every 60 s);
- with, memory runway only / with, checkpoints and disk runway only (--parts): each alone, to
  see which part costs what.

GPU node health and energy are not in a look: they ride in the GPU sample
(benchmarks/gpu_health_cost.py measures their extra per sample); add that to the extra here.

Each look is timed as the CPU of this process's thread (`time.thread_time` around
`Session.check`) plus the CPU its agent used meanwhile, from the scheduler's nanosecond count
(/proc/PID/task/*/schedstat), so a look of a few ms is measured, not sampled in 10 ms ticks.
The blocks alternate, every other round in the reverse order (ABBA), so a busy moment of the
shared machine, and what drifts with time, falls on each way alike. The cadences run
on the wall clock through the other ways' blocks: with two ways and blocks of 60 looks a second
apart (--looks 60), "with" holds the 60 s safety search once per 60 of its looks, as a watch
that looks every second does; with --parts (four ways) each way holds about three times that
(an upper bound: read the parts for which costs what, the two-way run for the total). Printed:
per way, the mean and median CPU per look, the searches and why; the extra of "with" over
"without" as a mean with a 95 % bootstrap interval (the looks of each way resampled), and as
the median of the rounds' paired extras with the lowest and highest round.

`.venv/bin/python benchmarks/see_it_coming_cost.py [--hf 300] [--files 300] [--procs 9] [--looks 60] [--gap 1.0] [--rounds 6] [--parts]`
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
    """A 95 % interval of the mean extra in % of "without": each way's looks resampled."""
    rng = random.Random(46)
    out = []
    for _ in range(n):
        w = statistics.fmean(rng.choices(with_ms, k=len(with_ms)))
        o = statistics.fmean(rng.choices(without_ms, k=len(without_ms)))
        out.append(100 * (w - o) / o)
    out.sort()
    return out[int(0.025 * n)], out[int(0.975 * n) - 1]


async def timed_looks(s: Session, n: int, gap: float, searched: list[str], quiet: list[float]) -> list[float]:
    """n looks `gap` apart: each one's CPU in ms, this thread's plus the agent's; why each
    checkpoint search ran, into `searched`; the CPU of each look that searched nothing, into
    `quiet`."""
    out = []
    ckpt = s.progress.checkpoints
    for _ in range(n):
        ckpt.why_searched = ""
        c0, t0 = children_cpu_ns(), time.thread_time_ns()
        await s.check()
        t1 = time.thread_time_ns()
        await asyncio.sleep(0.02)     # the agent's share of the look is counted after its answer
        out.append((t1 - t0 + children_cpu_ns() - c0) / 1e6)
        if ckpt.why_searched:
            searched.append(ckpt.why_searched)
        else:
            quiet.append(out[-1])
        await asyncio.sleep(max(0.0, gap - 0.02))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", type=int, default=300)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--procs", type=int, default=9)
    ap.add_argument("--looks", type=int, default=60)
    ap.add_argument("--gap", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=6)
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
            got: dict[str, list[list[float]]] = {name: [] for name in ways}
            searched: dict[str, list[str]] = {name: [] for name in ways}
            quiet: dict[str, list[float]] = {name: [] for name in ways}
            for r in range(args.rounds):
                # ABBA: every other round in the reverse order, so that what drifts with time (the
                # log, log_growth's 64 s sawtooth) falls on each way alike.
                for name, (ckpt, mem) in (ways.items() if r % 2 == 0 else reversed(ways.items())):
                    parts(ckpt, mem)
                    got[name].append(await timed_looks(s, args.looks, args.gap, searched[name], quiet[name]))
            parts(True, True)
            flat = {name: [ms for block in blocks for ms in block] for name, blocks in got.items()}
            base = statistics.mean(flat["without"])
            print(f"{args.rounds} rounds of {args.looks} looks per way, {args.gap:g} s apart; "
                  f"ms of CPU per look (app thread + agent)")
            for name, ms in flat.items():
                line = (f"{name:40s} mean {statistics.mean(ms):6.3f} ms  median {statistics.median(ms):6.3f} ms "
                        f"({len(ms)} looks, {len(searched[name])} searches)")
                if name != "without":
                    paired = sorted(100 * (statistics.mean(w) - statistics.mean(o)) / statistics.mean(o)
                                    for w, o in zip(got[name], got["without"]))
                    low, high = bootstrap_extra(ms, flat["without"])
                    line += (f"  extra {100 * (statistics.mean(ms) - base) / base:+.1f} % (mean; 95 %: "
                             f"{low:+.1f} to {high:+.1f} %); "
                             f"rounds: median {statistics.median(paired):+.1f} %, "
                             f"lowest {paired[0]:+.1f} %, highest {paired[-1]:+.1f} %")
                print(line)
                if name != "without" and searched[name]:
                    q = statistics.mean(quiet[name])
                    print(f"{'':40s} the {len(quiet[name])} looks that searched nothing: mean {q:6.3f} ms, "
                          f"extra {100 * (q - base) / base:+.1f} %; the searches' share of the extra: "
                          f"{statistics.mean(ms) - q:.3f} ms a look")
            for name, why in searched.items():
                if why:
                    print(f"  {name}: searched because " + "; ".join(f"{w} ({why.count(w)})" for w in sorted(set(why))))
        finally:
            parts(True, True)
            await s.stop(grace_s=1)
            await s.close()


if __name__ == "__main__":
    asyncio.run(main())
