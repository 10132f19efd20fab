"""GpuStream (one sampler, many subscribers, bounded history) and the sources behind it:
in-process NVML on a thread, and the host agent's gpu.sample op through a real agent process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.agent_probe import OP_NAME, gpu_agent_sources
from dflash_tui.gpu.fake_nvml import FakeNvml
from dflash_tui.gpu.nspid import read_stat
from dflash_tui.gpu.nvml_reader import nvidia_gpu_present
from dflash_tui.gpu.sample import GpuErrorKind, GpuSnapshot
from dflash_tui.gpu.sources import (AgentNvmlSource, FallbackSource, LocalNvmlSource, RunRef,
                                    SmiStreamSource, open_gpu_source)
from dflash_tui.gpu.stream import GpuStream
from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget

SRC = Path(__file__).resolve().parents[2] / "src"
FIX = Path(__file__).parents[1] / "fixtures" / "nvidia_smi"


class SlowSource:
    """Counts calls; can be made to block, to prove the loop never blocks the event loop."""

    name = "fake"

    def __init__(self, fake: FakeNvml) -> None:
        self.inner = LocalNvmlSource(fake_nvml.loader(fake))
        self.calls = 0
        self.closed = False

    async def sample(self, run=None) -> GpuSnapshot:
        self.calls += 1
        return await self.inner.sample(run)

    async def close(self) -> None:
        self.closed = True
        await self.inner.close()


async def test_subscribers_get_the_same_snapshots_and_history_is_bounded():
    source = SlowSource(FakeNvml(8))
    stream = GpuStream(source, interval=0.02, history=5)
    checklist, dashboard = stream.subscribe(), stream.subscribe()
    async with stream:
        a = [await anext(checklist) for _ in range(3)]
        b = await anext(dashboard)
        await asyncio.sleep(0.25)
    assert b in a or b.time >= a[0].time
    assert all(len(s.gpus) == 8 for s in a)
    assert len(stream.history(0)) == 5                      # bounded, however long it ran
    assert stream.samples_taken > 5
    assert len(stream.series(3, "util_sm_pct")) == 5
    assert source.closed
    with pytest.raises(StopAsyncIteration):                   # subscribers end with the stream
        while True:
            await anext(checklist)


async def test_a_slow_subscriber_only_misses_snapshots():
    stream = GpuStream(SlowSource(FakeNvml(2)), interval=0.01)
    sub = stream.subscribe()
    for _ in range(10):
        await stream.sample_once()
    got = await anext(sub)
    assert got is stream.latest                               # the newest, not the oldest


async def test_nvml_runs_off_the_event_loop():
    # A GPU whose NVML call hangs for 0.3 s must not freeze the loop (the UI would stall).
    fake = FakeNvml(1)
    real = fake.nvmlDeviceGetPowerUsage

    def slow_power(handle):
        time.sleep(0.3)
        return real(handle)

    fake.nvmlDeviceGetPowerUsage = slow_power
    stream = GpuStream(LocalNvmlSource(fake_nvml.loader(fake)), interval=1.0)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.create_task(ticker())
    await stream.sample_once()
    t.cancel()
    assert ticks >= 10


async def test_a_source_that_raises_becomes_a_probe_failed_state():
    class Broken:
        name = "broken"

        async def sample(self, run=None):
            raise RuntimeError("boom")

        async def close(self):
            pass

    snap = await GpuStream(Broken()).sample_once()
    assert snap.error.kind is GpuErrorKind.PROBE_FAILED and "boom" in snap.error.message


async def test_history_follows_the_gpu_not_the_index():
    fake = FakeNvml(2)
    stream = GpuStream(LocalNvmlSource(fake_nvml.loader(fake)))
    await stream.sample_once()
    await stream.sample_once()
    fake.gpus[1].uuid = "GPU-another"
    fake.unload_driver()
    await stream.sample_once()        # NVML down: re-initialised on the next sample
    fake.load_driver()
    await stream.sample_once()
    assert [g.uuid for g in stream.history(1)] == ["GPU-another"]
    assert len(stream.history(0)) == 3
    # The GPU that vanished is still reported (lost) and keeps its own history.
    old = [g for g in stream.latest.gpus if g.lost]
    assert len(old) == 1 and old[0].index == 1 and len(stream.history_of(old[0].uuid)) == 3


async def test_local_source_marks_the_runs_process():
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              start_new_session=True)
    try:
        fake = FakeNvml(2)
        fake.set_processes(1, [(leader.pid, 5 << 30), (os.getpid(), 1 << 30)])
        stream = GpuStream(LocalNvmlSource(fake_nvml.loader(fake)),
                           run=RunRef(leader.pid, read_stat(leader.pid).start_ticks))
        snap = await stream.sample_once()
        procs = {p.pid: p for p in snap.gpus[1].processes}
        assert procs[leader.pid].is_run_process and not procs[os.getpid()].is_run_process
        stream.set_run(RunRef(leader.pid, 1))                # a different start time: not the run
        snap = await stream.sample_once()
        assert not any(p.is_run_process for p in snap.gpus[1].processes)
    finally:
        leader.kill()
        leader.wait()


# -- the probe inside the real agent -----------------------------------------------------------

def agent_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "DFLASH_FAKE_NVML_GPUS": "8", **extra}


async def test_agent_probe_answers_gpu_sample_with_8_fake_gpus():
    ops = await AgentOps.start(LocalTarget(env=agent_env()), python=sys.executable,
                               extra_sources=gpu_agent_sources("dflash_tui.gpu.fake_nvml:from_env"))
    try:
        assert OP_NAME in ops.info["ops"] and not ops.info.get("extras_failed")
        source = AgentNvmlSource(ops)
        me = read_stat(os.getpid())
        snaps = [await source.sample(RunRef(os.getpid(), me.start_ticks)) for _ in range(3)]
        assert all(s.error is None and len(s.gpus) == 8 for s in snaps)
        assert snaps[-1].gpus[7].uuid.startswith("GPU-") and snaps[-1].latency_ms < 50
    finally:
        await ops.close()


async def test_agent_probe_without_pynvml_falls_back_to_nvidia_smi():
    # The agent's python has no pynvml (PYTHONPATH only, a bare interpreter): the probe says
    # so, and the fallback streams nvidia-smi (here the stand-in replaying the H200 recording).
    env = dict(os.environ, PATH=f"{FIX / 'bin'}{os.pathsep}{os.environ['PATH']}",
               NVIDIA_SMI_STANDIN_GPU=str(FIX / "h200_load_query_gpu_lms.csv"))
    target = LocalTarget(env=env)
    ops = await AgentOps.start(target, python="/usr/bin/python3", extra_sources=gpu_agent_sources())
    try:
        raw = await ops.call(OP_NAME)
        if nvidia_gpu_present() is False:
            # This machine's PCI bus shows no NVIDIA GPU: the probe says so, and the fallback
            # still asks nvidia-smi (here a stand-in that shows an H200), which wins.
            assert raw["error"]["kind"] == "no_gpu" and "no NVIDIA GPU" in raw["error"]["message"]
        else:
            assert raw["error"]["kind"] == "library_not_found" and "pynvml" in raw["error"]["message"]
        source = FallbackSource(AgentNvmlSource(ops), lambda: SmiStreamSource(target, interval_ms=100))
        snap = await source.sample(None)
        assert snap.error is None and snap.source == "nvidia-smi" and snap.gpus[0].name == "NVIDIA H200"
        await source.close()
    finally:
        await ops.close()


async def test_no_nvml_and_no_nvidia_smi_says_both():
    target = LocalTarget(env=dict(os.environ, PATH="/usr/bin:/bin"))
    source = FallbackSource(LocalNvmlSource(fake_nvml.missing_module_loader()),
                            lambda: SmiStreamSource(target))
    snap = await source.sample(None)
    assert snap.error.kind is GpuErrorKind.LIBRARY_NOT_FOUND
    assert "pynvml" in snap.error.message and "nvidia-smi" in snap.error.message
    await source.close()


async def test_no_nvidia_gpu_and_no_nvidia_smi_is_said_as_no_gpu():
    """NVML's "no GPU on the bus" and no nvidia-smi either: one line of information, not a
    request for the driver utilities."""
    target = LocalTarget(env=dict(os.environ, PATH="/usr/bin:/bin"))
    source = FallbackSource(LocalNvmlSource(fake_nvml.missing_module_loader(), gpu_present=lambda: False),
                            lambda: SmiStreamSource(target))
    for _ in range(2):
        snap = await source.sample(None)
        assert snap.error.kind is GpuErrorKind.NO_GPU and snap.gpus == ()
        assert snap.error.message.startswith("no NVIDIA GPU on ") and "install" not in snap.error.message
    await source.close()


async def test_open_gpu_source_for_this_machine_never_raises():
    # No GPU here: whatever the machine has (no libnvidia-ml, no nvidia-smi), it is a state.
    source = await open_gpu_source(LocalTarget())
    try:
        snap = await source.sample(None)
        assert isinstance(snap, GpuSnapshot)
        if not snap.gpus:
            assert snap.error is not None and "\n" not in snap.error.message
    finally:
        await source.close()


def test_run_ref_from_launch_record():
    from dflash_tui.contract.rundir import LaunchRecord
    from dflash_tui.gpu.sources import run_ref_from_launch

    rec = LaunchRecord(run_id="r", pid=42, pgid=42, start_ticks=9000, start_time=0.0, argv=["x"])
    assert run_ref_from_launch(rec) == RunRef(42, 9000)
    assert run_ref_from_launch(None) is None


async def test_a_hung_nvml_call_is_a_state_not_a_stall():
    fake = FakeNvml(1)
    real = fake.nvmlDeviceGetPowerUsage
    hang = {"s": 0.8}

    def hung_power(handle):
        time.sleep(hang["s"])
        return real(handle)

    fake.nvmlDeviceGetPowerUsage = hung_power
    source = LocalNvmlSource(fake_nvml.loader(fake), timeout=0.1)
    t0 = time.monotonic()
    snap = await source.sample(None)
    assert time.monotonic() - t0 < 0.5
    assert snap.error.kind is GpuErrorKind.PROBE_FAILED and "not answered" in snap.error.message
    hang["s"] = 0.0
    for _ in range(20):                 # the hung call finishes; its result is used, then fresh ones
        snap = await source.sample(None)
        if snap.error is None:
            break
        await asyncio.sleep(0.1)
    assert snap.error is None and snap.gpus[0].power_w is not None
    assert fake.init_calls == 1         # never a second reader call racing the hung one
    await source.close()


async def test_agent_probe_answers_why_while_nvml_hangs():
    # NVML hangs 4 s per sample: the second request, queued behind it, gets an answer that
    # says why within the probe's 3 s lock wait, instead of a silent client timeout.
    ops = await AgentOps.start(LocalTarget(env=agent_env(DFLASH_FAKE_NVML_GPUS="1",
                                                         DFLASH_FAKE_NVML_HANG_S="4")),
                               python=sys.executable,
                               extra_sources=gpu_agent_sources("dflash_tui.gpu.fake_nvml:from_env"))
    try:
        source = AgentNvmlSource(ops, timeout=8.0)
        first = asyncio.create_task(source.sample(None))
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        second = await source.sample(None)
        assert 2.5 < time.monotonic() - t0 < 4.5
        assert second.error.kind is GpuErrorKind.PROBE_FAILED and "not answered" in second.error.message
        assert (await first).error is None
    finally:
        await ops.close()


# -- one sample for several runs ---------------------------------------------------------------

# A "run" as launch.sh makes one: a session leader (the wrapper) with a trainer child; prints
# the trainer's pid.
RUN_SRC = ("import subprocess, sys, time; "
           "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
           "print(p.pid, flush=True); time.sleep(60)")

# The gpu.sample op of an agent older than `runs`: the same probe, its op taking one run only.
ONE_RUN_OP = '''
def gpu_sample_one_run(run_pid=None, run_start_ticks=None, nvml=None):
    return gpu_sample(run_pid, run_start_ticks, nvml)


register("gpu.sample", gpu_sample_one_run, blocking=True)
'''


def start_runs(n: int) -> list[tuple[subprocess.Popen, int, RunRef]]:
    runs = []
    for _ in range(n):
        leader = subprocess.Popen([sys.executable, "-c", RUN_SRC], stdout=subprocess.PIPE, text=True,
                                  start_new_session=True)
        trainer = int(leader.stdout.readline())
        runs.append((leader, trainer, RunRef(leader.pid, read_stat(leader.pid).start_ticks)))
    return runs


def stop_runs(runs) -> None:
    for leader, _, _ in runs:
        os.killpg(leader.pid, 9)
        leader.wait()


def counting(ops: AgentOps) -> list[dict]:
    """The gpu.sample requests `ops` sends from now on, each its arguments."""
    asked: list[dict] = []
    call = ops.call

    async def counted(op, timeout=None, **args):
        if op == OP_NAME:
            asked.append(args)
        return await call(op, timeout=timeout, **args)

    ops.call = counted   # type: ignore[method-assign]
    return asked


async def test_one_agent_request_serves_several_runs_each_marked_alone():
    """Two real runs with their trainers on GPUs 0 and 1 beside a process of nobody's (this
    test's) on GPU 1: one gpu.sample request for both runs (and a None, which marks nothing),
    each run's snapshot marking its own trainer only; then, against an agent whose op takes one
    run only (older), the same snapshots from one request per run."""
    (la, ta, a), (lb, tb, b) = runs = start_runs(2)
    env = agent_env(DFLASH_FAKE_NVML_GPUS="2",
                    DFLASH_FAKE_NVML_PROCS=f"0:{ta}:{3 << 30},1:{tb}:{5 << 30},1:{os.getpid()}:{1 << 30}")
    fake = gpu_agent_sources("dflash_tui.gpu.fake_nvml:from_env")
    try:
        for extra, per_request in ((fake, 3), ([fake[0] + ONE_RUN_OP], 1)):
            ops = await AgentOps.start(LocalTarget(env=env), python=sys.executable, extra_sources=extra)
            try:
                assert ("runs" in ops.info["args"][OP_NAME]) == (per_request == 3)
                asked = counting(ops)
                source = AgentNvmlSource(ops)
                for _ in range(2):     # the second from the runs' host pids kept by the agent
                    snap_a, none, snap_b = await source.sample_runs([a, None, b])
                    marked = [{p.pid for g in s.gpus for p in g.processes if p.is_run_process}
                              for s in (snap_a, none, snap_b)]
                    assert marked == [{ta}, set(), {tb}]
                    assert all(s.error is None and len(s.gpus) == 2 for s in (snap_a, none, snap_b))
                    assert {p.pid for g in none.gpus for p in g.processes} == {ta, tb, os.getpid()}
                    assert snap_a.gpus[0].processes[0].used_memory_bytes == 3 << 30
                assert len(asked) == 2 * 3 // per_request
                if per_request == 3:
                    assert asked[0]["runs"] == [[a.pid, a.start_ticks], [b.pid, b.start_ticks]]
                else:
                    assert all("runs" not in args for args in asked)
                # The one-run request still answers as it did, beside the new one.
                one = await source.sample(b)
                assert {p.pid for g in one.gpus for p in g.processes if p.is_run_process} == {tb}
            finally:
                await ops.close()
    finally:
        stop_runs(runs)


async def test_the_agent_refuses_malformed_runs_in_one_line():
    ops = await AgentOps.start(LocalTarget(env=agent_env(DFLASH_FAKE_NVML_GPUS="1")), python=sys.executable,
                               extra_sources=gpu_agent_sources("dflash_tui.gpu.fake_nvml:from_env"))
    try:
        for bad in ([[0, 1]], [["1", 2]], [[1, -1]], [[1]], "1,2", [[True, 1]], [[1, 2]] * 257):
            with pytest.raises(Exception, match="runs must be") as err:
                await ops.call(OP_NAME, runs=bad)
            assert "\n" not in str(err.value)
        with pytest.raises(Exception, match="not both"):
            await ops.call(OP_NAME, runs=[[1, 2]], run_pid=1)
        assert (await ops.call(OP_NAME, runs=[]))["run_processes"] == []
    finally:
        await ops.close()


async def test_local_nvml_marks_several_runs_from_one_read():
    fake = FakeNvml(2)
    (la, ta, a), (lb, tb, b) = runs = start_runs(2)
    try:
        fake.set_processes(0, [(ta, 1 << 30), (tb, 2 << 30)])
        reads = 0
        source = LocalNvmlSource(fake_nvml.loader(fake))
        inner_sample = source._reader.sample

        def counted():
            nonlocal reads
            reads += 1
            return inner_sample()

        source._reader.sample = counted
        snap_a, snap_b = await source.sample_runs([a, b])
        assert reads == 1
        assert [p.is_run_process for p in snap_a.gpus[0].processes] == [True, False]
        assert [p.is_run_process for p in snap_b.gpus[0].processes] == [False, True]
        await source.close()
    finally:
        stop_runs(runs)


async def test_a_late_answer_for_other_runs_is_not_taken_for_these():
    """A one-shot probe gives up on a hung sample for run A; the next ask is for run B: when
    the hung read comes back it marks A's processes, so B is asked for again, within B's own
    time bound, and B's snapshot marks B's trainer."""
    from dflash_tui.gpu.oneshot import OneShotGpuProbe

    fake = FakeNvml(1)
    real = fake.nvmlDeviceGetPowerUsage
    hang = {"s": 0.45}     # the read for A: past A's wait, well within B's

    def hung_power(handle):
        time.sleep(hang["s"])
        return real(handle)

    fake.nvmlDeviceGetPowerUsage = hung_power
    (la, ta, a), (lb, tb, b) = runs = start_runs(2)
    fake.set_processes(0, [(ta, 1 << 30), (tb, 2 << 30)])

    async def opener(host, **kw):
        return LocalNvmlSource(fake_nvml.loader(fake))

    probe = OneShotGpuProbe(LocalTarget(), sample_timeout=0.4, opener=opener)
    try:
        first = await probe.sample(a)
        assert first.error is not None and "not answered" in first.error.message
        hang["s"] = 0.0
        t0 = time.monotonic()
        (snap_b,) = await probe.sample_runs([b])
        assert time.monotonic() - t0 < 0.4 + 0.2
        assert snap_b.error is None
        assert {p.pid for p in snap_b.gpus[0].processes if p.is_run_process} == {tb}
    finally:
        await probe.close()
        stop_runs(runs)
