"""Runs under Slurm, judged against the real daemons (tests/support/slurm.py: munged,
slurmctld, two slurmd on 127.0.0.1, no accounting): jobs that run on one and two nodes, queue,
wait on a dependency, are held, fail before their script, exceed their memory, are preempted,
lose a node, are cancelled from outside, are stopped by us and relaunched with --resume, and hit
their time limit. Every verdict is also judged again after Slurm forgot the job (MinJobAge), from
the run dir alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config_file import parse_config
from dflash_tui.config import ConfigError
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.launch.launch import LaunchRefused
from dflash_tui.run.verdict.checklist import Checklist, Verdict
from dflash_tui.watch.session import Session
from dflash_tui.backends.slurm.commands import sbatch_argv
from dflash_tui.backends.slurm.evidence import slurm_of

from tests.support.slurm import (SIDE, URGENT, PROLOG_FAIL_MARKER, SlurmCluster, scheduler_shims, sleepers,
                                 slurm_cluster)  # noqa: F401  (fixture)
from tests.support.sshd import SshdUnavailable, start_sshd

pytestmark = pytest.mark.timeout(150)

TINY_TRAINER = ["--target-devices", "cpu", "--drafter-devices", "cpu", "--preset", "tiny"]


@pytest.fixture(scope="module", autouse=True)
def slurm_env(slurm_cluster: SlurmCluster, tmp_path_factory):
    """The client commands find the test cluster; launch attempts are kept in a temp dir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(slurm_cluster.conf))
        mp.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(scope="module", autouse=True)
def time_limited_run(slurm_env, tmp_path_factory):
    """A run with a one-minute time limit (Slurm's granularity; OverTimeLimit=0, KillWait=2),
    launched as the module starts on the side node, so its minute passes while the other tests
    run; test_time_limit_is_timeout (last) judges it."""
    run_dir = tmp_path_factory.mktemp("timeout") / "run"
    toml = "\n".join(["[profile.timeout]", 'scheduler = "slurm"', f'run_dir = "{run_dir}"', f'partition = "{SIDE}"',
                      "time_limit = 1", f"command = {json.dumps(sh_steps(1000))}", ""])
    profile = parse_config(toml, str(run_dir.parent / "c.toml")).profiles["timeout"]

    async def launch():
        async with Session(profile, targets=(LocalTarget(), LocalTarget())) as s:
            out = await s.launch()
            assert out.checklist.verdict in (Verdict.QUEUED, Verdict.STARTING, Verdict.RUNNING), out.checklist
    asyncio.run(launch())
    return profile


@pytest.fixture
async def make_session(tmp_path, slurm_cluster: SlurmCluster):
    sessions: list[Session] = []

    def make(name: str = "s", **keys) -> Session:
        keys = {"scheduler": "slurm", "run_dir": str(tmp_path / name), "launch_deadline_s": 5, **keys}
        toml = f"[profile.{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
        config = tmp_path / "config.toml"
        with config.open("a") as f:   # the CLI reads the same profiles
            f.write(toml)
        profile = parse_config(toml, str(config)).profiles[name]
        s = Session(profile, targets=(LocalTarget(), LocalTarget()))
        s.launcher.min_query_interval_s = 0.0   # the test asks as often as it needs
        sessions.append(s)
        return s
    yield make
    for s in sessions:
        try:
            await s.stop(grace_s=1)
        finally:
            await s.close()
    cancel_jobs_on_the_two_nodes(slurm_cluster)


def cancel_jobs_on_the_two_nodes(cluster: SlurmCluster) -> None:
    """Every job of the test's partitions (not the side node's time-limited run)."""
    for partition in (cluster.partition, URGENT):
        cluster.run("scancel", "--user", str(os.getuid()), f"--partition={partition}", check=False)


async def wait_for(session: Session, verdicts: set[Verdict], timeout: float = 60,
                   until=lambda cl: True) -> Checklist:
    deadline = time.monotonic() + timeout
    while True:
        _, cl = await session.check()
        if cl.verdict in verdicts and until(cl):
            return cl
        if time.monotonic() > deadline:
            raise AssertionError(f"still {cl.verdict.value} ({cl.summary}) after {timeout} s; wanted "
                                 + ", ".join(v.value for v in verdicts))
        await asyncio.sleep(0.3)


async def check_after_slurm_forgot(cluster: SlurmCluster, session: Session, timeout: float = 90) -> Checklist:
    """Wait until squeue and scontrol no longer know the run's job (MinJobAge), then check it
    as a new process would (`--check`: nothing remembered of the job)."""
    ev = await session.evidence()
    job_id = slurm_of(ev).record.job_id
    deadline = time.monotonic() + timeout
    while cluster.run("scontrol", "show", "job", job_id, check=False).returncode == 0:
        assert time.monotonic() < deadline, f"job {job_id} still known after {timeout} s"
        await asyncio.sleep(0.5)
    async with Session(session.profile, targets=(LocalTarget(), LocalTarget())) as fresh:
        _, cl = await fresh.check()
    assert not job_of(cl)["known"], cl
    return cl


def job_of(cl: Checklist) -> dict:
    assert cl.scheduler is not None and cl.scheduler.name == "slurm", cl
    return cl.scheduler.facts


def sh_steps(n: int, pause: float = 0.5) -> list[str]:
    return ["sh", "-c", f'i=1; while [ $i -le {n} ]; do echo "step $i/{n}"; i=$((i+1)); sleep {pause}; done']


async def test_one_node_runs_then_finishes_and_is_judged_after_slurm_forgot_it(make_session, slurm_cluster):
    s = make_session("one", command=sh_steps(8))
    out = await s.launch()
    assert out.checklist.verdict in (Verdict.QUEUED, Verdict.STARTING, Verdict.RUNNING), out.checklist
    cl = await wait_for(s, {Verdict.RUNNING})
    job = job_of(cl)
    assert job["state"] == "RUNNING" and job["partition"] == "debug" and job["node_list"] in ("n1", "n2")
    assert (Path(s.profile.run_dir) / "slurm.json").exists()
    cl = await wait_for(s, {Verdict.FINISHED})
    cl = await check_after_slurm_forgot(slurm_cluster, s)
    assert cl.verdict is Verdict.FINISHED, cl


@pytest.mark.timeout(300)   # two trainer processes start twice: slow on a loaded 2-core machine
async def test_two_nodes_run_the_bundled_trainer_stopped_then_resumed_to_the_end(make_session):
    s = make_session("two", nodes=2, train_args=[*TINY_TRAINER, "--steps", "30", "--checkpoint-every", "5"])
    await s.launch()
    cl = await wait_for(s, {Verdict.RUNNING}, timeout=150, until=lambda cl: "step" in cl.summary)
    assert job_of(cl)["node_list"] == "n[1-2]"
    # Both ranks' probe reports in the one shared run dir: the groups name Slurm's nodes.
    cl = await wait_for(s, {Verdict.RUNNING}, timeout=30,
                        until=lambda cl: {n for g in cl.rank_groups for n in g.nodes} == {"n1", "n2"})
    assert all(g.nodes for g in cl.rank_groups), [g.words() for g in cl.rank_groups]
    res = await s.stop()
    assert res.ok and res.record is not None and res.record.job_id == job_of(cl)["job_id"], res
    await wait_for(s, {Verdict.STOPPED})
    assert await s.newest_checkpoint() is not None
    out = await s.launch(relaunch=True, resume=True)
    assert out.checklist.verdict in (Verdict.QUEUED, Verdict.STARTING, Verdict.RUNNING), out.checklist
    assert "--resume" in (Path(s.profile.run_dir) / "launch.sh").read_text()
    await wait_for(s, {Verdict.FINISHED}, timeout=150)
    run = Path(s.profile.run_dir)
    rank1 = json.loads((run / "status.rank1.json").read_text())
    assert rank1["world_size"] == 2 and rank1["rank"] == 1 and rank1["step"] == 30
    assert "finished at step 30" in (run / "train.rank1.log").read_text()
    log = (run / "train.log").read_text()
    assert log.count("finished at step 30") == 1, log[-2000:]   # rank 0's lines once, not via srun too
    assert "resum" in log.lower()


async def test_queued_behind_a_job_holding_every_node_then_stopped_before_it_started(make_session, slurm_cluster):
    blocker = slurm_cluster.run("sbatch", "--parsable", "-N2", "--exclusive", "-o", "/dev/null",
                                "--wrap", "sleep 120").stdout.strip()
    s = make_session("queued", command=sh_steps(2))
    await s.launch()
    cl = await wait_for(s, {Verdict.QUEUED}, until=lambda cl: job_of(cl)["pending_reason"] == "Resources")
    assert "waiting for resources" in cl.summary
    # --check --all: the Slurm profile beside a plain one, its job in the JSON.
    config = Path(s.profile.source)
    with config.open("a") as f:
        f.write(f'[profile.plain]\nrun_dir = "{config.parent / "plain"}"\n')
    cli = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "dflash_tui", "--config", str(config),
                                                   "--check", "--all", "--json"],
                                  capture_output=True, text=True, timeout=60)
    results = {o["profile"]: o for o in json.loads(cli.stdout)}
    assert cli.returncode == 4 and results["plain"]["verdict"] == "NO RUN", cli.stderr
    out = results["queued"]
    assert out["verdict"] == "QUEUED" and out["exit_code"] == 4 and "slurm" in out["target"]
    assert out["slurm"]["pending_reason"] == "Resources" and out["slurm"]["job_id"] == job_of(cl)["job_id"]
    assert out["slurm"]["partition"] == "debug"
    res = await s.stop()
    assert res.ok and res.outcome == "terminated", res
    cl = await wait_for(s, {Verdict.STOPPED})
    assert "before it started" in cl.summary
    slurm_cluster.run("scancel", blocker)


async def test_held_dependency_queues_then_blocks_when_it_can_never_be_satisfied(make_session, slurm_cluster):
    held = slurm_cluster.run("sbatch", "--parsable", "-H", "-o", "/dev/null", "--wrap", "true").stdout.strip()
    s = make_session("dep", command=sh_steps(2), sbatch_args=[f"--dependency=afterok:{held}"])
    await s.launch()
    cl = await wait_for(s, {Verdict.QUEUED}, until=lambda cl: job_of(cl)["pending_reason"] == "Dependency")
    assert "waiting for the job it depends on" in cl.summary
    slurm_cluster.run("scancel", held)
    cl = await wait_for(s, {Verdict.BLOCKED})
    assert cl.verdict.failing and "can never be satisfied" in cl.summary


async def test_a_held_job_is_blocked(make_session, slurm_cluster):
    s = make_session("held", command=sh_steps(2), sbatch_args=["--begin=now+600"])
    await s.launch()
    job_id = slurm_of(await s.evidence()).record.job_id
    slurm_cluster.run("scontrol", "uhold", job_id)
    cl = await wait_for(s, {Verdict.BLOCKED})
    assert "held by its user" in cl.summary and f"scontrol release {job_id}" in cl.checks[0].hint


@pytest.mark.parametrize("requeue", [False, True], ids=["cancelled", "requeued-held"])
async def test_a_job_whose_node_setup_fails_never_started(make_session, slurm_cluster, requeue):
    """A node's prolog fails: Slurm cancels the job (--no-requeue, the launch's default) or
    requeues and holds it (--requeue), before its script ever ran."""
    marker = slurm_cluster.workdir / PROLOG_FAIL_MARKER
    marker.touch()
    try:
        s = make_session(f"prolog{int(requeue)}", command=sh_steps(2), sbatch_args=["--requeue"] if requeue else [])
        await s.launch()
        cl = await wait_for(s, {Verdict.NEVER_STARTED}, timeout=30)
        if requeue:
            assert "requeued and held before its script ran" in cl.summary, cl.summary
        else:
            assert "CANCELLED on n" in cl.summary and "before its script wrote launch.json" in cl.summary, cl.summary
        assert cl.verdict.failing and not (Path(s.profile.run_dir) / "launch.json").exists()
    finally:
        marker.unlink()
        cancel_jobs_on_the_two_nodes(slurm_cluster)
        slurm_cluster.resume_nodes()


async def test_memory_limit_is_out_of_memory(make_session, slurm_cluster):
    hog = [sys.executable, "-c", "import time; a = bytearray(400 << 20); a[::4096] = b'x' * len(a[::4096]); "
                                 "print('step 1', flush=True); time.sleep(30)"]
    s = make_session("oom", command=hog, sbatch_args=["--mem=80M"])
    await s.launch()
    cl = await wait_for(s, {Verdict.OUT_OF_MEMORY}, timeout=40)
    assert "exceeding its memory limit" in cl.summary
    # Under task/cgroup Slurm itself says OUT_OF_MEMORY; under OverMemoryKill the job reads
    # FAILED and slurmstepd's "exceeded memory limit" line in slurm.out tells why.
    expected = "OUT_OF_MEMORY" if slurm_cluster.memory_enforcement == "cgroup" else "FAILED"
    assert job_of(cl)["state"] == expected, cl


async def test_preempted_by_a_higher_priority_partition(make_session, slurm_cluster):
    s = make_session("preempt", command=sh_steps(200))
    await s.launch()
    await wait_for(s, {Verdict.RUNNING})
    urgent = slurm_cluster.run("sbatch", "--parsable", "-p", "urgent", "-N2", "--exclusive", "-o", "/dev/null",
                               "--wrap", "sleep 1").stdout.strip()
    cl = await wait_for(s, {Verdict.PREEMPTED}, timeout=40)
    assert "preempted" in cl.summary
    slurm_cluster.run("scancel", urgent, check=False)


async def test_node_failure_is_node_fail(make_session, slurm_cluster):
    s = make_session("nodefail", command=sh_steps(200))
    await s.launch()
    cl = await wait_for(s, {Verdict.RUNNING})
    node = job_of(cl)["node_list"]
    try:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=test")
        cl = await wait_for(s, {Verdict.NODE_FAIL}, timeout=40)
        assert f"lost a node of {node}" in cl.summary
    finally:
        slurm_cluster.resume_nodes()


async def test_cancelled_from_outside_is_cancelled_and_stays_so_after_slurm_forgot_it(make_session, slurm_cluster):
    s = make_session("cancel", command=sh_steps(200))
    await s.launch()
    await wait_for(s, {Verdict.RUNNING})
    slurm_cluster.run("scancel", slurm_of(await s.evidence()).record.job_id)
    cl = await wait_for(s, {Verdict.CANCELLED})
    assert "cancelled from outside" in cl.summary and "no stop request" in cl.summary
    cl = await check_after_slurm_forgot(slurm_cluster, s)
    assert cl.verdict is Verdict.CANCELLED, cl    # from slurmstepd's line in slurm.out


async def test_controller_silence_is_not_a_death(make_session, slurm_cluster):
    s = make_session("silence", command=sh_steps(200))
    await s.launch()
    await wait_for(s, {Verdict.RUNNING})
    s.launcher.query_timeout_s = 3.0
    ctld = slurm_cluster._procs["slurmctld"]
    ctld.send_signal(signal.SIGSTOP)
    try:
        _, cl = await s.check()
    finally:
        ctld.send_signal(signal.SIGCONT)
    assert cl.verdict is Verdict.RUNNING, cl
    assert cl.checks[0].id == "slurm_job" and "does not answer" in cl.checks[0].cause


async def test_a_live_job_refuses_a_second_launch_and_relaunch_cancels_it(make_session, slurm_cluster):
    s = make_session("relaunch", command=sh_steps(200))
    await s.launch()
    cl = await wait_for(s, {Verdict.RUNNING})
    first = job_of(cl)["job_id"]
    # The job's state refuses it, with or without the preflight: the process the batch host
    # runs is Slurm's copy of launch.sh, which the preflight's pid proof does not take as ours.
    for preflight in (True, False):
        with pytest.raises(LaunchRefused, match=fr"job {first} of run .* \(RUNNING\) is still running"):
            await s.launch(preflight=preflight)
    out = await s.launch(relaunch=True)
    assert out.stopped is not None and out.stopped.ok, out.stopped
    cl = await wait_for(s, {Verdict.RUNNING})
    assert job_of(cl)["job_id"] != first
    old = slurm_cluster.run("scontrol", "show", "job", "-o", first, check=False).stdout
    assert "JobState=RUNNING" not in old and "JobState=PENDING" not in old


async def test_a_login_host_over_ssh(slurm_cluster, tmp_path):
    """The login host is an SSH host: sbatch, squeue, scontrol and scancel run over the same
    connection as the agent (its sessions find the cluster through SLURM_CONF)."""
    try:
        sshd = start_sshd(tmp_path / "sshd", env={"SLURM_CONF": str(slurm_cluster.conf)})
    except SshdUnavailable as exc:
        pytest.skip(str(exc))
    toml = "\n".join(["[profile.login]", 'scheduler = "slurm"', f'host = "{sshd.host}"', f"port = {sshd.port}",
                      f'user = "{sshd.user}"', f'identity_file = "{sshd.client_key}"',
                      f'known_hosts = "{sshd.known_hosts}"', f'run_dir = "{tmp_path / "run"}"',
                      f"command = {json.dumps(sh_steps(200))}", ""])
    profile = parse_config(toml, str(tmp_path / "c.toml")).profiles["login"]
    try:
        async with Session(profile) as s:
            s.launcher.min_query_interval_s = 0.0
            await s.launch()
            cl = await wait_for(s, {Verdict.RUNNING})
            assert job_of(cl)["state"] == "RUNNING"
            res = await s.stop()
            assert res.ok, res
            cl = await wait_for(s, {Verdict.STOPPED})
            assert cl.checks[0].id == "slurm_job"
    finally:
        sshd.stop()


async def test_a_partition_slurm_does_not_have_is_not_launched(make_session):
    s = make_session("nopart", command=sh_steps(2), partition="nosuch")
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED and "no partition 'nosuch'" in out.checklist.summary
    # Without the preflight, sbatch's own refusal is why it never started.
    out = await s.launch(preflight=False)
    assert out.checklist.verdict is Verdict.NEVER_STARTED, out.checklist
    assert "sbatch refused the job" in out.checklist.summary and "partition" in out.checklist.summary.lower()
    assert not (Path(s.profile.run_dir) / "slurm.json").exists()


async def test_time_limit_is_timeout(time_limited_run):
    # Launched when the module started (time_limited_run): its minute ran beside the other tests.
    async with Session(time_limited_run, targets=(LocalTarget(), LocalTarget())) as s:
        s.launcher.min_query_interval_s = 0.0
        cl = await wait_for(s, {Verdict.TIMEOUT}, timeout=100)
        assert "hit its time limit" in cl.summary, cl.summary
        assert (Path(time_limited_run.run_dir) / "exit.json").exists()   # the wrapper saw the SIGTERM


async def test_a_copy_of_a_run_dir_neither_reports_nor_cancels_the_original_job(make_session, slurm_cluster, tmp_path):
    """The original's path holds ` JobState=COMPLETED`: its running job still reads RUNNING and
    its stop cancels it; a `cp -a` copy names the same job id, and neither shows nor cancels it."""
    original = tmp_path / "a JobState=COMPLETED b"
    s = make_session("orig", run_dir=str(original), command=sh_steps(200))
    await s.launch()
    cl = await wait_for(s, {Verdict.RUNNING})
    job_id = job_of(cl)["job_id"]
    assert job_of(cl)["state"] == "RUNNING", cl
    shutil.copytree(original, tmp_path / "copy", symlinks=True)
    copy = make_session("copy", command=sh_steps(200))
    _, copied = await copy.check()
    assert copied.scheduler is None, copied    # the original's job is not this run dir's
    res = await copy.stop(grace_s=1)
    assert res.outcome == "mismatch" and not res.ok, res
    assert f"job {job_id} in slurm.json runs in {original}, not in this run dir" in res.message, res.message
    # Its relaunch stops nothing (its own run is not alive) and submits a job of its own.
    out = await copy.launch(relaunch=True)
    assert out.stopped is None and slurm_of(await copy.evidence()).record.job_id != job_id, out
    assert "JobState=RUNNING" in slurm_cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    res = await s.stop()
    assert res.outcome == "terminated", res
    await wait_for(s, {Verdict.STOPPED})


async def test_stop_on_a_host_without_slurms_commands_is_one_line_and_cancels_nothing(make_session, tmp_path):
    s = make_session("bare", command=sh_steps(200))
    await s.launch()
    await wait_for(s, {Verdict.RUNNING})
    bare = scheduler_shims(tmp_path / "path-bare", missing=True)
    cli = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "dflash_tui", "--config", s.profile.source,
                                                   "--profile", "bare", "--stop"],
                                  capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": bare})
    assert cli.returncode == 1 and "internal error" not in cli.stdout + cli.stderr and not cli.stderr, cli
    (stop,) = [line for line in cli.stdout.splitlines() if line.strip().startswith("stop: ")]
    assert "no squeue/scontrol" in stop and "nothing was cancelled" in stop, stop
    assert (await s.check())[1].verdict is Verdict.RUNNING


async def test_a_hung_squeue_holds_neither_check_nor_stop(make_session, tmp_path, monkeypatch):
    s = make_session("hung", command=sh_steps(200))
    await s.launch()
    await wait_for(s, {Verdict.RUNNING})
    s.launcher.query_timeout_s = 5.0    # each command 1 s
    plain = os.environ["PATH"]
    # squeue waits on a child forever: each check and the stop are bounded, and it is ended.
    monkeypatch.setenv("PATH", scheduler_shims(tmp_path / "path-hang", hang=("squeue",)))
    try:
        t0 = time.monotonic()
        _, cl = await asyncio.wait_for(s.check(), 30)
        assert time.monotonic() - t0 < 8 and cl.verdict is Verdict.RUNNING, cl
        assert job_of(cl)["state"] == "RUNNING"        # scontrol answered
        res = await asyncio.wait_for(s.stop(grace_s=1), 60)
        assert res.outcome == "terminated", res
    finally:
        monkeypatch.setenv("PATH", plain)
    await asyncio.sleep(0.5)
    assert sleepers() == []


def sbatch_spellings() -> list[str]:
    """Every spelling sbatch reads as one of the options the launch sets (getopt_long: each
    unambiguous prefix of a long option; short options clustered behind ones without an
    argument), with a value that would move the job; and options of sbatch's own beside them."""
    values = {"--output": "=/tmp/elsewhere.out", "--error": "=/tmp/elsewhere.err", "--chdir": "=/tmp",
              "--job-name": "=other", "--wrap": "=true", "--nodes": "=2", "--ntasks-per-node": "=2",
              "--partition": "=urgent", "--time": "=5", "--hold": "", "--parsable": ""}
    out = [name[:n] + value for name, value in values.items() for n in range(3, len(name) + 1)]
    shorts = {"o": "/tmp/elsewhere.out", "e": "/tmp/elsewhere.err", "D": "/tmp", "J": "other", "N": "2",
              "p": "urgent", "t": "5", "H": "", "W": ""}
    out += [f"{lead}{letter}{value}" for letter, value in shorts.items() for lead in ("-v", "-Q", "-vQ", "-s")]
    return out + ["--ntasks=2", "-n2", "--time-min=1", "--comment=-o/tmp/x", "-vc1", "-Qs", "-sQ", "--qui", "--requeue"]


def test_sbatch_args_the_profile_takes_leave_the_launchs_options_as_sbatch_reads_them(slurm_cluster, tmp_path):
    """sbatch itself is the judge: each spelling the profile check lets through is submitted
    (held) with the launch's own options, and the job must still be the launch's."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text("#!/bin/sh\ntrue\n")
    submitted = []
    for arg in sbatch_spellings():
        try:
            profile = parse_config(f'[profile.p]\nscheduler = "slurm"\nrun_dir = "{run_dir}"\n'
                                   f"sbatch_args = [{json.dumps(arg)}]\n", "c.toml").profiles["p"]
        except ConfigError:
            continue
        argv = sbatch_argv(profile.scheduler, str(run_dir), "dflash-probe")
        res = slurm_cluster.run(argv[0], "--hold", *argv[1:], check=False)
        if res.returncode != 0:
            continue    # sbatch refused it: nothing was moved either
        job_id = res.stdout.strip()
        assert job_id.isdigit(), f"sbatch_args {arg!r}: sbatch took the job and printed no job id ({res.stdout!r})"
        submitted.append(arg)
        line = slurm_cluster.run("scontrol", "show", "job", "-o", job_id).stdout
        slurm_cluster.run("scancel", job_id, check=False)
        for field in ("JobName=dflash-probe ", "Reason=JobHeldUser ", "Partition=debug ", "NumNodes=1",
                      f"Command={run_dir}/launch.sh ", f"WorkDir={run_dir} ", f"StdOut={run_dir}/slurm.out ",
                      f"StdErr={run_dir}/slurm.out "):
            assert f" {field}" in line, f"sbatch_args {arg!r} moved the job: {field!r} not in {line}"
        assert " NumNodes=2" not in line and line.count("JobId=") == 1, (arg, job_id, line)
    assert "--time-min=1" in submitted and "--comment=-o/tmp/x" in submitted, submitted


async def test_what_scancel_says_reaches_the_stop_line_inert(make_session, tmp_path, monkeypatch):
    s = make_session("loud", command=sh_steps(200))
    await s.launch()
    await wait_for(s, {Verdict.RUNNING})
    s.launcher.cancel_margin_s = 1.0
    shims = scheduler_shims(tmp_path / "path-loud", scripts={
        "scancel": "printf '\\033]2;pwned\\007scancel: error: \\233 Kill job error\\n' >&2\nexit 1\n"})
    plain = os.environ["PATH"]
    monkeypatch.setenv("PATH", shims)
    try:
        res = await s.stop(grace_s=0)
    finally:
        monkeypatch.setenv("PATH", plain)
    assert res.outcome == "survived" and "Kill job error" in res.message, res
    assert res.message.isprintable() and "\\x1b]2;pwned" in res.message, res.message


async def test_a_hung_squeue_on_a_login_host_over_ssh_is_ended_there(slurm_cluster, tmp_path):
    """Over SSH the client can only close the channel: the hung squeue (and what it waits on)
    is ended on the login host itself, within the check's bound."""
    shims = scheduler_shims(tmp_path / "path-hang", hang=("squeue",))
    try:
        sshd = start_sshd(tmp_path / "sshd", env={"SLURM_CONF": str(slurm_cluster.conf)}, path_first=shims)
    except SshdUnavailable as exc:
        pytest.skip(str(exc))
    toml = "\n".join(["[profile.login]", 'scheduler = "slurm"', f'host = "{sshd.host}"', f"port = {sshd.port}",
                      f'user = "{sshd.user}"', f'identity_file = "{sshd.client_key}"',
                      f'known_hosts = "{sshd.known_hosts}"', f'run_dir = "{tmp_path / "run"}"',
                      "launch_deadline_s = 5", f"command = {json.dumps(sh_steps(200))}", ""])
    profile = parse_config(toml, str(tmp_path / "c.toml")).profiles["login"]
    try:
        async with Session(profile) as s:
            s.launcher.min_query_interval_s = 0.0
            s.launcher.query_timeout_s = 5.0    # each command 1 s
            await s.launch()
            await wait_for(s, {Verdict.RUNNING}, until=lambda cl: job_of(cl)["state"] == "RUNNING")
            t0 = time.monotonic()
            _, cl = await s.check()
            took = time.monotonic() - t0
            assert 1 <= took < 8 and cl.verdict is Verdict.RUNNING, (took, cl)   # squeue's 1 s, then scontrol
            await asyncio.sleep(1.0)
            # Without the bound on the login host each hung squeue would stay, and hold its
            # SSH session, until sshd refused new channels.
            assert sleepers() == [], "the hung squeue outlived the check on the login host"
            res = await s.stop(grace_s=1)
            assert res.outcome == "terminated", res
    finally:
        sshd.stop()


async def test_env_file_reaches_the_job_and_stays_out_of_the_run_dir(make_session, tmp_path):
    secret = "s3cr3t-$(id) 'q'"
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"API_TOKEN='{secret}'\nOUT_FILE={tmp_path / 'got.txt'}\n")
    s = make_session("env", command=["sh", "-c", 'printf "%s" "$API_TOKEN" > "$OUT_FILE"'],
                     env_file=str(env_file))
    await s.launch()
    await wait_for(s, {Verdict.FINISHED})
    assert (tmp_path / "got.txt").read_text() == secret
    for path in Path(s.profile.run_dir).rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
