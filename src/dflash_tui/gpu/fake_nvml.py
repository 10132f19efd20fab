"""A stand-in for the `pynvml` module, for machines without a GPU (CI, laptops, benchmarks).

It has the same function names and signatures as nvidia-ml-py, raises the SAME exception
classes with the same codes (it re-exports pynvml's `NVMLError` hierarchy, so
`NVMLError(NVML_ERROR_GPU_IS_LOST)` is a real `NVMLError_GpuIsLost`), and enforces the same
rules (calls before `nvmlInit` fail with Uninitialized, init is reference-counted). The
reader cannot tell it from the real module, which is what makes the error tests meaningful.

Failure scenarios, each reproducing what the real library does:
- `FakeNvml(library_missing=True)`: nvmlInit raises LibraryNotFound (no libnvidia-ml.so.1).
- `FakeNvml(driver_loaded=False)` / `.unload_driver()`: DriverNotLoaded.
- `FakeNvml(version_mismatch=True)`: LibRmVersionMismatch (driver upgraded without reboot).
- `FakeGpu(unsupported={"power", ...})`: that getter raises NotSupported (as power and the
  clocks' tops do on some consumer and virtualised GPUs: "max_clocks").
- `FakeGpu(load_pct=100, compute_pct=0)` / `.spin(i)`: a kernel that spins: 100 % busy at the
  top SM clock, drawing about idle power (what an H200 shows under `torch.cuda._sleep`).
- `.lose_gpu(i)`: every call on GPU i, and getting its handle, raises GpuIsLost.
- `FakeGpu(open_error=NVML_ERROR_NO_PERMISSION)`: that GPU's handle cannot be had.
- `.set_processes(i, [(pid, bytes), ...])`, `.inject_xid(i, 79)`.
- `.set_process_util(i, {pid: (sm %, mem %)})`: per-process utilisation samples, a few a
  second per busy process, as the driver keeps them; none since the timestamp asked (an idle
  GPU) raises NotFound, and `FakeGpu(unsupported={"process_utilization"})` NotSupported (as
  on GPUs and vGPUs without per-process accounting).
- `missing_module_loader()`: `import pynvml` itself fails (python package not installed).
- Node faults (`FakeGpu` fields, or `.fault(i, name)` with a name of FAULTS): uncorrectable ECC
  (volatile and aggregate), a page waiting for retirement, a row remap pending or failed, a
  PCIe link trained narrower than its maximum, hardware slowdown and power-brake clock
  reasons, and Xid events queued for whoever registers for the GPU's events (the driver's
  events reach only a listener that was there: an Xid before it is in the kernel log only).
- The total-energy counter integrates the power drawn on the fake's clock (mJ), so that it
  agrees with power integrated over time as the real one does; `unsupported={"energy"}` is a
  GPU older than Volta.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Iterable

import pynvml as _real

NVMLError = _real.NVMLError
NVMLLibraryMismatchError = _real.NVMLLibraryMismatchError
# Every NVML_ERROR_* code and NVMLError_* class, exactly as pynvml defines them.
globals().update({k: v for k, v in vars(_real).items()
                  if k.startswith("NVML_ERROR_") or k.startswith("NVMLError_")})

NVML_TEMPERATURE_GPU = _real.NVML_TEMPERATURE_GPU
NVML_CLOCK_SM = _real.NVML_CLOCK_SM
NVML_CLOCK_MEM = _real.NVML_CLOCK_MEM
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = _real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
NVML_VOLATILE_ECC = _real.NVML_VOLATILE_ECC
NVML_AGGREGATE_ECC = _real.NVML_AGGREGATE_ECC
nvmlEventTypeXidCriticalError = _real.nvmlEventTypeXidCriticalError
nvmlMemory_v2 = _real.nvmlMemory_v2

#: Field groups a FakeGpu can declare unsupported (the getter raises NotSupported).
FIELDS = frozenset({"utilization", "memory", "temperature", "power", "power_limit", "clocks",
                    "max_clocks", "throttle", "ecc", "processes", "events", "process_utilization",
                    "retired_pages", "remapped_rows", "pcie", "energy"})
PROCESS_SAMPLE_S = 1 / 6      # the driver's per-process sampling period


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    uuid: str = ""
    mem_total: int = 143771 * 1024 * 1024      # what an H200 reports, in bytes
    reserved: int = 536 * 1024 * 1024
    power_limit_mw: int = 700_000
    load_pct: float = 0.0                      # drives utilisation, clocks, power, temperature
    # How much of the busy time is arithmetic (drives power and temperature); None: all of it.
    # A kernel that spins on a flag (NCCL waiting for a peer, torch.cuda._sleep) keeps the GPU
    # 100 % busy at the SMs' top clock while it draws about idle power: load_pct=100, compute_pct=0.
    compute_pct: float | None = None
    sm_clock_max: int = 1980                   # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM) of an H200
    mem_used: int = 0
    unsupported: set[str] = field(default_factory=set)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    process_util: dict[int, tuple[float, float]] = field(default_factory=dict)   # pid -> (SM %, mem %)
    ecc_uncorrected: int = 0                   # volatile: since the driver loaded
    ecc_uncorrected_aggregate: int = 0         # over the board's life
    retired_pages: int = 0
    retired_pending: bool = False
    remap_unc_rows: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    energy_mj: float = 4.2e9                   # the counter since the driver loaded
    xids_on_register: list[int] = field(default_factory=list)   # Xids a new listener receives
    throttle_mask: int = 0x1                   # gpu_idle
    lost: bool = False
    open_error: int | None = None              # NVML_ERROR_* that getting its handle raises

    def __post_init__(self) -> None:
        unknown = set(self.unsupported) - FIELDS
        if unknown:
            raise ValueError(f"unknown fake NVML field(s) {sorted(unknown)}; known: {sorted(FIELDS)}")


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


def _power_mw(g: "FakeGpu") -> int:
    """What the GPU draws, mW: 72 W idle, 672 W under full arithmetic, a spinning kernel's few watts."""
    work = _work(g)
    return int(72_000 + work * 6_000 + (g.load_pct - work) * 40)


class FakeNvml:
    """Module-like object: pass it where `pynvml` would go (`NvmlReader(lambda: fake)`)."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def __init__(self, gpus: int | Iterable[FakeGpu] = 1, *, driver_version: str = "570.124.06",
                 library_missing: bool = False, driver_loaded: bool = True,
                 version_mismatch: bool = False) -> None:
        if isinstance(gpus, int):
            gpus = [FakeGpu(load_pct=(i * 37) % 100, mem_used=(i + 1) * 3 << 30) for i in range(gpus)]
        self.gpus: list[FakeGpu] = list(gpus)
        for i, g in enumerate(self.gpus):
            if not g.uuid:
                g.uuid = f"GPU-fa4e0000-0000-4000-8000-{i:012d}"
        self.driver_version = driver_version
        self.library_missing = library_missing
        self.driver_loaded = driver_loaded
        self.version_mismatch = version_mismatch
        self._refcount = 0
        self._lock = threading.Lock()
        self._events: list[SimpleNamespace] = []
        self._event_sets: dict[int, set[int]] = {}
        self.init_calls = 0
        self.calls = 0
        self.clock: Callable[[], float] = time.time    # the driver's timestamps (CPU clock)
        self._energy_at: dict[int, float] = {}          # GPU index -> clock of its counter's last update
        # Set: each counter starts as if its GPU drew its present power since this clock time
        # (from_env's FAKE_DRIVER_LOADED_AT); None: at `FakeGpu.energy_mj`.
        self.energy_since: float | None = None

    # -- scenario controls -----------------------------------------------------------------

    def lose_gpu(self, index: int) -> None:
        self.gpus[index].lost = True

    def recover_gpu(self, index: int) -> None:
        self.gpus[index].lost = False

    def unload_driver(self) -> None:
        self.driver_loaded = False
        self._refcount = 0

    def load_driver(self) -> None:
        self.driver_loaded = True

    def set_processes(self, index: int, procs: list[tuple[int, int | None]]) -> None:
        self.gpus[index].processes = list(procs)

    def set_process_util(self, index: int, util: dict[int, tuple[float, float]]) -> None:
        self.gpus[index].process_util = dict(util)

    def set_load(self, index: int, pct: float, compute_pct: float | None = None) -> None:
        self.gpus[index].load_pct = pct
        self.gpus[index].compute_pct = compute_pct

    def spin(self, index: int) -> None:
        """GPU `index` runs a kernel that spins: always busy, no arithmetic."""
        self.set_load(index, 100.0, 0.0)

    def fault(self, index: int, name: str) -> None:
        """Give GPU `index` the node fault `name` (FAULTS: "ecc", "xid=48", "pcie_x8", ...)."""
        g = self.gpus[index]
        kind, _, value = name.partition("=")
        if kind == "ecc":
            g.ecc_uncorrected += 1
            g.ecc_uncorrected_aggregate += 1
        elif kind == "ecc_aggregate":
            g.ecc_uncorrected_aggregate += 2
        elif kind == "retired_pending":
            g.retired_pages += 1
            g.retired_pending = True
        elif kind == "remap":
            g.remap_unc_rows += 1
            g.remap_pending = True
        elif kind == "remap_failed":
            g.remap_failed = True
        elif kind.startswith("pcie_x") and kind[6:].isdigit():
            g.pcie_width = int(kind[6:])
        elif kind.startswith("pcie_gen") and kind[8:].isdigit():
            g.pcie_gen = int(kind[8:])
        elif kind == "hw_slowdown":
            g.throttle_mask |= 0x8
        elif kind == "power_brake":
            g.throttle_mask |= 0x8 | 0x80
        elif kind == "thermal":
            g.throttle_mask |= 0x40
        elif kind == "xid" and value.isdigit():
            g.xids_on_register.append(int(value))
        elif kind == "no_energy":
            g.unsupported.add("energy")     # a GPU older than Volta: no total-energy counter
        else:
            raise ValueError(f"unknown fake GPU fault {name!r}; known: {', '.join(FAULTS)}")

    def inject_xid(self, index: int, xid: int) -> None:
        with self._lock:
            for members in self._event_sets.values():
                if index in members:
                    self._events.append(SimpleNamespace(
                        device=_Handle(index), eventType=nvmlEventTypeXidCriticalError,
                        eventData=xid, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF))
                    return

    # -- helpers ---------------------------------------------------------------------------

    def _check_ready(self) -> None:
        self.calls += 1
        if not self.driver_loaded:
            raise NVMLError(_real.NVML_ERROR_DRIVER_NOT_LOADED if self._refcount == 0
                            else _real.NVML_ERROR_UNINITIALIZED)
        if self._refcount == 0:
            raise NVMLError(_real.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle, what: str | None = None) -> FakeGpu:
        self._check_ready()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
        if what is not None and what in gpu.unsupported:
            raise NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    # -- the pynvml API --------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.library_missing:
            raise NVMLError(_real.NVML_ERROR_LIBRARY_NOT_FOUND)
        if not self.driver_loaded:
            raise NVMLError(_real.NVML_ERROR_DRIVER_NOT_LOADED)
        if self.version_mismatch:
            raise NVMLError(_real.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
        self._refcount += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        self._check_ready()
        self._refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_ready()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_ready()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check_ready()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
        if self.gpus[index].open_error is not None:
            raise NVMLError(self.gpus[index].open_error)
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        self._gpu(handle)
        return handle.index

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        g = self._gpu(handle, "utilization")
        return SimpleNamespace(gpu=int(g.load_pct), memory=int(g.load_pct * 0.6))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> SimpleNamespace:
        g = self._gpu(handle, "memory")
        used = g.mem_used + sum(m or 0 for _, m in g.processes)
        if version:
            return SimpleNamespace(version=version, total=g.mem_total, reserved=g.reserved,
                                   used=used, free=g.mem_total - g.reserved - used)
        # v1 counts the driver's reservation as used, as the real v1 struct does.
        return SimpleNamespace(total=g.mem_total, used=used + g.reserved,
                               free=g.mem_total - g.reserved - used)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        g = self._gpu(handle, "temperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return int(28 + _work(g) * 0.45)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        """Milliwatts: 72 W idle, 672 W under full arithmetic; a kernel that spins adds a few
        watts for its busy SMs (4 W at 100 %)."""
        return _power_mw(self._gpu(handle, "power"))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu(handle, "power_limit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:
        g = self._gpu(handle, "clocks")
        if clock_type == NVML_CLOCK_SM:
            return 345 if g.load_pct == 0 else 1980
        if clock_type == NVML_CLOCK_MEM:
            return 2619
        raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock_type: int) -> int:
        g = self._gpu(handle, "max_clocks")
        if clock_type == NVML_CLOCK_SM:
            return g.sm_clock_max
        if clock_type == NVML_CLOCK_MEM:
            return 3201
        raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        g = self._gpu(handle, "throttle")
        return g.throttle_mask if g.load_pct == 0 else g.throttle_mask & ~0x1

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        g = self._gpu(handle, "ecc")
        return g.ecc_uncorrected_aggregate if counter_type == NVML_AGGREGATE_ECC else g.ecc_uncorrected

    def nvmlDeviceGetRetiredPages(self, handle: _Handle, source_filter: int) -> list[int]:
        g = self._gpu(handle, "retired_pages")
        # The pending page counts as double-bit, the rest as single-bit: two calls add them up.
        dbe = 1 if g.retired_pending else 0
        n = dbe if source_filter == _real.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else g.retired_pages - dbe
        return [0x1000 * (k + 1) for k in range(max(0, n))]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: _Handle) -> int:
        g = self._gpu(handle, "retired_pages")
        return _real.NVML_FEATURE_ENABLED if g.retired_pending else _real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        g = self._gpu(handle, "remapped_rows")
        return (0, g.remap_unc_rows, int(g.remap_pending), int(g.remap_failed))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        g = self._gpu(handle, "pcie")
        # Like the real link: an idle GPU trains down to gen 1 to save power.
        return 1 if g.load_pct == 0 and g.pcie_gen == g.pcie_gen_max else g.pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._gpu(handle, "pcie").pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return self._gpu(handle, "pcie").pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return self._gpu(handle, "pcie").pcie_width_max

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        """mJ since the driver loaded: the power drawn, integrated on the fake's clock."""
        g = self._gpu(handle, "energy")
        now = self.clock()
        last = self._energy_at.get(handle.index)
        if last is None and self.energy_since is not None:
            last, g.energy_mj = self.energy_since, 0.0
        if last is not None and now > last:
            # the power drawn, not its getter: a hung or unsupported power reading leaves the counter be
            g.energy_mj += _power_mw(g) * (now - last)
        self._energy_at[handle.index] = now
        return int(g.energy_mj)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        g = self._gpu(handle, "processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem, gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for pid, mem in g.processes]

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, timeStamp: int) -> list[SimpleNamespace]:
        """Samples newer than `timeStamp` (µs, CPU clock) of the processes that used the GPU:
        the last second's, one per sampling period per busy process."""
        g = self._gpu(handle, "process_utilization")
        now_us = int(self.clock() * 1e6)
        period = int(PROCESS_SAMPLE_S * 1e6)
        start = max(int(timeStamp), now_us - 1_000_000)
        out = [SimpleNamespace(pid=pid, timeStamp=t, smUtil=int(sm), memUtil=int(mem), encUtil=0, decUtil=0)
               for t in range(start - start % period + period, now_us + 1, period)
               for pid, (sm, mem) in sorted(g.process_util.items()) if sm or mem]
        if not out:
            raise NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return out

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        self._gpu(handle, "processes")
        return []

    def nvmlEventSetCreate(self) -> int:
        self._check_ready()
        with self._lock:
            key = len(self._event_sets) + 1
            self._event_sets[key] = set()
        return key

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: int) -> None:
        g = self._gpu(handle, "events")
        self._event_sets[event_set].add(handle.index)
        for xid in g.xids_on_register:
            self.inject_xid(handle.index, xid)

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> SimpleNamespace:
        self._check_ready()
        with self._lock:
            if self._events:
                return self._events.pop(0)
        raise NVMLError(_real.NVML_ERROR_TIMEOUT)

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, event_set: int) -> None:
        with self._lock:
            self._event_sets.pop(event_set, None)


def _work(g: FakeGpu) -> float:
    """The share of the time the GPU does arithmetic, in %."""
    return g.load_pct if g.compute_pct is None else min(g.load_pct, g.compute_pct)


def loader(fake: FakeNvml) -> Callable[[], FakeNvml]:
    """What `NvmlReader` calls instead of `import pynvml`."""
    return lambda: fake


def missing_module_loader() -> Callable[[], object]:
    """A loader that fails the way `import pynvml` does when nvidia-ml-py is not installed."""

    def load() -> object:
        raise ModuleNotFoundError("No module named 'pynvml'", name="pynvml")

    return load


#: Environment variables read by `from_env` (for agents, demos and benchmarks in a subprocess).
ENV_GPUS = "DFLASH_FAKE_NVML_GPUS"
ENV_SCENARIO = "DFLASH_FAKE_NVML_SCENARIO"
ENV_PROCS = "DFLASH_FAKE_NVML_PROCS"   # "gpu:pid:bytes,gpu:pid:bytes"
ENV_HANG = "DFLASH_FAKE_NVML_HANG_S"   # every power reading takes this long (a failing GPU)
ENV_LOST = "DFLASH_FAKE_NVML_LOST"     # "1,3": these GPUs fell off the bus (Xid 79)
ENV_SPIN = "DFLASH_FAKE_NVML_SPIN"     # "0,2": these GPUs run a kernel that spins (100 % busy, idle power)
ENV_UNSUPPORTED = "DFLASH_FAKE_NVML_UNSUPPORTED"   # "power,max_clocks": getters that raise NotSupported
ENV_FAULTS = "DFLASH_FAKE_NVML_FAULTS"   # "1:ecc,2:pcie_x8,0:xid=48": node faults (FAKE.fault)
#: The names `FakeNvml.fault` knows ("xid=N", "pcie_xN" and "pcie_genN" take a number).
FAULTS = ("ecc", "ecc_aggregate", "retired_pending", "remap", "remap_failed", "pcie_xN", "pcie_genN",
          "hw_slowdown", "power_brake", "thermal", "xid=N", "no_energy")
# When the fakes of every process "loaded the driver": each process's counter starts where a GPU
# drawing its power since then would be, so readings of one GPU by two processes (the launch's
# preflight, a later --check) differ by the energy drawn between them, as the real counter's do.
FAKE_DRIVER_LOADED_AT = 1.7e9
# A later time: the driver "reloaded" then, so every counter restarted from 0 (a test's check
# after a launch read under the default sees its counters go back).
ENV_DRIVER_LOADED_AT = "DFLASH_FAKE_NVML_DRIVER_LOADED_AT"
_SCENARIOS = {"ok": {}, "library_missing": {"library_missing": True},
              "no_driver": {"driver_loaded": False}, "version_mismatch": {"version_mismatch": True}}
_FROM_ENV: FakeNvml | None = None


def from_env() -> FakeNvml:
    """One process-wide fake, shaped by DFLASH_FAKE_NVML_GPUS (default 8),
    DFLASH_FAKE_NVML_SCENARIO (ok | library_missing | no_driver | version_mismatch) and
    DFLASH_FAKE_NVML_PROCS (processes on GPUs, "gpu:pid:bytes,...") and
    DFLASH_FAKE_NVML_HANG_S (seconds each power reading hangs, as on a failing GPU) and
    DFLASH_FAKE_NVML_LOST (indices of GPUs that fell off the bus, "1,3") and
    DFLASH_FAKE_NVML_SPIN (indices of GPUs that run a kernel that spins, "0") and
    DFLASH_FAKE_NVML_UNSUPPORTED (field groups every GPU answers NotSupported for, "power") and
    DFLASH_FAKE_NVML_FAULTS (node faults, "gpu:fault,...": FakeNvml.fault)."""
    global _FROM_ENV
    if _FROM_ENV is None:
        raw = os.environ.get(ENV_GPUS, "8")
        scenario = os.environ.get(ENV_SCENARIO, "ok")
        if not raw.isdigit() or scenario not in _SCENARIOS:
            raise ValueError(f"{ENV_GPUS}={raw!r} / {ENV_SCENARIO}={scenario!r}: expected a GPU "
                             f"count and one of {', '.join(_SCENARIOS)}")
        fake = FakeNvml(int(raw), **_SCENARIOS[scenario])
        procs: dict[int, list[tuple[int, int | None]]] = {}
        for item in filter(None, os.environ.get(ENV_PROCS, "").split(",")):
            try:
                gpu, pid, used = (int(x) for x in item.split(":"))
                procs.setdefault(gpu, []).append((pid, used))
            except ValueError:
                raise ValueError(f"{ENV_PROCS}: {item!r} is not gpu:pid:bytes") from None
        for gpu, plist in procs.items():
            fake.set_processes(gpu, plist)
        for item in filter(None, os.environ.get(ENV_LOST, "").split(",")):
            if not item.strip().isdigit() or int(item) >= len(fake.gpus):
                raise ValueError(f"{ENV_LOST}: {item!r} is not the index of one of the "
                                 f"{len(fake.gpus)} fake GPUs")
            fake.lose_gpu(int(item))
        for item in filter(None, os.environ.get(ENV_SPIN, "").split(",")):
            if not item.strip().isdigit() or int(item) >= len(fake.gpus):
                raise ValueError(f"{ENV_SPIN}: {item!r} is not the index of one of the "
                                 f"{len(fake.gpus)} fake GPUs")
            fake.spin(int(item))
        unsupported = set(filter(None, os.environ.get(ENV_UNSUPPORTED, "").split(",")))
        if unsupported - FIELDS:
            raise ValueError(f"{ENV_UNSUPPORTED}: unknown field(s) {sorted(unsupported - FIELDS)}; "
                             f"known: {', '.join(sorted(FIELDS))}")
        for g in fake.gpus:
            g.unsupported |= unsupported
        for item in filter(None, os.environ.get(ENV_FAULTS, "").split(",")):
            index, _, name = item.partition(":")
            if not index.strip().isdigit() or int(index) >= len(fake.gpus):
                raise ValueError(f"{ENV_FAULTS}: {item!r} is not gpu:fault for one of the "
                                 f"{len(fake.gpus)} fake GPUs")
            fake.fault(int(index), name.strip())
        hang = float(os.environ.get(ENV_HANG, "0") or 0)
        if hang > 0:
            read_power = fake.nvmlDeviceGetPowerUsage

            def hung_power(handle: _Handle) -> int:
                time.sleep(hang)
                return read_power(handle)

            fake.nvmlDeviceGetPowerUsage = hung_power  # type: ignore[method-assign]
        loaded_at = os.environ.get(ENV_DRIVER_LOADED_AT, "")
        try:
            fake.energy_since = float(loaded_at) if loaded_at else FAKE_DRIVER_LOADED_AT
        except ValueError:
            raise ValueError(f"{ENV_DRIVER_LOADED_AT}={loaded_at!r}: expected epoch seconds") from None
        _FROM_ENV = fake
    return _FROM_ENV
