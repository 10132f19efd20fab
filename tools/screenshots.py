"""Write the README's screenshots: `python tools/screenshots.py [OUTDIR]`.

The same states as the snapshot tests (tests/support/scenarios.py: evidence through the real
engine, fixed clock), rendered as SVG at 100x32, so the README shows what the tests pin down.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repo root, for tests.support

from dflash_tui.run.history import PreviousRun  # noqa: E402
from dflash_tui.ui.app import DashboardApp  # noqa: E402
from tests.support import scenarios as R  # noqa: E402

SIZE = (100, 32)

# name -> (report, gpu snapshot, crashed log?, keys to press, title)
SHOTS = {
    "running": (R.healthy, R.gpu_snapshot, False, (), "RUNNING: the checklist, the live log"),
    "never-started": (R.never_started, lambda: R.gpu_snapshot(run_gpus=0, util=0.0), False, (),
                      "NEVER STARTED at the first poll"),
    "crashed": (R.crashed, R.gpu_snapshot, True, ("e",), "CRASHED: exit code and the traceback"),
    "stalled": (R.stalled, R.gpu_snapshot, False, ("2",), "STALLED: the thread that stopped"),
    "gpus": (R.healthy, R.gpu_snapshot, False, ("3",), "GPUs: the run's processes marked, another user's too"),
    "metrics": (R.healthy, R.gpu_snapshot, False, ("4",), "Metrics: every series, the previous run in dots"),
    "stale": (R.stale, R.gpu_snapshot, False, (), "Connection lost: last data, marked stale"),
}


async def shoot(name: str, outdir: Path) -> Path:
    make_report, make_gpu, crash_log, keys, title = SHOTS[name]
    started = make_report is not R.never_started
    gpus = R.gpu_history(40, foreign=True) if make_gpu is R.gpu_snapshot else [make_gpu()]
    src = R.ReplaySource(reports=[make_report()], gpus=gpus,
                         logs={"train.log": R.train_log(crash=crash_log), "events.jsonl": R.events()}
                         if started else None,
                         missing=() if started else ("train.log", "events.jsonl"),
                         previous=PreviousRun(R.PREVIOUS_RUN_ID, f"history/{R.PREVIOUS_RUN_ID}", R.previous_events()))
    app = DashboardApp(lambda profile: src, R.PROFILE, [R.PROFILE, "local"], clock=lambda: R.T0)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            if app.run_view.report is not None and app.run_view.gpu_pane.snapshot is gpus[-1] and (
                    app.run_view.log_pane.lines.line_count or not started):
                break
            await pilot.pause(0.05)
        if keys:
            await pilot.press(*keys)
        await pilot.pause(0.3)
        for pane in (app.run_view.metrics_pane, app.run_view.gpu_pane):   # charts take new points every few seconds
            if pane.on_screen:
                pane.draw()
        await pilot.pause(0.2)
        path = outdir / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"dflash-tui · {title}"), encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    outdir = Path(argv[0]) if argv else Path("assets/screenshots")
    outdir.mkdir(parents=True, exist_ok=True)
    for name in SHOTS:
        print(asyncio.run(shoot(name, outdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
