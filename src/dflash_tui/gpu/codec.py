"""Turn the probe's plain dicts (from `nvml_reader`, in-process or over the agent's JSON) into
`gpu/sample.py` dataclasses.

The remote side is another machine's python answering over a pipe: anything it sends is
checked here, and an answer that does not have the expected shape raises `ProbeAnswerError`
(the sources turn that into a PROBE_FAILED snapshot, never a crash of the dashboard).
"""

from __future__ import annotations

from typing import Any

from .sample import GpuError, GpuErrorKind, GpuProcess, GpuSample, GpuSnapshot


class ProbeAnswerError(ValueError):
    """The probe answered something that is not a GPU snapshot."""


_FLOAT_FIELDS = ("util_sm_pct", "util_mem_pct", "temperature_c", "power_w", "power_limit_w")
_INT_FIELDS = ("mem_used_bytes", "mem_total_bytes", "sm_clock_mhz", "mem_clock_mhz",
               "ecc_errors_uncorrected", "xid_errors", "last_xid")


def _opt(value: Any, kind: type, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProbeAnswerError(f"{where} should be a number or null, got {type(value).__name__}")
    return kind(value)


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
    return GpuError(kind=kind, message=lines[0] if lines else kind.value,
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
        name=str(d.get("name", "")),
        user=str(d.get("user", "")),
    )


def sample_from_dict(d: Any) -> GpuSample:
    if not isinstance(d, dict) or not isinstance(d.get("index"), int):
        raise ProbeAnswerError("a GPU entry has no integer index")
    kwargs: dict[str, Any] = {"index": d["index"], "name": str(d.get("name", "")),
                              "uuid": str(d.get("uuid", ""))}
    for name in _FLOAT_FIELDS:
        kwargs[name] = _opt(d.get(name), float, name)
    for name in _INT_FIELDS:
        kwargs[name] = _opt(d.get(name), int, name)
    reasons = d.get("throttle_reasons") or ()
    if not isinstance(reasons, (list, tuple)):
        raise ProbeAnswerError("throttle_reasons should be a list")
    kwargs["throttle_reasons"] = tuple(str(r) for r in reasons)
    procs = d.get("processes") or ()
    if not isinstance(procs, (list, tuple)):
        raise ProbeAnswerError("processes should be a list")
    kwargs["processes"] = tuple(process_from_dict(p) for p in procs)
    kwargs["lost"] = bool(d.get("lost", False))
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

