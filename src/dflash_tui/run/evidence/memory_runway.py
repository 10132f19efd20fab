"""Memory runway: the run's host memory and each GPU's memory held by the run's processes, as
trends over the run's steps (run/evidence/memtrend.py), each with its limit and forecast.

Host: the PSS of the run's process tree against the lowest cgroup limit it is in, else the host's
MemTotal (run/evidence/host_memory.py), or a profile's `memory_limit_mb` where one is set; the
limit is read once a minute. PSS costs the kernel a walk of each process's page tables
(smaps_rollup: about 0.2 ms for a small Python process, more for a trainer's address space);
the tree's RSS comes with every look's process tree, from the stat files it reads anyway. So
the PSS is sampled, at most every `every_s` seconds, only when that RSS moved (by
RSS_MOVED_BYTES or RSS_MOVED_PART since the last PSS sample), when the tree's processes
changed, or PSS_EVERY_S after the last sample: a leak moves the RSS and is sampled every
`every_s`, a flat run once a minute. GPU: the memory NVML says the run's processes hold on
each GPU (the GPU sample's per-process usage), against the GPU's total. The `memory` check reads
it (run/verdict/checks/memory.py); the series survive a `--check` process through
`to_json`/`restore` (watch/session.py keeps them in the state directory).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...remote.ops import RemoteOps
from .host_memory import READ_MAX, HostLimit, host_limit, pss_path, tree_memory
from .memtrend import MemorySeries, Trend, trend
from .next_look import NextLook

LIMIT_EVERY_S = 60.0
PSS_EVERY_S = 60.0       # a PSS sample at least this often while the RSS stays put
RSS_MOVED_BYTES = 16 << 20
RSS_MOVED_PART = 0.01
PREFETCH_PROCS = 64      # processes whose PSS the look's first request reads ahead


@dataclass(frozen=True)
class MemoryUse:
    """One quantity as last sampled: the run's host memory ("host") or its memory on one GPU
    ("GPU 3"); `step`: the run's step when it was sampled."""
    name: str
    used: int
    step: int | None
    limit: int | None
    limit_source: str
    trend: Trend | None            # a steady growth, with its forecast; None when there is none
    gpu: int | None = None

    def to_json(self) -> dict:
        return {**({"gpu": self.gpu} if self.gpu is not None else {}),
                "used_bytes": self.used, "step": self.step, "limit_bytes": self.limit,
                "limit_source": self.limit_source or None,
                "growth": self.trend.to_json() if self.trend is not None else None}


@dataclass(frozen=True)
class MemoryRunway:
    host: MemoryUse | None = None
    gpus: tuple[MemoryUse, ...] = ()
    # What is worked out from it once (the `memory` check): it stands until a sample changes it.
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def uses(self) -> tuple[MemoryUse, ...]:
        return ((self.host,) if self.host is not None else ()) + self.gpus

    def to_json(self) -> dict:
        return {"host": self.host.to_json() if self.host is not None else None,
                "gpus": [g.to_json() for g in self.gpus]}


def run_step(ev) -> int | None:
    """The run's step as its richest source says it (status.json, else the log's or events', else
    a metric file's); the x of every memory trend."""
    if ev.status is not None and ev.status.step > 0:
        return ev.status.step
    act = ev.activity
    if act is not None and act.step is not None:
        return act.step
    mp = ev.metrics.progress if ev.metrics is not None else None
    return mp.step if mp is not None else None


class MemoryLooks:
    """One run's memory series across looks; a new run id starts them afresh."""

    def __init__(self, every_s: float = 5.0, limit_bytes: int | None = None) -> None:
        self.every_s = every_s
        self.limit_bytes = limit_bytes       # a profile's memory_limit_mb: the host's limit stand-in
        self._next = NextLook()              # when the next look comes: whether it asks the PSS up front
        self._reset(None)

    def _reset(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.dirty = False                   # a sample was added since the series were last kept
        self.host = MemorySeries()
        self.gpus: dict[int, MemorySeries] = {}
        self._host_at: float | None = None      # the last PSS sample
        self._host_used: int | None = None
        self._rss_then: int | None = None       # the tree's RSS and processes at the last PSS sample
        self._pids_then: tuple[int, ...] = ()
        self._pids: tuple[int, ...] = ()     # the tree's processes at the last look
        self._limit: HostLimit | None = None
        self._limit_at: float | None = None
        self._limit_reads: list[str] = []   # the files the last limit was read from
        self._limit_absent: set[str] = set()   # the limit files that could not be read
        self._host_step: int | None = None
        self._gpu_now: dict[int, tuple[int, int | None, int | None]] = {}
        self._gpu_at: float | None = None
        # The runway as of the last sample: a look that samples nothing hands out the same one.
        self._runway: MemoryRunway | None = None
        self._runway_stale = True
        # (series, its length and newest sample, the limit) -> its trend: a look that added no
        # sample works nothing out again.
        self._trends: dict[str, tuple[tuple, Trend | None]] = {}

    def _for_run(self, run_id: str | None) -> None:
        if run_id != self.run_id:
            self._reset(run_id)

    def prefetch(self) -> dict[str, int]:
        """The reads the next look's first request should carry ({path: max bytes}): the PSS of
        the tree's processes when that look is due to sample it by the clock, and the files the
        limit was read from when it is due to read it again, so that the agent answers them
        with the look's other files, in one request (a sample that a moved RSS asks for, and a
        limit read from other files than last time, cost requests of their own)."""
        reads: dict[str, int] = {}
        if self._next.due(self._host_at, self._pss_every_s):
            reads.update((pss_path(p), READ_MAX) for p in self._pids[:PREFETCH_PROCS])
        if self.limit_bytes is None and self._next.due(self._limit_at, LIMIT_EVERY_S):
            reads.update((path, READ_MAX) for path in self._limit_reads)
        return reads

    @property
    def _pss_every_s(self) -> float:
        return max(PSS_EVERY_S, self.every_s)

    async def look(self, ops: RemoteOps, ev, run_id: str | None) -> MemoryRunway | None:
        """The host's part: sampled when `_pss_due` says so, else as last sampled."""
        self._for_run(run_id)
        self._next.saw(ev.now)
        tree = ev.tree
        if tree is None or not tree.pids:
            return self.runway()
        now = ev.now
        self._pids = tree.pids
        if self._pss_due(now, tree.pids, tree.rss_bytes):
            step = run_step(ev)
            self._host_at = now
            self._host_used, self._host_step = await tree_memory(ops, tree.pids), step
            self._rss_then, self._pids_then = tree.rss_bytes, tree.pids
            self.host.add(now, step, self._host_used)
            self.dirty = self._runway_stale = True
        if self.limit_bytes is None and (self._limit_at is None or not 0 <= now - self._limit_at < LIMIT_EVERY_S):
            self._limit_at = now
            self._limit_reads = []
            limit = await host_limit(ops, tree.pid, self._limit_reads, self._limit_absent)
            if limit != self._limit:
                self._limit, self._runway_stale = limit, True
        return self.runway()

    def _pss_due(self, now: float, pids: tuple[int, ...], rss: int | None) -> bool:
        """Whether the tree's PSS is sampled now: when none was, when PSS_EVERY_S passed since the
        last sample, and, once `every_s` passed, when the tree holds other processes or its RSS
        moved (or is not known: then only the PSS says)."""
        since = None if self._host_at is None else now - self._host_at
        if since is None or not 0 <= since < self._pss_every_s:
            return True
        if since < self.every_s:
            return False
        if pids != self._pids_then or rss is None or self._rss_then is None:
            return True
        return abs(rss - self._rss_then) >= max(RSS_MOVED_BYTES, self._rss_then * RSS_MOVED_PART)

    def note_gpus(self, now: float, step: int | None, run_id: str | None, snap) -> None:
        """Each GPU's memory held by the run's processes, from one GPU snapshot."""
        self._for_run(run_id)
        if snap is None or snap.error is not None:
            return
        if self._gpu_at is not None and 0 <= now - self._gpu_at < self.every_s:
            return
        self._gpu_at = now
        for g in snap.gpus:
            held = [p.used_memory_bytes for p in g.processes if p.is_run_process and p.used_memory_bytes is not None]
            if not held:
                continue
            self._gpu_now[g.index] = (sum(held), g.mem_total_bytes, step)
            self.gpus.setdefault(g.index, MemorySeries()).add(now, step, sum(held))
            self.dirty = self._runway_stale = True

    def runway(self) -> MemoryRunway | None:
        """The runway as last sampled (the same object until a sample or the limit changes it)."""
        if self._runway_stale:
            self._runway, self._runway_stale = self._build_runway(), False
        return self._runway

    def _build_runway(self) -> MemoryRunway | None:
        host = None
        if self._host_used is not None:
            limit = (HostLimit(self.limit_bytes, "memory_limit_mb") if self.limit_bytes is not None
                     else self._limit)
            lb, ls = (limit.bytes, limit.source) if limit is not None else (None, "")
            host = MemoryUse("host", self._host_used, self._host_step, lb, ls, self._trend("host", self.host, lb, ls))
        gpus = []
        for index in sorted(self._gpu_now):
            used, total, step = self._gpu_now[index]
            gpus.append(MemoryUse(f"GPU {index}", used, step, total, "GPU total" if total else "",
                                  self._trend(f"GPU {index}", self.gpus[index], total, "GPU total"), gpu=index))
        if host is None and not gpus:
            return None
        return MemoryRunway(host, tuple(gpus))

    def _trend(self, key: str, series: MemorySeries, limit: int | None, source: str) -> Trend | None:
        s = series.samples
        mark = (len(s), s[-1] if s else None, limit, source)
        held = self._trends.get(key)
        if held is not None and held[0] == mark:
            return held[1]
        found = trend(s, limit, source)
        self._trends[key] = (mark, found)
        return found

    # -- across processes (a later --check continues the series) --------------------------------

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "host": self.host.to_json(),
                "gpus": {str(i): s.to_json() for i, s in self.gpus.items()}}

    def restore(self, data: object) -> None:
        """The series `to_json` wrote, where they are of a run; anything malformed is ignored.
        The next look samples the host at once: what it holds now is this process's to read."""
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
            return
        self._reset(data["run_id"])
        self.host = MemorySeries.from_json(data.get("host") or [])
        gpus = data.get("gpus")
        if isinstance(gpus, dict):
            for k, rows in gpus.items():
                if isinstance(k, str) and k.isdigit():
                    self.gpus[int(k)] = MemorySeries.from_json(rows or [])
