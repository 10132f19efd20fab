"""The launch path as the incident ran it: real sshd on 127.0.0.1, asyncssh, `pct exec` into a
real PID-namespace container (the stand-in), with each of the stand-in's failure modes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import inert_text
from dflash_tui.config import Profile
from dflash_tui.remote.base import ContainerNotRunning
from dflash_tui.run.launch.launch import launch_run
from dflash_tui.run.launch.request import LaunchRequest
from dflash_tui.run.launch.stop import stop_run
from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.watch.session import Session

from tests.support.run_standins import PROGRAM
from tests.support.runs import standin_profile

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]

CT = "pct:200"
HOSTILE = "we ird 'q\" $(touch /tmp/pwned-dflash-ssh) `touch /tmp/pwned-dflash-ssh`\nline2 ;&|"


def ssh_profile(sshd, run_dir: Path, mode: str, *args: str, container: str | None = CT, **kw) -> Profile:
    return standin_profile(run_dir, mode, *args, **{
        "name": "ssh", **sshd.profile(), "container": container, **kw})


async def wait_verdict(session: Session, want: set[Verdict], timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        ev, cl = await session.check()
        if cl.verdict in want or time.monotonic() > deadline:
            return ev, cl
        await asyncio.sleep(0.1)


async def test_running_killed_from_outside_over_ssh_pct(sshd, standin, sessions, tmp_path):
    standin.container(CT, mode="ok")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat"))
    out = await s.launch()
    assert out.preflight.ok, [c for c in out.preflight.checks]
    assert {c.id for c in out.preflight.checks} >= {"pre_reachable", "pre_container", "pre_run_dir", "pre_disk",
                                                    "pre_python", "pre_no_live_run"}
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    # Container pids: the wrapper is a small pid inside the namespace, not the host's.
    assert ev.launch.pid < 1000
    r = standin.tool("pct", "exec", "200", "--", "sh", "-c", 'kill -KILL -"$1"', "sh", str(ev.launch.pgid))
    assert r.returncode == 0, r.stderr
    ev, cl = await wait_verdict(s, {Verdict.KILLED}, timeout=5)
    assert cl.verdict is Verdict.KILLED, cl


async def test_crashed_log_missing_stalled_finished_over_ssh_pct(sshd, standin, sessions, tmp_path):
    standin.container(CT, mode="ok")
    s = sessions(ssh_profile(sshd, tmp_path / "crash", "crash"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.CRASHED}, timeout=5)
    assert cl.verdict is Verdict.CRASHED and "RuntimeError: CUDA error" in cl.summary, cl

    (tmp_path / "nolog" / "train.log").mkdir(parents=True)
    s = sessions(ssh_profile(sshd, tmp_path / "nolog", "beat"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.LOG_MISSING}, timeout=5)
    assert cl.verdict is Verdict.LOG_MISSING and "Is a directory" in cl.summary, cl

    s = sessions(ssh_profile(sshd, tmp_path / "stall", "thread", "--beats=3"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.STALLED}, timeout=8)
    assert cl.verdict is Verdict.STALLED and "drafter1 [compiling]" in cl.summary, cl
    await s.stop(grace_s=0.5)

    s = sessions(ssh_profile(sshd, tmp_path / "fin", "finish", "--steps=2"))
    await s.launch(preflight=False)
    ev, cl = await wait_verdict(s, {Verdict.FINISHED}, timeout=8)
    assert cl.verdict is Verdict.FINISHED, cl


async def test_python_path_wrong_and_run_dir_impossible_over_ssh(sshd, standin, sessions, tmp_path):
    standin.container(CT, mode="ok")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat", command=None, python="/no/such/python3"))
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED and "'/no/such/python3' not found" in out.checklist.summary
    (tmp_path / "file").write_text("x")
    s = sessions(ssh_profile(sshd, tmp_path / "file" / "run", "beat"))
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED and "Not a directory" in out.checklist.summary


async def test_noop_exec_is_never_started_within_a_second(sshd, standin, sessions, tmp_path):
    """The incident: `pct exec` exits 0 and runs nothing."""
    standin.container(CT, mode="ok")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat"))
    await s.ops()                       # the agent runs already (started while exec worked)
    standin.set_mode(CT, "noop")
    t0 = time.monotonic()
    out = await s.launch(preflight=False)
    took = time.monotonic() - t0
    cl = out.checklist
    assert cl.verdict is Verdict.NEVER_STARTED, cl
    assert "exit status 0" in cl.summary and "stderr '' (empty)" in cl.summary, cl.summary
    assert took < 2.0, took
    # With preflight, the same transport is caught before anything is sent.
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED and "did not run the command" in out.checklist.summary


@pytest.mark.slow
async def test_hup_mode_twenty_of_twenty_launches_survive(sshd, standin, sessions, tmp_path):
    """Each exec's session is torn down (SIGHUP + group kill) when it returns."""
    standin.container(CT, mode="hup")
    s = sessions(ssh_profile(sshd, tmp_path / "base", "beat"))
    ops = await s.ops()
    launches = []
    for i in range(20):
        out = await launch_run(s.profile, s.launcher, ops, LaunchRequest(argv=("sleep", "60"), preflight=False,
                                                                          run_dir=str(tmp_path / f"run{i:02d}")))
        assert out.evidence.launch is not None, out.checklist
        launches.append(out)
    await asyncio.sleep(1.0)            # any SIGHUP/kill from the exec teardown has landed
    survived = 0
    for out in launches:
        (info,) = await ops.pid_info([out.evidence.launch.pid])
        survived += info.alive and info.start_ticks == out.evidence.launch.start_ticks
    assert survived == 20
    stops = await asyncio.gather(*(stop_run(ops, s.target, str(tmp_path / f"run{i:02d}"), grace_s=1.0)
                                   for i in range(20)))
    assert [res.outcome for res in stops] == ["terminated"] * 20, stops


async def test_ptyhang_mode_launch_returns(sshd, standin, sessions, tmp_path):
    """An exec that waits while anything holds its stdout/stderr: the launch holds nothing."""
    standin.container(CT, mode="ptyhang")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat"))
    t0 = time.monotonic()
    out = await s.launch(preflight=False)
    assert time.monotonic() - t0 < 5
    assert out.attempt.exit_status == 0 and out.attempt.pid
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    await s.stop(grace_s=1.0)


async def test_stopped_container(sshd, standin, sessions, tmp_path):
    standin.container(CT, mode="ok")
    standin.stop(CT)
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat"))
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED
    fail = next(c for c in out.checklist.checks if c.state is CheckState.FAIL)
    assert fail.id == "pre_container" and "pct start 200" in fail.hint


async def test_canary_over_ssh_hup(sshd, standin, sessions, tmp_path):
    standin.container(CT, mode="hup")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat"))
    before = sshd.accepted_connections()
    res = await s.canary(sleep_s=30)
    assert res.ok, res.message
    assert "outlived the channel" in res.message
    assert sshd.accepted_connections() > before + 1     # the connection really was re-made


async def test_hostile_strings_over_ssh_pct(sshd, standin, sessions, tmp_path):
    if os.path.exists("/tmp/pwned-dflash-ssh"):
        os.unlink("/tmp/pwned-dflash-ssh")
    standin.container(CT, mode="ok")
    run = tmp_path / HOSTILE
    args = (HOSTILE, "--x=$(touch /tmp/pwned-dflash-ssh)", "a'b", 'c"d', "", "\\n")
    s = sessions(ssh_profile(sshd, run, "argv", *args))
    out = await s.launch()
    assert out.preflight.ok, out.preflight.checks
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    assert json.loads((run / "argv.json").read_text()) == ["argv", *args]
    # Read inert: the newline in the run dir's name reads as "\\n" (docs/ARCHITECTURE.md, trust boundary).
    assert ev.launch.argv == [inert_text(a) for a in [sys.executable, PROGRAM, "argv", *args]]
    assert ev.launch.cwd == inert_text(str(run))
    await s.stop(grace_s=1.0)
    assert not os.path.exists("/tmp/pwned-dflash-ssh")


async def test_canary_fails_loudly_when_exec_runs_nothing(sshd, standin, sessions, tmp_path):
    standin.container(CT, mode="ok")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat"))
    await s.ops()
    standin.set_mode(CT, "noop")
    res = await s.canary(sleep_s=30)
    assert not res.ok and "NEVER STARTED" in res.message and "exit status 0" in res.message, res.message


async def test_docker_container_launch_hup_and_stop(sshd, standin, sessions, tmp_path):
    spec = standin.container("docker:trainer-1", mode="hup")
    s = sessions(ssh_profile(sshd, tmp_path / "run", "beat", container=spec))
    out = await s.launch()
    assert out.preflight.ok, out.preflight.checks
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    res = await s.stop(grace_s=1.0)
    assert res.outcome == "terminated", res
    standin.stop(spec)
    with pytest.raises(ContainerNotRunning) as exc:
        await s.reopen()
    assert "docker start trainer-1" in str(exc.value)
