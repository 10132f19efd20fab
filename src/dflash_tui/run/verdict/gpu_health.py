"""The "gpu_health" check: is each GPU of a node fit to run on, from one GpuSnapshot.

The faults that make a node relaunch onto the same broken GPU again and again, each read from
NVML on the host (gpu/nvml_reader.py):

- fail    a GPU fell off the bus; uncorrectable ECC errors since the driver loaded (volatile);
          a page waiting for retirement or a row remap pending (both: reset the GPU); a row
          remap that failed (service); the PCIe link trained narrower than its maximum (x8 of
          x16); an Xid event of the node's kind (NODE_XIDS) seen by the sampler
- warn    uncorrectable ECC errors over the board's life only (already remapped or retired);
          hardware slowdown, power brake or hardware thermal slowdown of the clocks; a busy GPU
          whose link runs below its top generation (an idle one trains down to save power); an
          Xid of the program's own kind (13, 31, 43: an illegal access, a fault of the code);
          the health could not be read (the reason)
- ok      every GPU readable and none of the above (a host with no NVIDIA GPU: said as such)

The preflight runs it on the node before a launch (a fail refuses the launch, naming the GPU
and the reason); a run's checklist carries it beside "gpus" (run/verdict/health.py
`with_gpu_check`), where a fault on a GPU that holds none of the run's processes, while
others do, is a warn: the node is sick, the run is not on that GPU. It never changes the
verdict by itself (a GPU that fell off the bus is GPU LOST through the "gpus" check).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...gpu.kernel_log import KernelLog
from ...gpu.sample import GpuErrorKind, GpuSample, GpuSnapshot
from .checklist import Check, CheckId, CheckState

CHECK_ID = CheckId.GPU_HEALTH
OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

# Xid codes that say the node's hardware or driver failed, not the program (NVIDIA's Xid
# catalogue): double-bit ECC, row remap events and failures, NVLink, fell off the bus, a high
# single-bit rate, contained/uncontained ECC, GSP errors, an unrecovered ECC error.
NODE_XIDS = {48: "double-bit ECC error", 62: "internal micro-controller halt", 63: "row remap recorded",
             64: "row remap failed", 74: "NVLink error", 79: "fell off the bus", 92: "high single-bit ECC rate",
             94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP timeout", 120: "GSP error",
             140: "unrecovered ECC error"}
# Throttle reasons that name the hardware, not a setting: a slowed GPU drags every rank.
HW_THROTTLES = {"hw_slowdown": "HW slowdown", "hw_power_brake_slowdown": "power brake",
                "hw_thermal_slowdown": "HW thermal slowdown"}
# A node Xid in the host's kernel log this recent is a warn in the preflight: history, where NVML
# says the present (a GPU still broken fails through its own fields).
KERNEL_XID_WINDOW_S = 24 * 3600.0
# A link below its top generation is judged only while the GPU is this busy (at idle the link
# trains down to save power, which is no fault).
BUSY_FOR_LINK_PCT = 50.0


@dataclass(frozen=True)
class GpuFault:
    index: int
    state: CheckState      # FAIL or WARN
    reason: str            # "1 uncorrectable ECC error since the driver loaded"
    hint: str
    kind: str = ""         # lost, ecc, retired, remap, remap_failed, pcie_width, xid, ecc_life, clocks, pcie_gen


def gpu_faults(g: GpuSample) -> list[GpuFault]:
    """Every fault of one GPU, the failing ones first."""
    out: list[GpuFault] = []

    def add(kind: str, state: CheckState, reason: str, hint: str) -> None:
        out.append(GpuFault(g.index, state, reason, hint, kind))

    reset = "drain the node and reset the GPU (nvidia-smi -r) or reboot, then launch"
    if g.lost:
        add("lost", FAIL, f"fell off the bus (Xid {g.last_xid or 79})", "check dmesg for Xid 79; " + reset)
        return out
    if g.ecc_errors_uncorrected:
        add("ecc", FAIL, f"{g.ecc_errors_uncorrected} uncorrectable ECC error(s) since the driver loaded", reset)
    if g.retired_pages_pending:
        add("retired", FAIL, "a memory page waits for retirement", reset)
    if g.remap_pending:
        add("remap", FAIL, "a row remap is pending", reset)
    if g.remap_failed:
        add("remap_failed", FAIL, "a row remap failed", "the GPU needs service (RMA): exclude the node")
    if g.pcie_width is not None and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
        add("pcie_width", FAIL, f"PCIe link x{g.pcie_width} of x{g.pcie_width_max}",
            "reseat the GPU or check the riser/slot: every host-device copy runs at a fraction")
    if g.last_xid in NODE_XIDS:
        add("xid", FAIL, f"Xid {g.last_xid} ({NODE_XIDS[g.last_xid]})", "check dmesg; " + reset)
    elif g.last_xid is not None:
        add("xid", WARN, f"Xid {g.last_xid} (a fault of a program on the GPU)", "see dmesg for the process")
    if not g.ecc_errors_uncorrected and g.ecc_errors_uncorrected_aggregate:
        add("ecc_life", WARN, f"{g.ecc_errors_uncorrected_aggregate} uncorrectable ECC error(s) over its life",
            "watch it: more of them is a GPU to replace")
    hw = [HW_THROTTLES[r] for r in g.throttle_reasons if r in HW_THROTTLES]
    if hw:
        add("clocks", WARN, f"clocks held down: {', '.join(hw)}", "check the node's cooling and power supply")
    if (g.pcie_gen is not None and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max
            and (g.util_sm_pct or 0) >= BUSY_FOR_LINK_PCT):
        add("pcie_gen", WARN, f"PCIe gen {g.pcie_gen} of {g.pcie_gen_max} while busy", "check the slot's BIOS link setting")
    out.sort(key=lambda f: f.state is not FAIL)
    return out


def kernel_faults(kernel: KernelLog | None) -> list[str]:
    """The node Xids of the host's kernel log within KERNEL_XID_WINDOW_S, newest first, in words."""
    if kernel is None or kernel.now is None:
        return []
    recent = [x for x in kernel.xids if x.xid in NODE_XIDS and kernel.now - x.time <= KERNEL_XID_WINDOW_S]
    return [f"Xid {x.xid} ({NODE_XIDS[x.xid]}) on PCI {x.pci} in the kernel log "
            f"{_ago(kernel.now - x.time)} ago" for x in sorted(recent, key=lambda x: -x.time)]


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds / 3600:.0f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def gpu_health_check(snap: GpuSnapshot | None, *, where: str = "", run_gpus: set[int] | None = None,
                     kernel: KernelLog | None = None, check_id: CheckId = CHECK_ID) -> Check:
    """The check for one node. `where`: the node's name in the words ("on n2"), "" for one host.
    `run_gpus`: the indices of the GPUs holding the run's processes (None: not known, every
    GPU counts as the run's). `kernel`: the host's kernel log (the preflight's), whose recent
    node Xids warn where NVML finds nothing worse. `check_id`: the preflight's is PRE_GPU_HEALTH."""
    on = f" on {where}" if where else ""
    logged = kernel_faults(kernel)
    if snap is None:
        return Check.of(check_id, PENDING, "no GPU sample yet")
    if snap.error is not None and snap.error.kind is GpuErrorKind.NO_GPU:
        return Check.of(check_id, OK, snap.error.message)
    faults = [f for g in sorted(snap.gpus, key=lambda g: g.index) for f in gpu_faults(g)]
    if run_gpus:
        faults = [f if f.index in run_gpus or f.state is not FAIL
                  else GpuFault(f.index, WARN, f"{f.reason} (no process of the run on it)", f.hint, f.kind)
                  for f in faults]
    failing = [f for f in faults if f.state is FAIL]
    if failing or faults:
        worst = failing or faults
        first = worst[0]
        more = len(worst) - 1
        cause = f"GPU {first.index}{on}: {first.reason}" + (f"; and {more} more: " + "; ".join(
            f"GPU {f.index}: {f.reason}" for f in worst[1:3]) if more else "")
        return Check.of(check_id, FAIL if failing else WARN, cause, first.hint)
    if logged:
        more = f"; and {len(logged) - 1} more" if len(logged) > 1 else ""
        return Check.of(check_id, WARN, f"{where or 'the host'}: {logged[0]}{more}",
                        "NVML shows no fault now; if it comes back, drain the node and reset the GPU")
    if snap.error is not None:
        if snap.error.kind is GpuErrorKind.GPU_LOST:
            return Check.of(check_id, FAIL, snap.error.message,
                            "check dmesg for Xid 79; reset the GPU (nvidia-smi -r) or reboot")
        return Check.of(check_id, WARN, f"GPU health not read{on}: {snap.error.message}",
                        "check nvidia-smi on the host")
    if not snap.gpus:
        return Check.of(check_id, OK, f"no GPU{on}")
    unread = [g.index for g in snap.gpus if g.pcie_width is None and g.ecc_errors_uncorrected is None
              and g.remap_pending is None]
    said = (f"; ECC, remaps and link not readable on GPU {', '.join(map(str, unread))}" if unread else "")
    if kernel is not None and kernel.refused:
        said += f"; kernel log not read ({kernel.refused})"
    return Check.of(check_id, OK, f"{len(snap.gpus)} GPU(s){on} healthy: no uncorrectable ECC, "
                                  f"no pending remap, full PCIe width{said}")
