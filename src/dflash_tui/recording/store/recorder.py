"""Recorder: turns a stream of reports into recorded verdict changes, each exactly once; and,
while a state stands, tells its notice listeners of a check that foresees a failure turning
warn or fail (recording/store/change.py `notices_of`), never recording those.

It starts from the store's last state of every profile, so a restarted watcher records only
what really changed while it was away (and nothing twice). A change is committed before the
listeners hear of it: a listener (the notifier) never announces a change the store lost.
"""

from __future__ import annotations

import time
from typing import Callable

from ...run.verdict.report import RunReport
from ...run.verdict.checklist import Checklist
from ...verdicts import State
from .change import CheckNotice, VerdictChange, change_of, notices_of, run_id_of, state_of
from .store import ChangeStore

PRUNE_EVERY_S = 3600.0


class Recorder:
    def __init__(self, store: ChangeStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self.listeners: list[Callable[[VerdictChange], None]] = []
        # Who hears a foresight check that turned warn or fail while the state stood (the notifier).
        self.notice_listeners: list[Callable[[CheckNotice], None]] = []
        # profile -> (state, run id) last recorded; and the checklist seen last, per profile
        self._last: dict[str, tuple[State, str]] = {
            name: (c.state, c.run_id) for name, c in store.last_states().items()}
        self._seen: dict[str, Checklist] = {}
        self._looked: set[str] = set()    # the profiles this recorder has had a report of
        self._pruned_at = clock()
        store.prune(self._pruned_at)

    def last_state(self, profile: str) -> State | None:
        last = self._last.get(profile)
        return last[0] if last is not None else None

    def last_run(self, profile: str) -> str:
        last = self._last.get(profile)
        return last[1] if last is not None else ""

    def observe(self, report: RunReport, previous: RunReport | None = None) -> VerdictChange | None:
        """Record `report`'s change, if it is one; the recorded change or None. `previous`: the
        report before it (RunWatch's change hook passes it), else the last one observed."""
        now = self.clock()
        name = report.profile
        state, run_id = state_of(report), run_id_of(report)
        before = previous.checklist if previous is not None and previous.connected else self._seen.get(name)
        if report.connected:
            self._seen[name] = report.checklist
        last = self._last.get(name)
        # A run no watcher recorded, in this recorder's first report of the profile: what it
        # shows happened before anyone watched (a run ended by then is recorded, not news).
        first_look = name not in self._looked and (last is None or run_id != last[1])
        if last is not None:
            if state == last[0] and (run_id == last[1] or not report.connected):
                self._looked.add(name)
                for notice in notices_of(report, before, previous=last[0], now=now):
                    for listener in self.notice_listeners:
                        listener(notice)
                return None
        change = self.store.record(change_of(report, previous=last[0] if last else None,
                                             before=before, now=now, first_look=first_look))
        self._looked.add(name)     # only once recorded: a store that failed sees it again
        self._last[name] = (state, change.run_id if report.connected or last is None else last[1])
        for listener in self.listeners:
            listener(change)
        if now - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = now
            self.store.prune(now)
        return change
