"""The "gpus" check: the bundled trainer's from its status.json (run/verdict/gpu_check.py), any
other program's from the run's processes NVML finds on the host's GPUs."""

from __future__ import annotations

from ....gpu.sample import GpuSnapshot
from ...evidence.observe import Evidence
from ..checklist import Check, CheckId, CheckState
from ..gpu_check import gpu_check_for_status, run_gpu_words

OK = CheckState.OK


def gpus_check(snap: GpuSnapshot | None, ev: Evidence, alive: bool | None) -> Check:
    """The "gpus" check: the bundled trainer's GPUs from status.json (run/verdict/gpu_check.py); any other
    program's from the processes of the run that NVML finds on the host's GPUs."""
    if ev.status is not None or snap is None or snap.error is not None or not snap.gpus or not alive \
            or any(g.lost for g in snap.gpus):
        return gpu_check_for_status(snap, ev.status, alive)
    with_run = [g for g in snap.gpus if any(p.is_run_process for p in g.processes)]
    if not with_run:
        return Check.of(CheckId.GPUS, OK,
                        f"no process of the run on the host's {len(snap.gpus)} GPU(s): it uses none so far")
    used = sum(p.used_memory_bytes or 0 for g in with_run for p in g.processes if p.is_run_process)
    return Check.of(CheckId.GPUS, OK,
                    f"run processes on {len(with_run)} GPU(s) ({', '.join(str(g.index) for g in with_run)}), "
                    f"{used / 1024 ** 3:.1f} GiB{run_gpu_words(snap)}")

