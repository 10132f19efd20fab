"""The nvidia-smi fallback: query arguments, and parsers for its CSV stream.

Used where NVML cannot be read in a python process: a host whose python3 has no pynvml, or
no python3 at all. One long-running `nvidia-smi --query-gpu=... -lms 1000` per host streams
a group of lines (one per GPU) each interval; a second stream, `--query-compute-apps`, lists
the processes. Starting `nvidia-smi` once per sample would cost ~21 ms of host CPU each time
(measured on an H200), a stream costs that once.

Format facts (checked against driver 580 on an H200, recorded in tests/fixtures/nvidia_smi):
`--format=csv,noheader,nounits` prints comma+space separated values; unavailable values are
`[N/A]`, `[Not Supported]`, `N/A`, or an error in brackets such as `[Unknown Error]` or
`[GPU is lost]`; memory is MiB, power W, clocks MHz, temperature C; the throttle mask is hex.
A bad field name makes it print `Field "x" is not a valid field to query.` and exit 2: a
driver that does not know one of OPTIONAL_FIELDS (an older one, or a newer one that dropped a
name) gets the query without it, and that value reads None (gpu/sources.py SmiStreamSource).
"""

from __future__ import annotations

import csv
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .nvml_reader import throttle_reason_names

MIB = 1024 * 1024

# (nvidia-smi property, probe key, converter). `timestamp` and `count` come first so that a
# line says which loop it belongs to and how many lines that loop has.
GPU_FIELDS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("timestamp", "timestamp", str),
    ("count", "count", int),
    ("index", "index", int),
    ("name", "name", str),
    ("uuid", "uuid", str),
    ("utilization.gpu", "util_sm_pct", float),
    ("utilization.memory", "util_mem_pct", float),
    ("memory.used", "mem_used_bytes", lambda v: int(float(v) * MIB)),
    ("memory.total", "mem_total_bytes", lambda v: int(float(v) * MIB)),
    ("temperature.gpu", "temperature_c", float),
    ("power.draw", "power_w", float),
    ("enforced.power.limit", "power_limit_w", float),
    ("clocks.sm", "sm_clock_mhz", lambda v: int(float(v))),
    ("clocks.mem", "mem_clock_mhz", lambda v: int(float(v))),
    # The older name: drivers before 535 know only it, newer ones accept both.
    ("clocks_throttle_reasons.active", "throttle_mask", lambda v: int(v, 16)),
    ("ecc.errors.uncorrected.volatile.total", "ecc_errors_uncorrected", lambda v: int(float(v))),
    # The SM clock's top, beside clocks.sm: a clock well under it names a cap (power, heat).
    ("clocks.max.sm", "sm_clock_max_mhz", lambda v: int(float(v))),
)
# The fields a snapshot can do without: refused by a driver, each is left out of the query.
OPTIONAL_FIELDS = frozenset(("utilization.memory", "temperature.gpu", "power.draw", "enforced.power.limit",
                             "clocks.sm", "clocks.mem", "clocks_throttle_reasons.active",
                             "ecc.errors.uncorrected.volatile.total", "clocks.max.sm"))
_REFUSED_FIELD = re.compile(r'Field "([^"\n]{1,80})" is not a valid field to query')
APP_FIELDS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("timestamp", "timestamp", str),
    ("gpu_uuid", "gpu_uuid", str),
    ("pid", "pid", int),
    ("used_memory", "used_memory_bytes", lambda v: int(float(v) * MIB)),
    ("process_name", "name", str),
)

_UNAVAILABLE = {"n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", ""}
_LOST_MARKERS = ("gpu is lost", "gpu requires reset", "gpu requires restart")


def refused_field(text: str) -> str | None:
    """The field nvidia-smi refused, from its message, or None."""
    m = _REFUSED_FIELD.search(text)
    return m.group(1) if m else None


def without_field(fields: tuple, name: str) -> tuple | None:
    """`fields` without optional field `name`; None when `name` is not one of them or not
    optional (a query without it says nothing)."""
    if name not in OPTIONAL_FIELDS or not any(f == name for f, _, _ in fields):
        return None
    return tuple(f for f in fields if f[0] != name)


def gpu_query_argv(interval_ms: int | None = 1000, fields: tuple = GPU_FIELDS) -> list[str]:
    argv = ["nvidia-smi", "--query-gpu=" + ",".join(f for f, _, _ in fields),
            "--format=csv,noheader,nounits"]
    return argv + ["-lms", str(interval_ms)] if interval_ms else argv


def apps_query_argv(interval_ms: int | None = 1000) -> list[str]:
    argv = ["nvidia-smi", "--query-compute-apps=" + ",".join(f for f, _, _ in APP_FIELDS),
            "--format=csv,noheader,nounits"]
    return argv + ["-lms", str(interval_ms)] if interval_ms else argv


class SmiLineError(ValueError):
    """A line that is not a CSV record of the expected shape."""


def _split(line: str, n: int, what: str, text_at: int) -> list[str]:
    try:
        row = next(csv.reader([line], skipinitialspace=True))
    except (csv.Error, StopIteration):
        raise SmiLineError(f"not a CSV line: {line[:80]!r}") from None
    if len(row) > n:
        # nvidia-smi does not quote: a comma inside the one free-text column (GPU or process
        # name) splits it. Join the surplus back into that column.
        extra = len(row) - n
        row = row[:text_at] + [", ".join(row[text_at:text_at + extra + 1])] + row[text_at + extra + 1:]
    if len(row) != n:
        raise SmiLineError(f"{what} line has {len(row)} values, expected {n}: {line[:80]!r}")
    return [c.strip() for c in row]


def _convert(raw: str, conv: Callable[[str], Any]) -> tuple[Any, bool]:
    """(value or None, lost?) for one raw CSV cell."""
    low = raw.lower()
    if any(m in low for m in _LOST_MARKERS):
        return None, True
    if low in _UNAVAILABLE or (low.startswith("[") and low.endswith("]")):
        return None, False
    try:
        return conv(raw), False
    except ValueError:
        return None, False


def parse_gpu_line(line: str, fields: tuple = GPU_FIELDS) -> dict[str, Any]:
    """One `--query-gpu` line of `fields` -> probe-style GPU dict (keys of gpu/sample.py's
    GpuSample; a field left out of the query reads None).

    Also returns `timestamp` and `count` (used to group lines into one sample).
    """
    cells = _split(line, len(fields), "--query-gpu", text_at=3)
    out: dict[str, Any] = {key: None for _, key, _ in GPU_FIELDS}
    lost = False
    for (prop, key, conv), raw in zip(fields, cells):
        value, gone = _convert(raw, conv)
        lost = lost or gone
        out[key] = value
    if out["index"] is None or out["count"] is None:
        raise SmiLineError(f"--query-gpu line without index/count: {line[:80]!r}")
    mask = out.pop("throttle_mask")
    out["throttle_reasons"] = throttle_reason_names(mask)
    out["name"] = out["name"] or ""
    out["uuid"] = out["uuid"] or ""
    out.update(xid_errors=None, last_xid=None, processes=[], lost=lost)
    return out


def parse_app_line(line: str) -> dict[str, Any]:
    """One `--query-compute-apps` line -> {timestamp, gpu_uuid, pid, used_memory_bytes, name}."""
    cells = _split(line, len(APP_FIELDS), "--query-compute-apps", text_at=4)
    out = {key: _convert(raw, conv)[0] for (_, key, conv), raw in zip(APP_FIELDS, cells)}
    if out["pid"] is None:
        raise SmiLineError(f"--query-compute-apps line without a pid: {line[:80]!r}")
    out["name"] = out["name"] or ""
    return out


def classify_message(text: str) -> dict[str, Any] | None:
    """A non-CSV line or exit message from nvidia-smi -> a snapshot error dict, or None."""
    low = text.lower()
    if "couldn't find libnvidia-ml" in low:
        return {"kind": "library_not_found", "gpu_index": None,
                "message": "nvidia-smi cannot find libnvidia-ml.so: install the NVIDIA driver (or fix its library path)"}
    if ("not found" in low and ("nvidia-smi" in low or "command" in low)) or "no such file" in low:
        return {"kind": "library_not_found", "gpu_index": None,
                "message": "nvidia-smi not found on the host: install the NVIDIA driver utilities, or pynvml for the host's python3"}
    if "version mismatch" in low:
        return {"kind": "version_mismatch", "gpu_index": None,
                "message": "nvidia-smi: driver/library version mismatch (driver upgraded without reboot?): reboot or reload the nvidia module"}
    if "couldn't communicate with the nvidia driver" in low or "driver not loaded" in low:
        return {"kind": "no_driver", "gpu_index": None,
                "message": "nvidia-smi cannot talk to the NVIDIA driver: load the kernel module (modprobe nvidia) or check the GPU"}
    if "no devices were found" in low:
        return {"kind": "no_driver", "gpu_index": None,
                "message": "nvidia-smi found no GPU on this host: check that the GPUs are visible (lspci, dmesg)"}
    if any(m in low for m in _LOST_MARKERS) or "unable to determine the device handle" in low:
        return {"kind": "gpu_lost", "gpu_index": None,
                "message": "nvidia-smi: " + " ".join(text.split())[:160] + " (check dmesg for Xid 79, reset the GPU)"}
    if "is not a valid field to query" in low:
        return {"kind": "probe_failed", "gpu_index": None,
                "message": "this nvidia-smi is too old for the query: " + " ".join(text.split())[:120]}
    return None


@dataclass
class GpuLineGrouper:
    """Groups the `-lms` stream's lines into one list per loop (each line carries `count`)."""

    _pending: list[dict[str, Any]] = field(default_factory=list)

    def feed(self, gpu: dict[str, Any]) -> list[dict[str, Any]] | None:
        if self._pending and (gpu["timestamp"] != self._pending[0]["timestamp"]
                              or gpu["index"] <= self._pending[-1]["index"]):
            self._pending = []   # the previous loop was cut short: drop it, start anew
        self._pending.append(gpu)
        if len(self._pending) >= gpu["count"]:
            done, self._pending = self._pending, []
            return done
        return None


@dataclass
class AppsTracker:
    """The latest complete process list from the `--query-compute-apps -lms` stream.

    nvidia-smi prints nothing in a loop with no processes, so a loop's list is complete when a
    line of a later loop arrives, and the list is empty when no line came for `stale_after` s.
    """

    stale_after: float = 2.5
    clock: Callable[[], float] = time.monotonic
    _current_ts: str | None = None
    _current: list[dict[str, Any]] = field(default_factory=list)
    _complete: list[dict[str, Any]] = field(default_factory=list)
    _last_line: float = 0.0

    def feed(self, app: dict[str, Any]) -> None:
        if app["timestamp"] != self._current_ts:
            if self._current_ts is not None:
                self._complete = self._current
            self._current_ts = app["timestamp"]
            self._current = []
        self._current.append(app)
        self._last_line = self.clock()

    def processes(self) -> list[dict[str, Any]]:
        if self._current_ts is None or self.clock() - self._last_line > self.stale_after:
            return []
        # Until a second loop arrives the first is the best we have.
        return self._complete or self._current


def attach_processes(gpus: list[dict[str, Any]], apps: list[dict[str, Any]]) -> None:
    """Put each app under its GPU (matched by UUID), in the probe's process-dict shape."""
    by_uuid = {g["uuid"]: g for g in gpus}
    for g in gpus:
        g["processes"] = []
    for app in apps:
        gpu = by_uuid.get(app["gpu_uuid"])
        if gpu is not None:
            gpu["processes"].append({"pid": app["pid"], "used_memory_bytes": app["used_memory_bytes"],
                                     "name": app["name"]})
    for g in gpus:
        g["processes"].sort(key=lambda p: p["pid"])


def snapshot_dict(gpus: list[dict[str, Any]], apps: list[dict[str, Any]], *, now: float,
                  latency_ms: float | None = None, driver_version: str = "") -> dict[str, Any]:
    """A probe-style snapshot dict (see gpu/codec.py) from one loop of lines."""
    gpus = [{k: v for k, v in g.items() if k not in ("timestamp", "count")} for g in gpus]
    attach_processes(gpus, apps)
    lost = [g for g in gpus if g["lost"]]
    error = None
    if lost:
        error = {"kind": "gpu_lost", "gpu_index": lost[0]["index"],
                 "message": f"GPU {lost[0]['index']} ({lost[0]['uuid']}) fell off the bus: check dmesg for Xid 79, then reset it (nvidia-smi -r) or reboot"}
    return {"time": now, "source": "nvidia-smi", "gpus": sorted(gpus, key=lambda g: g["index"]),
            "error": error, "driver_version": driver_version, "latency_ms": latency_ms}
