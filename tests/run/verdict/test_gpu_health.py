"""GPU node health: the NVML stand-in's faults read by the real reader, judged by the "gpu_health"
check (run/verdict/gpu_health.py)."""

from __future__ import annotations

import time

import pytest

from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.codec import ProbeAnswerError, snapshot_from_dict
from dflash_tui.gpu.fake_nvml import FakeGpu, FakeNvml
from dflash_tui.gpu.nvml_reader import NvmlReader
from dflash_tui.run.verdict.checklist import CheckState
from dflash_tui.run.verdict.gpu_health import gpu_health_check

OK, WARN, FAIL = CheckState.OK, CheckState.WARN, CheckState.FAIL


def snap(fake: FakeNvml, **kw):
    return snapshot_from_dict(NvmlReader(fake_nvml.loader(fake), **kw).sample())


def test_healthy_gpus_say_what_was_read():
    s = snap(FakeNvml(2))
    g = s.gpus[0]
    assert (g.pcie_width, g.pcie_width_max, g.pcie_gen_max) == (16, 16, 5)
    assert (g.ecc_errors_uncorrected_aggregate, g.remap_pending, g.remap_failed, g.retired_pages_pending) == \
        (0, False, False, False)
    c = gpu_health_check(s, where="n1")
    assert c.id == "gpu_health" and c.state is OK, c
    assert c.cause == "2 GPU(s) on n1 healthy: no uncorrectable ECC, no pending remap, full PCIe width"


@pytest.mark.parametrize("fault, state, words", [
    ("ecc", FAIL, "GPU 1 on n1: 1 uncorrectable ECC error(s) since the driver loaded"),
    ("ecc_aggregate", WARN, "GPU 1 on n1: 2 uncorrectable ECC error(s) over its life"),
    ("retired_pending", FAIL, "GPU 1 on n1: a memory page waits for retirement"),
    ("remap", FAIL, "GPU 1 on n1: a row remap is pending"),
    ("remap_failed", FAIL, "GPU 1 on n1: a row remap failed"),
    ("pcie_x8", FAIL, "GPU 1 on n1: PCIe link x8 of x16"),
    ("xid=48", FAIL, "GPU 1 on n1: Xid 48 (double-bit ECC error)"),
    ("xid=13", WARN, "GPU 1 on n1: Xid 13 (a fault of a program on the GPU)"),
    ("power_brake", WARN, "GPU 1 on n1: clocks held down: HW slowdown, power brake"),
])
def test_each_fault_of_the_stand_in_is_named_with_its_gpu(fault, state, words):
    fake = FakeNvml(2)
    fake.fault(1, fault)
    c = gpu_health_check(snap(fake), where="n1")
    assert (c.state, c.cause) == (state, words), c
    assert c.hint


def test_a_gpu_that_fell_off_the_bus_fails_health():
    fake = FakeNvml(2)
    reader = NvmlReader(fake_nvml.loader(fake))
    reader.sample()
    fake.lose_gpu(0)
    c = gpu_health_check(snapshot_from_dict(reader.sample()))
    assert c.state is FAIL and c.cause.startswith("GPU 0: fell off the bus"), c


def test_link_generation_below_its_top_counts_only_while_busy():
    fake = FakeNvml([FakeGpu(load_pct=0.0), FakeGpu(load_pct=95.0, pcie_gen=3)])
    s = snap(fake)
    assert s.gpus[0].pcie_gen == 1   # idle: trained down to save power, no fault
    c = gpu_health_check(s)
    assert c.state is WARN and c.cause == "GPU 1: PCIe gen 3 of 5 while busy", c


def test_a_fault_off_the_runs_gpus_is_a_warn_during_the_run():
    fake = FakeNvml(2)
    fake.fault(1, "ecc")
    s = snap(fake)
    assert gpu_health_check(s, run_gpus={0}).state is WARN
    assert "no process of the run on it" in gpu_health_check(s, run_gpus={0}).cause
    assert gpu_health_check(s, run_gpus={1}).state is FAIL


def test_several_faults_are_counted():
    fake = FakeNvml(3)
    fake.fault(0, "remap")
    fake.fault(2, "pcie_x4")
    fake.fault(2, "ecc")
    c = gpu_health_check(snap(fake))
    assert c.state is FAIL and c.cause.startswith("GPU 0: a row remap is pending; and 2 more: GPU 2: "), c


def test_fields_the_driver_lacks_are_unknown_not_healthy_zeroes():
    fake = FakeNvml([FakeGpu(unsupported={"ecc", "remapped_rows", "retired_pages", "pcie", "energy"})])
    s = snap(fake)
    g = s.gpus[0]
    assert (g.ecc_errors_uncorrected, g.remap_pending, g.pcie_width, g.energy_mj) == (None, None, None, None)
    c = gpu_health_check(s)
    assert c.state is OK and "not readable on GPU 0" in c.cause, c


def test_slow_health_fields_are_read_again_only_after_their_interval():
    fake = FakeNvml(1)
    reader = NvmlReader(fake_nvml.loader(fake), health_interval=0.3)
    assert snapshot_from_dict(reader.sample()).gpus[0].remap_pending is False
    fake.fault(0, "remap")
    assert snapshot_from_dict(reader.sample()).gpus[0].remap_pending is False   # cached
    time.sleep(0.35)
    assert snapshot_from_dict(reader.sample()).gpus[0].remap_pending is True


def test_the_energy_counter_integrates_the_power_drawn():
    fake = FakeNvml([FakeGpu(load_pct=100.0)])   # 672 W
    reader = NvmlReader(fake_nvml.loader(fake))
    e0 = snapshot_from_dict(reader.sample()).gpus[0].energy_mj
    time.sleep(0.5)
    s = snapshot_from_dict(reader.sample())
    joules = (s.gpus[0].energy_mj - e0) / 1000
    assert 0.4 * 672 < joules < 0.8 * 672, joules


def test_a_health_flag_that_is_not_a_bool_is_a_bad_answer():
    d = NvmlReader(fake_nvml.loader(FakeNvml(1))).sample()
    d["gpus"][0]["remap_pending"] = "yes"
    with pytest.raises(ProbeAnswerError, match="remap_pending"):
        snapshot_from_dict(d)


def test_faults_from_the_environment(monkeypatch):
    monkeypatch.setattr(fake_nvml, "_FROM_ENV", None)
    monkeypatch.setenv(fake_nvml.ENV_GPUS, "2")
    monkeypatch.setenv(fake_nvml.ENV_FAULTS, "1:pcie_x8,0:xid=79")
    fake = fake_nvml.from_env()
    assert fake.gpus[1].pcie_width == 8 and fake.gpus[0].xids_on_register == [79]
    monkeypatch.setattr(fake_nvml, "_FROM_ENV", None)
    monkeypatch.setenv(fake_nvml.ENV_FAULTS, "1:melted")
    with pytest.raises(ValueError, match="unknown fake GPU fault 'melted'"):
        fake_nvml.from_env()
    monkeypatch.setattr(fake_nvml, "_FROM_ENV", None)


def test_kernel_log_xids_are_read_and_recent_node_ones_warn():
    from dflash_tui.gpu.kernel_log import parse_kernel_xids

    now = 1_800_000_000
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 600)) + ",123456+00:00"
    old = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 3 * 86400)) + ",000000+00:00"
    log = parse_kernel_xids(f"dflash-now {now}\n"
                            f"{iso} NVRM: Xid (PCI:0000:3B:00): 79, pid=1234, GPU has fallen off the bus.\n"
                            f"{iso} NVRM: Xid (PCI:0000:3b:00): 13, pid=99, Graphics Exception\n"
                            f"{old} NVRM: Xid (PCI:0000:5e:00): 48, DBE\n"
                            "garbage line\ndflash-dmesg-end\n")
    assert [(x.pci, x.xid) for x in log.xids] == [("0000:3b:00", 79), ("0000:3b:00", 13), ("0000:5e:00", 48)]
    c = gpu_health_check(snap(FakeNvml(1)), where="h1", kernel=log)
    assert c.state is WARN and c.cause == \
        "h1: Xid 79 (fell off the bus) on PCI 0000:3b:00 in the kernel log 10 min ago", c
    # NVML's present fault outranks the log's history.
    fake = FakeNvml(1)
    fake.fault(0, "ecc")
    assert gpu_health_check(snap(fake), kernel=log).state is FAIL
    refused = parse_kernel_xids(f"dflash-now {now}\ndflash-dmesg-refused dmesg: read kernel buffer failed: "
                                "Operation not permitted\ndflash-dmesg-end\n")
    c = gpu_health_check(snap(FakeNvml(1)), kernel=refused)
    assert c.state is OK and "kernel log not read (dmesg: read kernel buffer failed" in c.cause, c
