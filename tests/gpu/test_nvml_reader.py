"""NvmlReader against the fake NVML: every field, and every error case as a state."""

from __future__ import annotations

import os

import pynvml
import pytest

from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.codec import ProbeAnswerError, snapshot_from_dict
from dflash_tui.gpu.fake_nvml import FakeGpu, FakeNvml
from dflash_tui.gpu.nvml_reader import REINIT_INTERVAL_S, NvmlReader, nvidia_gpu_present, throttle_reason_names
from dflash_tui.gpu.sample import GpuErrorKind


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def reader_for(fake: FakeNvml, clock: Clock | None = None) -> NvmlReader:
    clock = clock or Clock()
    return NvmlReader(fake_nvml.loader(fake), monotonic=clock)


def test_fake_raises_the_real_pynvml_exception_classes():
    fake = FakeNvml(1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    fake.lose_gpu(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as info:
        fake.nvmlDeviceGetHandleByIndex(0)
    assert info.value.value == pynvml.NVML_ERROR_GPU_IS_LOST


def test_all_fields_of_all_gpus():
    fake = FakeNvml([FakeGpu(load_pct=80, mem_used=10 << 30, ecc_uncorrected=2),
                     FakeGpu(name="NVIDIA A100-SXM4-80GB", load_pct=0)])
    fake.set_processes(0, [(4242, 3 << 30), (4343, None)])
    snap = snapshot_from_dict(reader_for(fake).sample())
    assert snap.error is None and snap.source == "nvml" and snap.driver_version == "570.124.06"
    g0, g1 = snap.gpus
    assert (g0.index, g1.index) == (0, 1)
    assert g1.name == "NVIDIA A100-SXM4-80GB" and g0.uuid.startswith("GPU-")
    assert g0.util_sm_pct == 80.0 and g0.util_mem_pct == 48.0
    assert g0.mem_used_bytes == (13 << 30)          # v2 struct: without the reserved memory
    assert g0.mem_total_bytes == 143771 * 1024 * 1024
    assert g0.temperature_c == 64.0
    assert g0.power_w == pytest.approx(552.0) and g0.power_limit_w == 700.0
    assert (g0.sm_clock_mhz, g0.mem_clock_mhz) == (1980, 2619) and g0.sm_clock_max_mhz == 1980
    assert g1.throttle_reasons == ("gpu_idle",) and g0.throttle_reasons == ()
    assert g0.ecc_errors_uncorrected == 2 and g0.xid_errors == 0
    assert [(p.pid, p.used_memory_bytes) for p in g0.processes] == [(4242, 3 << 30), (4343, None)]
    assert g1.processes == ()
    assert snap.latency_ms is not None and snap.latency_ms >= 0


def test_not_supported_fields_are_none_not_zero():
    fake = FakeNvml([FakeGpu(load_pct=50, unsupported={"power", "ecc", "temperature", "throttle",
                                                       "events", "processes"})])
    g = snapshot_from_dict(reader_for(fake).sample()).gpus[0]
    assert g.power_w is None and g.ecc_errors_uncorrected is None and g.temperature_c is None
    assert g.xid_errors is None            # Xid events not observable here: n/a, not "0 errors"
    assert g.throttle_reasons == () and g.processes == ()
    assert g.power_limit_w == 700.0 and g.util_sm_pct == 50.0   # the rest still reads


def test_power_and_sm_clock_tell_a_spinning_kernel_from_compute():
    fake = FakeNvml([FakeGpu(load_pct=100), FakeGpu(load_pct=100, compute_pct=0), FakeGpu()])
    compute, spin, idle = snapshot_from_dict(reader_for(fake).sample()).gpus
    # Both read 100 % busy at the SMs' top clock; only arithmetic draws the power.
    assert compute.util_sm_pct == spin.util_sm_pct == 100.0
    assert compute.sm_clock_mhz == spin.sm_clock_mhz == spin.sm_clock_max_mhz == 1980
    assert compute.power_w == pytest.approx(672.0) and spin.power_w == pytest.approx(76.0)
    assert idle.power_w == pytest.approx(72.0) and idle.sm_clock_mhz == 345 and idle.sm_clock_max_mhz == 1980


def test_power_and_clock_tops_not_supported_read_none_and_are_not_asked_again():
    fake = FakeNvml([FakeGpu(load_pct=100, unsupported={"power", "power_limit", "max_clocks"})])
    with pytest.raises(pynvml.NVMLError_NotSupported):   # what the real library raises there
        fake.nvmlInit() or fake.nvmlDeviceGetMaxClockInfo(fake.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    reader = reader_for(fake)
    g = snapshot_from_dict(reader.sample()).gpus[0]
    assert (g.power_w, g.power_limit_w, g.sm_clock_max_mhz) == (None, None, None)
    assert g.sm_clock_mhz == 1980 and g.util_sm_pct == 100.0
    asked = []
    fake.nvmlDeviceGetMaxClockInfo = lambda *a: asked.append(a) or 1980   # type: ignore[method-assign]
    assert snapshot_from_dict(reader.sample()).gpus[0].sm_clock_max_mhz is None and asked == []


def test_unknown_fake_field_is_refused():
    with pytest.raises(ValueError, match="unknown fake NVML field"):
        FakeGpu(unsupported={"powr"})


@pytest.mark.parametrize("fake, kind, words", [
    (FakeNvml(library_missing=True), GpuErrorKind.LIBRARY_NOT_FOUND, "libnvidia-ml.so.1"),
    (FakeNvml(driver_loaded=False), GpuErrorKind.NO_DRIVER, "driver not loaded"),
    (FakeNvml(version_mismatch=True), GpuErrorKind.VERSION_MISMATCH, "reboot"),
])
def test_startup_errors_are_states_with_one_line_messages(fake, kind, words):
    snap = snapshot_from_dict(reader_for(fake).sample())
    assert snap.gpus == ()
    assert snap.error is not None and snap.error.kind is kind
    assert words in snap.error.message and "\n" not in snap.error.message


def test_missing_pynvml_module():
    reader = NvmlReader(fake_nvml.missing_module_loader())
    snap = snapshot_from_dict(reader.sample())
    assert snap.error.kind is GpuErrorKind.LIBRARY_NOT_FOUND
    assert "pip install nvidia-ml-py" in snap.error.message


def test_nvml_is_initialised_once_across_samples():
    fake = FakeNvml(8)
    reader = reader_for(fake)
    for _ in range(20):
        assert reader.sample()["error"] is None
    assert fake.init_calls == 1


def test_gpu_lost_mid_run_then_recovered_after_reinit():
    clock = Clock()
    fake = FakeNvml(3)
    reader = reader_for(fake, clock)
    assert reader.sample()["error"] is None
    fake.inject_xid(1, 79)
    fake.lose_gpu(1)
    clock.t += REINIT_INTERVAL_S  # due for a re-init: the reader retries at the slow pace
    snap = snapshot_from_dict(reader.sample())
    assert snap.error.kind is GpuErrorKind.GPU_LOST and snap.error.gpu_index == 1
    assert "fell off the bus" in snap.error.message and "Xid 79" in snap.error.message
    lost = snap.gpus[1]
    assert lost.lost and lost.util_sm_pct is None and lost.last_xid == 79 and lost.xid_errors == 1
    assert not snap.gpus[0].lost and snap.gpus[0].util_sm_pct is not None
    # Still lost after the re-init (its handle cannot be had): reported, never dropped.
    snap = snapshot_from_dict(reader.sample())
    assert fake.init_calls == 2
    assert [g.lost for g in snap.gpus] == [False, True, False]
    assert snap.gpus[1].uuid == fake.gpus[1].uuid
    # Back after a reset: the next due re-init (the pace has backed off to 2x) sees it again.
    fake.recover_gpu(1)
    clock.t += REINIT_INTERVAL_S
    assert snapshot_from_dict(reader.sample()).gpus[1].lost       # not due yet
    assert fake.init_calls == 2
    clock.t += REINIT_INTERVAL_S
    reader.sample()
    snap = snapshot_from_dict(reader.sample())
    assert snap.error is None and not any(g.lost for g in snap.gpus)


def test_gpu_missing_after_reinit_is_reported_lost():
    clock = Clock()
    fake = FakeNvml(2)
    reader = reader_for(fake, clock)
    reader.sample()
    fake.lose_gpu(1)
    clock.t += REINIT_INTERVAL_S
    reader.sample()                          # notices the loss, schedules the re-init
    gone = fake.gpus.pop(1)                  # after the re-init NVML no longer lists it
    snap = snapshot_from_dict(reader.sample())
    assert [g.uuid for g in snap.gpus] == [fake.gpus[0].uuid, gone.uuid]
    assert snap.gpus[1].lost and snap.error.kind is GpuErrorKind.GPU_LOST


def test_driver_unloaded_mid_run_reinitialises_at_slow_pace():
    clock = Clock()
    fake = FakeNvml(2)
    reader = reader_for(fake, clock)
    reader.sample()
    fake.unload_driver()
    snap = snapshot_from_dict(reader.sample())
    assert snap.error.kind is GpuErrorKind.NO_DRIVER and snap.gpus == ()
    calls = fake.init_calls
    for _ in range(5):                       # retries are rate-limited, not once a sample
        assert snapshot_from_dict(reader.sample()).error.kind is GpuErrorKind.NO_DRIVER
    assert fake.init_calls - calls <= 1
    fake.load_driver()
    clock.t += REINIT_INTERVAL_S
    assert snapshot_from_dict(reader.sample()).error is None


def test_xid_events_counted_per_gpu():
    fake = FakeNvml(2)
    reader = reader_for(fake)
    reader.sample()
    fake.inject_xid(0, 13)
    fake.inject_xid(0, 31)
    g0, g1 = snapshot_from_dict(reader.sample()).gpus
    assert (g0.xid_errors, g0.last_xid) == (2, 31)
    assert (g1.xid_errors, g1.last_xid) == (0, None)


def test_throttle_reason_names():
    assert throttle_reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert throttle_reason_names(0) == [] and throttle_reason_names(None) == []


@pytest.mark.parametrize("bad", [None, [], {"gpus": []}, {"time": 1, "gpus": "x"},
                                 {"time": 1, "gpus": [{"name": "no index"}]},
                                 {"time": 1, "gpus": [{"index": 0, "power_w": "hot"}]}])
def test_codec_rejects_garbage(bad):
    with pytest.raises(ProbeAnswerError):
        snapshot_from_dict(bad)


def test_reinit_backs_off_while_a_gpu_stays_lost():
    clock = Clock()
    fake = FakeNvml(2)
    reader = reader_for(fake, clock)
    reader.sample()
    fake.lose_gpu(1)
    for _ in range(600):                      # ten minutes at 1 Hz
        clock.t += 1.0
        assert reader.sample()["error"]["kind"] == "gpu_lost"
    # 10, 20, 40, 80, 160, 300 s apart: a handful of nvmlInit calls, not sixty.
    assert 4 <= fake.init_calls <= 7


def test_a_gpu_that_cannot_be_opened_does_not_hide_the_others():
    fake = FakeNvml([FakeGpu(), FakeGpu(open_error=pynvml.NVML_ERROR_NO_PERMISSION), FakeGpu()])
    snap = snapshot_from_dict(reader_for(fake).sample())
    assert [g.index for g in snap.gpus] == [0, 2]
    assert snap.error.kind is GpuErrorKind.UNKNOWN and snap.error.gpu_index == 1
    assert "GPU 1 cannot be opened: Insufficient Permissions" == snap.error.message


def pci_root(tmp_path, *devices: tuple[str, str]):
    """A /sys with the given (vendor, class) PCI functions, as the kernel lays them out."""
    base = tmp_path / "sys" / "bus" / "pci" / "devices"
    base.mkdir(parents=True)
    for i, (vendor, cls) in enumerate(devices):
        d = base / f"0000:00:{i:02x}.0"
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
    return tmp_path / "sys"


@pytest.mark.parametrize("devices, dev_nvidia0, present", [
    ([("0x8086", "0x060000"), ("0x1af4", "0x020000")], False, False),   # this machine's kind
    ([("0x8086", "0x060000"), ("0x10de", "0x030200")], False, True),    # an H200: 3D controller
    ([("0x10de", "0x030000")], False, True),                            # a VGA-class NVIDIA card
    ([("0x10de", "0x040300"), ("0x10de", "0x068000")], False, False),   # NVIDIA audio, NVSwitch only
    ([("0x1af4", "0x020000")], True, True),                             # a container given /dev/nvidia0
    ([], False, None),                                                  # an empty bus: cannot tell
])
def test_nvidia_gpu_present_reads_the_pci_bus(tmp_path, devices, dev_nvidia0, present):
    dev = tmp_path / "dev"
    dev.mkdir()
    if dev_nvidia0:
        (dev / "nvidia0").write_text("")
    assert nvidia_gpu_present(str(pci_root(tmp_path, *devices)), str(dev)) is present
    assert nvidia_gpu_present(str(tmp_path / "no-sys"), str(tmp_path / "no-dev")) is None


@pytest.mark.parametrize("load", [fake_nvml.missing_module_loader(),
                                  fake_nvml.loader(FakeNvml(library_missing=True)),
                                  fake_nvml.loader(FakeNvml(driver_loaded=False))])
def test_a_host_without_an_nvidia_gpu_says_so_instead_of_asking_for_a_driver(tmp_path, load):
    """No pynvml, no libnvidia-ml or no driver on a host whose PCI bus shows no NVIDIA GPU:
    "no GPU" (information), not a request to install the driver utilities."""
    sys_root, dev = str(pci_root(tmp_path, ("0x8086", "0x060000"))), str(tmp_path / "dev")
    snap = snapshot_from_dict(NvmlReader(load, gpu_present=lambda: nvidia_gpu_present(sys_root, dev)).sample())
    assert snap.error.kind is GpuErrorKind.NO_GPU
    assert snap.error.message == f"no NVIDIA GPU on {os.uname().nodename}"


def test_a_host_with_a_gpu_but_no_driver_still_asks_for_the_driver(tmp_path):
    sys_root, dev = str(pci_root(tmp_path, ("0x10de", "0x030200"))), str(tmp_path / "dev")
    for load, kind in ((fake_nvml.missing_module_loader(), GpuErrorKind.LIBRARY_NOT_FOUND),
                       (fake_nvml.loader(FakeNvml(driver_loaded=False)), GpuErrorKind.NO_DRIVER)):
        snap = snapshot_from_dict(NvmlReader(load, gpu_present=lambda: nvidia_gpu_present(sys_root, dev)).sample())
        assert snap.error.kind is kind
    # A stand-in NVML (no gpu_present) is never second-guessed by this machine's bus.
    snap = snapshot_from_dict(NvmlReader(fake_nvml.loader(FakeNvml(library_missing=True))).sample())
    assert snap.error.kind is GpuErrorKind.LIBRARY_NOT_FOUND
