"""What one steady look of the run view costs in CPU, app and agent apart (issue 37).

The look is HostWatch.poll without the UI: gather (the agent's `observe`, the probe reports read
in turns, the log's new bytes, the stacks sampled), the judgement (`evaluate`) and the report.
The load is benchmarks/dashboard_cost.py's writer (1,000 log lines a second, 16 threads in
status.json) with --ranks N rank processes beside it, each with its run probe, launched
detached through a Session as the dashboard would. After a warm-up (the first looks read every
report), --looks looks are taken --gap seconds apart, each timed as:

- app: the thread CPU time of this process's look (`time.thread_time` around `poll()`);
- agent: the CPU time the look's processes under this one (the local agent) used from the
  look's start to 0.3 s after it (its answer and the exit watch); counted in the kernel's
  ticks (10 ms), so only its mean over many looks says much.

`--parts` adds the mean CPU per look of three parts of the app's (PARTS: the judgement, the
probe reports' parses, the tracker's sampling of the stacks), each timed where the look calls it.

Each tree runs in a child process with PYTHONPATH=TREE/src (the load is the tree's own
benchmarks/dashboard_cost.py); with `--trees A,B` the trees alternate, `--rounds` times each,
so a busy moment of a shared machine falls on both. Printed: each tree's median and mean
milliseconds per look, over all its rounds' looks, and the verdicts seen (always RUNNING).
`--profile` (one tree) adds a cProfile of the looks by thread CPU.

`.venv/bin/python benchmarks/look_cost.py [--ranks 64] [--looks 15] [--gap 1.0]
[--trees OLD_ROOT,NEW_ROOT] [--rounds 2] [--parts] [--profile]`

(a tree is a checkout's root, or its src/: `git archive <commit> src benchmarks | tar -x -C DIR`
makes one of an older commit; a tree without this script is timed with this one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --parts: three parts of the app's look, each timed where the look calls it (module, name).
PARTS = {"judge (evaluate)": ("dflash_tui.run.launch.launcher", "evaluate"),
         "probe report parses": ("dflash_tui.run.evidence.probe_files", "parse_probe_after"),
         "tracker's observe (stacks sampled)": ("dflash_tui.run.evidence.activity", "ProgressTracker.observe")}


def _time_parts() -> dict[str, float]:
    """Wrap each of PARTS to add its thread CPU time into the returned dict (seconds, by part)."""
    import importlib

    spent = dict.fromkeys(PARTS, 0.0)
    for label, (module, name) in PARTS.items():
        owner = importlib.import_module(module)
        *path, attr = name.split(".")
        for step in path:
            owner = getattr(owner, step)
        fn = getattr(owner, attr)

        def timed(*a, _fn=fn, _label=label, **k):
            t0 = time.thread_time()
            try:
                return _fn(*a, **k)
            finally:
                spent[_label] += time.thread_time() - t0
        setattr(owner, attr, timed)
    return spent


def child(ranks: int, looks: int, gap: float, profile: bool, parts: bool) -> int:
    """One tree's looks (this process's PYTHONPATH picks the tree): one JSON line on stdout."""
    import cProfile
    import pstats

    import psutil

    from dflash_tui.config import Profile
    from dflash_tui.watch import STEADY_INTERVAL_S, open_watch
    from dflash_tui.watch.session import Session

    tmp = Path(tempfile.mkdtemp(prefix="look-cost-"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    load = str(Path(__file__).resolve().parent / "dashboard_cost.py")
    prof = Profile(name="bench", run_dir=str(tmp / "run"), python=sys.executable,
                   command=(sys.executable, load, "--writer", "--rate", "1000", "--threads", "16",
                            "--ranks", str(ranks)),
                   stop_grace_s=3.0, min_free_gb=0.0)

    spent = _time_parts() if parts else {}

    async def main() -> dict:
        async with Session(prof) as s:
            out = await s.launch()
            if not out.run_id:
                raise SystemExit(f"the load did not launch: {out.checklist.summary}")
        await asyncio.sleep(8)      # every rank started and beating
        watch = open_watch(prof, steady_interval=STEADY_INTERVAL_S)
        me = psutil.Process()
        try:
            await watch.poll()
            await asyncio.sleep(1)
            await watch.poll()      # the first look read every report; this one finds it steady
            kids = me.children(recursive=True)

            def agent_cpu() -> float:
                total = 0.0
                for c in kids:
                    try:
                        t = c.cpu_times()
                        total += t.user + t.system
                    except psutil.NoSuchProcess:
                        pass
                return total
            cprof = cProfile.Profile(time.thread_time) if profile else None
            for label in spent:
                spent[label] = 0.0
            app, agent, verdicts = [], [], set()
            for _ in range(looks):
                await asyncio.sleep(gap)
                a0, t0 = agent_cpu(), time.thread_time()
                if cprof:
                    cprof.enable()
                report = await watch.poll()
                if cprof:
                    cprof.disable()
                t1 = time.thread_time()
                await asyncio.sleep(0.3)
                app.append(t1 - t0)
                agent.append(agent_cpu() - a0)
                verdicts.add(report.checklist.verdict.name)
            if cprof:
                pstats.Stats(cprof, stream=sys.stderr).sort_stats("cumtime").print_stats(40)
            return {"app": app, "agent": agent, "verdicts": sorted(verdicts),
                    "parts": {label: t / looks for label, t in spent.items()}}
        finally:
            async with Session(prof) as s:
                await s.stop()
    print(json.dumps(asyncio.run(main())))
    return 0


def run_tree(tree: Path, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    argv = [sys.executable, str(tree / "benchmarks" / "look_cost.py"), "--child", "--ranks", str(args.ranks),
            "--looks", str(args.looks), "--gap", str(args.gap)] + (["--profile"] if args.profile else []) + (
            ["--parts"] if args.parts else [])
    if not (tree / "benchmarks" / "look_cost.py").exists():   # an older tree: this script, its code
        argv[1] = str(Path(__file__).resolve())
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the looks failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ranks", type=int, default=64, help="rank processes beside the writer")
    ap.add_argument("--looks", type=int, default=15, help="timed looks per round")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between looks")
    ap.add_argument("--trees", default=str(ROOT), help="checkout roots, comma-separated, taken in turns")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per tree")
    ap.add_argument("--profile", action="store_true", help="a cProfile of the looks (stderr)")
    ap.add_argument("--parts", action="store_true", help="also the mean CPU of three parts of a look (PARTS)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.ranks, args.looks, args.gap, args.profile, args.parts)
    # A tree is a checkout's root; its src/ is taken for its root.
    trees = [Path(t).resolve() for t in args.trees.split(",") if t]
    trees = [t.parent if t.name == "src" and (t / "dflash_tui").is_dir() else t for t in trees]
    for t in trees:
        if not (t / "src" / "dflash_tui").is_dir():
            ap.error(f"--trees: {t} holds no src/dflash_tui; name a checkout's root")
    got: dict[Path, dict] = {t: {"app": [], "agent": [], "verdicts": set(), "parts": []} for t in trees}
    for r in range(args.rounds):
        for t in trees:
            res = run_tree(t, args)
            for k in ("app", "agent"):
                got[t][k] += res[k]
            got[t]["verdicts"].update(res["verdicts"])
            got[t]["parts"].append(res.get("parts", {}))
            print(f"round {r + 1} {t}: app median {statistics.median(res['app']) * 1e3:.1f} ms", file=sys.stderr)
    print(f"{args.ranks} ranks, {args.looks} looks x {args.rounds} rounds, {args.gap} s apart; ms of CPU per look")
    print("| tree | app median | app mean | agent median | agent mean | verdicts |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for t, g in got.items():
        app, agent = [x * 1e3 for x in g["app"]], [x * 1e3 for x in g["agent"]]
        print(f"| {t} | {statistics.median(app):.1f} | {statistics.mean(app):.1f} | "
              f"{statistics.median(agent):.1f} | {statistics.mean(agent):.1f} | {', '.join(sorted(g['verdicts']))} |")
    if args.parts:
        print()
        print("| tree | " + " | ".join(PARTS) + " |")
        print("| --- |" + " ---: |" * len(PARTS))
        for t, g in got.items():
            means = [statistics.mean(r[label] for r in g["parts"]) * 1e3 for label in PARTS]
            print(f"| {t} | " + " | ".join(f"{m:.2f}" for m in means) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
