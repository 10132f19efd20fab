"""Verdicts for programs that are not ours (tests/programs/), watched past every limit they are
judged by, on this machine and over the loopback sshd into the pct stand-in.

None of these programs writes status.json: each is judged by what any process gives (its
output in train.log, parsed for steps; the CPU time of its process tree; its exit). The stall
limits are shortened in the profile (stall_after_s 4 s, compile_stall_after_s 10 s) and every
program is watched for longer than both, all at once, so a broken rule shows in ~20 s. A busy
silence of a Python program (its stacks read by the run probe) that is no compile is STALLED
after stall_after_s; only a compile gets compile_stall_after_s.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.remote.local import LocalTarget
from dflash_tui.watch import HostWatch
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session

pytestmark = pytest.mark.timeout(240)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable
STALL_S, BUSY_LIMIT_S = 4.0, 14.0
WATCH_S = BUSY_LIMIT_S + 5   # every run is watched until it is up longer than this

SCENARIOS = {
    "print_loop": (PY, str(PROGRAMS / "print_loop.py")),
    "trainer_dicts": (PY, str(PROGRAMS / "trainer_dicts.py")),
    "tqdm_bar": (PY, str(PROGRAMS / "tqdm_bar.py")),
    "idle_hang": ("sh", str(PROGRAMS / "idle_hang.sh")),
    "busy_silent": (PY, str(PROGRAMS / "busy_silent.py")),
    "crash": (PY, str(PROGRAMS / "crash_after_steps.py")),
    "stop": (PY, str(PROGRAMS / "print_loop.py")),
}


def program_profile(run_dir: Path, command: tuple[str, ...], **kw) -> Profile:
    base = dict(name="prog", run_dir=str(run_dir), python=PY, command=command, train_args=(),
                stall_after_s=STALL_S, compile_stall_after_s=BUSY_LIMIT_S, stop_grace_s=2.0, min_free_gb=0.0)
    base.update(kw)
    return Profile(**base)


@pytest.fixture
def where(place, sessions, monkeypatch):
    """(make_session(run_dir, command) -> Session, label)."""
    label, keys = place
    # As over SSH: nothing in the environment makes Python unbuffered but the wrapper.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    return (lambda run_dir, command: sessions(program_profile(run_dir, command, **keys))), label


async def test_programs_that_are_not_ours(where, tmp_path):
    make, label = where
    sessions = {name: make(tmp_path / name, cmd) for name, cmd in SCENARIOS.items()}
    await asyncio.gather(*(s.launch(preflight=False) for s in sessions.values()))
    # Per observation: (the run's uptime on the target's clock, verdict, summary, checks).
    seen: dict[str, list[tuple[float, Verdict, str, dict]]] = {n: [] for n in sessions}
    t0 = time.monotonic()
    stopped = None
    while time.monotonic() - t0 < 120:
        looks = await asyncio.gather(*(s.check() for s in sessions.values()))
        youngest = None
        for name, (ev, cl) in zip(sessions, looks):
            up = ev.now - ev.launch.start_time if ev.launch is not None else 0.0
            youngest = up if youngest is None else min(youngest, up)
            seen[name].append((up, cl.verdict, cl.summary, {c.id: c for c in cl.checks}))
        if stopped is None and youngest > 5:
            stopped = await sessions["stop"].stop()
        if youngest > WATCH_S:
            break
        await asyncio.sleep(0.5)

    def verdicts(name):
        return [v for _, v, _, _ in seen[name]]

    def last(name):
        return seen[name][-1]

    # A print loop that never flushes: the wrapper makes Python unbuffered, so its steps are
    # read as they happen; RUNNING from its first steps to the end, never STALLED.
    for name in ("print_loop", "trainer_dicts", "tqdm_bar"):
        v = verdicts(name)
        assert Verdict.STALLED not in v and v[-1] is Verdict.RUNNING, (label, name, seen[name][-3:])
        first_running = v.index(Verdict.RUNNING)
        assert set(v[first_running:]) == {Verdict.RUNNING}, (label, name, v)
    assert "step " in last("print_loop")[2] and "loss " in last("print_loop")[2], last("print_loop")
    assert "loss " in last("trainer_dicts")[2], last("trainer_dicts")
    assert "step " in last("tqdm_bar")[2] and "/100000" in last("tqdm_bar")[2], last("tqdm_bar")

    # Idle hang vs busy silent phase: the same silence, never the same words.
    idle = [(t, v, s) for t, v, s, _ in seen["idle_hang"]]
    assert idle[-1][1] is Verdict.STALLED and idle[-1][2].startswith("idle hang"), (label, idle[-3:])
    assert re.search(r"idle \(0 % CPU", idle[-1][2]) and "sleeping" in idle[-1][2], idle[-1]
    early = [v for up, v, _, _ in seen["idle_hang"] if up < STALL_S - 1]
    assert all(v is Verdict.RUNNING for v in early), (label, idle)  # its two steps, before the hang
    assert all(v is Verdict.STALLED for up, v, _, _ in seen["idle_hang"] if up > STALL_S + 2), (label, idle)
    busy = seen["busy_silent"]
    # A busy silence that is no compile gets stall_after_s, not the compile limit: its stack
    # says where it spins (one function of its own, calling nothing else of the program).
    assert all(x[1] is Verdict.STALLED for x in busy if x[0] > STALL_S + 2), (label, [x[:3] for x in busy])
    assert busy[-1][2].startswith("busy in its own code: MainThread in <module> (busy_silent.py:"), (label, busy[-1][:3])
    assert int(re.search(r"(\d+) % CPU", busy[-1][2]).group(1)) >= 5, busy[-1][2]
    assert "(limit stall_after_s 4 s)" in busy[-1][3]["progress"].cause, busy[-1][3]["progress"]

    crash = last("crash")
    assert crash[1] is Verdict.CRASHED and "exit code 1: ValueError: shape mismatch" in crash[2], crash[:3]

    assert stopped is not None and stopped.outcome == "terminated", stopped
    stop = last("stop")
    assert stop[1] is Verdict.STOPPED and stop[1].healthy, stop[:3]
    assert stop[2].startswith("stopped by ") and "killed by SIGTERM" in stop[2], stop[2]


async def test_report_carries_the_parsed_progress(tmp_path, monkeypatch):
    """The dashboard's report: progress (step, loss) parsed from the log, and the CPU evidence."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    s = Session(program_profile(tmp_path / "run", (PY, str(PROGRAMS / "print_loop.py"), "100000", "0.2")),
                targets=(LocalTarget(), LocalTarget()))
    try:
        await s.launch(preflight=False)
        mon = HostWatch(s, interval=0.2)
        deadline = time.monotonic() + 20
        rep = await mon.poll()
        while not (rep.progress and rep.progress.step and rep.progress.step >= 3) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            rep = await mon.poll()
        assert rep.checklist.verdict is Verdict.RUNNING, rep.checklist
        assert rep.progress.source == "log" and rep.progress.step >= 3, rep.progress
        assert rep.progress.loss == pytest.approx(2.0 / rep.progress.step, abs=1e-3)
        assert rep.activity.procs >= 2 and rep.activity.cpu_s is not None
        assert rep.activity.disk is not None and rep.activity.disk.free > 0
    finally:
        await s.stop(grace_s=0.5)
        await s.close()


def test_one_shot_check_tells_idle_from_busy(tmp_path, monkeypatch):
    """`dflash-tui --check` is one look: a second process-tree and stack sample a second later
    tells an idle hang from a busy silent phase, with no memory of earlier polls."""
    from tests.test_cli_modes import cli, write_config

    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    common = {"stall_after_s": 2, "compile_stall_after_s": 600, "min_free_gb": 0, "python": PY}
    cfg = write_config(tmp_path, idle={"run_dir": str(tmp_path / "idle"), "command": ["sh", SCENARIOS["idle_hang"][1]],
                                       **common},
                       busy={"run_dir": str(tmp_path / "busy"), "command": list(SCENARIOS["busy_silent"]), **common})
    try:
        for name in ("idle", "busy"):
            res = cli(tmp_path, "--config", str(cfg), "--profile", name, "--launch", "--no-preflight")
            assert res.returncode in (0, 4), res.stdout + res.stderr
        time.sleep(4)
        idle = cli(tmp_path, "--config", str(cfg), "--profile", "idle", "--check")
        busy = cli(tmp_path, "--config", str(cfg), "--profile", "busy", "--check")
        assert idle.returncode == 1 and "STALLED: idle hang" in idle.stdout, idle.stdout
        assert re.search(r"idle \(0 % CPU over 1 s", idle.stdout), idle.stdout
        # Busy and silent past stall_after_s, its stack in one function of its own: no compile,
        # so STALLED within compile_stall_after_s, saying where it spins.
        assert busy.returncode == 1, busy.stdout
        assert "STALLED: busy in its own code: MainThread in <module> (busy_silent.py:" in busy.stdout, busy.stdout
    finally:
        for name in ("idle", "busy"):
            cli(tmp_path, "--config", str(cfg), "--profile", name, "--stop")
