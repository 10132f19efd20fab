"""CPU of one frame of the run view, a tree beside another: the paint alone, without the poll.

    .venv/bin/python benchmarks/frame_cost.py [--tree DIR] [--frames 600] [--tab tab-log]

The real DashboardApp (headless, 120x40) on a replayed healthy run (tests/support/scenarios.py)
with a full 5,000-line log; its streams are stopped and the script drives the frames itself,
alternating the two kinds a 1,000-lines-a-second run makes on the Log tab:
- "log": 500 new log lines, every row of the log moves (the timer's log poll);
- "report": a report whose summary and uptime changed, then 500 new lines (the report's frame).
Each frame is timed on the main thread's CPU clock, the escape sequences for the terminal
included (headless skips writing them; they are rendered here and thrown away). "feed" is what
the panes do with the new data before the frame (the append, the report's panes).

`--tree DIR` imports dflash_tui from DIR/src, so an older checkout (a `git worktree`) runs the
same frames: run it once per tree, alternating, and compare the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lines(start: int, n: int, t: float) -> list[str]:
    return [f"{t:.6f} step {k} loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450 thread drafter-{k % 10}"
            for k in range(start, start + n)]


async def measure(frames: int, tab: str) -> dict[str, list[tuple[float, float]]]:
    from textual._compositor import CompositorUpdate

    from dflash_tui.ui.app import DashboardApp
    from tests.support import scenarios as R
    from tests.support.replay import ReplaySource

    base = R.healthy()
    source = ReplaySource(R.PROFILE, reports=[base], gpus=[R.gpu_snapshot()], logs={"train.log": lines(0, 5000, 0.0)})
    app = DashboardApp(lambda name: source, R.PROFILE, clock=lambda: R.T0)
    costs: dict[str, list[tuple[float, float]]] = {"log": [], "report": []}
    async with app.run_test(headless=True, size=(120, 40)) as pilot:
        while not (app.run_view.report is not None and app.run_view.log_pane.lines.line_count > 0 and app.run_view.gpu_pane.snapshot is not None):
            await pilot.pause(0.02)
        # TabbedContent applies its `initial` tab after the app's first frames, undoing a switch
        # made before then: switch once they are up, and check that it held.
        await pilot.pause(0.3)
        app.run_view.action_show_tab(tab)
        await pilot.pause(0.3)
        assert app.run_view.tabs.active == tab, f"{tab} was asked for but {app.run_view.tabs.active} is on screen"
        app.run_view.streams.stop()
        await pilot.pause(0.1)

        def display(screen, update) -> None:   # what a terminal would be sent, rendered and dropped
            if isinstance(update, CompositorUpdate):
                update.render_segments(app.console)
        app._display = display
        screen = app.screen
        paint = screen._compositor_refresh
        spent = [0.0]

        def timed() -> None:
            t = time.thread_time()
            paint()
            spent[0] += time.thread_time() - t
        screen._compositor_refresh = timed
        k = 5000
        for i in range(frames):
            kind = "report" if i % 2 == 0 else "log"
            t0 = time.thread_time()
            if kind == "report":
                checklist = dataclasses.replace(base.checklist, summary=f"step {1000 + i}, loss 2.3, τ 3.2, up {i} s")
                app.run_view.on_report(dataclasses.replace(base, checklist=checklist, time=base.time + i,
                                                  uptime_s=(base.uptime_s or 0) + i))
            app.run_view.log_pane.lines.append(lines(k, 500, float(i)))
            k += 500
            feed = time.thread_time() - t0
            spent[0] = 0.0
            await pilot.pause(0.03)   # the screen's update timer paints the frame
            costs[kind].append((feed, spent[0]))
    return costs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose src/ is measured")
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--tab", default="tab-log")
    args = ap.parse_args()
    sys.path[:0] = [str(args.tree / "src"), str(ROOT)]
    costs = asyncio.run(measure(args.frames, args.tab))
    print(f"tree {args.tree}, tab {args.tab}, {args.frames} frames (CPU of the main thread, ms)")
    print("| frame | feed (mean) | paint p20 | paint median | paint mean |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for kind, c in costs.items():
        c = c[len(c) // 10:]   # the first tenth warms the caches up
        paint = sorted(p for _, p in c)
        print(f"| {kind} | {sum(f for f, _ in c) / len(c) * 1e3:.2f} | {paint[len(paint) // 5] * 1e3:.2f} | "
              f"{paint[len(paint) // 2] * 1e3:.2f} | {sum(paint) / len(paint) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
