"""What the memory runway adds to a look (issue 46 item 2): a look's CPU with and without it, side
by side, on a live run whose process tree holds --procs processes (a trainer and its workers).

The program prints a step line every 50 ms and keeps --procs - 1 child processes (as DataLoader
workers), launched detached through a Session as the dashboard would. Three ways of looking
alternate, --rounds times, --looks looks each, --gap seconds apart:

- without: the look with its memory step removed (`MemoryLooks.look` answers None, and
  `MemoryLooks.prefetch` asks nothing ahead);
- with: the look as shipped (the tree's PSS sampled at most every 5 s of the target's clock,
  and then only when the tree's RSS moved or a minute passed; the limit once a minute, the trend
  worked out only when a sample was added);
- with, sampling every look: the worst case (the PSS and the trend at every look, as if the RSS
  moved at each: `every_s` 0 and no bar on the RSS's move; the limit still once a minute).

Each look is timed as the CPU of this process's thread (`time.thread_time` around
`Session.check`) plus the CPU its agent used meanwhile (/proc of the child processes, 10 ms ticks:
only the mean over many looks says much). Printed: per way, the mean and median milliseconds per
look, and the extra of each "with" over "without" in %.

`.venv/bin/python benchmarks/memory_look_cost.py [--procs 9] [--looks 40] [--gap 0.25] [--rounds 3]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from checkpoint_look_cost import looks   # this folder: the same timing of a look
from see_it_coming_cost import PROGRAM   # the same live program with its child processes
from dflash_tui.config import Profile
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence import memory_runway
from dflash_tui.run.evidence.memory_runway import MemoryLooks
from dflash_tui.watch.session import Session


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=9)
    ap.add_argument("--looks", type=int, default=40)
    ap.add_argument("--gap", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        prof = Profile(name="bench", run_dir=str(Path(tmp) / "run"), python=sys.executable,
                       command=(sys.executable, "-c", PROGRAM, str(args.procs - 1)), train_args=(), min_free_gb=0.0)
        s = Session(prof, targets=(LocalTarget(), LocalTarget()))
        await s.launch()
        shipped, shipped_prefetch = MemoryLooks.look, MemoryLooks.prefetch
        bars = memory_runway.RSS_MOVED_BYTES, memory_runway.RSS_MOVED_PART

        async def without(self, ops, ev, run_id):
            return None

        def nothing_ahead(self):
            return {}

        try:
            for _ in range(100):                # warm: the agent started, the tree whole
                ev, _ = await s.check()
                if ev.memory is not None and ev.tree is not None and ev.tree.procs >= args.procs:
                    break
                await asyncio.sleep(0.1)
            print(f"tree: {ev.tree.procs} processes; memory {ev.memory.to_json() if ev.memory else None}")
            got: dict[str, list[float]] = {"without": [], "with": [], "with, sampling every look": []}
            mem = s.progress.memory
            for _ in range(args.rounds):
                MemoryLooks.look, MemoryLooks.prefetch = without, nothing_ahead
                got["without"] += await looks(s, args.looks, args.gap, [])
                MemoryLooks.look, MemoryLooks.prefetch = shipped, shipped_prefetch
                mem.every_s = 5.0
                got["with"] += await looks(s, args.looks, args.gap, [])
                mem.every_s = 0.0
                memory_runway.RSS_MOVED_BYTES, memory_runway.RSS_MOVED_PART = 0, 0.0
                got["with, sampling every look"] += await looks(s, args.looks, args.gap, [])
                memory_runway.RSS_MOVED_BYTES, memory_runway.RSS_MOVED_PART = bars
            base = statistics.mean(got["without"])
            for way, ms in got.items():
                extra = "" if way == "without" else f"  extra {100 * (statistics.mean(ms) - base) / base:+.1f} %"
                print(f"{way:28s} mean {statistics.mean(ms):6.2f} ms  median {statistics.median(ms):6.2f} ms "
                      f"per look ({len(ms)} looks){extra}")
        finally:
            MemoryLooks.look, MemoryLooks.prefetch = shipped, shipped_prefetch
            memory_runway.RSS_MOVED_BYTES, memory_runway.RSS_MOVED_PART = bars
            await s.stop(grace_s=1)
            await s.close()


if __name__ == "__main__":
    asyncio.run(main())
