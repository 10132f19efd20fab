"""One GPU sample: what NVML (or nvidia-smi) said about each GPU at one moment.

Produced by `gpu/` sources (local pynvml, the remote agent's probe, nvidia-smi CSV), consumed
by the health checklist and the dashboard's GPU pane. A field the driver does not support is
None (shown as n/a), never 0. An error is a state (`GpuSnapshot.error`), never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class GpuErrorKind(str, Enum):
    NO_DRIVER = "no_driver"                # NVML loaded but no driver / no GPU
    LIBRARY_NOT_FOUND = "library_not_found"  # libnvidia-ml.so / pynvml / nvidia-smi missing
    VERSION_MISMATCH = "version_mismatch"  # driver/library version mismatch
    GPU_LOST = "gpu_lost"                  # a GPU fell off the bus
    PROBE_FAILED = "probe_failed"          # the remote probe died or answered garbage
    NO_GPU = "no_gpu"                      # the host has no NVIDIA GPU at all: information, not a fault
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class GpuError:
    kind: GpuErrorKind
    message: str          # one line, names the problem and the fix
    gpu_index: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    pid: int                       # host pid, as NVML reports it
    used_memory_bytes: int | None
    container_pid: int | None = None  # pid inside the run's container (NSpid), if mapped
    is_run_process: bool = False      # belongs to the watched run
    name: str = ""
    user: str = ""                    # owner of the host pid ("" when it could not be read)
    # This process's share of the GPU's SM and memory-controller time over the last sample period
    # (NVML's per-process utilisation), None where the driver does not give it.
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    uuid: str
    util_sm_pct: float | None = None
    util_mem_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None   # the SM clock's top (NVML's max clock; nvidia-smi clocks.max.sm)
    mem_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    ecc_errors_uncorrected: int | None = None
    xid_errors: int | None = None  # Xid events seen since the sampler started (None: not observable)
    processes: tuple[GpuProcess, ...] = ()
    lost: bool = False             # fell off the bus since the last sample
    last_xid: int | None = None    # code of the most recent Xid event (e.g. 79: fell off the bus)
    # Node health (run/verdict/gpu_health.py judges it). None: the driver does not say.
    ecc_errors_uncorrected_aggregate: int | None = None   # over the GPU's life (the volatile one: since the driver loaded)
    retired_pages: int | None = None        # pages retired for ECC errors (pre-Ampere; Ampere+ remaps rows)
    retired_pages_pending: bool | None = None   # a page waits for retirement: the GPU needs a reset
    remapped_rows_uncorrectable: int | None = None   # rows remapped for uncorrectable errors
    remap_pending: bool | None = None       # a row remap waits: the GPU needs a reset
    remap_failed: bool | None = None        # a row remap failed: the GPU needs service
    pcie_gen: int | None = None             # the PCIe link now (the generation drops at idle to save power)
    pcie_gen_max: int | None = None         # the most this GPU and slot can train to
    pcie_width: int | None = None           # lanes now
    pcie_width_max: int | None = None
    energy_mj: int | None = None            # the total-energy counter, mJ since the driver loaded (Volta+)


@dataclass(frozen=True)
class GpuSnapshot:
    time: float                    # epoch seconds when sampled (sampler's clock)
    source: str                    # "nvml" | "nvidia-smi" | "fake" | "none"
    gpus: tuple[GpuSample, ...] = ()
    error: GpuError | None = None
    driver_version: str = ""
    latency_ms: float | None = None  # how long the sample took
    extra: dict = field(default_factory=dict, compare=False)
