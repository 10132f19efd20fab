"""NVML's per-process utilisation into GpuProcess.sm_util_pct / mem_util_pct: the run's own
share of the GPU, never another process's. The stand-in fails as the driver does: NotFound when
no process used the GPU since the timestamp asked, NotSupported where there is no per-process
accounting (then it is not asked again)."""

from __future__ import annotations

import time

import pynvml
import pytest

from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.codec import snapshot_from_dict
from dflash_tui.gpu.fake_nvml import FakeGpu, FakeNvml
from dflash_tui.gpu.nvml_reader import NvmlReader


def read(reader: NvmlReader):
    return snapshot_from_dict(reader.sample())


def test_fake_fails_as_the_driver_does():
    fake = FakeNvml([FakeGpu(), FakeGpu(unsupported={"process_utilization"})])
    fake.nvmlInit()
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetProcessUtilization(h0, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetProcessUtilization(h1, 0)
    fake.set_process_util(0, {812: (97, 40)})
    samples = fake.nvmlDeviceGetProcessUtilization(h0, int((time.time() - 1) * 1e6))
    assert 4 <= len(samples) <= 7 and {s.pid for s in samples} == {812}
    newest = max(s.timeStamp for s in samples)
    with pytest.raises(pynvml.NVMLError_NotFound):     # nothing newer than what was read
        fake.nvmlDeviceGetProcessUtilization(h0, newest + 10_000_000)


def test_each_process_gets_its_own_share():
    fake = FakeNvml([FakeGpu(load_pct=100), FakeGpu(load_pct=0), FakeGpu(load_pct=50, unsupported={"process_utilization"}),
                     FakeGpu(load_pct=100)])
    fake.set_processes(0, [(812, 3 << 30), (999, 1 << 30)])     # the run's rank, another user's job
    fake.set_processes(1, [(813, 1 << 30)])
    fake.set_processes(2, [(814, 1 << 30)])
    # Busy, yet no per-process sample (as in a gVisor sandbox on the H200): nobody's share known.
    fake.set_processes(3, [(815, 1 << 30)])
    fake.set_process_util(0, {999: (100, 55)})                    # only the other job computes
    calls = []
    real = fake.nvmlDeviceGetProcessUtilization

    def counted(handle, stamp):
        calls.append((handle.index, stamp))
        return real(handle, stamp)
    fake.nvmlDeviceGetProcessUtilization = counted
    reader = NvmlReader(fake_nvml.loader(fake))
    g0, g1, g2, g3 = read(reader).gpus
    by_pid = {p.pid: p for p in g0.processes}
    assert g0.util_sm_pct == 100.0                                # the GPU is busy ...
    assert (by_pid[812].sm_util_pct, by_pid[812].mem_util_pct) == (0.0, 0.0)   # ... but not with the run
    assert (by_pid[999].sm_util_pct, by_pid[999].mem_util_pct) == (100.0, 55.0)
    assert [(p.pid, p.sm_util_pct) for p in g1.processes] == [(813, 0.0)]       # idle GPU: NotFound
    assert [(p.pid, p.sm_util_pct, p.mem_util_pct) for p in g2.processes] == [(814, None, None)]
    assert [(p.pid, p.sm_util_pct) for p in g3.processes] == [(815, None)]
    first_since = {i: s for i, s in calls}
    assert abs(first_since[0] / 1e6 - (time.time() - 2.0)) < 5

    fake.set_process_util(0, {812: (90, 30), 999: (10, 5)})      # now the run computes
    time.sleep(0.4)
    calls.clear()
    g0, _, g2, _ = read(reader).gpus
    by_pid = {p.pid: p for p in g0.processes}
    assert by_pid[812].sm_util_pct == 90.0 and by_pid[999].sm_util_pct == 10.0
    # Asked from the newest sample read before, and never again where it is not supported.
    assert [i for i, _ in calls] == [0, 1, 3] and calls[0][1] > first_since[0]
    assert g2.processes[0].sm_util_pct is None
