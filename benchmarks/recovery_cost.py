"""The recovery's cost (issue 36): from a hang to training again, and the watcher's CPU with the
policy on 50 profiles beside the same watcher without it.

    PYTHONPATH=src .venv/bin/python benchmarks/recovery_cost.py [--trials 3] [--profiles 50] [--window 60] [--append]

(a) From the hang to training again, on CPU: a real `dflash-tui --watch` process and, per trial,
    a profile running benchmarks/hang_resume.py (a step every 0.5 s, its own checkpoint file;
    it hangs after step 5 on its first launch), `stall_after_s = 10`, `[recover]` on STALLED
    with `backoff_s = 1`. The time is from the hang (the wall time the program wrote of its
    last step before it) to training again (the wall time of the relaunched program's first
    step). The trials run one after another, the same watcher throughout. The bar:
    stall_after_s + 15 s.
(b) The watcher's CPU: --profiles local profiles, each a real shell loop printing a step every
    2 s, launched once; two real watcher processes at the same time over the same runs, one
    with `[recover]` on for every profile, one with no `[recover]` table (each its own store);
    each one's CPU (psutil: user + system of the watcher and its live descendants, its
    host agents) over the same --window seconds once
    both have recorded every profile RUNNING. The bar: on / off <= 1.1.
Everything it started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.fleet_cost import launch_all  # noqa: E402
from benchmarks.harness import replace_section  # noqa: E402

from dflash_tui.recording.recovery.recovery_log import RecoveryLog  # noqa: E402
from dflash_tui.recording.store.store import ChangeStore  # noqa: E402

HEADING = "## recovery: from a hang to training again, the watcher's CPU with the policy on (benchmarks/recovery_cost.py; issue 36)"
PROGRAM = ROOT / "benchmarks" / "hang_resume.py"
STALL_AFTER_S, BACKOFF_S = 10, 1
LOOP = "i=0; while :; do i=$((i+1)); echo step $i loss 0.5; sleep 2; done"


def watcher(cfg: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--watch"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cli(cfg: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), *args], env=env,
                          capture_output=True, text=True, timeout=120)


# -- (a) from the hang to training again -------------------------------------------------------

def hang_trials(work: Path, env: dict, trials: int) -> list[dict]:
    names = [f"hang{i}" for i in range(trials)]
    cfg = work / "hang.toml"
    cfg.write_text("".join(
        f'[profile.{n}]\nrun_dir = "{work / n}"\n'
        f'command = {json.dumps([sys.executable, str(PROGRAM), str(work / (n + ".ckpt")), str(work / (n + ".steps"))])}\n'
        f'stall_after_s = {STALL_AFTER_S}\nstop_grace_s = 5\nmin_free_gb = 0\n' for n in names)
        + f'[watch]\nstore = "{work / "hang.sqlite3"}"\n'
        + f'[recover]\non = ["STALLED"]\nmax_restarts = 3\nbackoff_s = {BACKOFF_S}\n')
    w = watcher(cfg, env)
    out = []
    try:
        time.sleep(2.0)
        for n in names:
            res = cli(cfg, env, "--profile", n, "--launch", "--no-preflight")
            if res.returncode not in (0, 4):   # healthy, or still STARTING
                raise SystemExit(f"launch of {n} failed: {res.stdout}{res.stderr}")
            steps = work / (n + ".steps")
            deadline = time.monotonic() + STALL_AFTER_S + 90
            while time.monotonic() < deadline:
                rows = [line.split() for line in steps.read_text().splitlines()] if steps.exists() else []
                if any(r[0] == "1" for r in rows):
                    break
                if w.poll() is not None:
                    raise SystemExit(f"the watcher ended: {w.stderr.read()[-2000:]}")
                time.sleep(0.2)
            else:
                raise SystemExit(f"{n}: not relaunched within {STALL_AFTER_S + 90} s")
            hang = max(float(r[2]) for r in rows if r[0] == "0")
            again = min(float(r[2]) for r in rows if r[0] == "1")
            with ChangeStore(work / "hang.sqlite3", readonly=True) as s:
                stalled = next(c.time for c in s.changes(n) if c.state == "STALLED")
            with RecoveryLog(work / "hang.sqlite3", readonly=True) as rl:
                acts = {a.action: a.time for a in rl.actions(n)}
            out.append({"profile": n, "hang_to_training_s": again - hang, "hang_to_stalled_s": stalled - hang,
                        "stalled_to_stopped_s": acts["stopped"] - stalled,
                        "stopped_to_launched_s": acts["launched"] - acts["stopped"],
                        "launched_to_step_s": again - acts["launched"]})
            cli(cfg, env, "--profile", n, "--stop")
    finally:
        stop(w)
    return out


# -- (b) the watcher's CPU, policy on beside off ------------------------------------------------

def tree_cpu(proc: psutil.Process) -> dict[int, float]:
    """pid -> CPU seconds (user + system, reaped children's included) of the process and every
    live descendant (the watcher's host agents work in child processes)."""
    out = {}
    for p in [proc, *proc.children(recursive=True)]:
        try:
            out[p.pid] = sum(p.cpu_times()[:4])
        except psutil.NoSuchProcess:
            pass
    return out

def cpu_side_by_side(work: Path, env: dict, profiles: int, window: float) -> dict:
    names = [f"p{i:02d}" for i in range(profiles)]
    body = "".join(f'[profile.{n}]\nrun_dir = "{work / "runs" / n}"\ncommand = {json.dumps(["sh", "-c", LOOP])}\n'
                   'stall_after_s = 60\nstop_grace_s = 2\nmin_free_gb = 0\n' for n in names)
    cfg_off, cfg_on = work / "off.toml", work / "on.toml"
    cfg_off.write_text(body + f'[watch]\nstore = "{work / "off.sqlite3"}"\n')
    cfg_on.write_text(body + f'[watch]\nstore = "{work / "on.sqlite3"}"\n'
                      '[recover]\non = ["CRASHED", "STALLED", "KILLED"]\nmax_restarts = 3\nbackoff_s = 30\n')
    pids = asyncio.run(launch_all(cfg_off))
    procs = {"off": watcher(cfg_off, env), "on": watcher(cfg_on, env)}
    try:
        t0 = time.monotonic()
        for which, store in (("off", work / "off.sqlite3"), ("on", work / "on.sqlite3")):
            while True:
                if store.exists():
                    with ChangeStore(store, readonly=True) as s:
                        if {p for p, c in s.last_states().items() if c.state == "RUNNING"} >= set(names):
                            break
                if time.monotonic() - t0 > 180 or procs[which].poll() is not None:
                    raise SystemExit(f"the {which} watcher did not record every run RUNNING within 180 s")
                time.sleep(0.5)
        time.sleep(3.0)
        ps = {k: psutil.Process(p.pid) for k, p in procs.items()}
        c0, w0 = {k: tree_cpu(p) for k, p in ps.items()}, time.monotonic()
        time.sleep(window)
        c1, w1 = {k: tree_cpu(p) for k, p in ps.items()}, time.monotonic()
        # Per process of the tree (the watcher, its host agents): CPU over the window.
        cpu = {k: sum(v - c0[k].get(pid, 0.0) for pid, v in c1[k].items()) for k in ps}
        agents = {k: len(c1[k]) - 1 for k in ps}
        return {"profiles": profiles, "window_s": w1 - w0, "cpu_s": cpu, "children": agents,
                "percent": {k: 100.0 * v / (w1 - w0) for k, v in cpu.items()},
                "ratio": cpu["on"] / cpu["off"] if cpu["off"] > 0 else None}
    finally:
        for p in procs.values():
            stop(p)
        for pid in pids.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--profiles", type=int, default=50)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dflash-recovery-bench-"))
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state"), "PYTHONPATH": str(ROOT / "src")}
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    started = time.monotonic()
    try:
        load0 = os.getloadavg()[0]
        trials = hang_trials(work, env, args.trials)
        cpu = cpu_side_by_side(work, env, args.profiles, args.window)
        load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - started
    print(json.dumps({"trials": trials, "cpu": cpu, "load": [load0, load1]}, indent=1))
    if not args.append:
        return 0
    bar = STALL_AFTER_S + 15
    rows = "\n".join(
        f"| {t['profile']} | {t['hang_to_training_s']:.1f} s | {t['hang_to_stalled_s']:.1f} s | "
        f"{t['stalled_to_stopped_s']:.1f} s | {t['stopped_to_launched_s']:.1f} s | {t['launched_to_step_s']:.1f} s |"
        for t in trials)
    worst = max(t["hang_to_training_s"] for t in trials)
    ratio = cpu["ratio"]
    section = f"""{HEADING}

    PYTHONPATH=src .venv/bin/python benchmarks/recovery_cost.py --trials {args.trials} --profiles {args.profiles} --window {args.window:.0f} --append

On {platform.node()} ({os.cpu_count()} cores, shared with other workers' tests: load average
{load0:.1f} at the start, {load1:.1f} at the end; {took:.0f} s in all). Both figures are noisy on a
machine this busy; read them as an order of magnitude, not a fine measure.

(a) From the hang (the program's last step before it) to training again (the relaunched
program's first step, which itself waits its 0.5 s step), `stall_after_s = {STALL_AFTER_S}`,
`backoff_s = {BACKOFF_S}`, a real watcher (the default `interval_s`, 1 s):

| trial | hang -> training again | hang -> STALLED recorded | -> stopped | -> relaunched (backoff incl.) | -> first step |
| --- | ---: | ---: | ---: | ---: | ---: |
{rows}

Worst {worst:.1f} s against the bar of stall_after_s + 15 s = {bar} s ({'met' if worst <= bar else 'NOT met'}).

(b) The watcher's CPU over the same {cpu['window_s']:.0f} s, {cpu['profiles']} local profiles (a shell
loop each, a step every 2 s), both watchers at once over the same runs; each watcher's process
and its live descendants (off: {cpu['children']['off']}, on: {cpu['children']['on']} child processes):

| watcher | CPU seconds | CPU % of one core |
| --- | ---: | ---: |
| `[recover]` off | {cpu['cpu_s']['off']:.2f} | {cpu['percent']['off']:.1f} % |
| `[recover]` on, every profile | {cpu['cpu_s']['on']:.2f} | {cpu['percent']['on']:.1f} % |

On / off = {ratio:.2f}x against the bar of 1.1x ({'met' if ratio is not None and ratio <= 1.1 else 'NOT met'}).
"""
    replace_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
