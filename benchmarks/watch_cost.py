"""The watcher's cost: `dflash-tui --watch` beside the fleet screen on 50 profiles on 10 hosts,
the store's size after a simulated week of 50 runs, and verdict change to notification sent.

    .venv/bin/python benchmarks/watch_cost.py [--hosts 10] [--per-host 5] [--window 30] [--append]

Builds the fleet benchmark's set-up (benchmarks/fleet_cost.py: --hosts real sshd servers on
127.0.0.1, --per-host detached `run_standins.py beat` runs on each), then measures in one run,
side by side:

  (a) the fleet screen (the real app, headless 160x60; fleet_cost.py's own child): its CPU
      over --window seconds of steady state;
  (b) the watcher (a real `dflash-tui --watch` process, the same profiles, [notify] to a
      json:// receiver on 127.0.0.1 with hold_s = 0): its CPU (psutil, user + system, all its
      threads) over the same window; then 3 runs SIGKILLed one after another: for each, the
      time from the change observed (the change's recorded time) to the notification received,
      and from the kill to the notification.

And, offline: the store after a simulated week of 50 runs (a change every 10 minutes per run,
a traceback on every third, one relaunch a day), its file size beside the same changes as
JSON lines, and after retention (max_rows_per_run = 1000). Everything it started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.fleet_cost import launch_all, run_dashboard, write_config  # noqa: E402
from benchmarks.harness import replace_section  # noqa: E402

from dflash_tui.recording.store.change import Evidence, VerdictChange  # noqa: E402
from dflash_tui.recording.store.store import ChangeStore  # noqa: E402
from tests.support.receivers import HttpReceiver  # noqa: E402
from tests.support.sshd import SshdUnavailable, start_sshd  # noqa: E402

HEADING = "## watch: the recording watcher beside the fleet screen, its store, change to notification (benchmarks/watch_cost.py)"
WEEK_S = 7 * 86400.0
CHANGE_EVERY_S = 600.0


def simulated_week(path: Path, runs: int) -> dict:
    """A week of changes of `runs` profiles in a store at `path`; sizes and timings."""
    rng = random.Random(7)
    states = ["RUNNING", "STALLED", "RUNNING", "UNREACHABLE", "RUNNING", "CRASHED", "STARTING"]
    tb = tuple(f'  File "/opt/train/model.py", line {100 + i}, in forward_{i}' for i in range(5)) + (
        "RuntimeError: CUDA error: an illegal memory access was encountered",)
    t0 = time.time() - WEEK_S
    jsonl = 0
    n = 0
    store = ChangeStore(path, retention_days=30, max_rows_per_run=1000)
    # The first 200 changes as the watcher commits them (fsync each); the bulk of the week without
    # fsync, which changes the time it takes to make the file, not its content or size.
    w0, timed = time.monotonic(), 200
    for r in range(runs):
        t, prev, k = t0 + rng.random() * CHANGE_EVERY_S, "", 0
        while t < t0 + WEEK_S:
            state = states[k % len(states)]
            ev = Evidence(step=k * 150, total=200000, loss=2.0 / (1 + k), rate=18450.0, rate_unit="tok/s",
                          stuck_at="/opt/train/data.py:41 get_batch" if state == "STALLED" else "",
                          traceback=tb if k % 3 == 0 else (), pid=4000 + r, exit_code=1 if state == "CRASHED" else None)
            c = VerdictChange(f"h{r // 5:02d}-r{r % 5}", f"20260101-{int(t) // 86400:06d}-{r:04x}", t, state, prev,
                              f"{state}: cause of change {k} of run {r} (no step for 61 s; 0 % CPU over 3 s)",
                              "progress", ev)
            store.record(c)
            if n + 1 == timed:
                write_s = time.monotonic() - w0
                store._db.execute("PRAGMA synchronous=OFF")
            jsonl += len(json.dumps({**c.__dict__, "evidence": json.loads(ev.to_json())})) + 1
            prev, k, n = state, k + 1, n + 1
            t += CHANGE_EVERY_S
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = path.stat().st_size
    q0 = time.monotonic()
    for r in range(runs):
        store.changes(f"h{r // 5:02d}-r{r % 5}")
    query_s = (time.monotonic() - q0) / runs
    deleted = store.prune()
    store._db.execute("VACUUM")
    store.close()
    return {"changes": n, "size": size, "jsonl": jsonl, "write_ms": write_s * 1000 / timed,
            "query_ms": query_s * 1000, "after_prune_changes": n - deleted,
            "after_prune_size": path.stat().st_size}


def watcher_run(cfg: Path, window: float, victims: list[str], pids: dict[str, int], store: Path,
                env: dict, receiver: HttpReceiver, names: list[str]) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--watch"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ps = psutil.Process(proc.pid)
        t0 = time.monotonic()
        while True:   # every profile recorded as RUNNING at least once
            if store.exists():
                with ChangeStore(store, readonly=True) as s:
                    running = {p for p, c in s.last_states().items() if c.state == "RUNNING"}
                if running >= set(names):
                    break
            if time.monotonic() - t0 > 90 or proc.poll() is not None:
                raise SystemExit(f"the watcher did not see every run within 90 s: {proc.stderr.read()[-2000:] if proc.poll() is not None else ''}")
            time.sleep(0.5)
        first_full_s = time.monotonic() - t0
        time.sleep(3.0)
        c0, w0 = ps.cpu_times(), time.monotonic()
        time.sleep(window)
        c1, w1 = ps.cpu_times(), time.monotonic()
        cpu_s = (c1.user + c1.system) - (c0.user + c0.system)
        threads = ps.num_threads()
        rss = ps.memory_info().rss
        lat = {}
        for name in victims:
            t_kill = time.time()
            os.killpg(pids[name], signal.SIGKILL)
            title = f"dflash-tui: {name} KILLED"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                got = [r for r in receiver.requests if json.loads(r.body)["title"] == title]
                if got:
                    break
                time.sleep(0.02)
            with ChangeStore(store, readonly=True) as s:
                change = s.changes(name)[-1]
            lat[name] = {"observed_to_sent": got[0].at - change.time if got else None,
                         "kill_to_sent": got[0].at - t_kill if got else None, "state": change.state}
            time.sleep(1.3)
        return {"cpu_s": cpu_s, "wall_s": w1 - w0, "first_full_s": first_full_s, "latency": lat,
                "threads": threads, "rss": rss}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--per-host", type=int, default=5)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dflash-watch-bench-"))
    servers, pids = [], {}
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state"), "PYTHONPATH": str(ROOT / "src")}
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    receiver = HttpReceiver()
    try:
        week = simulated_week(work / "week.sqlite3", args.hosts * args.per_host)
        try:
            for h in range(args.hosts):
                servers.append(start_sshd(work / f"sshd{h}"))
        except SshdUnavailable as exc:
            print(f"watch_cost: {exc}", file=sys.stderr)
            return 2
        cfg = work / "config.toml"
        names = write_config(cfg, servers, args.per_host, work / "runs")
        store = work / "watch.sqlite3"
        with cfg.open("a") as f:
            f.write(f'\n[watch]\nstore = "{store}"\n[notify]\nhold_s = 0\n'
                    f'urls = ["json://127.0.0.1:{receiver.port}/hook"]\n')
        pids = asyncio.run(launch_all(cfg))
        victims = names[1::max(1, len(names) // 3)][:3]
        dash = run_dashboard(cfg, args.window, [], work, env)
        watch = watcher_run(cfg, args.window, victims, pids, store, env, receiver, names)
        load = os.getloadavg()[0]
    finally:
        receiver.close()
        for pid in pids.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for s in servers:
            s.kill_sessions()
            s.stop()
        shutil.rmtree(work, ignore_errors=True)

    n = len(names)
    dash_cpu = 100.0 * dash["cpu_s"] / dash["wall_s"]
    watch_cpu = 100.0 * watch["cpu_s"] / watch["wall_s"]
    obs = [v["observed_to_sent"] for v in watch["latency"].values() if v["observed_to_sent"] is not None]
    kill = [v["kill_to_sent"] for v in watch["latency"].values() if v["kill_to_sent"] is not None]
    missed = [k for k, v in watch["latency"].items() if v["observed_to_sent"] is None]
    cmd = "`.venv/bin/python benchmarks/watch_cost.py" + (
        "" if (args.hosts, args.per_host, args.window) == (10, 5, 30.0)
        else f" --hosts {args.hosts} --per-host {args.per_host} --window {args.window:g}") + " --append`"
    mib = 1 << 20
    lines = [
        HEADING, "",
        f"Command: {cmd}", "",
        f"Machine: this one ({os.cpu_count()} shared CPU cores, no GPU, CPython {platform.python_version()}, "
        f"load average {load:.1f} at the end, other work running on it). {n} profiles on {args.hosts} loopback "
        f"sshd hosts ({args.per_host} each), each a detached `run_standins.py beat` run, polled at 1 Hz with "
        "GPU samples every 2 s by both sides (the same fleet poller, fleet/poller.py); measured one after "
        "the other on the same runs.", "",
        "| | (a) fleet screen | (b) `dflash-tui --watch` | (b)/(a) |",
        "| --- | ---: | ---: | ---: |",
        f"| CPU over {args.window:.0f} s of steady state | {dash_cpu:.1f}% of one core ({dash['cpu_s']:.1f} s) | "
        f"{watch_cpu:.1f}% of one core ({watch['cpu_s']:.1f} s; {watch['threads']} threads, "
        f"{watch['rss'] / mib:.0f} MiB RSS) | {watch_cpu / dash_cpu:.2f} |",
        f"| every profile seen | {dash['first_full_s']:.1f} s after start | {watch['first_full_s']:.1f} s after start "
        "(recorded RUNNING in the store) | |",
        "",
        f"Change to notification (3 runs SIGKILLed one after another, `[notify] hold_s = 0`, json:// to an "
        f"HTTP receiver on 127.0.0.1): observed (the change's recorded time) to received: "
        f"{', '.join(f'{x:.3f} s' for x in obs)} (max {max(obs) if obs else float('nan'):.3f} s); "
        f"kill to received: {', '.join(f'{x:.2f} s' for x in kill)}"
        f"{f'; never notified: {missed}' if missed else ''}. Target under 2 s after the change is "
        f"observed: {'met' if obs and not missed and max(obs) < 2 else 'NOT met'}. A configured `hold_s` "
        "adds itself to this on purpose (a change must last that long to notify).", "",
        f"Store after a simulated week of {n} runs (a change every {CHANGE_EVERY_S / 60:.0f} min per run, "
        f"{week['changes']} changes, a 6-line traceback on every third): "
        f"{week['size'] / mib:.1f} MiB of SQLite (WAL checkpointed) beside {week['jsonl'] / mib:.1f} MiB as "
        f"JSON lines ({week['size'] / week['jsonl']:.2f}x); {week['write_ms']:.2f} ms per recorded change "
        f"(one commit with fsync each, synchronous=FULL), {week['query_ms']:.1f} ms to read one profile's week (its timeline). "
        f"With the default retention (30 days, 1000 changes per profile and run id): "
        f"{week['after_prune_changes']} changes, {week['after_prune_size'] / mib:.1f} MiB after VACUUM. "
        "A real run changes state a few times a day; this is the bound, not the usual.", "",
        f"Target: the watcher's CPU at most the fleet screen's: {'met' if watch_cpu <= dash_cpu else 'NOT met'}.",
        "",
    ]
    section = "\n".join(lines)
    print(section)
    if args.append:
        replace_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
