"""FleetPoller: every profile's RunMonitor polled on its target's own schedule.

Profiles are grouped by run target (fleet/transport.py `target_key`): one task per target
polls that target's profiles once per interval, each poll bounded by `poll_timeout` and all
polls together by `max_concurrent`, so a slow or dead host only ever delays itself. A dead
host costs little: RunMonitor backs off between reconnects and answers with its last report
in between, which the row shows as UNREACHABLE with the reason and the retry countdown.
GPU samples come from one probe per host (the shared transport), in a task of their own,
because a hung NVML must not hold up the verdict polls; each sample feeds both the row's
GPU cells and the monitor's "gpus" check (GPU LOST), as in the single-run view.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import replace
from typing import AsyncIterator, Callable, Sequence

from ..config import ConfigError, Profile
from ..gpu.sample import GpuSnapshot
from ..gpu.sources import run_ref_from_launch
from ..multinode import NodesSession
from ..remote.base import TargetError
from ..run.report import RunReport
from ..run.verdict import Check, CheckState, Checklist, Verdict
from ..run.monitor import RunMonitor
from ..session import Session
from .row import FleetRow, config_error_row, row_from_report
from .transport import SharedTransport, host_key, target_key

DEFAULT_INTERVAL_S = 1.0
DEFAULT_POLL_TIMEOUT_S = 5.0
DEFAULT_MAX_CONCURRENT = 16
DEFAULT_GPU_INTERVAL_S = 2.0
LATENCY_SAMPLES = 512


class FleetPoller:
    def __init__(self, profiles: Sequence[Profile], *, interval: float = DEFAULT_INTERVAL_S,
                 poll_timeout: float = DEFAULT_POLL_TIMEOUT_S,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT,
                 gpu_interval: float | None = DEFAULT_GPU_INTERVAL_S,
                 transport: SharedTransport | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """`gpu_interval=None` samples no GPUs (rows show none)."""
        self.profiles = {p.name: p for p in profiles}
        self.interval = interval
        self.poll_timeout = poll_timeout
        self.gpu_interval = gpu_interval
        self.transport = transport if transport is not None else SharedTransport()
        self.clock = clock
        self._sem = asyncio.Semaphore(max_concurrent)
        self.sessions: dict[str, Session] = {}
        self.monitors: dict[str, RunMonitor] = {}
        self.nodes: dict[str, NodesSession] = {}   # profiles with `nodes`: one run on several hosts
        self._nodes_last: dict[str, RunReport] = {}
        self.rows: dict[str, FleetRow] = {}
        self._gpu: dict[str, GpuSnapshot] = {}
        self._fresh_at: dict[str, float] = {}
        self._groups: dict[tuple, list[str]] = {}
        self._wake: dict[tuple, asyncio.Event] = {}
        self._tasks: list[asyncio.Task] = []
        self._dirty: set[str] = set()
        self._changed = asyncio.Event()
        # per target: how long each poll of it took (seconds), newest last
        self.latencies: dict[tuple, deque[float]] = {}
        for p in profiles:
            if p.is_multinode:
                try:
                    self.nodes[p.name] = NodesSession(p)
                except ConfigError as exc:
                    self.rows[p.name] = config_error_row(p, str(exc))
                    continue
                self.rows[p.name] = row_from_report(p, None)
                continue
            try:
                session = Session(p, transport=self.transport)
            except ConfigError as exc:
                self.rows[p.name] = config_error_row(p, str(exc))
                continue
            self.sessions[p.name] = session
            monitor = RunMonitor(session, interval=interval, poll_timeout=poll_timeout)
            monitor.gpu_snapshot = (lambda name=p.name: self._gpu.get(name))
            self.monitors[p.name] = monitor
            self._groups.setdefault(target_key(p), []).append(p.name)
            self.rows[p.name] = row_from_report(p, None)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._tasks:
            return
        for key, names in self._groups.items():
            self._wake[key] = asyncio.Event()
            self.latencies[key] = deque(maxlen=LATENCY_SAMPLES)
            self._tasks.append(asyncio.create_task(self._poll_target(key, names),
                                                   name=f"fleet-poll {names[0]}"))
        for name in self.nodes:
            self._wake[("nodes", name)] = asyncio.Event()
            self.latencies[("nodes", name)] = deque(maxlen=LATENCY_SAMPLES)
            self._tasks.append(asyncio.create_task(self._poll_nodes(name), name=f"fleet-poll {name}"))
        if self.gpu_interval is not None:
            hosts: dict[tuple, list[str]] = {}
            for names in self._groups.values():
                for n in names:
                    hosts.setdefault(host_key(self.profiles[n]), []).append(n)
            for names in hosts.values():
                self._tasks.append(asyncio.create_task(self._sample_gpus(names),
                                                       name=f"fleet-gpus {names[0]}"))

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass   # it was told to stop; how it ended changes nothing
        for ns in self.nodes.values():
            await ns.close()
        await self.transport.close()

    async def __aenter__(self) -> "FleetPoller":
        self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- what the screen reads ------------------------------------------------------------------
    def snapshot(self) -> list[FleetRow]:
        return [self.rows[n] for n in self.profiles]

    async def changes(self) -> AsyncIterator[set[str]]:
        """Forever: the names of the profiles whose rows changed since the last yield."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            dirty, self._dirty = self._dirty, set()
            if dirty:
                yield dirty

    def poke(self, name: str | None = None) -> None:
        """Poll now: `name`'s target, or every target."""
        if name is None:
            keys = list(self._wake)
        else:
            keys = [("nodes", name) if name in self.nodes else target_key(self.profiles[name])]
        for k in keys:
            if k in self._wake:
                self._wake[k].set()

    def refresh_row(self, name: str) -> None:
        """Rebuild `name`'s row from what is known now (an action started or ended)."""
        monitor = self.monitors.get(name)
        if monitor is None:
            return
        old = self.rows.get(name)
        self._set_row(name, monitor.last, polled_at=old.polled_at if old else None,
                      poll_s=old.poll_s if old else None)

    # -- polling --------------------------------------------------------------------------------
    async def _poll_target(self, key: tuple, names: list[str]) -> None:
        wake = self._wake[key]
        while True:
            t0 = time.monotonic()
            await asyncio.gather(*(self._poll_one(n) for n in names))
            self.latencies[key].append(time.monotonic() - t0)
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), max(0.0, self.interval - (time.monotonic() - t0)))
            except asyncio.TimeoutError:
                pass

    async def _poll_one(self, name: str) -> None:
        monitor = self.monitors[name]
        async with self._sem:
            t0 = time.monotonic()
            report = await monitor.poll()   # bounded by poll_timeout; never raises for the transport
            took = time.monotonic() - t0
        self._set_row(name, report, polled_at=self.clock(), poll_s=took)

    def _set_row(self, name: str, report, *, polled_at: float | None, poll_s: float | None) -> None:
        monitor = self.monitors.get(name)
        if report is not None and report.connected:
            self._fresh_at[name] = polled_at if polled_at is not None else self.clock()
        row = row_from_report(self.profiles[name], report, gpu=self._gpu.get(name),
                              polled_at=polled_at, poll_s=poll_s, fresh_at=self._fresh_at.get(name),
                              retry_in_s=monitor.retry_in if monitor is not None else None,
                              busy=_busy_word(monitor) if monitor is not None else "")
        old = self.rows.get(name)
        self.rows[name] = row
        if old is None or _what_shows(row) != _what_shows(old):
            self._dirty.add(name)
            self._changed.set()

    async def _poll_nodes(self, name: str) -> None:
        """A run across several hosts: every node observed at once (multinode.NodesSession),
        one row with the combined verdict (run/combine.py), on its own schedule."""
        profile, ns, wake = self.profiles[name], self.nodes[name], self._wake[("nodes", name)]
        while True:
            t0 = time.monotonic()
            async with self._sem:
                try:
                    run = await asyncio.wait_for(ns.check(), self.poll_timeout)
                    report = run.report(name, profile.where(), profile.run_dir)
                    if any(n.report.connected for n in run.nodes):
                        # The combined verdict already accounts for a node that did not answer.
                        report = replace(report, connected=True)
                    self._nodes_last[name] = report
                except (asyncio.TimeoutError, TargetError, OSError) as exc:
                    why = (f"no node answered within {self.poll_timeout:.0f} s"
                           if isinstance(exc, asyncio.TimeoutError) else str(exc))
                    report = _unanswered(self._nodes_last.get(name), profile, why)
            took = time.monotonic() - t0
            self.latencies[("nodes", name)].append(took)
            self._set_row(name, report, polled_at=self.clock(), poll_s=took)
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), max(0.0, self.interval - (time.monotonic() - t0)))
            except asyncio.TimeoutError:
                pass

    async def _sample_gpus(self, names: list[str]) -> None:
        while True:
            t0 = time.monotonic()
            for n in names:
                last = self.monitors[n].last
                if last is None or not last.connected or not last.pid_alive:
                    self._gpu.pop(n, None)
                    continue
                self._gpu[n] = await self.transport.gpu_sample(self.profiles[n],
                                                               run_ref_from_launch(last.launch))
            await asyncio.sleep(max(0.1, self.gpu_interval - (time.monotonic() - t0)))


def _unanswered(last: RunReport | None, profile: Profile, why: str) -> RunReport:
    """The last report marked stale, or (never answered) what RunMonitor says in that case."""
    now = time.time()
    if last is not None:
        return replace(last, connected=False, stale_since=last.stale_since or now, error=why)
    check = Check("transport", "Target reachable", CheckState.FAIL, why, "", now)
    return RunReport(time=now, profile=profile.name, target_label=profile.where(), run_dir=profile.run_dir,
                     checklist=Checklist(Verdict.NO_RUN, [check], why), connected=False,
                     stale_since=now, error=why)


def _what_shows(row: FleetRow) -> FleetRow:
    """The row less its timestamps: a poll that only refreshed them changed nothing on screen
    (the ages tick on the screen's own 1 s timer)."""
    return replace(row, polled_at=None, poll_s=None, fresh_at=None, retry_in_s=None)


def _busy_word(monitor: RunMonitor) -> str:
    return "busy" if monitor.busy else ""
