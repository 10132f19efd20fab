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
