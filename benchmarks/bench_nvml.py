"""The NVML of a benchmark's loopback GPU host (fleet_cost.py --gpus): dflash_tui's fake NVML
with that host's runs on its GPUs, each read of it counted.

Every loopback "host" is this machine, so each host's agent is told its own runs by a file:
$DFLASH_BENCH_HOST_RUNS holds the wrappers' pids (comma-separated, written once the runs are
launched, before any dashboard starts). Each wrapper's children (the trainer) are put on the
GPUs in turn ($DFLASH_FAKE_NVML_GPUS of them), as a trainer on a real host would be; and
each read of the GPUs appends its time to $DFLASH_BENCH_HOST_READS, so the benchmark can
count the reads (GPU samples) each dashboard asked for.

Loaded in the host's agent by name: DFLASH_TUI_NVML=benchmarks.bench_nvml:from_env, with the
project's root on the agent's PYTHONPATH (the sshd's SetEnv).
"""

from __future__ import annotations

import os
import time

from dflash_tui.gpu import fake_nvml

ENV_RUNS = "DFLASH_BENCH_HOST_RUNS"
ENV_READS = "DFLASH_BENCH_HOST_READS"

_NVML = None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def from_env():
    global _NVML
    if _NVML is not None:
        return _NVML
    fake = fake_nvml.from_env()
    with open(os.environ[ENV_RUNS]) as fh:
        wrappers = [int(x) for x in fh.read().split(",") if x.strip()]
    per_gpu: dict[int, list[tuple[int, int]]] = {}
    for i, wrapper in enumerate(wrappers):
        for pid in _children(wrapper) or [wrapper]:
            per_gpu.setdefault(i % len(fake.gpus), []).append((pid, (10 + i) << 30))
    for gpu, procs in per_gpu.items():
        fake.set_processes(gpu, procs)
    reads = open(os.environ[ENV_READS], "a", buffering=1)
    memory_info = fake.nvmlDeviceGetMemoryInfo

    def counted_memory_info(handle, *args, **kw):
        if handle.index == 0:     # once per read of the GPUs
            reads.write(f"{time.time():.3f}\n")
        return memory_info(handle, *args, **kw)

    fake.nvmlDeviceGetMemoryInfo = counted_memory_info
    _NVML = fake
    return fake
