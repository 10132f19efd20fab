"""Device-list validation: every bad list is a one-line message naming the fix, before any build."""

from __future__ import annotations

import pytest

from dflash_train.devices import DeviceError, parse_device, plan_devices


def test_parse_normalises():
    assert parse_device("cuda") == "cuda:0"
    assert parse_device(" CUDA:3 ") == "cuda:3"
    assert parse_device("cpu:0") == "cpu"


@pytest.mark.parametrize("bad", ["gpu0", "cuda:-1", "tpu", "cuda:x", ""])
def test_unknown_device(bad):
    with pytest.raises(DeviceError) as ei:
        plan_devices("cpu", bad, cuda_count=lambda: 2, cpu_count=4)
    msg = str(ei.value)
    assert "--drafter-devices" in msg and "\n" not in msg


def test_cuda_index_out_of_range_names_what_exists():
    with pytest.raises(DeviceError, match=r"cuda:4 does not exist.*2 CUDA device\(s\), cuda:0..cuda:1"):
        plan_devices("cuda:0", "cuda:1,cuda:4", cuda_count=lambda: 2, cpu_count=4)


def test_cuda_without_gpu():
    with pytest.raises(DeviceError, match="no usable CUDA device"):
        plan_devices("cpu", "cuda:0", cuda_count=lambda: 0, cpu_count=4)


def test_one_drafter_thread_per_gpu_unless_asked():
    with pytest.raises(DeviceError, match="lists cuda:1 2 times but --threads-per-gpu is 1"):
        plan_devices("cuda:0", "cuda:1,cuda:1", cuda_count=lambda: 4, cpu_count=4)
    p = plan_devices("cuda:0", "cuda:0," * 7 + "cuda:0", cuda_count=lambda: 1, cpu_count=4, threads_per_gpu=8)
    assert p.drafter == ("cuda:0",) * 8


def test_more_cpu_threads_than_cores():
    with pytest.raises(DeviceError, match="asks for 3 cpu threads but this machine has 2 core"):
        plan_devices("cpu", "cpu,cpu,cpu", cpu_count=2)


def test_valid_plans():
    p = plan_devices("cpu", "cpu,cpu", cpu_count=2)
    assert p.drafter == ("cpu", "cpu") and not p.uses_cuda
    p = plan_devices("cuda:0,cuda:1", "cuda:2,cuda:3", cuda_count=lambda: 4, cpu_count=2)
    assert p.target == ("cuda:0", "cuda:1") and p.uses_cuda
