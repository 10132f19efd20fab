"""The run view's stream workers, kept outside the App (dolphie's WorkerManager is the model).

Five workers feed the panes, each a Textual worker on the run view (screens/run.py), exclusive
in its group so a restart replaces it: the source's reports (every pane), its GPU snapshots (the
"gpus" pane), the shown log file (the "log" pane, every 0.5 s and behind each report),
events.jsonl (the "events" pane, only while its tab is shown) and the previous run (its overlay). No call that waits on a target runs on Textual's
event loop. A report is held for the log poll it wakes (at most REPORT_HOLD_S) so the checklist
and the log repaint in one frame; a stream that breaks keeps the last data on screen and
resubscribes with capped backoff.
"""

from __future__ import annotations

import asyncio
import collections
import time

from ..remote.base import TargetError
from ..run.verdict.report import RunReport
from .fmt import one_line
from .sources.source import EVENTS_LOG, ActionError

LOG_POLL_S = 0.5   # two polls a second: under 1 s behind the file, half the redraws of 4 Hz
# After a poll its timer made, the next one waits this much longer for the report it expects
# when one is due about then (reports come each second, or every 3 s while the run is steady,
# a little over): a timer poll just before a report, then the report's own poll, would repaint
# every log row twice within a few milliseconds.
REPORT_SLACK_S = 0.2
EVENTS_POLL_S = 1.0
RETRY_MAX_S = 5.0
REPORT_HOLD_S = 0.2   # the longest a report waits for the log poll it triggers
REPORTS_QUIET_S = 2.5  # no report for this long: new events.jsonl points are drawn without one
GROUPS = ("reports", "gpus", "log", "events", "previous")


class RunStreams:
    def __init__(self, view) -> None:
        """`view`: the RunScreen whose source the workers read and whose panes they feed."""
        self.view = view
        self.started = False
        self._report_arrived = asyncio.Event()
        self._pending_report: RunReport | None = None
        self._hold: asyncio.TimerHandle | None = None   # draws a held report alone, if still held
        self._report_applied_at = float("-inf")
        self._report_times: collections.deque[float] = collections.deque(maxlen=2)   # the last two arrivals

    def _run(self, coro, group: str) -> None:
        self.view.run_worker(coro, group=group, exclusive=True)

    def start(self) -> None:
        self.started = True
        self._run(self._reports(), "reports")
        self._run(self._gpus(), "gpus")
        self.follow_log()
        shown = self.view.shown_pane()
        if shown is not None and shown.STREAM == "events":
            self.restart_metrics()

    def stop(self) -> None:
        for group in GROUPS:
            self.view.workers.cancel_group(self.view, group)
        if self._hold is not None:   # a report of the source being left is not drawn after it
            self._hold.cancel()
            self._hold = None
        self._pending_report = None

    def follow_log(self) -> None:
        """The shown log file (the log pane's log_name), replacing the previous follower."""
        self._run(self._log(), "log")

    def restart_metrics(self) -> None:
        """events.jsonl is read only while the Metrics tab is on screen: a fresh follower
        starts at the file's tail window, which is the recent history the sparklines show."""
        metrics = self.view.metrics_pane
        metrics.reset()
        if self.view.report is not None:
            metrics.show(self.view.report)   # until the events arrive
        metrics.flush()
        self._run(self._events(), "events")
        self.load_previous_run()

    def stop_events(self) -> None:
        self.view.workers.cancel_group(self.view, "events")

    def load_previous_run(self) -> None:
        self._run(self._previous_run(), "previous")

    @staticmethod
    async def _resubscribing(subscribe, take, errors: tuple[type[BaseException], ...], say) -> None:
        """Hands each item of the stream `subscribe()` opens to `take`, until the stream ends; a
        stream broken by one of `errors` is `say`d and subscribed to again, after 1 s, doubled at
        each break in a row up to RETRY_MAX_S. The last data stays on screen meanwhile."""
        delay = 1.0
        while True:
            try:
                async for item in subscribe():
                    take(item)
                    delay = 1.0
                return
            except errors as exc:
                say(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    async def _reports(self) -> None:
        view = self.view

        def broke(exc: BaseException) -> None:
            # The watch keeps its own connection alive; if its stream itself breaks, the
            # header shows the last data's age.
            view.log_pane.problem = f"monitor: {one_line(str(exc))}"

        await self._resubscribing(lambda: view.source.reports(), self._took_report,
                                  (TargetError, OSError, ActionError), broke)

    def _took_report(self, report) -> None:
        # Held for the log poll it wakes, so both repaint in one frame; drawn
        # alone if that poll does not come back quickly (a slow transport).
        self._pending_report = report
        self._report_times.append(time.monotonic())
        self._report_arrived.set()
        # A plain loop timer, cancelled when the log poll draws the report (it
        # nearly always does): no timer task and no wake-up a second for nothing.
        if self._hold is not None:
            self._hold.cancel()
        self._hold = asyncio.get_running_loop().call_later(REPORT_HOLD_S, self.apply_pending_report)

    def apply_pending_report(self) -> None:
        report, self._pending_report = self._pending_report, None
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None
        if not self.view.is_attached or not self.view.app.is_running:
            return   # the app is closing: its widgets are being removed under this call
        if report is not None:
            self.view.on_report(report)
            self._report_applied_at = time.monotonic()
            # events.jsonl points (polled each second, see _events) join the report's frame:
            # the step counter above the charts moves with the checklist's, once a second,
            # and the Metrics tab repaints once a second, not at every log poll too.
            self.view.metrics_pane.flush()

    async def _gpus(self) -> None:
        view = self.view

        def broke(exc: BaseException) -> None:
            view.app.notify(f"GPU stream: {one_line(str(exc))}; retrying", severity="warning")

        await self._resubscribing(lambda: view.source.gpu_snapshots(), lambda snap: view.on_gpu_snapshot(snap),
                                  (TargetError, OSError), broke)

    async def _log(self) -> None:
        view = self.view
        pane = view.log_pane
        follower = view.source.follow(pane.log_name)
        delay = LOG_POLL_S
        timed = False   # the last poll was the timer's, not a report's
        while True:
            try:
                lines = await follower.poll()
                if not view.is_attached or not view.app.is_running:
                    return   # closed while the poll waited: nothing left to show it in
            except (TargetError, OSError, ValueError) as exc:
                pane.problem = f"cannot read: {one_line(str(exc))}"
                view.metrics_pane.flush()   # the points still show while the log cannot be read
                delay = min(max(delay * 2, 1.0), RETRY_MAX_S)
            else:
                self.apply_pending_report()   # same synchronous block: one frame for both
                if pane.problem:
                    pane.problem = ""
                pane.missing = not follower.exists
                delay = LOG_POLL_S
                if lines:
                    pane.lines.append(lines)
                    pane.update_title()
                # A bar redrawn with carriage returns shows at its latest state before its line ends.
                pane.lines.show_partial(follower.partial)
            timed = not await self._next_poll(delay + (self._slack(delay) if timed and delay == LOG_POLL_S else 0.0))

    def _slack(self, delay: float) -> float:
        """REPORT_SLACK_S when the next report is due about `delay` from now (as far after the
        last one as that was after the one before), else none: a poll waits for a report that
        is about to come, never for one a second away (a steady run's reports)."""
        if len(self._report_times) < 2:
            return REPORT_SLACK_S
        before, last = self._report_times
        due = last + (last - before) - time.monotonic()
        return REPORT_SLACK_S if abs(due - delay) <= REPORT_SLACK_S else 0.0

    async def _events(self) -> None:
        metrics = self.view.metrics_pane
        follower = self.view.source.follow(EVENTS_LOG)
        delay = EVENTS_POLL_S
        while True:
            try:
                lines = await follower.poll()
            except (TargetError, OSError, ValueError):
                delay = min(delay * 2, RETRY_MAX_S)  # the log pane and header report the cause
            else:
                delay = EVENTS_POLL_S
                if lines:
                    metrics.add_lines(lines)   # drawn with the next report's frame (flush)
            # No report for a while (a quiet source, a replay): points not drawn yet show by
            # themselves, also those that came just before the reports stopped.
            if time.monotonic() - self._report_applied_at > REPORTS_QUIET_S:
                metrics.flush()
            await self._next_poll(delay)

    async def _previous_run(self) -> None:
        """The run dir's previous run (history/), overlaid on the Metrics charts."""
        view = self.view
        try:
            prev = await view.source.previous_run(exclude=view.run_id)
        except (TargetError, OSError, ValueError):
            return   # no overlay; the log pane and header report transport trouble
        if prev is not None:
            view.metrics_pane.set_previous(prev.run_id, prev.event_lines)
            view.metrics_pane.flush()

    async def _next_poll(self, delay: float) -> bool:
        """Sleep `delay`, or less if a report arrives first: polling right behind the report
        lets the log and the checklist repaint in one frame instead of two. True when a report
        ended the wait."""
        if delay > RETRY_MAX_S / 2:
            await asyncio.sleep(delay)   # backing off after errors: do not let reports hurry it
            return False
        self._report_arrived.clear()
        try:
            await asyncio.wait_for(self._report_arrived.wait(), delay)
        except asyncio.TimeoutError:
            return False
        return True
