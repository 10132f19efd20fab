"""Watcher: `dflash-tui --watch`, the recording daemon.

It polls every chosen profile the way the fleet screen does (fleet/poller.py: one connection
and one agent per host, each target on its own schedule, GPU samples for GPU LOST). The Recorder
hangs on each profile's RunWatch change hook (watch/base.py `add_listener`: a new verdict or a
check in a new state); a target that stops or starts answering is not such a change (a stale
report keeps its checklist), so the fleet's row stream tells the Recorder of those. The Recorder
commits each real change before anyone hears of it; the recorded changes go to the
NotifyPolicy, and the due notifications to the NotifySender's queue, so no send ever holds up
a poll. SIGTERM or
SIGINT ends it cleanly (what is due still goes out, briefly); a SIGKILL loses nothing the
store had committed, and the next start resumes from the store's last state of each run.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import time
from dataclasses import replace
from typing import Callable, Sequence

from ..config import DEFAULT_PROFILE, Config, Profile
from ..fleet.poller import FleetPoller
from ..run.verdict.report import RunReport
from ..verdicts import TargetState
from .store.change import CheckNotice, VerdictChange, run_id_of
from .notify.notify import NotifyPolicy
from .notify.settings import NOTIFY_SECTION
from .recovery.settings import RECOVER_SECTION
from .store.settings import WATCH_SECTION
from .store.recorder import Recorder
from .recovery.recovery import Recovery
from .recovery.recovery_log import RecoveryLog
from .notify.sender import NotifySender
from .store.store import ChangeStore, StoreError

log = logging.getLogger("dflash_tui.recording")

TICK_MAX_S = 1.0     # the longest the notify clock sleeps when nothing is pending


class Watcher:
    def __init__(self, config: Config, profiles: Sequence[Profile], store: ChangeStore, *,
                 interval: float | None = None, gpu_interval: float | None = 2.0,
                 clock: Callable[[], float] = time.time,
                 on_notified: Callable | None = None) -> None:
        self.config = config
        self.profiles = list(profiles)
        self.store = store
        self.interval = interval if interval is not None else WATCH_SECTION.of(config).interval_s
        self.gpu_interval = gpu_interval
        self.clock = clock
        self.recorder = Recorder(store, clock=clock)
        self.policy = NotifyPolicy(NOTIFY_SECTION.of(config), config_path=config.path)
        now = clock()
        for last in store.last_states().values():
            # The only change of its run: recorded at a first look, if it was one.
            only = len(store.changes(last.profile, run_id=last.run_id)) == 1
            self.policy.resume(replace(last, first_look=only), now)
        self.recorder.listeners.append(self._changed)
        self.recorder.notice_listeners.append(self._noticed)
        self.on_notified = on_notified
        self.sender = NotifySender(retry_max_s=NOTIFY_SECTION.of(config).retry_max_s, on_delivery=self._delivered,
                                   clock=clock)
        self._due = asyncio.Event()
        self._stop = asyncio.Event()
        self._unrecorded: dict[str, RunReport] = {}   # per profile: a report the store refused
        # [recover]: the watcher is the one actor of the restart policy (recovery.py).
        self.recovery: Recovery | None = None
        if any(RECOVER_SECTION.of(config).for_profile(p.name) is not None for p in self.profiles):
            self.recovery = Recovery(config, store, RecoveryLog(store.path), submit=self.sender.submit, clock=clock)
            self.recorder.listeners.append(self.recovery.changed)

    def stop(self) -> None:
        self._stop.set()

    def _delivered(self, d) -> None:
        """The sender's report of one delivery (its worker thread)."""
        if self.recovery is not None:
            self.recovery.delivered(d)   # a recovery notice every URL took: marked sent in the outbox
        if self.on_notified is not None:
            self.on_notified(d)

    def _changed(self, change: VerdictChange) -> None:
        log.info("%s: %s -> %s%s: %s", change.profile, change.previous or "(first seen)", change.state,
                 f" [{change.check}]" if change.check else "", change.cause)
        self.policy.changed(change)
        self._due.set()

    def _noticed(self, notice: CheckNotice) -> None:
        c = notice.change
        log.info("%s: %s, check %s %s: %s", c.profile, c.state, c.check, notice.check_state.value, c.cause)
        self.policy.noticed(notice)
        self._due.set()

    def _record(self, report: RunReport, previous: RunReport | None = None) -> None:
        """Observe `report`; a store that fails (disk full, I/O error) is logged and the report
        kept to be tried again each tick, never raised into the poll that called the hook."""
        try:
            self.recorder.observe(report, previous)
            self._unrecorded.pop(report.profile, None)
        except (sqlite3.Error, OSError, StoreError) as exc:
            if report.profile not in self._unrecorded:
                log.error("%s: could not record a change (%s); trying again", report.profile, exc)
            self._unrecorded[report.profile] = report

    def _heard(self, previous: RunReport | None, current: RunReport) -> None:
        """RunWatch's change hook: a new verdict, a check in a new state, or another run."""
        self._record(current, previous)

    def _row_changed(self, report: RunReport | None) -> None:
        """A fleet row changed: what the hook does not report matters here: whether the target
        answers, and a new run id under an unchanged checklist (a relaunch seen only after it)."""
        if report is None:
            return
        name = report.profile
        if (not report.connected or self.recorder.last_state(name) is TargetState.UNREACHABLE
                or run_id_of(report) != self.recorder.last_run(name)):
            self._record(report)

    async def _notify_clock(self) -> None:
        while True:
            for report in list(self._unrecorded.values()):
                self._record(report)
            for n in self.policy.due(self.clock()):
                self.sender.submit(n)
            nxt = self.policy.next_due()
            wait = TICK_MAX_S if nxt is None else min(TICK_MAX_S, max(0.0, nxt - self.clock()))
            self._due.clear()
            try:
                await asyncio.wait_for(self._due.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def run(self) -> None:
        poller = FleetPoller(self.profiles, interval=self.interval, gpu_interval=self.gpu_interval)
        clock_task = asyncio.create_task(self._notify_clock(), name="watch notify clock")
        if self.recovery is not None:
            self.recovery.send_pending()   # what a watcher killed before the send left in the outbox
        recover_task = (asyncio.create_task(self.recovery.run(poller.watches), name="watch recovery")
                        if self.recovery is not None else None)
        try:
            for watch in poller.watches.values():
                watch.add_listener(self._heard)
            for row in poller.snapshot():
                if row.profile not in poller.watches:   # its fields cannot make a target
                    log.error("%s: not watched: %s", row.profile, row.cause)
            async with poller:
                changes = poller.changes()
                stop = asyncio.create_task(self._stop.wait())
                while not self._stop.is_set():
                    nxt = asyncio.create_task(anext(changes))
                    done, _ = await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if nxt not in done:
                        nxt.cancel()
                        break
                    for name in sorted(nxt.result()):
                        watch = poller.watches.get(name)
                        self._row_changed(watch.last if watch is not None else None)
                stop.cancel()
        finally:
            for task in (clock_task, recover_task):
                if task is None:
                    continue
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            for n in self.policy.due(self.clock()):
                self.sender.submit(n)
            await asyncio.to_thread(self.sender.close)


def builtin_note(config: Config, profiles: Sequence[Profile]) -> str:
    """Why the built-in `local` that --list-profiles shows is not watched, when it is not."""
    local = config.profiles.get(DEFAULT_PROFILE)
    if (config.path is None or local is None or local.source == config.path
            or any(p.name == DEFAULT_PROFILE for p in profiles)):
        return ""
    return (f"; the built-in '{DEFAULT_PROFILE}' is not watched (add [profile.{DEFAULT_PROFILE}] "
            f"to {config.path}, or pass --profile {DEFAULT_PROFILE})")


def run_watcher(config: Config, profiles: Sequence[Profile], store: ChangeStore) -> int:
    """The --watch mode: until SIGTERM/SIGINT; 0 when it was told to stop."""
    # Local time with its offset: a line read from a file (not the journal) says when it happened.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s dflash-tui --watch: %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S%z")
    # Apprise's own warnings arrive in the sender's one line per failed attempt (log_callback).
    logging.getLogger("apprise").setLevel(logging.CRITICAL)

    async def main() -> None:
        watcher = Watcher(config, profiles, store)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, watcher.stop)
        urls = {u for p in profiles for u in NOTIFY_SECTION.of(config).for_profile(p.name)}
        log.info("watching %d profile(s); store %s (%d changes); notifying %d URL(s)%s",
                 len(profiles), store.path, store.count(), len(urls), builtin_note(config, profiles))
        await watcher.run()
        log.info("stopped")

    asyncio.run(main())
    return 0
