"""The checklist's "gpus" check, on snapshots from the fake NVML through the real reader."""

from __future__ import annotations

import pytest

from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.codec import snapshot_from_dict
from dflash_tui.gpu.fake_nvml import FakeNvml
from dflash_tui.run.verdict.gpu_check import CHECK_ID, cuda_devices, gpu_check
from dflash_tui.gpu.nvml_reader import NvmlReader
from dflash_tui.run.verdict.checklist import CheckState

RUN_PID = 777


def snap_of(fake: FakeNvml, run_pids=(RUN_PID,)):
    """A snapshot where processes with a pid in run_pids are marked as the run's."""
    d = NvmlReader(fake_nvml.loader(fake)).sample()
    for g in d["gpus"]:
        for p in g["processes"]:
            p["is_run_process"] = p["pid"] in run_pids
    return snapshot_from_dict(d)


def test_ok_when_the_run_is_on_all_its_gpus():
    fake = FakeNvml(4)
    for i in range(3):
        fake.set_processes(i, [(RUN_PID, 20 << 30)])
    fake.set_processes(3, [(999, 1 << 30)])        # a neighbour's job on the fourth GPU
    c = gpu_check(snap_of(fake), run_devices=["cuda:0", "cuda:1", "cuda:2", "cuda:2"], compile_done=True)
    assert (c.id, c.state) == (CHECK_ID, CheckState.OK)
    assert "3 GPU(s)" in c.cause and "60.0 GiB" in c.cause


def test_warn_when_a_gpu_of_the_run_has_no_run_process_after_compile():
    fake = FakeNvml(3)
    fake.set_processes(0, [(RUN_PID, 1 << 30)])
    c = gpu_check(snap_of(fake), run_devices=["cuda:0", "cuda:1", "cuda:2"], compile_done=True)
    assert c.state is CheckState.WARN
    assert "uses 3 CUDA devices" in c.cause and "only 1 GPU(s): 0" in c.cause and c.hint


def test_warn_when_no_gpu_shows_the_run_at_all():
    c = gpu_check(snap_of(FakeNvml(2)), run_devices=["cuda:0"], compile_done=True)
    assert c.state is CheckState.WARN and "no GPU shows a process of the run" in c.cause


def test_pending_while_compiling_even_without_run_processes():
    c = gpu_check(snap_of(FakeNvml(2)), run_devices=["cuda:0"], compile_done=False)
    assert c.state is CheckState.PENDING


def test_fail_when_a_gpu_is_lost_whatever_the_run_does():
    fake = FakeNvml(2)
    reader = NvmlReader(fake_nvml.loader(fake), monotonic=lambda: 0.0)
    reader.sample()
    fake.lose_gpu(1)
    snap = snapshot_from_dict(reader.sample())
    for compile_done in (False, True):
        c = gpu_check(snap, run_devices=["cuda:0"], compile_done=compile_done)
        assert c.state is CheckState.FAIL and "fell off the bus" in c.cause and "reset" in c.hint


@pytest.mark.parametrize("fake, words", [
    (FakeNvml(library_missing=True), "libnvidia-ml.so.1"),
    (FakeNvml(driver_loaded=False), "driver not loaded"),
    (FakeNvml(version_mismatch=True), "versions differ"),
])
def test_warn_with_the_reason_when_nvml_is_unavailable(fake, words):
    c = gpu_check(snap_of(fake), run_devices=["cuda:0"], compile_done=True)
    assert c.state is CheckState.WARN and words in c.cause and "\n" not in c.cause


def test_cpu_run_is_ok_without_any_gpu():
    c = gpu_check(snap_of(FakeNvml(library_missing=True)), run_devices=["cpu", "cpu"], compile_done=True)
    assert c.state is CheckState.OK and "no GPU in use" in c.cause
    assert gpu_check(None, run_devices=["cpu"], compile_done=False).state is CheckState.OK


def test_pending_without_data_or_devices():
    assert gpu_check(None, run_devices=["cuda:0"], compile_done=True).state is CheckState.PENDING
    assert gpu_check(snap_of(FakeNvml(1)), run_devices=None, compile_done=False).state is CheckState.PENDING
    c = gpu_check(snap_of(FakeNvml(1)), run_devices=["cuda:0"], compile_done=True, run_alive=False)
    assert c.state is CheckState.PENDING and "not running" in c.cause


def test_cuda_device_names():
    assert cuda_devices(["cuda", "cuda:0", "CUDA:1", "cpu", "mps"]) == {"cuda:0", "cuda:1"}


def test_check_from_status_json():
    from dflash_tui.contract.rundir import ThreadStatus, TrainStatus
    from dflash_tui.run.verdict.gpu_check import gpu_check_for_status

    fake = FakeNvml(2)
    fake.set_processes(0, [(RUN_PID, 1 << 30)])
    snap = snap_of(fake)
    threads = [ThreadStatus("drafter-0", "drafter", "cuda:0", compile_state="compiled"),
               ThreadStatus("drafter-1", "drafter", "cuda:1", compile_state="compiling")]
    st = TrainStatus(run_id="r", pid=RUN_PID, time=0.0, phase="warming", threads=threads)
    assert gpu_check_for_status(snap, st, True).state is CheckState.PENDING    # still compiling
    threads[1].compile_state = "compiled"
    assert gpu_check_for_status(snap, st, True).state is CheckState.WARN       # cuda:1 has no run process
    fake.set_processes(1, [(RUN_PID, 1 << 30)])
    assert gpu_check_for_status(snap_of(fake), st, True).state is CheckState.OK
    assert gpu_check_for_status(snap, None, None).state is CheckState.PENDING


async def test_run_watch_adds_the_gpu_check_from_the_stream(tmp_path):
    """The wiring: a HostWatch with a GPU snapshot provider puts "gpus" into every checklist,
    and HealthTracker keeps its `since` like any other check."""
    from dflash_tui.config import Profile
    from dflash_tui.remote.local import LocalTarget
    from dflash_tui.watch.session import Session
    from dflash_tui.watch import HostWatch

    session = Session(Profile(name="gpu", run_dir=str(tmp_path / "run")),
                      targets=(LocalTarget(), LocalTarget()))
    try:
        monitor = HostWatch(session)
        report = await monitor.poll()
        assert CHECK_ID not in [c.id for c in report.checklist.checks]   # no stream: no check
        monitor.gpus.lend(lambda: snap_of(FakeNvml(library_missing=True)))
        first = await monitor.poll()
        (check,) = [c for c in first.checklist.checks if c.id == CHECK_ID]
        assert check.state is CheckState.WARN and "libnvidia-ml.so.1" in check.cause
        assert check.since is not None
        (again,) = [c for c in (await monitor.poll()).checklist.checks if c.id == CHECK_ID]
        assert again.since == check.since
    finally:
        await session.close()


def no_gpu_snapshot():
    return snapshot_from_dict(NvmlReader(fake_nvml.loader(FakeNvml(library_missing=True)),
                                         gpu_present=lambda: False).sample())


def test_a_host_without_an_nvidia_gpu_is_information_not_a_warning():
    """A user program (devices unknown) or the bundled trainer before it names its devices:
    ok, saying there is no GPU; a run that names CUDA devices there is warned."""
    snap = no_gpu_snapshot()
    for devices in (None, ["cpu"]):
        c = gpu_check(snap, run_devices=devices, compile_done=True)
        assert c.state is CheckState.OK and not c.hint, c
    c = gpu_check(snap, run_devices=None, compile_done=False)
    assert c.state is CheckState.OK and c.cause.startswith("no NVIDIA GPU on "), c
    c = gpu_check(snap, run_devices=["cuda:0", "cuda:1"], compile_done=True)
    assert c.state is CheckState.WARN and "uses 2 CUDA device(s) but no NVIDIA GPU on " in c.cause, c
