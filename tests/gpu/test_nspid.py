"""Container pid -> host pid mapping through NSpid, in real PID namespaces made with unshare."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.gpu.nspid import RunPidMapper, belongs_to, find_host_pid, read_nspid, read_stat

# Runs inside the namespace: the "wrapper" (a session leader, like launch.sh) starts a
# "trainer" child in its session and an unrelated, detached process, then reports
# the pids and start ticks as seen INSIDE, the way launch.json records them.
INNER = r"""
import json, os, subprocess, sys, time
os.setsid()
trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
# Not the run's: a process in its own session whose parent exited (re-parented to the
# namespace's init), like a daemon that happens to share the container.
spawn = ("import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(60)'], start_new_session=True, "
         "stdout=subprocess.DEVNULL).pid)")
other_pid = int(subprocess.check_output([sys.executable, "-c", spawn]))
def ticks(pid):
    raw = open("/proc/%d/stat" % pid).read()
    return int(raw[raw.rfind(")") + 2:].split()[19])
print(json.dumps({"wrapper": os.getpid(), "ticks": ticks(os.getpid()),
                  "trainer": trainer.pid, "other": other_pid}), flush=True)
time.sleep(60)
"""


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) not installed"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        return f"cannot create a PID namespace here: {probe.stderr.strip()}"
    return None


@pytest.fixture
def container():
    """Start one PID namespace running INNER; yield (unshare Popen, inner report); tear down."""
    reason = _can_unshare()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason + "; CI=true requires the namespace tests to run")
        pytest.skip(reason)
    started = []

    def start():
        # `sh -c` makes the shell pid 1 of the namespace, so the wrapper is not pid 1 (as in a
        # real container, where init is pid 1 and the run is some later pid).
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
             "sh", "-c", 'exec "$0" -c "$1" & wait', sys.executable, INNER],
            stdout=subprocess.PIPE, text=True)
        started.append(proc)
        line = proc.stdout.readline()
        assert line, "the namespace did not start its wrapper"
        return proc, json.loads(line)

    yield start
    for proc in started:
        proc.kill()          # --kill-child: the namespace's init dies, and with it everything in it
        proc.wait(timeout=10)


def _host_descendants(root: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if pid != root and belongs_to(pid, root) and read_stat(pid) is not None:
                out.append(pid)
    return out


def _host_pid_of(inner: int, root: int) -> int:
    for pid in _host_descendants(root):
        ns = read_nspid(pid)
        if len(ns) >= 2 and ns[-1] == inner:
            return pid
    raise AssertionError(f"no host process with inner pid {inner} under {root}")


def test_host_pid_found_by_inner_pid_and_start_ticks(container):
    proc, inner = container()
    host_wrapper = find_host_pid(inner["wrapper"], inner["ticks"])
    assert host_wrapper is not None and host_wrapper != inner["wrapper"]
    assert read_nspid(host_wrapper)[-1] == inner["wrapper"]
    assert read_nspid(host_wrapper)[0] == host_wrapper
    assert read_stat(host_wrapper).start_ticks == inner["ticks"]
    # Wrong start time: a reused pid is never taken for the run.
    assert find_host_pid(inner["wrapper"], inner["ticks"] + 12345) is None


def test_same_inner_pid_in_two_containers_told_apart_by_start_time(container):
    _, a = container()
    time.sleep(0.05)                     # start ticks are 10 ms apart at least
    _, b = container()
    assert a["wrapper"] == b["wrapper"]  # same number inside both namespaces
    if a["ticks"] == b["ticks"]:
        pytest.skip("both namespaces started within one clock tick")
    ha, hb = find_host_pid(a["wrapper"], a["ticks"]), find_host_pid(b["wrapper"], b["ticks"])
    assert ha is not None and hb is not None and ha != hb
    # Without a start time the same inner pid is ambiguous: refuse to guess.
    assert find_host_pid(a["wrapper"], None) is None


def test_mapper_marks_the_runs_gpu_processes(container):
    proc, inner = container()
    host_trainer = _host_pid_of(inner["trainer"], proc.pid)
    host_other = _host_pid_of(inner["other"], proc.pid)
    procs = [{"pid": host_trainer}, {"pid": host_other}, {"pid": os.getpid()}]
    mapper = RunPidMapper()
    leader = mapper.annotate(procs, inner["wrapper"], inner["ticks"])
    assert leader == find_host_pid(inner["wrapper"], inner["ticks"])
    trainer, other, me = procs
    assert trainer == {"pid": host_trainer, "container_pid": inner["trainer"], "is_run_process": True}
    assert other == {"pid": host_other, "container_pid": inner["other"], "is_run_process": False}
    assert me == {"pid": os.getpid(), "container_pid": None, "is_run_process": False}


def test_mapper_keeps_the_host_pid_of_each_run_one_sample_serves(container, monkeypatch):
    """Two runs in a container (the wrapper's session, and the detached process as a run of its
    own): one sample marks each run's process, and the host pids found by the /proc scan are
    kept for every run asked, so samples that alternate runs do not scan again."""
    from dflash_tui.gpu import nspid

    proc, inner = container()
    host_trainer = _host_pid_of(inner["trainer"], proc.pid)
    host_other = _host_pid_of(inner["other"], proc.pid)
    runs = [(inner["wrapper"], inner["ticks"]), (inner["other"], read_stat(host_other).start_ticks)]
    scans = []
    monkeypatch.setattr(nspid, "find_host_pid", lambda *a: scans.append(a) or find_host_pid(*a))
    mapper = RunPidMapper()
    for _ in range(3):
        procs = [{"pid": host_trainer}, {"pid": host_other}, {"pid": host_trainer}, {"pid": os.getpid()}]
        assert mapper.mark_runs(procs, runs) == [[host_trainer], [host_other]]
        assert [p["container_pid"] for p in procs] == [inner["trainer"], inner["other"], inner["trainer"], None]
        assert not any(p["is_run_process"] for p in procs)   # no one run is meant
    assert len(scans) == 2, scans
    # A run no longer asked about is forgotten: the mapper holds the runs of the last ask.
    mapper.mark_runs([{"pid": host_other}], runs[1:])
    mapper.mark_runs([{"pid": host_trainer}], runs[:1])
    assert len(scans) == 3


def test_mapper_for_a_run_outside_any_container():
    # A local run: launch.json's pid is already the host pid; the child is in its session.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        grandchild_src = ("import subprocess, sys, time; "
                          "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                          "print(p.pid, flush=True); time.sleep(30)")
        leader = subprocess.Popen([sys.executable, "-c", grandchild_src], stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        try:
            trainer = int(leader.stdout.readline())
            ticks = read_stat(leader.pid).start_ticks
            procs = [{"pid": trainer}, {"pid": child.pid}]
            mapper = RunPidMapper()
            assert mapper.annotate(procs, leader.pid, ticks) == leader.pid
            assert procs[0]["is_run_process"] and procs[0]["container_pid"] is None
            assert not procs[1]["is_run_process"]
        finally:
            os.killpg(leader.pid, signal.SIGKILL)   # the leader's own group: it and the trainer
            leader.wait()
    finally:
        child.kill()
        child.wait()


def test_gone_process_reads_as_nothing():
    assert read_stat(2 ** 22 + 7) is None
    assert read_nspid(2 ** 22 + 7) == ()
    assert not belongs_to(2 ** 22 + 7, 1)


async def test_host_agent_probe_marks_a_containers_run(container):
    """The whole remote path on one machine: the host agent's gpu.sample op (fake NVML that
    lists the container's trainer by HOST pid) is asked about the run by its CONTAINER pid
    and start ticks, as launch.json records them, and marks the trainer as the run's."""
    from dflash_tui.gpu.agent_probe import OP_NAME, gpu_agent_sources
    from dflash_tui.gpu.codec import snapshot_from_dict
    from dflash_tui.remote.agent import AgentOps
    from dflash_tui.remote.local import LocalTarget

    proc, inner = container()
    host_trainer = _host_pid_of(inner["trainer"], proc.pid)
    host_other = _host_pid_of(inner["other"], proc.pid)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src, DFLASH_FAKE_NVML_GPUS="2",
               DFLASH_FAKE_NVML_PROCS=f"1:{host_trainer}:{20 << 30},1:{host_other}:{1 << 30}")
    ops = await AgentOps.start(LocalTarget(env=env), python=sys.executable,
                               extra_sources=gpu_agent_sources("dflash_tui.gpu.fake_nvml:from_env"))
    try:
        snap = snapshot_from_dict(await ops.call(OP_NAME, run_pid=inner["wrapper"],
                                                 run_start_ticks=inner["ticks"]))
        many = await ops.call(OP_NAME, runs=[[inner["wrapper"], inner["ticks"]],
                                             [inner["other"], read_stat(host_other).start_ticks]])
    finally:
        await ops.close()
    assert snap.error is None and snap.gpus[0].processes == ()
    procs = {p.pid: p for p in snap.gpus[1].processes}
    assert procs[host_trainer].is_run_process and procs[host_trainer].container_pid == inner["trainer"]
    assert not procs[host_other].is_run_process and procs[host_other].container_pid == inner["other"]
    assert procs[host_trainer].used_memory_bytes == 20 << 30
    # The same run and the container's other process as a second run, in one request.
    assert many["run_processes"] == [[host_trainer], [host_other]]
    assert {p["pid"]: (p["container_pid"], p["is_run_process"]) for p in many["gpus"][1]["processes"]} == {
        host_trainer: (inner["trainer"], False), host_other: (inner["other"], False)}
