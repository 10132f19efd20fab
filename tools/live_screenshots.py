"""Screenshots of the REAL dashboard on a real run: `python tools/live_screenshots.py OUTDIR`.

Launches the profile's run if there is none (like `make run`), waits until the checklist says
RUNNING, then saves one SVG per tab (Log, Threads, GPUs, Metrics). Unlike tools/screenshots.py
(recorded states, fixed clock, for the snapshot tests), nothing here is replayed.

    python tools/live_screenshots.py out/ --config my.toml --profile gpu --wait 300
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from dflash_tui.config import load_config
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.sources.watch_source import WatchSource
from dflash_tui.watch import open_watch

TABS = (("log", None), ("threads", "2"), ("gpus", "3"), ("metrics", "4"))


async def shoot(config, profile: str, outdir: Path, wait_s: float, settle_s: float, size) -> int:
    app = DashboardApp(lambda name: WatchSource(open_watch(config.profile(name))), profile,
                       sorted(config.profiles), launch_if_no_run=True)
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + wait_s
        verdict = None
        while time.monotonic() < deadline:
            await pilot.pause(1.0)
            report = app.run_view.report
            verdict = report.checklist.verdict.value if report else None
            if verdict == "RUNNING" and report.status and report.status.step > 0:
                break
        await pilot.pause(settle_s)   # a few more polls: sparklines and metrics fill in
        print(f"verdict {verdict}", flush=True)
        for name, key in TABS:
            if key:
                await pilot.press(key)
                await pilot.pause(1.5)
            path = outdir / f"live-{name}.svg"
            path.write_text(app.export_screenshot(title=f"dflash-tui · {profile} · live {name}"))
            print(path, flush=True)
    return 0 if verdict == "RUNNING" else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--config", default=None)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--wait", type=float, default=240.0, help="seconds to wait for RUNNING")
    ap.add_argument("--settle", type=float, default=15.0)
    ap.add_argument("--size", default="120x40")
    a = ap.parse_args()
    config = load_config(a.config)
    profile = config.profile(a.profile).name
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    w, h = (int(x) for x in a.size.split("x"))
    return asyncio.run(shoot(config, profile, out, a.wait, a.settle, (w, h)))


if __name__ == "__main__":
    sys.exit(main())
