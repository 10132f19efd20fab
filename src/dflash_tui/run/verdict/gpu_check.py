"""The checklist's GPU check ("gpus"), from the latest GpuSnapshot and what the run reported.

- fail    a GPU fell off the bus (any GPU of the host: the run's or a neighbour, both end runs;
          a live run's verdict then becomes GPU LOST: run/verdict/health.py `with_gpu_check`)
- warn    NVML/nvidia-smi unavailable (the one-line reason); a lost GPU under a run that uses
          only CPU devices; or, after the run's compile
          finished, its GPUs do not all show a process of the run (a thread that never reached
          its device, or a run that silently fell back to CPU)
- pending no GPU data yet, or the run is still starting/compiling
- ok      the run's processes are on as many GPUs as it uses (with the SM use, power against its
          limit and SM clock against its top of the GPU that says most, or "... but drawing
          80 W of 700 W: a kernel that spins, not compute": run/verdict/gpu_facts.py); or the run uses only CPU devices;
          or the host has no NVIDIA GPU at all and the run is not known to use CUDA (said as
          information: a driver it does not need is no fault; a run that names CUDA devices
          there is warned)

The trainer names devices as torch does ("cuda:3"); CUDA may number GPUs differently from NVML
(CUDA_VISIBLE_DEVICES, fastest-first order), so the check compares how MANY GPUs carry a run
process with how many CUDA devices the run uses, never index against index.
"""

from __future__ import annotations

from typing import Iterable

from ...contract.rundir import Phase, TrainStatus
from ...gpu.sample import GpuErrorKind, GpuSnapshot
from ...words import gpu_use
from .checklist import Check, CheckId, CheckState
from .gpu_facts import run_gpu

CHECK_ID = CheckId.GPUS

_BYTES_GIB = 1024 ** 3


def cuda_devices(devices: Iterable[str]) -> set[str]:
    """The distinct CUDA devices among torch device strings ("cuda", "cuda:0", "cpu", ...)."""
    out = set()
    for d in devices:
        d = str(d).strip().lower()
        if d == "cuda":
            d = "cuda:0"
        if d.startswith("cuda:"):
            out.add(d)
    return out


def gpu_check(snap: GpuSnapshot | None, *, run_devices: Iterable[str] | None,
              compile_done: bool, run_alive: bool = True) -> Check:
    """One Check for the checklist. `since` is left to the checklist's tracker.

    run_devices: the devices the run's threads use (status.json threads[].device), None when
    not known yet. compile_done: every thread finished its compile warm-up.
    """
    def check(state: CheckState, cause: str, hint: str = "") -> Check:
        return Check.of(CHECK_ID, state, cause, hint)

    devices = None if run_devices is None else cuda_devices(run_devices)
    cpu_only = devices is not None and not devices

    if snap is not None:
        lost = [g for g in snap.gpus if g.lost]
        if lost or (snap.error is not None and snap.error.kind is GpuErrorKind.GPU_LOST):
            names = ", ".join(f"GPU {g.index}" for g in lost) or "a GPU"
            msg = snap.error.message if snap.error is not None else f"{names} fell off the bus"
            if cpu_only:
                # The host is sick, but this run never touches a GPU: not a reason to fail it.
                return check(CheckState.WARN, f"{msg} (the run uses only CPU devices)",
                             "reset the GPU (nvidia-smi -r) or reboot before a GPU run")
            return check(CheckState.FAIL, msg,
                         "check dmesg for Xid 79; reset the GPU (nvidia-smi -r) or reboot, then relaunch")

    if cpu_only:
        return check(CheckState.OK, "no GPU in use: the run uses only CPU devices")
    if snap is None:
        return check(CheckState.PENDING, "no GPU sample yet")
    if snap.error is not None and snap.error.kind is GpuErrorKind.NO_GPU:
        if devices:
            return check(CheckState.WARN, f"the run uses {len(devices)} CUDA device(s) but {snap.error.message}",
                         "check that the run's host is the one watched, or run it on a GPU host")
        return check(CheckState.OK, snap.error.message)
    if snap.error is not None:
        hint = {
            GpuErrorKind.LIBRARY_NOT_FOUND: "GPU numbers are unavailable; the run itself is not affected",
            GpuErrorKind.NO_DRIVER: "without a driver CUDA cannot run either: check nvidia-smi on the host",
            GpuErrorKind.VERSION_MISMATCH: "CUDA programs started now may fail too: reboot the host when you can",
            GpuErrorKind.PROBE_FAILED: "the dashboard retries every second; --check samples once",
        }.get(snap.error.kind, "")
        return check(CheckState.WARN, snap.error.message, hint)
    if not snap.gpus:
        if devices:
            return check(CheckState.WARN, f"the run uses {len(devices)} CUDA device(s) but the host shows no GPU",
                         "check nvidia-smi on the host and that the run's host is the one watched")
        return check(CheckState.PENDING, "the host shows no GPU")
    if not run_alive:
        return check(CheckState.PENDING, "the run is not running")
    if devices is None or not compile_done:
        return check(CheckState.PENDING, "waiting for the run to finish compiling")

    with_run = [g for g in snap.gpus if any(p.is_run_process for p in g.processes)]
    if len(with_run) < len(devices):
        idle = [g.index for g in snap.gpus if g not in with_run]
        if not with_run:
            cause = f"compile finished but no GPU shows a process of the run (it uses {len(devices)})"
        else:
            cause = (f"the run uses {len(devices)} CUDA devices but its processes are on only "
                     f"{len(with_run)} GPU(s): {_list(g.index for g in with_run)}; no run process on "
                     f"{_list(idle)}")
        return check(CheckState.WARN, cause,
                     "a thread may not have reached its device, or the run fell back to CPU: each thread's device is in status.json")
    used = sum(p.used_memory_bytes or 0 for g in with_run for p in g.processes if p.is_run_process)
    return check(CheckState.OK, f"run processes on {len(with_run)} GPU(s) "
                                f"({_list(g.index for g in with_run)}), {used / _BYTES_GIB:.1f} GiB"
                                f"{run_gpu_words(snap)}")


def run_gpu_words(snap: GpuSnapshot) -> str:
    """", 100 % SM (the run's processes), 655 W of 700 W, SM 1755 of 1980 MHz" of the GPU that
    says most about the run (gpu_facts.run_gpu: one that spins, else its busiest); "" when no
    GPU shows a process of the run."""
    found = run_gpu(snap)
    if found is None:
        return ""
    f, pct, whose = found
    shared = ", shared with another program's processes" if f.shared else ""
    return ", " + gpu_use(pct, whose, f.power_w, f.power_limit_w, f.sm_clock_mhz, f.sm_clock_max_mhz,
                          f.spinning) + shared


def _list(items: Iterable[int]) -> str:
    return ", ".join(str(i) for i in items)


# Trainer phases after the main-thread compile warm-up.
_PAST_COMPILE = {Phase.TRAINING.value, Phase.CHECKPOINTING.value, Phase.EVALUATING.value, Phase.FINISHED.value}


def gpu_check_for_status(snap: GpuSnapshot | None, status: "TrainStatus | None",
                         pid_alive: bool | None) -> Check:
    """`gpu_check` fed from what a RunWatch already has: status.json and whether the pid lives.

    Wiring: run/verdict/health.py `with_gpu_check` appends it (and applies its one verdict rule) for
    both a RunWatch and `dflash-tui --check`, before `HealthTracker.update` keeps its `since`.
    """
    threads = list(status.threads) if status is not None else []
    devices = [t.device for t in threads] or None
    compile_done = status is not None and (
        status.phase in _PAST_COMPILE
        or (bool(threads) and all(t.compile_state == "compiled" for t in threads)))
    return gpu_check(snap, run_devices=devices, compile_done=compile_done, run_alive=bool(pid_alive))
