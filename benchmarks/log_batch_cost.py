"""CPU of what the dashboard does with one batch of the house load's log lines, a tree beside another.

    .venv/bin/python benchmarks/log_batch_cost.py [--tree DIR] [--reps 300]

The house load (benchmarks/dashboard_cost.py) writes 1,000 lines a second like
"1796456656.609031 step 12 loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450 thread drafter-3":
- the look reads a second's worth (1,000 lines, ~88 KB) through ProgressParser.feed and
  LogSeries.feed (run/evidence/progress.py, log_series.py);
- the log pane takes half a second's worth (500 lines) at each poll (LogLines.append, the
  buffer alone: no app, so no paint).
Each is timed on this process's CPU clock, fresh objects each repetition, the best of three rounds.

`--tree DIR` imports dflash_tui from DIR/src, so an older checkout (a `git worktree`) runs the
same batches: run it once per tree and compare.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def house_lines(n: int) -> list[str]:
    return [f"{1796456656.0 + k / 1000:.6f} step {k} loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450 "
            f"thread drafter-{k % 16}" for k in range(n)]


def best_us(make, use, reps: int) -> float:
    """The best of three rounds of `reps` calls of use(make()), in microseconds a call."""
    rounds = []
    for _ in range(3):
        objs = [make() for _ in range(reps)]
        t = time.thread_time()
        for o in objs:
            use(o)
        rounds.append((time.thread_time() - t) / reps * 1e6)
    return min(rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose src/ is measured")
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree / "src"))
    from dflash_tui.run.evidence.log_series import LogSeries
    from dflash_tui.run.evidence.progress import ProgressParser
    from dflash_tui.ui.panes.logview import LogLines

    look = ("\n".join(house_lines(1000)) + "\n").encode()
    poll = house_lines(500)

    def log_lines() -> LogLines:
        ll = LogLines(max_lines=5000)
        ll._after_change = lambda *a, **k: None   # the buffer alone: no app to refresh
        ll.append(house_lines(5000))              # a full ring, as in the steady state
        return ll

    print(f"tree {args.tree} (CPU us a call, best of 3 x {args.reps})")
    print("| step | us |")
    print("| --- | ---: |")
    print(f"| ProgressParser.feed, 1,000 lines | {best_us(ProgressParser, lambda p: p.feed(look), args.reps):.0f} |")
    print(f"| LogSeries.feed, 1,000 lines | {best_us(LogSeries, lambda s: s.feed(look), args.reps):.0f} |")
    print(f"| LogLines.append, 500 lines | {best_us(log_lines, lambda ll: ll.append(poll), args.reps // 3):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
