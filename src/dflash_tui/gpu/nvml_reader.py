"""Read every GPU through NVML into plain, JSON-ready dicts.

This file has two lives. The dashboard imports it to sample local GPUs in-process, and its
source text is sent to the persistent agent on a remote GPU host (see `agent_probe.py`), where
it runs under whatever python3 the host has. So it is stdlib-only, Python 3.8-compatible, has
no package-relative imports and no `from __future__` line (it is concatenated with other probe
sources before it runs).

The NVML module is injected: `NvmlReader(load)` calls `load()` to get it, which on a real host
is `import pynvml` (done lazily, inside the process that samples) and in tests is
`dflash_tui.gpu.fake_nvml`. Errors are answers, never exceptions: a field the driver does not
support is None, a GPU that fell off the bus is a sample with `lost: True`, and a missing
library or driver is the snapshot's `error`. The output keys are the field names of
`gpu/sample.py`'s dataclasses so that `gpu/codec.py` can rebuild them one to one.
"""

import os
import time

try:
    import pwd
except ImportError:  # not on every platform the probe may run on
    pwd = None


def _user_of(proc_dir):
    """The owner of /proc/<pid> by name (its uid as text when it has no passwd entry)."""
    try:
        uid = os.stat(proc_dir).st_uid
    except OSError:
        return ""
    if pwd is not None:
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            pass
    return str(uid)

# NVML return codes (nvml.h; the same numbers pynvml exposes as NVML_ERROR_*). Spelled out
# here because pynvml may not be importable where this runs.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_NO_DATA = 21
NVML_ERROR_GPU_NOT_FOUND = 28

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_FEATURE_ENABLED = 1
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
# Per-process utilisation on the first look covers this much of the driver's recent samples.
PROC_UTIL_FIRST_WINDOW_S = 2.0
NVML_MEMORY_V2 = 0x02000028   # nvmlMemory_v2: "used" without the driver's reserved memory

# Codes that mean "this field is not available here": shown as n/a, never an error.
_FIELD_UNAVAILABLE = frozenset((
    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION, NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NO_DATA, NVML_ERROR_NOT_FOUND,
))
# Codes that mean "this GPU is gone" (fell off the bus, needs a reset).
_GPU_GONE = frozenset((NVML_ERROR_GPU_IS_LOST, NVML_ERROR_GPU_NOT_FOUND, NVML_ERROR_RESET_REQUIRED))
# Codes that mean "NVML as a whole stopped working": re-initialise before the next sample.
_NVML_DOWN = frozenset((
    NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
))

# Clock event ("throttle") reason bits, named as nvidia-smi names its clocks_event_reasons.*
# fields so that both sources report the same words.
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# After NVML failed to start, or a GPU was lost, try again at most this often: nvmlInit costs
# tens of milliseconds, far more than a whole 1 Hz sample.
REINIT_INTERVAL_S = 10.0
# While a GPU stays lost, re-initialising to look for it backs off up to this: without
# persistence mode nvmlInit on a big box can take a second of CPU.
REINIT_MAX_INTERVAL_S = 300.0
# Bound on Xid events drained per sample so a storm cannot stall the sampler.
MAX_EVENTS_PER_SAMPLE = 64
# The memory-health counters (aggregate ECC, retired pages, row remaps) and the link's maximum
# change rarely: read on the first sample and then at most this often, so that the health
# fields cost a 1 Hz sampler about one NVML call per GPU more (the current link and the energy
# counter, read every sample).
HEALTH_INTERVAL_S = 10.0


def throttle_reason_names(mask):
    """Names of the set bits of a clocks-event-reasons mask, in bit order."""
    if mask is None:
        return []
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


def _error_dict(kind, message, gpu_index=None):
    return {"kind": kind, "message": message, "gpu_index": gpu_index}


NVIDIA_PCI_VENDOR = "0x10de"
NO_GPU_MESSAGE = "no NVIDIA GPU on %s"


def nvidia_gpu_present(sys_root="/sys", dev_root="/dev"):
    """Whether this host has an NVIDIA GPU, asked of the hardware rather than of the driver:
    True when /dev/nvidia0 exists (a container given a GPU) or the PCI bus shows an NVIDIA
    display or 3D controller (class 0x03...; NVIDIA's audio and NVSwitch functions do not
    count), False when the bus is readable and shows none, None when it cannot be told (no
    readable or an empty /sys/bus/pci, as in some sandboxes)."""
    if os.path.exists(os.path.join(dev_root, "nvidia0")):
        return True
    base = os.path.join(sys_root, "bus", "pci", "devices")
    try:
        names = os.listdir(base)
    except OSError:
        return None
    if not names:
        return None
    for name in names:
        try:
            with open(os.path.join(base, name, "vendor")) as f:
                if f.read(16).strip().lower() != NVIDIA_PCI_VENDOR:
                    continue
            with open(os.path.join(base, name, "class")) as f:
                if f.read(16).strip().lower().startswith("0x03"):
                    return True
        except (OSError, ValueError):
            continue
    return False


def no_gpu_error():
    """The answer where the host has no NVIDIA GPU: information, not a fault to fix."""
    try:
        host = os.uname().nodename or "this host"
    except (AttributeError, OSError):
        host = "this host"
    return _error_dict("no_gpu", NO_GPU_MESSAGE % host)


def classify_init_error(exc):
    """Map an exception from loading or initialising NVML to a snapshot error dict."""
    code = getattr(exc, "value", None)
    if isinstance(exc, ImportError):
        return _error_dict(
            "library_not_found",
            "python module pynvml not found: pip install nvidia-ml-py (nvidia-smi is used meanwhile)")
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return _error_dict(
            "version_mismatch",
            "pynvml is newer than the NVML library it found: install the nvidia-ml-py that matches the driver")
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return _error_dict(
            "library_not_found",
            "libnvidia-ml.so.1 not found: install the NVIDIA driver, or add its library directory to LD_LIBRARY_PATH")
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return _error_dict(
            "no_driver",
            "NVIDIA driver not loaded: load the kernel module (modprobe nvidia) or check that this host has a GPU")
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return _error_dict(
            "version_mismatch",
            "NVML library and kernel driver versions differ (driver upgraded without reboot?): reboot or reload the nvidia module")
    if code == NVML_ERROR_NO_PERMISSION:
        return _error_dict(
            "no_driver",
            "no permission to open /dev/nvidia*: run as a user in the video group or fix the device permissions")
    if code in _GPU_GONE:
        return _error_dict("gpu_lost", "a GPU fell off the bus during NVML start-up: check dmesg for Xid 79 and reset the GPU")
    return _error_dict("unknown", "NVML failed to start: %s" % _describe(exc))


def _describe(exc):
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


class _Device(object):
    __slots__ = ("index", "handle", "name", "uuid", "lost", "xid_registered", "util_since", "proc_util",
                 "max_sm_clock", "health", "health_at")

    def __init__(self, index, handle, name, uuid):
        self.index = index
        self.handle = handle
        self.name = name
        self.uuid = uuid
        self.lost = False
        self.xid_registered = False
        self.util_since = None    # the newest per-process utilisation sample read (driver µs)
        self.proc_util = True     # False once the driver said NOT_SUPPORTED: not asked again
        self.max_sm_clock = None  # MHz once read; False once the driver cannot give it
        self.health = None        # the slow health fields last read (see HEALTH_INTERVAL_S)
        self.health_at = None     # monotonic time of that read


class NvmlReader(object):
    """Samples all GPUs of this host. nvmlInit happens once, and again only after NVML broke.

    Not thread-safe: one sampler thread (or the agent's single loop) owns a reader.
    """

    def __init__(self, load, clock=time.time, monotonic=time.monotonic, proc_root="/proc",
                 gpu_present=None, health_interval=HEALTH_INTERVAL_S):
        """`gpu_present`: asked when NVML cannot start for want of a library or a driver
        (`nvidia_gpu_present` on a real host; None where the NVML is a stand-in): a host with
        no NVIDIA GPU then answers "no_gpu" instead of asking for a driver it does not need."""
        self._load = load
        self._gpu_present = gpu_present
        self._health_interval = health_interval
        self._clock = clock
        self._monotonic = monotonic
        self._proc_root = proc_root
        self._nvml = None
        self._initialised = False
        self._init_error = None
        self._next_init = 0.0
        self._reinit_interval = REINIT_INTERVAL_S
        self._open_errors = []    # per-GPU errors from the last init (GPU present, not readable)
        self._devices = []
        self._driver = ""
        self._event_set = None
        self._xid_count = {}      # uuid -> Xid events seen since this reader started
        self._last_xid = {}       # uuid -> last Xid code
        self._known = {}          # uuid -> (index, name): GPUs seen once, to report the lost ones
        self._names = {}          # pid -> (process name, user) (cached: pids are reused rarely within a run)

    # -- lifecycle -------------------------------------------------------------------------

    def _init(self):
        now = self._monotonic()
        if now < self._next_init:
            return self._init_error
        self._next_init = now + self._reinit_interval
        self._open_errors = []
        try:
            if self._nvml is None:
                self._nvml = self._load()
            nvml = self._nvml
            nvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError and anything a broken install raises
            self._init_error = self._no_gpu_or(classify_init_error(exc))
            return self._init_error
        self._initialised = True
        try:
            self._driver = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            self._driver = ""
        self._devices = []
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            self._init_error = classify_init_error(exc)
            self._shutdown()
            return self._init_error
        self._event_set = None
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except Exception:
            self._event_set = None
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                dev = _Device(index, handle, _text(nvml.nvmlDeviceGetName(handle)),
                              _text(nvml.nvmlDeviceGetUUID(handle)))
            except Exception as exc:
                code = getattr(exc, "value", None)
                if code in _GPU_GONE:
                    dev = _Device(index, None, self._name_for_index(index), self._uuid_for_index(index))
                    dev.lost = True
                elif code in _NVML_DOWN or code is None:
                    self._init_error = classify_init_error(exc)
                    self._shutdown()
                    return self._init_error
                else:
                    # One GPU NVML cannot open (no permission, needs power...): say so, and
                    # keep sampling the others.
                    self._open_errors.append(_error_dict(
                        "unknown", "GPU %d cannot be opened: %s" % (index, _describe(exc)), index))
                    continue
            if self._event_set is not None and dev.handle is not None:
                try:
                    nvml.nvmlDeviceRegisterEvents(dev.handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
                                                  self._event_set)
                    dev.xid_registered = True
                    self._xid_count.setdefault(dev.uuid, 0)
                except Exception:
                    dev.xid_registered = False
            if not dev.lost:
                self._known[dev.uuid] = (dev.index, dev.name)
            self._devices.append(dev)
        self._init_error = None
        return None

    def _no_gpu_or(self, error):
        if error["kind"] in ("library_not_found", "no_driver") and self._gpu_present is not None:
            try:
                present = self._gpu_present()
            except Exception:
                present = None
            if present is False:
                return no_gpu_error()
        return error

    def _name_for_index(self, index):
        for _uuid, (i, name) in self._known.items():
            if i == index:
                return name
        return ""

    def _uuid_for_index(self, index):
        for uuid, (i, _name) in self._known.items():
            if i == index:
                return uuid
        return "index-%d" % index

    def _shutdown(self):
        nvml = self._nvml
        if nvml is not None and self._event_set is not None:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except Exception:
                pass
        self._event_set = None
        if nvml is not None and self._initialised:
            try:
                nvml.nvmlShutdown()
            except Exception:
                pass
        self._initialised = False
        self._devices = []

    def close(self):
        self._shutdown()

    # -- sampling --------------------------------------------------------------------------

    def sample(self):
        """One snapshot of every GPU, as a dict (see gpu/sample.py for the keys)."""
        t0 = self._monotonic()
        wall = self._clock()
        if not self._initialised:
            err = self._init()
            if not self._initialised:
                return self._snapshot(wall, t0, [], err or self._init_error)
        nvml = self._nvml
        for uuid, codes in self._drain_xid_events().items():
            self._xid_count[uuid] = self._xid_count.get(uuid, 0) + len(codes)
            self._last_xid[uuid] = codes[-1]
        gpus = []
        error = self._open_errors[0] if self._open_errors else None
        seen = set()
        for dev in self._devices:
            seen.add(dev.uuid)
            if dev.lost:
                gpus.append(self._lost_gpu(dev.index, dev.name, dev.uuid))
                continue
            try:
                gpus.append(self._read_gpu(nvml, dev))
            except Exception as exc:
                code = getattr(exc, "value", None)
                if code in _GPU_GONE:
                    dev.lost = True
                    gpus.append(self._lost_gpu(dev.index, dev.name, dev.uuid))
                elif code in _NVML_DOWN:
                    err = classify_init_error(exc)
                    self._shutdown()
                    self._next_init = 0.0
                    return self._snapshot(wall, t0, [], err)
                else:
                    gpus.append(self._lost_gpu(dev.index, dev.name, dev.uuid, lost=False))
                    error = error or _error_dict(
                        "unknown", "GPU %d could not be read: %s" % (dev.index, _describe(exc)), dev.index)
        # A GPU that was present once and is missing after a re-init fell off the bus too.
        for uuid, (index, name) in sorted(self._known.items(), key=lambda kv: kv[1][0]):
            if uuid not in seen:
                gpus.append(self._lost_gpu(index, name, uuid))
        lost = [g for g in gpus if g["lost"]]
        if lost:
            first = lost[0]
            xid = "" if first["last_xid"] is None else ", last Xid %d" % first["last_xid"]
            error = _error_dict(
                "gpu_lost",
                "GPU %d (%s) fell off the bus%s: check dmesg for Xid 79, then reset it (nvidia-smi -r) or reboot"
                % (first["index"], first["uuid"], xid), first["index"])
            # Retry at a slow, growing pace: a reset GPU comes back without restarting us.
            if self._monotonic() >= self._next_init:
                self._shutdown()
                self._reinit_interval = min(self._reinit_interval * 2, REINIT_MAX_INTERVAL_S)
        else:
            self._reinit_interval = REINIT_INTERVAL_S
        gpus.sort(key=lambda g: g["index"])
        return self._snapshot(wall, t0, gpus, error)

    def _snapshot(self, wall, t0, gpus, error):
        return {
            "time": wall,
            "source": "nvml",
            "gpus": gpus,
            "error": error,
            "driver_version": self._driver,
            "latency_ms": (self._monotonic() - t0) * 1000.0,
        }

    def _lost_gpu(self, index, name, uuid, lost=True):
        return {"index": index, "name": name, "uuid": uuid, "util_sm_pct": None, "util_mem_pct": None,
                "mem_used_bytes": None, "mem_total_bytes": None, "temperature_c": None, "power_w": None,
                "power_limit_w": None, "sm_clock_mhz": None, "sm_clock_max_mhz": None, "mem_clock_mhz": None,
                "throttle_reasons": [], "ecc_errors_uncorrected": None,
                "xid_errors": self._xid_count.get(uuid), "last_xid": self._last_xid.get(uuid),
                "processes": [], "lost": lost, "energy_mj": None, "pcie_gen": None, "pcie_width": None}

    def _read_gpu(self, nvml, dev):
        h = dev.handle
        util = _field(nvml.nvmlDeviceGetUtilizationRates, h)
        mem = _memory_info(nvml, h)
        power_mw = _field(nvml.nvmlDeviceGetPowerUsage, h)
        limit_mw = _field(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
        reasons = _throttle_mask(nvml, h)
        ecc = _field(nvml.nvmlDeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                     NVML_VOLATILE_ECC)
        return {
            "index": dev.index,
            "name": dev.name,
            "uuid": dev.uuid,
            "util_sm_pct": None if util is None else float(util.gpu),
            "util_mem_pct": None if util is None else float(util.memory),
            "mem_used_bytes": None if mem is None else int(mem.used),
            "mem_total_bytes": None if mem is None else int(mem.total),
            "temperature_c": _num(_field(nvml.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU)),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
            "sm_clock_mhz": _int(_field(nvml.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM)),
            "sm_clock_max_mhz": self._max_sm_clock(nvml, dev),
            "mem_clock_mhz": _int(_field(nvml.nvmlDeviceGetClockInfo, h, NVML_CLOCK_MEM)),
            "throttle_reasons": throttle_reason_names(reasons),
            "ecc_errors_uncorrected": _int(ecc),
            "xid_errors": self._xid_count.get(dev.uuid) if dev.xid_registered else None,
            "last_xid": self._last_xid.get(dev.uuid),
            "processes": self._with_utilisation(self._processes(nvml, h), self._process_utilisation(nvml, dev),
                                                util),
            "lost": False,
            "energy_mj": _int(_optional(nvml, "nvmlDeviceGetTotalEnergyConsumption", h)),
            "pcie_gen": _int(_optional(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", h)),
            "pcie_width": _int(_optional(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h)),
            **self._health(nvml, dev),
        }

    def _health(self, nvml, dev):
        """The slow health fields of `dev` (uncorrectable ECC since the driver loaded, retired
        pages and their pending retirement, row remaps pending or failed, the link's maximum),
        read again only every `health_interval` seconds."""
        now = self._monotonic()
        if dev.health is not None and now - dev.health_at < self._health_interval:
            return dev.health
        h = dev.handle
        retired = None
        for cause in (NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                      NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
            pages = _optional(nvml, "nvmlDeviceGetRetiredPages", h, cause)
            if pages is not None:
                retired = (retired or 0) + len(pages)
        pending = _optional(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        remap = _optional(nvml, "nvmlDeviceGetRemappedRows", h)
        dev.health = {
            "ecc_errors_uncorrected_aggregate": _int(_field(
                nvml.nvmlDeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)),
            "retired_pages": retired,
            "retired_pages_pending": None if pending is None else int(pending) == NVML_FEATURE_ENABLED,
            "remapped_rows_uncorrectable": None if remap is None else int(remap[1]),
            "remap_pending": None if remap is None else bool(remap[2]),
            "remap_failed": None if remap is None else bool(remap[3]),
            "pcie_gen_max": _int(_optional(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", h)),
            "pcie_width_max": _int(_optional(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h)),
        }
        dev.health_at = now
        return dev.health

    @staticmethod
    def _max_sm_clock(nvml, dev):
        """The SM clock's top, read once per device: a fixed property of the board, and one
        NVML call fewer per GPU per sample. Not supported here: None, and not asked again."""
        if dev.max_sm_clock is False:
            return None
        if dev.max_sm_clock is None:
            fn = getattr(nvml, "nvmlDeviceGetMaxClockInfo", None)
            value = None if fn is None else _int(_field(fn, dev.handle, NVML_CLOCK_SM))
            dev.max_sm_clock = False if value is None else value
            return value
        return dev.max_sm_clock

    def _process_utilisation(self, nvml, dev):
        """{pid: (SM %, memory %)} over the samples since the last look (NVML keeps a short ring
        of per-process samples, a few a second): the run's own share of the GPU, so another
        user's kernel is never read as the run's. None where the driver does not give it; {}
        when it has no sample since (NVML_ERROR_NOT_FOUND: on an idle GPU, no process used it)."""
        fn = getattr(nvml, "nvmlDeviceGetProcessUtilization", None)
        if fn is None or not dev.proc_util:
            return None
        since = dev.util_since
        if since is None:
            since = int((self._clock() - PROC_UTIL_FIRST_WINDOW_S) * 1e6)
        try:
            samples = fn(dev.handle, since)
        except Exception as exc:
            code = getattr(exc, "value", None)
            # pynvml raises NVMLError(NVML_SUCCESS) when the size query finds no sample at all.
            if code in (NVML_ERROR_NOT_FOUND, NVML_SUCCESS):
                return {}
            if code in _GPU_GONE or code in _NVML_DOWN:
                raise
            if code == NVML_ERROR_NOT_SUPPORTED:
                dev.proc_util = False
            if code in _FIELD_UNAVAILABLE or type(exc).__name__ == "NVMLLibraryMismatchError":
                return None
            raise
        sums = {}
        for smp in samples or ():
            pid, stamp = int(smp.pid), int(smp.timeStamp)
            if stamp <= since:
                continue
            sm, mem, n = sums.get(pid, (0, 0, 0))
            sums[pid] = (sm + int(smp.smUtil), mem + int(smp.memUtil), n + 1)
            if dev.util_since is None or stamp > dev.util_since:
                dev.util_since = stamp
        return {pid: (sm / float(n), mem / float(n)) for pid, (sm, mem, n) in sums.items()}

    @staticmethod
    def _with_utilisation(procs, util, device_util):
        # No sample at all while the GPU as a whole is busy (seen where processes live in another
        # pid namespace, e.g. a gVisor sandbox): nobody's share is known, not everybody's 0.
        if util == {} and (device_util is None or float(device_util.gpu) > 0):
            util = None
        for p in procs:
            if util is None:
                p["sm_util_pct"] = p["mem_util_pct"] = None
            else:
                p["sm_util_pct"], p["mem_util_pct"] = util.get(p["pid"], (0.0, 0.0))
        return procs

    def _processes(self, nvml, handle):
        seen = {}
        for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(nvml, fn_name, None)
            if fn is None:
                continue
            procs = _field(fn, handle)
            for p in procs or ():
                used = getattr(p, "usedGpuMemory", None)
                pid = int(p.pid)
                if pid in seen and seen[pid]["used_memory_bytes"] is not None:
                    continue  # same process as a compute and a graphics client: count it once
                name, user = self._process_owner(pid)
                seen[pid] = {"pid": pid, "used_memory_bytes": None if used is None else int(used),
                             "name": name, "user": user}
        return [seen[pid] for pid in sorted(seen)]

    def _process_owner(self, pid):
        """(comm, user name) of a host pid; "" for what cannot be read (another namespace)."""
        known = self._names.get(pid)
        if known is None:
            try:
                with open("%s/%d/comm" % (self._proc_root, pid)) as fh:
                    name = fh.read().strip()
            except (OSError, ValueError):
                name = ""
            known = (name, _user_of("%s/%d" % (self._proc_root, pid)))
            if len(self._names) > 4096:
                self._names.clear()
            self._names[pid] = known
        return known

    def _drain_xid_events(self):
        """Xid events since the last sample, as {uuid: [xid, ...]} (non-blocking)."""
        out = {}
        if self._event_set is None:
            return out
        nvml = self._nvml
        for _ in range(MAX_EVENTS_PER_SAMPLE):
            try:
                data = nvml.nvmlEventSetWait(self._event_set, 0)
            except Exception:
                break  # NVML_ERROR_TIMEOUT: nothing pending (or events unsupported here)
            if not (int(data.eventType) & NVML_EVENT_TYPE_XID_CRITICAL_ERROR):
                continue
            # Match the event's handle against ours rather than asking NVML for its UUID: the
            # GPU behind an Xid 79 no longer answers.
            key = _handle_key(data.device)
            uuid = None
            for dev in self._devices:
                if dev.handle is not None and _handle_key(dev.handle) == key:
                    uuid = dev.uuid
            if uuid is not None:
                out.setdefault(uuid, []).append(int(data.eventData))
        return out


def _field(fn, *args):
    """Call one NVML getter; a value the driver cannot give here is None.

    GPU-lost and NVML-down errors propagate: they change the state of the whole sample.
    """
    try:
        return fn(*args)
    except Exception as exc:
        code = getattr(exc, "value", None)
        if code in _GPU_GONE or code in _NVML_DOWN:
            raise
        if code in _FIELD_UNAVAILABLE or type(exc).__name__ == "NVMLLibraryMismatchError":
            return None
        raise


def _optional(nvml, name, *args):
    """`_field` of a getter an older pynvml may not have (None then)."""
    fn = getattr(nvml, name, None)
    return None if fn is None else _field(fn, *args)


def _memory_info(nvml, handle):
    # nvidia-smi reports memory.used from the v2 struct (without reserved memory); ask for the
    # same so that both sources agree, and fall back to v1 where the driver lacks v2.
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=NVML_MEMORY_V2)
    except TypeError:
        pass
    except Exception as exc:
        code = getattr(exc, "value", None)
        if code in _GPU_GONE or code in _NVML_DOWN:
            raise
    return _field(nvml.nvmlDeviceGetMemoryInfo, handle)


def _throttle_mask(nvml, handle):
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(nvml, name, None)
        if fn is not None:
            value = _field(fn, handle)
            if value is not None:
                return int(value)
    return None


def _handle_key(handle):
    """A comparable identity for a device handle (pynvml's are ctypes pointers)."""
    try:
        import ctypes
        return ctypes.cast(handle, ctypes.c_void_p).value
    except Exception:  # not a ctypes pointer (the fake's handles): fall back to its index
        return ("index", getattr(handle, "index", id(handle)))


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _num(value):
    return None if value is None else float(value)


def _int(value):
    return None if value is None else int(value)
