"""FleetPoller: every profile's RunWatch polled on its target's own schedule.

Profiles are grouped by run target (watch/transport.py `target_key`): one task per target
polls that target's profiles once per interval, each poll bounded by `poll_timeout` and all
polls together by `max_concurrent`, so a slow or dead host only ever delays itself. A target
whose runs all stand still is polled every `steady_interval` instead (fleet/cadence.py has the
rule), while its exit watch, a `wait_exit` on the target's agent for those runs' live pids,
wakes its poll the moment one of them ends: a run that dies turns its row red as fast as at
`interval`. A dead host costs little: a RunWatch backs off between reconnects and answers with
its last report in between, which the row shows as UNREACHABLE with the reason and the retry
countdown.
GPU samples come from one probe per host (the shared transport), in a task of their own,
because a hung NVML must not hold up the verdict polls: one sample per `gpu_interval` for all
the host's live runs, each run's snapshot with its own processes marked, feeding both the row's
GPU cells and the watch's "gpus" check (GPU LOST), as in the single-run view. A run on several
nodes is one watch on its own schedule (watch/nodes.py), each node's GPUs sampled for that
node's "gpus" check.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import fields, replace
from operator import attrgetter
from typing import AsyncIterator, Callable, Sequence

from ..backends import launcher_class
from ..config import ConfigError, Profile
from ..gpu.sample import GpuSnapshot
from ..gpu.sources import run_ref_from_launch
from ..remote.base import TargetError
from ..remote.ops import ExitWatch
from ..watch import RunWatch, open_watch
from ..watch.host import EXIT_WATCH_S, STEADY_INTERVAL_S
from .cadence import STEADY_AFTER_POLLS, TargetCadence
from .row import FleetRow, config_error_row, row_from_report
from ..watch.transport import SharedTransport, host_key, target_key

DEFAULT_INTERVAL_S = 1.0
DEFAULT_POLL_TIMEOUT_S = 5.0
DEFAULT_MAX_CONCURRENT = 16
DEFAULT_GPU_INTERVAL_S = 2.0
DEFAULT_STEADY_INTERVAL_S = STEADY_INTERVAL_S
LATENCY_SAMPLES = 512


class FleetPoller:
    def __init__(self, profiles: Sequence[Profile], *, interval: float = DEFAULT_INTERVAL_S,
                 poll_timeout: float = DEFAULT_POLL_TIMEOUT_S,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT,
                 gpu_interval: float | None = DEFAULT_GPU_INTERVAL_S,
                 steady_interval: float | None = DEFAULT_STEADY_INTERVAL_S,
                 steady_after: int = STEADY_AFTER_POLLS,
                 transport: SharedTransport | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """`gpu_interval=None` samples no GPUs (rows show none). `steady_interval`: the pause of
        a target whose runs stand still (fleet/cadence.py; never below `interval`; None: every
        target every `interval`), after `steady_after` polls that changed nothing."""
        self.profiles = {p.name: p for p in profiles}
        self.interval = interval
        self.steady_interval = steady_interval
        self.steady_after = steady_after
        self.poll_timeout = poll_timeout
        self.gpu_interval = gpu_interval
        self.transport = transport if transport is not None else SharedTransport()
        self.clock = clock
        self._sem = asyncio.Semaphore(max_concurrent)
        self.watches: dict[str, RunWatch] = {}
        self.rows: dict[str, FleetRow] = {}
        self._gpu: dict[tuple[str, ...], GpuSnapshot] = {}   # (profile,) or (profile, node)
        self._fresh_at: dict[str, float] = {}
        self._groups: dict[tuple, list[str]] = {}
        self._wake: dict[tuple, asyncio.Event] = {}
        self.cadence: dict[tuple, TargetCadence] = {}
        self._to_watch: dict[tuple, frozenset] = {}
        self._pause: dict[tuple, float] = {}   # per target: its pause between polls now
        self._tasks: list[asyncio.Task] = []
        self._dirty: set[str] = set()
        self._changed = asyncio.Event()
        # per target: how long each poll of it took (seconds), newest last
        self.latencies: dict[tuple, deque[float]] = {}
        for p in profiles:
            try:
                watch = open_watch(p, interval=interval, poll_timeout=poll_timeout, transport=self.transport)
            except ConfigError as exc:
                self.rows[p.name] = config_error_row(p, str(exc))
                continue
            self.watches[p.name] = watch
            for key, w in _gpu_watches(p.name, watch):
                w.gpus.lend(lambda key=key: self._gpu.get(key))
            self._groups.setdefault(_poll_key(p), []).append(p.name)
            self.rows[p.name] = row_from_report(p, None)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._tasks:
            return
        for key, names in self._groups.items():
            self._wake[key] = asyncio.Event()
            self.latencies[key] = deque(maxlen=LATENCY_SAMPLES)
            watchable = (self.steady_interval is not None and key[0] != "nodes"
                         and all(launcher_class(self.profiles[n]).POLL_SLOWLY_WHEN_STEADY for n in names))
            self.cadence[key] = TargetCadence(names, interval=self.interval,
                                              steady_interval=self.steady_interval or self.interval,
                                              steady_after=self.steady_after, watchable=watchable)
            self._tasks.append(asyncio.create_task(self._poll_target(key, names),
                                                   name=f"fleet-poll {names[0]}"))
            if watchable:
                self._tasks.append(asyncio.create_task(self._watch_exits(key, self.profiles[names[0]]),
                                                       name=f"fleet-exits {names[0]}"))
        if self.gpu_interval is not None:
            hosts: dict[tuple, list[tuple[tuple[str, ...], RunWatch]]] = {}
            for name, watch in self.watches.items():
                for key, w in _gpu_watches(name, watch):
                    hosts.setdefault(host_key(w.profile), []).append((key, w))
            for entries in hosts.values():
                self._tasks.append(asyncio.create_task(self._sample_gpus(entries),
                                                       name=f"fleet-gpus {entries[0][0][0]}"))

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass   # it was told to stop; how it ended changes nothing
        for watch in self.watches.values():
            await watch.close()   # a single host's borrowed targets and agent stay with the transport
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
        """Poll now, and every `interval` until its runs stand still again: `name`'s target, or
        every target."""
        if name is None:
            keys = list(self._wake)
        else:
            keys = [_poll_key(self.profiles[name])]
        for k in keys:
            if k in self._wake:
                self.cadence[k].poked()
                self._wake[k].set()

    def refresh_row(self, name: str) -> None:
        """Rebuild `name`'s row from what is known now (an action started or ended)."""
        watch = self.watches.get(name)
        if watch is None:
            return
        old = self.rows.get(name)
        self._set_row(name, watch.last, polled_at=old.polled_at if old else None,
                      poll_s=old.poll_s if old else None)

    # -- polling --------------------------------------------------------------------------------
    async def _poll_target(self, key: tuple, names: list[str]) -> None:
        wake, cadence = self._wake[key], self.cadence[key]
        while True:
            t0 = time.monotonic()
            # Cleared before the polls: a poke or an exit seen while they run asks for another.
            wake.clear()
            await asyncio.gather(*(self._poll_one(n, cadence) for n in names))
            self.latencies[key].append(time.monotonic() - t0)
            want = cadence.to_watch()
            if want != self._to_watch.get(key) or (cadence.can_watch is None and any(
                    r is not None and r.connected for r in cadence.last.values())):
                self._to_watch[key] = want
                cadence.rearm.set()
            pause = cadence.pause(n for n in names if self.watches[n].busy)
            if pause != self._pause.get(key, self.interval):
                # The rows say how often they are polled (their Age cell's "fresh" follows it).
                self._pause[key] = pause
                for n in names:
                    self.refresh_row(n)
            try:
                await asyncio.wait_for(wake.wait(), max(0.0, pause - (time.monotonic() - t0)))
            except asyncio.TimeoutError:
                pass

    async def _poll_one(self, name: str, cadence: TargetCadence) -> None:
        async with self._sem:
            t0 = time.monotonic()
            report = await self.watches[name].poll()   # bounded by poll_timeout; never raises for the transport
            took = time.monotonic() - t0
        if report.nodes and any(n.report.connected for n in report.nodes):
            # A run on several nodes: the combined verdict already accounts for a node that did
            # not answer; the row is UNREACHABLE only when none did.
            report = replace(report, connected=True)
        cadence.polled(name, report)
        self._set_row(name, report, polled_at=self.clock(), poll_s=took)

    async def _watch_exits(self, key: tuple, profile: Profile) -> None:
        """The target's exit watch: while some of its runs are steady, a wait_exit on its agent
        for their pids (a new one when more are to be covered; the older ones run out on their
        own); an end wakes the target's poll at once."""
        cadence, wake = self.cadence[key], self._wake[key]
        waits: dict[asyncio.Task, frozenset] = {}
        hold_until = 0.0   # after a failed wait, the next one waits this long (the others go on)
        try:
            while True:
                if cadence.can_watch is None:
                    cadence.can_watch = await self._can_wait(profile)
                want = cadence.to_watch()
                held = hold_until - time.monotonic()
                if want and not want <= cadence.watched and held <= 0:
                    ops = await self.transport.ops(profile)   # opened already: can_watch said so
                    waits[asyncio.create_task(ops.wait_exit(sorted(want), EXIT_WATCH_S))] = want
                    cadence.watched = frozenset().union(*waits.values())
                rearm = asyncio.create_task(cadence.rearm.wait())
                done, _ = await asyncio.wait({*waits, rearm}, timeout=held if held > 0 else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                rearm.cancel()
                cadence.rearm.clear()
                for task in done - {rearm}:
                    del waits[task]
                    try:
                        gone = task.result()
                    except (TargetError, OSError, ValueError, TypeError):
                        # The polls report what is wrong with the target.
                        gone, hold_until = [], time.monotonic() + cadence.steady_interval
                    cadence.watched = frozenset().union(*waits.values())
                    if gone:
                        cadence.exited(gone)
                        wake.set()
        finally:
            # Ended (closed, or a bug): nothing guards these runs any more, so `interval` again.
            cadence.can_watch, cadence.watched = False, frozenset()
            for task in waits:
                task.cancel()

    async def _can_wait(self, profile: Profile) -> bool | None:
        """Whether the target's ops can wait on a process (the agent can, the shell cannot);
        None while they cannot be had (the polls say why)."""
        try:
            ops = await self.transport.ops(profile)
        except (TargetError, OSError):
            return None
        return isinstance(ops, ExitWatch)

    def _set_row(self, name: str, report, *, polled_at: float | None, poll_s: float | None) -> None:
        watch = self.watches.get(name)
        if report is not None and report.connected:
            self._fresh_at[name] = polled_at if polled_at is not None else self.clock()
        row = row_from_report(self.profiles[name], report, gpu=self._gpu.get((name,)),
                              polled_at=polled_at, poll_s=poll_s, fresh_at=self._fresh_at.get(name),
                              retry_in_s=watch.retry_in if watch is not None else None,
                              busy="busy" if watch is not None and watch.busy else "",
                              polled_every_s=self._pause.get(_poll_key(self.profiles[name]), self.interval))
        old = self.rows.get(name)
        self.rows[name] = row
        if old is None or _what_shows(row) != _what_shows(old):
            self._dirty.add(name)
            self._changed.set()

    async def _sample_gpus(self, entries: list[tuple[tuple[str, ...], RunWatch]]) -> None:
        """One host's GPUs, for every watch of a run there (a profile, or a node of a run): one
        sample per period serves every live run, each its own snapshot with its own processes."""
        while True:
            t0 = time.monotonic()
            live: list[tuple[tuple[str, ...], RunWatch]] = []
            for key, w in entries:
                last = w.last
                if last is None or not last.connected or not last.pid_alive:
                    self._gpu.pop(key, None)
                else:
                    live.append((key, w))
            if live:
                runs = [run_ref_from_launch(w.last.launch) for _, w in live]
                snaps = await self.transport.gpu_sample_runs(live[0][1].profile, runs)
                for (key, _), snap in zip(live, snaps):
                    self._gpu[key] = snap
            await asyncio.sleep(max(0.1, self.gpu_interval - (time.monotonic() - t0)))


def _poll_key(profile: Profile) -> tuple:
    """Profiles polled by one task: those on one run target; a run on several nodes alone."""
    return ("nodes", profile.name) if profile.is_multinode else target_key(profile)


def _gpu_watches(name: str, watch: RunWatch) -> list[tuple[tuple[str, ...], RunWatch]]:
    """The host watches whose "gpus" check the fleet's samples feed, each with its sample's key:
    (profile,) for a run on one host (the row shows it), (profile, node) for a node of a run."""
    return [((name, node) if node else (name,), w) for node, w in watch.host_watches()]


# The row less its timestamps: a poll that only refreshed them changed nothing on screen (the
# ages tick on the screen's own 1 s timer).
_what_shows = attrgetter(*(f.name for f in fields(FleetRow)
                           if f.name not in ("polled_at", "poll_s", "fresh_at", "retry_in_s")))
