"""The dashboard's CPU on the Metrics tab while a program writes TensorBoard scalars, beside the
same tab of the same program writing no metric file, both measured at once.

    .venv/bin/python benchmarks/metrics_tab_cost.py [--seconds 60] [--warmup 20] [--scalars 100] [--rounds 2] [--append]

Two runs launched through the product (Session.launch on local profiles, the run probe on, as
for any program of one's own): the same program (this file, --program), printing one progress
line a second ("<time> step N loss X"). One of them also writes --scalars scalars a second
(4 tags, --scalars/4 steps a second) through torch's real `SummaryWriter` with its defaults (a
flush every 10 events); the other writes no metric file, so its Metrics tab has the log's
series only. Two dashboards (benchmarks/dashboard_cost.py's measured app: DashboardApp +
WatchSource through the persistent agent, one fake-NVML GPU, 120x40 pseudo-terminal, the
Metrics tab on screen) watch them at the same time, so both see the same machine; each one's
CPU (the app and its agent, user + system) over the same window after --warmup.

Target: the dashboard with the TensorBoard writer at most 2% of one core. The screen of each
is kept: the script fails unless the TensorBoard one lists its TensorBoard source, so the
figure is the one asked for. --append writes the section into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import dashboard_cost  # noqa: E402  (puts this tree's src/ first on the path)
from harness import replace_section  # noqa: E402

HEADING = "## ui: the Metrics tab with a TensorBoard writer at 100 scalars/s, beside no metric file (benchmarks/metrics_tab_cost.py)"
CPU_TARGET_PCT = 2.0
TAGS = ("train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s")


def program(scalars: int) -> int:
    """The measured runs' program: a progress line a second, and `scalars` TensorBoard scalars
    a second when asked (a loop of 10 ms ticks)."""
    writer = None
    if scalars:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(os.path.join(os.environ["DFLASH_RUN_DIR"], "tb"))
    steps_per_s = max(1, scalars // len(TAGS)) if scalars else 25
    tick, step, next_t, next_line = 1.0 / steps_per_s, 0, time.time(), 0.0
    while True:
        now = time.time()
        loss = 2.0 + (step % 97) / 100
        if writer is not None:
            for i, tag in enumerate(TAGS):
                writer.add_scalar(tag, loss * (i + 1), step)
        if now >= next_line:
            print(f"{now:.6f} step {step} loss {loss:.4f}", flush=True)
            next_line = now + 1.0
        step += 1
        next_t += tick
        time.sleep(max(0.0, next_t - time.time()))


def _screen_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def measure(args, tmp: Path) -> dict:
    """One round: both runs launched, both dashboards measured at once, both runs stopped.
    {"results": {"tb"|"none": the dashboard's figures}, "tb_bytes", "source_line", "load"}."""
    import psutil

    from dflash_tui.config import Profile
    from dflash_tui.watch.session import Session

    cases = {"tb": args.scalars, "none": 0}
    profiles = {name: Profile(name=f"bench-{name}", run_dir=str(tmp / name), python=sys.executable,
                              command=(sys.executable, str(Path(__file__).resolve()), "--program", str(n)),
                              stop_grace_s=3.0, min_free_gb=0.0)
                for name, n in cases.items()}

    async def launch_all() -> None:
        for p in profiles.values():
            async with Session(p) as s:
                out = await s.launch()
                if out.checklist.verdict.failing or not out.run_id:
                    raise SystemExit(f"metrics_tab_cost: {p.name} did not start: {out.checklist.summary}")

    async def stop_all() -> None:
        for p in profiles.values():
            async with Session(p) as s:
                await s.stop()

    asyncio.run(launch_all())
    results, dashes, drains = {}, {}, {}
    try:
        for name, p in profiles.items():
            master, slave = dashboard_cost._terminal(dashboard_cost.COLS, dashboard_cost.ROWS)
            env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor",
                   "DFLASH_BENCH_TAB": "tab-metrics", "DFLASH_BENCH_SCREEN": str(tmp / f"{name}.screen")}
            if os.environ.get("METRICS_BENCH_CPROFILE"):   # where each one's time goes: PATH.tb, PATH.none
                env["DFLASH_BENCH_CPROFILE"] = f"{os.environ['METRICS_BENCH_CPROFILE']}.{name}"
            dashes[name] = subprocess.Popen(
                [sys.executable, dashboard_cost.__file__, "--dashboard", json.dumps({f.name: getattr(p, f.name) for f in dataclasses.fields(p)}),
                 "--out", str(tmp / f"{name}.json"), "--seconds", str(args.seconds),
                 "--warmup", str(args.warmup), "--gpus", "1"],
                stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=env)
            os.close(slave)
            drains[name] = dashboard_cost._drain(master)
        rss = {name: 0 for name in dashes}
        t0 = time.monotonic()
        while any(d.poll() is None for d in dashes.values()) and time.monotonic() - t0 < args.seconds + args.warmup + 120:
            time.sleep(0.5)
            for name, d in dashes.items():
                try:
                    rss[name] = max(rss[name], psutil.Process(d.pid).memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
        load = os.getloadavg()[0]
        for name, d in dashes.items():
            out = tmp / f"{name}.json"
            if d.wait(timeout=30) != 0 or not out.exists() or "cpu_s" not in json.loads(out.read_text() or "{}"):
                raise SystemExit(f"metrics_tab_cost: the {name} dashboard failed (exit {d.returncode}); the end of "
                                 f"its terminal output:\n{bytes(drains[name][-4000:]).decode(errors='replace')}")
            results[name] = dict(json.loads(out.read_text()), rss=rss[name])
        tb_bytes = sum(f.stat().st_size for f in (tmp / "tb" / "tb").glob("events.out.tfevents.*"))
    finally:
        asyncio.run(stop_all())

    screens = {name: _screen_text(tmp / f"{name}.screen") for name in results}
    if os.environ.get("DFLASH_BENCH_SCREENS"):       # both screens, as text, for a look
        Path(os.environ["DFLASH_BENCH_SCREENS"]).write_text("\n\n".join(screens.values()))
    if "TensorBoard" not in screens["tb"]:
        raise SystemExit("metrics_tab_cost: the TensorBoard run's Metrics tab lists no TensorBoard source; its "
                         "screen:\n" + screens["tb"])
    if any(r["tab"] != "tab-metrics" for r in results.values()):
        raise SystemExit(f"metrics_tab_cost: the Metrics tab was not on screen: {[r['tab'] for r in results.values()]}")
    lines = screens["tb"].splitlines()
    source_line = next((ln.strip() for ln in lines if "TensorBoard tb," in ln),
                       next(ln.strip() for ln in lines if "TensorBoard" in ln))
    return {"results": results, "tb_bytes": tb_bytes, "source_line": source_line, "load": load}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--scalars", type=int, default=100, help="TensorBoard scalars a second")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each with both dashboards at once")
    ap.add_argument("--append", action="store_true", help="write the section into benchmarks/RESULTS.md")
    ap.add_argument("--program", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.program is not None:
        return program(args.program)

    tmp = Path(tempfile.mkdtemp(prefix="dflash-metrics-bench-"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    rounds = []
    for i in range(args.rounds):
        d = tmp / f"round{i + 1}"
        d.mkdir()
        rounds.append(measure(args, d))
    words = {"tb": f"a TensorBoard writer at {args.scalars} scalars/s", "none": "no metric file (log series only)"}
    loads = ", ".join(f"{r['load']:.1f}" for r in rounds)
    lines = [
        HEADING, "",
        f"Command: `.venv/bin/python benchmarks/metrics_tab_cost.py --seconds {args.seconds:g} "
        f"--warmup {args.warmup:g} --scalars {args.scalars} --rounds {args.rounds}"
        f"{' --append' if args.append else ''}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other workers, so the figures are "
        f"noisy (load average at the end of each round: {loads}); CPython {platform.python_version()}. In each "
        f"round both dashboards ran at the same time over the same {args.seconds:g} s window after "
        f"{args.warmup:g} s of warm-up, the Metrics tab on screen, so the difference between the two rows of a "
        f"round is the metric file's cost; the program printed a progress line a second, and the TensorBoard "
        f"one also wrote {args.scalars} scalars a second ({len(TAGS)} tags, torch `SummaryWriter`), "
        f"{rounds[0]['tb_bytes'] >> 10} KiB of events a round. Its tab said: `{rounds[0]['source_line']}`.",
        "",
        "| round | Metrics tab of | dashboard CPU (% of one core, app + agent) | of which the agent | the app's event loop | repaints/s | peak RSS |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rd in rounds:                              # DFLASH_BENCH_BREAKDOWN=1: the stages' seconds
        for name, r in rd["results"].items():
            if "breakdown" in r:
                print(f"breakdown ({name}): " + ", ".join(f"{k.strip()} {v}" for k, v in sorted(
                    r["breakdown"].items(), key=lambda kv: -kv[1])[:14]))
    if os.environ.get("DFLASH_BENCH_LAYOUTS"):
        for rd in rounds:
            for name, r in rd["results"].items():
                print(f"layouts asked for ({name}): {r.get('layouts')}")
    worst = 0.0
    for i, rd in enumerate(rounds, 1):
        for name, r in rd["results"].items():
            pct = 100 * r["cpu_s"] / r["wall_s"]
            if name == "tb":
                worst = max(worst, pct)
            lines.append(f"| {i} | {words[name]} | **{pct:.2f}%** | {100 * r['agent_cpu_s'] / r['wall_s']:.2f}% | "
                         f"{100 * r['main_cpu_s'] / r['wall_s']:.2f}% | {r['frames'] / r['wall_s']:.1f} | "
                         f"{r['rss'] / 2**20:.0f} MB |")
    deltas = ", ".join(
        f"{100 * (rd['results']['tb']['cpu_s'] / rd['results']['tb']['wall_s'] - rd['results']['none']['cpu_s'] / rd['results']['none']['wall_s']):+.2f}"
        for rd in rounds)
    ok = worst <= CPU_TARGET_PCT
    lines += ["", f"Target: at most {CPU_TARGET_PCT:g}% of one core with the writer -> at most {worst:.2f}% "
                  f"(beside no metric file, per round: {deltas} points): {'PASS' if ok else 'FAIL'}.", ""]
    section = "\n".join(lines)
    print(section)
    if args.append:
        replace_section(HEADING, section)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
