"""Turn the probe's plain dicts (from `nvml_reader`, in-process or over the agent's JSON) into
`gpu/sample.py` dataclasses.

The remote side is another machine's python answering over a pipe: anything it sends is
checked here, and an answer that does not have the expected shape raises `ProbeAnswerError`
(the sources turn that into a PROBE_FAILED snapshot, never a crash of the dashboard).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..contract.rundir import inert_text
from .sample import GpuError, GpuErrorKind, GpuProcess, GpuSample, GpuSnapshot


class ProbeAnswerError(ValueError):
    """The probe answered something that is not a GPU snapshot."""


_FLOAT_FIELDS = ("util_sm_pct", "util_mem_pct", "temperature_c", "power_w", "power_limit_w")
_INT_FIELDS = ("mem_used_bytes", "mem_total_bytes", "sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz",
               "ecc_errors_uncorrected", "xid_errors", "last_xid", "ecc_errors_uncorrected_aggregate",
               "retired_pages", "remapped_rows_uncorrectable", "pcie_gen", "pcie_gen_max", "pcie_width",
               "pcie_width_max", "energy_mj")
_BOOL_FIELDS = ("retired_pages_pending", "remap_pending", "remap_failed")


def _opt(value: Any, kind: type, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProbeAnswerError(f"{where} should be a number or null, got {type(value).__name__}")
    try:
        return kind(value)
    except (OverflowError, ValueError):    # an integer no float holds, int(nan)
        raise ProbeAnswerError(f"{where} should be a finite number, got {str(value)[:20]}...") from None


def error_from_dict(d: Any) -> GpuError | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ProbeAnswerError("error should be an object")
    try:
        kind = GpuErrorKind(d.get("kind", "unknown"))
    except ValueError:
        kind = GpuErrorKind.UNKNOWN
    index = d.get("gpu_index")
    lines = str(d.get("message") or "").strip().splitlines()
    return GpuError(kind=kind, message=inert_text(lines[0]) if lines else kind.value,
                    gpu_index=index if isinstance(index, int) and not isinstance(index, bool) else None)


def process_from_dict(d: Any) -> GpuProcess:
    if not isinstance(d, dict) or not isinstance(d.get("pid"), int):
        raise ProbeAnswerError("a process entry has no integer pid")
    cpid = d.get("container_pid")
    return GpuProcess(
        pid=d["pid"],
        used_memory_bytes=_opt(d.get("used_memory_bytes"), int, "used_memory_bytes"),
        container_pid=cpid if isinstance(cpid, int) else None,
        is_run_process=bool(d.get("is_run_process", False)),
        # Another user's process names itself: inert before any pane shows it.
        name=inert_text(str(d.get("name", ""))),
        user=inert_text(str(d.get("user", ""))),
        sm_util_pct=_opt(d.get("sm_util_pct"), float, "sm_util_pct"),
        mem_util_pct=_opt(d.get("mem_util_pct"), float, "mem_util_pct"),
    )


def sample_from_dict(d: Any) -> GpuSample:
    if not isinstance(d, dict) or not isinstance(d.get("index"), int):
        raise ProbeAnswerError("a GPU entry has no integer index")
    kwargs: dict[str, Any] = {"index": d["index"], "name": inert_text(str(d.get("name", ""))),
                              "uuid": inert_text(str(d.get("uuid", "")))}
    for name in _FLOAT_FIELDS:
        kwargs[name] = _opt(d.get(name), float, name)
    for name in _INT_FIELDS:
        kwargs[name] = _opt(d.get(name), int, name)
    reasons = d.get("throttle_reasons") or ()
    if not isinstance(reasons, (list, tuple)):
        raise ProbeAnswerError("throttle_reasons should be a list")
    kwargs["throttle_reasons"] = tuple(inert_text(str(r)) for r in reasons)
    procs = d.get("processes") or ()
    if not isinstance(procs, (list, tuple)):
        raise ProbeAnswerError("processes should be a list")
    kwargs["processes"] = tuple(process_from_dict(p) for p in procs)
    kwargs["lost"] = bool(d.get("lost", False))
    for name in _BOOL_FIELDS:
        value = d.get(name)
        if value is not None and not isinstance(value, bool):
            raise ProbeAnswerError(f"{name} should be true, false or null, got {type(value).__name__}")
        kwargs[name] = value
    return GpuSample(**kwargs)


def snapshot_from_dict(d: Any, *, source: str | None = None) -> GpuSnapshot:
    """Build a GpuSnapshot from the probe's dict. Raises ProbeAnswerError on a wrong shape."""
    if not isinstance(d, dict):
        raise ProbeAnswerError(f"expected a JSON object, got {type(d).__name__}")
    t = d.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ProbeAnswerError("snapshot has no numeric time")
    gpus = d.get("gpus") or ()
    if not isinstance(gpus, (list, tuple)):
        raise ProbeAnswerError("gpus should be a list")
    extra = d.get("extra") if isinstance(d.get("extra"), dict) else {}
    return GpuSnapshot(
        time=float(t),
        source=source or str(d.get("source", "nvml")),
        gpus=tuple(sample_from_dict(g) for g in gpus),
        error=error_from_dict(d.get("error")),
        driver_version=str(d.get("driver_version", "")),
        latency_ms=_opt(d.get("latency_ms"), float, "latency_ms"),
        extra=dict(extra),
    )


def snapshots_for_runs(d: Any, runs: int, *, source: str | None = None) -> tuple[GpuSnapshot, list[GpuSnapshot]]:
    """The answer of one sample asked for `runs` runs (`gpu.sample` with `runs`): the snapshot as
    no run's (no process marked), and one snapshot per run asked, in order, with that run's
    processes (the answer's "run_processes", one list of host pids per run) marked.
    Raises ProbeAnswerError on a wrong shape."""
    base = snapshot_from_dict(d, source=source)
    marks = d.get("run_processes")
    if (not isinstance(marks, list) or len(marks) != runs
            or not all(isinstance(m, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in m)
                       for m in marks)):
        raise ProbeAnswerError(f"run_processes should be {runs} list(s) of pids, one per run asked")
    return base, [with_run_processes(base, frozenset(m)) for m in marks]


def with_run_processes(snap: GpuSnapshot, pids: frozenset[int]) -> GpuSnapshot:
    """`snap` with exactly the processes of `pids` marked as the run's (what is already so is
    shared, not copied: most GPUs hold no process of a given run)."""
    gpus = tuple(g if all(p.is_run_process == (p.pid in pids) for p in g.processes) else replace(
        g, processes=tuple(p if p.is_run_process == (p.pid in pids) else replace(p, is_run_process=p.pid in pids)
                           for p in g.processes)) for g in snap.gpus)
    return snap if all(a is b for a, b in zip(gpus, snap.gpus)) else replace(snap, gpus=gpus)
