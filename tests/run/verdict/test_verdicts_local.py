"""Every verdict from a real scenario on this machine: real launch.sh, real processes, real files.

The same scenarios run over the loopback sshd and the pct stand-in in test_run_verdicts_ssh.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import inert_text
from dflash_tui.config import Profile
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.verdict.health import Limits, evaluate
from dflash_tui.run.launch.launch import LaunchRefused
from dflash_tui.run.evidence.observe import gather
from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.watch.session import Session

from tests.support.run_standins import PROGRAM
from tests.support.runs import standin_profile

pytestmark = pytest.mark.timeout(60)

HOSTILE = "we ird 'q\" $(touch /tmp/pwned-dflash) `touch /tmp/pwned-dflash`\nline2 ;&|"


@pytest.fixture
async def make_session(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    sessions: list[Session] = []

    async def make(profile: Profile) -> Session:
        s = Session(profile, targets=(LocalTarget(), LocalTarget()))
        sessions.append(s)
        return s
    yield make
    for s in sessions:
        try:
            ops = await s.ops()
            ev = await gather(ops, s.profile.run_dir)
            if ev.launch is not None:
                await s.stop(grace_s=0.5)
        finally:
            await s.close()


def gone(pid: int) -> bool:
    """No such process, or a zombie waiting for its (re)parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def wait_verdict(session: Session, want: set[Verdict], timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        ev, cl = await session.check()
        if cl.verdict in want or time.monotonic() > deadline:
            return ev, cl
        await asyncio.sleep(0.1)


async def test_running_then_stop(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "beat"))
    out = await s.launch()
    assert out.preflight is not None and out.preflight.ok, out.preflight.checks
    assert out.checklist.verdict is Verdict.STARTING
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    assert {c.id: c.state for c in cl.checks}["heartbeat"] is CheckState.OK
    pid = ev.launch.pid
    res = await s.stop()
    assert res.outcome == "terminated", res
    assert gone(pid)
    ev, cl = await s.check()
    # SIGTERM killed the stand-in (it has no handler): a stop the user asked for, so STOPPED.
    assert cl.verdict is Verdict.STOPPED and "killed by SIGTERM" in cl.summary, cl
    assert cl.summary.startswith("stopped by "), cl.summary


async def test_finished(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "finish", "--steps=3"))
    await s.launch()
    ev, cl = await wait_verdict(s, {Verdict.FINISHED})
    assert cl.verdict is Verdict.FINISHED and ev.exit.exit_code == 0


async def test_crashed_at_start_shows_traceback(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "crash"))
    t0 = time.monotonic()
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.CRASHED}, timeout=5)
    assert cl.verdict is Verdict.CRASHED, cl
    assert time.monotonic() - t0 < 3
    assert "exit code 1" in cl.summary and "RuntimeError: CUDA error" in cl.summary
    assert ev.last_traceback.startswith("Traceback (most recent call last):")
    tb = {c.id: c for c in cl.checks}["traceback"]
    assert tb.state is CheckState.FAIL and "device-side assert" in tb.cause


async def test_killed_from_outside(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "beat"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    os.killpg(ev.launch.pgid, signal.SIGKILL)   # as the OOM killer or a container stop would
    ev, cl = await wait_verdict(s, {Verdict.KILLED}, timeout=5)
    assert cl.verdict is Verdict.KILLED and "no exit.json" in cl.summary, cl


async def test_stalled_names_the_silent_process(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "stall", "--beats=3"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.STALLED}, timeout=8)
    assert cl.verdict is Verdict.STALLED, cl
    assert {c.id: c.state for c in cl.checks}["process"] is CheckState.OK   # alive, but silent


async def test_stalled_names_the_thread_and_its_compile_state(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "thread", "--beats=3"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.STALLED}, timeout=8)
    assert cl.verdict is Verdict.STALLED, cl
    assert "drafter1 [compiling]" in cl.summary and "drafter0" not in cl.summary, cl.summary


async def test_log_missing_says_why(make_session, tmp_path):
    run = tmp_path / "run"
    (run / "train.log").mkdir(parents=True)
    s = await make_session(standin_profile(run, "beat"))
    out = await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.LOG_MISSING}, timeout=3)
    assert cl.verdict is Verdict.LOG_MISSING, cl
    assert "Is a directory" in cl.summary and str(run / "train.log") in cl.summary
    assert ev.proc is not None and not ev.proc.alive or ev.exit is None   # trainer never started
    assert not (run / "status.json").exists()


async def test_log_deleted_after_launch_is_log_missing_at_first_look(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "beat"))
    await s.launch(preflight=False)
    await wait_verdict(s, {Verdict.RUNNING})
    (tmp_path / "run" / "train.log").unlink()
    ev, cl = await s.check()
    assert cl.verdict is Verdict.LOG_MISSING and "deleted after the launch" in cl.summary


async def test_never_started_shows_transport_stderr(make_session, tmp_path):
    # launch.out is a directory: the detach shell cannot redirect, the wrapper never runs.
    run = tmp_path / "run"
    (run / "launch.out").mkdir(parents=True)
    s = await make_session(standin_profile(run, "beat"))
    t0 = time.monotonic()
    out = await s.launch(preflight=False)
    took = time.monotonic() - t0
    cl = out.checklist
    assert cl.verdict is Verdict.NEVER_STARTED, cl
    assert "launch.out" in cl.summary and "Is a directory" in cl.summary, cl.summary
    assert "exit status 0" in cl.summary
    assert took < 3.0
    # A later check in another process (no in-memory attempt) agrees, from the stored attempt.
    s2 = Session(s.profile, targets=(LocalTarget(), LocalTarget()))
    try:
        _, cl2 = await s2.check()
        assert cl2.verdict is Verdict.NEVER_STARTED and "Is a directory" in cl2.summary
    finally:
        await s2.close()


async def test_python_path_wrong(make_session, tmp_path):
    p = standin_profile(tmp_path / "run", "beat", command=None, python="/nonexistent/bin/python3")
    s = await make_session(p)
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED
    assert "'/nonexistent/bin/python3' not found" in out.checklist.summary
    # Without the preflight the wrapper runs it and the shell's 127 is the evidence.
    out = await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.CRASHED}, timeout=5)
    assert "exit code 127" in cl.summary and "not found" in cl.summary, cl.summary


async def test_run_dir_impossible(make_session, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    s = await make_session(standin_profile(blocker / "run", "beat"))
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED
    assert "cannot create" in out.checklist.summary and "Not a directory" in out.checklist.summary


async def test_second_launch_refused_relaunch_replaces(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "beat"))
    await s.launch(preflight=False)
    ev1, _ = await wait_verdict(s, {Verdict.RUNNING})
    # Files of other ranks belong to this run too, and must leave with it.
    for name in ("status.rank1.json", "events.rank1.jsonl", "train.rank12.log"):
        (tmp_path / "run" / name).write_text("{}\n")
    with pytest.raises(LaunchRefused):
        await s.launch(preflight=False)
    out = await s.launch()          # preflight refuses too, with a check that says why
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED and "still running" in out.checklist.summary
    out = await s.launch(relaunch=True)
    assert out.stopped is not None and out.stopped.outcome == "terminated"
    ev2, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert ev2.launch.pid != ev1.launch.pid and ev2.launch.run_id != ev1.launch.run_id
    assert gone(ev1.launch.pid)
    # The first run's files were put aside, not mixed into the second.
    hist = tmp_path / "run" / "history" / ev1.launch.run_id
    assert (hist / "launch.json").exists() and (hist / "train.log").exists()
    for name in ("status.rank1.json", "events.rank1.jsonl", "train.rank12.log"):
        assert (hist / name).exists() and not (tmp_path / "run" / name).exists(), name


async def test_stop_escalates_to_sigkill(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "ignoreterm", stop_grace_s=0.5))
    await s.launch(preflight=False)
    ev, _ = await wait_verdict(s, {Verdict.RUNNING})
    res = await s.stop()
    assert res.outcome == "killed", res
    ev, cl = await s.check()
    assert cl.verdict is Verdict.STOPPED and "SIGKILL after the grace period" in cl.summary, cl.summary
    stop = json.loads((tmp_path / "run" / "stop.json").read_text())
    assert stop["signal_sent"] == "SIGKILL"


async def test_stop_refuses_a_reused_pid(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "finish", "--steps=1"))
    await s.launch(preflight=False)
    ev, _ = await wait_verdict(s, {Verdict.FINISHED})
    # Pretend the run's pid now belongs to an unrelated live process: same pid, other start time.
    bystander = await asyncio.create_subprocess_exec("sleep", "30")
    try:
        rec = json.loads((tmp_path / "run" / "launch.json").read_text())
        rec["pid"] = rec["pgid"] = bystander.pid
        (tmp_path / "run" / "launch.json").write_text(json.dumps(rec))
        (tmp_path / "run" / "exit.json").unlink()
        ev, cl = await s.check()
        assert cl.verdict is Verdict.KILLED and "pid reused" in cl.summary, cl.summary
        res = await s.stop()
        assert res.outcome == "mismatch" and not res.ok   # README: --stop on a reused pid exits 1
        # Same start time but not our command line: signal() must refuse it too.
        ops = await s.ops()
        (info,) = await ops.pid_info([bystander.pid])
        assert await ops.signal(bystander.pid, signal.SIGTERM, start_ticks=info.start_ticks,
                                cmdline=["sh", "./launch.sh"], group=True) == "mismatch"
        assert bystander.returncode is None
        os.kill(bystander.pid, 0)
    finally:
        bystander.kill()
        await bystander.wait()


async def test_hostile_strings_pass_through_exactly(make_session, tmp_path):
    for p in ("/tmp/pwned-dflash",):
        if os.path.exists(p):
            os.unlink(p)
    run = tmp_path / HOSTILE
    args = (HOSTILE, "--x=$(touch /tmp/pwned-dflash)", "a'b", 'c"d', "", "-", "\\n")
    s = await make_session(standin_profile(run, "argv", *args))
    out = await s.launch()
    assert out.preflight.ok, out.preflight.checks
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    assert json.loads((run / "argv.json").read_text()) == ["argv", *args]
    # What the run dir says is read inert (control characters shown as escapes): the newline
    # in the run dir's name reads as "\\n".
    assert ev.launch.argv == [inert_text(a) for a in [sys.executable, PROGRAM, "argv", *args]]
    assert ev.launch.cwd == inert_text(str(run)) and "\n" not in ev.launch.cwd
    assert not os.path.exists("/tmp/pwned-dflash")


async def test_canary_local(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "beat"))
    res = await s.canary(sleep_s=20)
    assert res.ok, res.message
    assert res.run_dir == str(tmp_path / "run" / "canary")
    assert gone(res.pid)             # the canary stops its sleep afterwards


async def test_starting_within_limits_then_no_run(make_session, tmp_path):
    s = await make_session(standin_profile(tmp_path / "run", "beat"))
    ev, cl = await s.check()
    assert cl.verdict is Verdict.NO_RUN
    slow = standin_profile(tmp_path / "run2", "stall", "--beats=0", stall_after_s=30.0)
    s2 = await make_session(slow)
    await s2.launch(preflight=False)
    ev, cl = await s2.check()
    assert cl.verdict is Verdict.STARTING, cl
    # The same evidence judged a second later with a limit of 0.01 s (the look itself may come
    # within 10 ms of the stand-in's first line: silent for less than the limit).
    assert evaluate(replace(ev, now=ev.now + 1.0), Limits(stall_after_s=0.01)).verdict is Verdict.STALLED


async def test_same_verdicts_through_shell_ops(monkeypatch, tmp_path):
    """A target without python3 gets one-shot shell commands instead of the agent: same answers."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    s = Session(standin_profile(tmp_path / "run", "beat"), targets=(LocalTarget(), LocalTarget()), ops_kind="shell")
    try:
        assert (await s.ops()).kind == "shell"
        await s.launch()
        ev, cl = await wait_verdict(s, {Verdict.RUNNING})
        assert cl.verdict is Verdict.RUNNING, cl
        res = await s.stop()
        assert res.outcome == "terminated" and gone(ev.launch.pid)
        s2 = Session(standin_profile(tmp_path / "crash", "crash"), targets=(LocalTarget(), LocalTarget()),
                     ops_kind="shell")
        await s2.launch(preflight=False)
        ev, cl = await wait_verdict(s2, {Verdict.CRASHED}, timeout=5)
        assert cl.verdict is Verdict.CRASHED and "RuntimeError: CUDA error" in cl.summary, cl
        await s2.close()
    finally:
        await s.close()
