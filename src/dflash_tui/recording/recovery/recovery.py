"""Recovery: the watcher applying each profile's [recover] policy, the one actor that does.

For a recorded failing change (a verdict in the policy's `on`) of a run not answered yet, it
asks the pure decision (recover_policy.py `decide`) with the restarts that led to that run
(recovery_log.py `chain_of`). Before it acts on a failing run (a restart or a give-up) it takes an evidence bundle
(bundles.py; the plan's `bundle`, named in the notification). To restart: it records `planned`, stops a run whose processes
still live (STALLED, GPU LOST) with the verified stop, waits out the backoff, records
`launching`, and relaunches through the profile's RunWatch (one LaunchRequest): from the
checkpoint the plan chose (rollback.py: the newest complete one at or before the last good step;
DFLASH_RESUME_FROM / DFLASH_RESUME_STEP, and DFLASH_DIVERGED_AT after a divergence), the bundled
trainer with --resume, any program with DFLASH_RESTART=<n> in its environment, away from the node the failure named where the launcher places the run (a
scheduler; `RunWatch.places_nodes`, asked before the plan); then `launched`. To give up:
`gave_up` and the reason. Each restart and each give-up is one notification, committed with
its action in the store's outbox and marked sent once every URL took it: a watcher killed
between the two sends what is pending when it starts again, once. A watcher killed at any
point resumes from the log (module doc there). A stop by a person is never undone: STOPPED
is no trigger, a run someone else launched meanwhile supersedes the plan, and a person's stop
while a restart is pending cancels it (`cancelled`, written by the stop's own process:
recovery_log.py `cancel`): each step here commits only on top of the action it acted on, so
a cancel that came first ends the plan, and one that came during the launch has the launched
run stopped again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Callable

from ...config import Config, ConfigError
from ...remote.base import TargetError
from ...run.launch.launch import LaunchRefused
from ...run.launch.request import OWN_NODES, LaunchRequest, Placement
from ...run.verdict.rank_groups import nodes_outside_collective
from ...run.verdict.report import RunReport
from ...verdicts import State, Verdict
from ...watch.base import ActionInFlight, RunWatch
from .bundles import take_before_recovery
from ..store.change import VerdictChange, run_id_of
from ..goodput.goodput import goodput
from ..goodput.spend import priced_loss
from ..notify.notify import Notification, open_command
from .recover_policy import GIVE_UP, RESTART, Failure, decide, failure_of
from .rollback import divergence_of, last_good_step, nothing_fits, rollback_of, rollback_words
from .recovery_log import (CANCELLED, GAVE_UP, IN_FLIGHT, LAUNCHED, LAUNCHING, PLANNED, STOPPED, SUPERSEDED, Action,
                           Notice, RecoveryLog, chain_of, failure_json, mark_sent, stop_times)
from ..notify.sender import Delivery
from ..store.store import ChangeStore
from .settings import RECOVER_SECTION
from ..notify.settings import NOTIFY_SECTION

log = logging.getLogger("dflash_tui.recording")

TICK_S = 0.5
NEVER_SEEN_S = 120.0   # a `launching` whose new run never shows a run id: given up after this
FAILED_BEFORE = "it failed the run before"
# A program's own failing end (`Verdict.program_failed`) may have a scheduler's end of its job
# (a node failure, a preemption) behind it; the scheduler is given this long to say so.
SCHEDULER_SETTLE_S = 30.0
# For tests only: seconds to hold the watcher still right after a notice is committed with its
# action, before it is handed to the sender (a test SIGKILLs the watcher there).
PAUSE_ENV = "DFLASH_TUI_TEST_PAUSE_BEFORE_NOTIFY_S"


def failed_nodes(state: State, report: RunReport | None) -> tuple[tuple[str, ...], str]:
    """(the nodes a relaunch must avoid after a failure in `state`, why), as the failed run's
    report names them: on a verdict that names a node (NODE FAIL) the job's nodes its scheduler
    holds out of service (all its nodes when it names none); on STALLED the node of the rank
    that was not in the collective the others waited in; ((), "") when none is named."""
    if report is None or not isinstance(state, Verdict):
        return (), ""
    if state is Verdict.STALLED:
        odd = nodes_outside_collective(report.checklist.rank_groups)
        return (odd.nodes, odd.why()) if odd is not None else ((), "")
    sched = report.checklist.scheduler
    if sched is None or not state.names_a_node:
        return (), ""
    named = sched.failed_nodes or sched.nodes
    return (named, FAILED_BEFORE) if named else ((), "")


def job_still_ending(report: RunReport | None, change: VerdictChange, now: float) -> bool:
    """The run's program ended while its scheduler still says its job is active: how the job
    ended (NODE FAIL names the node to exclude, PREEMPTED) is the scheduler's to say within
    SCHEDULER_SETTLE_S; its program's own end (CRASHED, killed by Slurm's SIGTERM) is not
    acted on before."""
    sched = report.checklist.scheduler if report is not None and run_id_of(report) == change.run_id else None
    return (sched is not None and sched.active and isinstance(change.state, Verdict) and change.state.program_failed
            and now - change.time < SCHEDULER_SETTLE_S)


def nodes_detail(nodes: tuple[str, ...], why: str, places_nodes: bool) -> dict:
    """What a plan records of the nodes a failure named: where the launcher places the run (a
    scheduler), the nodes its relaunch excludes (`exclude`, `exclude_why`); else only which
    node looked unhealthy (`unhealthy`, `unhealthy_why`), for the notice: the profile's own
    nodes are relaunched as they are."""
    if not nodes:
        return {}
    key = "exclude" if places_nodes else "unhealthy"
    return {key: list(nodes), f"{key}_why": why} if why else {key: list(nodes)}


def _resume_detail(detail: dict) -> dict:
    """The checkpoint a plan chose (rollback.py), carried on to its later actions, or why a
    diverged run starts from scratch (`from_scratch`); {} when neither, or when what is recorded
    is not a checkpoint's path and step."""
    point = detail.get("resume_from")
    if not isinstance(point, dict) or not isinstance(point.get("path"), str) or not point["path"]:
        why = detail.get("from_scratch")
        return {"from_scratch": why} if isinstance(why, str) and why else {}
    out = {**point, "step": _whole(point.get("step"))}
    if "diverged_at" in point:
        out["diverged_at"] = _whole(point["diverged_at"])
    return {"resume_from": out}


def _whole(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _nodes_detail(detail: dict, places_nodes: bool) -> dict:
    """The nodes a plan named, carried on to its later actions (an exclusion recorded where
    the launcher now cannot carry it out is only said)."""
    for key in ("exclude", "unhealthy"):
        nodes = tuple(x for x in detail.get(key) or () if isinstance(x, str) and x)
        if nodes:
            return nodes_detail(nodes, str(detail.get(f"{key}_why") or ""), places_nodes and key == "exclude")
    return {}


def recovery_stopper(attempt: int, max_restarts: int) -> str:
    """Who a recovery's stop names in stop.json (`requested_by`)."""
    return f"the recovery policy, attempt {attempt}/{max_restarts}"


def left_running(name: str, report, run_id: str) -> str:
    """What a give-up leaves behind, when its run still lives (a hang is not stopped when no
    restart follows): "; the run is left running (pid 812, STALLED): ..."; "" otherwise."""
    if report is None or run_id_of(report) != run_id or not report.checklist.verdict.alive:
        return ""
    pid = f"pid {report.launch.pid}, " if report.launch is not None else ""
    return (f"; the run is left running ({pid}{report.checklist.verdict}): look at it, then stop it "
            f"(`dflash-tui --stop -p {name}`, or `s` in the dashboard)")


class Recovery:
    def __init__(self, config: Config, store: ChangeStore, log_: RecoveryLog, *,
                 submit: Callable[[Notification], None], clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.store = store
        self.log = log_
        self.submit = submit
        self.clock = clock
        self.watches: dict[str, RunWatch] = {}
        policies = RECOVER_SECTION.of(config)
        self._latest: dict[str, VerdictChange] = {
            name: c for name, c in store.last_states().items() if policies.for_profile(name) is not None}
        self._tasks: dict[str, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._unsent: dict[int, set[str]] = {}   # outbox id -> the URLs that have not taken it yet
        self._unsent_lock = threading.Lock()
        self._handed: set[int] = set()   # outbox ids handed to the sender by this watcher

    def send_pending(self) -> None:
        """Send, once, the notices committed by others and never marked sent: at the start, a
        watcher's before this one (killed between the action and the send); on each tick, a
        person's stop's (the cancel of a pending restart)."""
        pending = [n for n in self.log.pending(self.clock()) if n.id not in self._handed]
        latest = self.store.last_states() if pending else {}
        for notice in pending:
            change = latest.get(notice.profile)
            urls = NOTIFY_SECTION.of(self.config).for_profile(notice.profile)
            if change is None or not urls:
                continue
            log.info("%s: sending the notice a watcher before this one did not: %s", notice.profile, notice.title)
            self._hand_over(Notification(notice.profile, change.state, notice.event, notice.title, notice.body,
                                         urls, change, notice.time, notice.id))

    def _hand_over(self, n: Notification) -> None:
        if n.outbox_id is not None:
            self._handed.add(n.outbox_id)
            with self._unsent_lock:
                self._unsent[n.outbox_id] = set(n.urls)
        self.submit(n)

    def delivered(self, d: Delivery) -> None:
        """The sender's report (its worker thread): a notice every URL took is marked sent."""
        oid = d.notification.outbox_id
        if oid is None or d.sent_at is None:
            return
        with self._unsent_lock:
            left = self._unsent.get(oid)
            if left is None:
                return
            left.discard(d.url)
            if left:
                return
            del self._unsent[oid]
        mark_sent(self.log.path, oid, d.sent_at)

    def changed(self, change: VerdictChange) -> None:
        """The Recorder's listener: a committed change."""
        if RECOVER_SECTION.of(self.config).for_profile(change.profile) is not None:
            self._latest[change.profile] = change
            self._wake.set()

    def _due(self, name: str) -> bool:
        last = self.log.last(name)
        if last is not None and last.action in IN_FLIGHT:
            return True
        change = self._latest.get(name)
        policy = RECOVER_SECTION.of(self.config).for_profile(name)
        return (change is not None and policy is not None and change.state in policy.on
                and not self.log.handled(name, change.run_id))

    async def run(self, watches: dict[str, RunWatch]) -> None:
        self.watches = watches
        try:
            while True:
                try:
                    self.send_pending()
                except ConfigError as exc:
                    log.warning("recovery: pending notices not read: %s", exc)
                for name in watches:
                    if name not in self._tasks and self._due(name):
                        self._tasks[name] = asyncio.create_task(self._step_safely(name), name=f"recover {name}")
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), TICK_S)
                except asyncio.TimeoutError:
                    pass
        finally:
            for t in self._tasks.values():
                t.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _step_safely(self, name: str) -> None:
        try:
            await self._step(name)
        except (TargetError, OSError, ActionInFlight, asyncio.TimeoutError) as exc:
            log.warning("%s: recovery waits: %s", name, exc)   # tried again on the next tick
        finally:
            self._tasks.pop(name, None)
            self._wake.set()

    def _record(self, name: str, action: str, run_id: str, attempt: int,
                notify: Callable[[Action], Notification | None] | None = None, after: int | None | str = "any",
                **detail) -> Action | None:
        """Commit an action; with `notify`, the notification it announces in the same
        transaction (the outbox), then handed to the sender. With `after`, only on top of that
        action (its id): None, nothing done, when a person's stop cancelled the restart since."""
        a = Action(name, self.clock(), action, run_id, attempt, detail)
        n = notify(a) if notify is not None else None
        a = self.log.record(a, Notice(name, n.due, n.event, n.title, n.body) if n is not None else None, after=after)
        if a is None:
            log.info("%s: recovery %s not done (run %s, restart %d): %s", name, action, run_id or "-", attempt,
                     self._cancelled_words(name))
            return None
        log.info("%s: recovery %s (run %s, restart %d)%s", name, action, run_id or "-", attempt,
                 f": {detail['reason']}" if "reason" in detail else "")
        if n is not None:
            pause = os.environ.get(PAUSE_ENV)
            if pause:
                time.sleep(float(pause))
            self._hand_over(Notification(n.profile, n.state, n.event, n.title, n.body, n.urls, n.change, n.due,
                                         self.log.outbox_id))
        return a

    # -- one step of a profile's recovery --------------------------------------------------------

    async def _step(self, name: str) -> None:
        policy = RECOVER_SECTION.of(self.config).for_profile(name)
        watch = self.watches[name]
        last = self.log.last(name)
        if last is not None and last.action in IN_FLIGHT:
            await self._continue(name, watch, last, policy.max_restarts if policy else 0)
            return
        change = self._latest.get(name)
        if change is None or policy is None or self.log.handled(name, change.run_id):
            return
        if job_still_ending(watch.last, change, self.clock()):
            await asyncio.sleep(TICK_S)   # asked again on the next tick, with the scheduler's word
            return
        actions = self.log.actions(name)
        chain = chain_of(actions, change.run_id)
        steps = [c.evidence.step for c in self.store.changes(name, run_id=change.run_id) if c.evidence.step is not None]
        report = watch.last if watch.last is not None and run_id_of(watch.last) == change.run_id else None
        failure = failure_of(change, max(steps) if steps else None, divergence_of(report))
        now = self.clock()
        d = decide(policy, failure, chain, now)
        after = last.id if last is not None else None
        bundle = None
        if d.kind in (GIVE_UP, RESTART):
            # The evidence first: a stop or relaunch wipes the hung processes' stacks. It is
            # taken within the backoff (counted from the failure), not added to it.
            bundle = await take_before_recovery(self.config, watch.profile, watch, change.run_id)
        if d.kind == GIVE_UP:
            reason = d.reason + left_running(name, watch.last, change.run_id)
            self._record(name, GAVE_UP, change.run_id, d.attempt, reason=reason, failure=failure_json(failure),
                         bundle=bundle, notify=lambda a: self._notify_gave_up(name, a, failure, policy.max_restarts),
                         after=after)
        elif d.kind == RESTART:
            # `resume = false`: a relaunch from scratch, no checkpoint chosen
            if policy.resume:
                report = await self._searched_now(watch, change.run_id, report)
            rollback = rollback_of(report) if policy.resume else None
            scratch = nothing_fits(report) if policy.resume else ""
            plan = self._record(name, PLANNED, change.run_id, d.attempt, at=d.at, failure=failure_json(failure),
                                bundle=bundle, after=after,
                                **nodes_detail(*failed_nodes(change.state, report), watch.places_nodes),
                                **({"resume_from": rollback.detail()} if rollback is not None else {}),
                                **({"from_scratch": scratch} if scratch else {}))
            if plan is not None:
                await self._continue(name, watch, plan, policy.max_restarts)

    async def _searched_now(self, watch: RunWatch, run_id: str, report: RunReport | None) -> RunReport | None:
        """The failed run's report with its checkpoints searched just now: the watch searches at
        its own cadence (every 5 s until it knows the save interval), and the checkpoint the
        relaunch resumes from may be younger than its last search. A rollback's candidates (at
        or before the last good step) are judged first: a diverged run that saved on past its
        divergence may have more newer checkpoints waiting than one look judges. The report as
        it was when the target cannot be asked or shows another run by now."""
        watch.search_checkpoints_now(last_good_step(divergence_of(report)))
        try:
            again = await watch.check()
        except (TargetError, OSError, ActionInFlight, asyncio.TimeoutError):
            return report
        return again if run_id_of(again) == run_id else report

    async def _continue(self, name: str, watch: RunWatch, last: Action, max_restarts: int) -> None:
        report = watch.last
        if report is None or not report.connected:
            return   # nothing is done on a report that is not current
        run_id = run_id_of(report)
        failure = self._failure_of(name, last)
        if run_id != last.run_id:
            if last.action == LAUNCHING and run_id:
                # Killed after the launch, before recording it: the new run is there.
                self._record(name, LAUNCHED, last.run_id, last.attempt, new_run_id=run_id,
                             from_step=last.detail.get("from_step"), resume=last.detail.get("resume"),
                             notify=lambda a: self._notify_restart(name, a, failure, max_restarts), after=last.id,
                             **_nodes_detail(last.detail, watch.places_nodes), **_resume_detail(last.detail))
            elif last.action == LAUNCHING and self.clock() - last.time > NEVER_SEEN_S:
                self._record(name, GAVE_UP, last.run_id, last.attempt, failure=failure_json(failure) if failure else {},
                             reason=f"the relaunch showed no run within {NEVER_SEEN_S:.0f} s", after=last.id)
            elif last.action != LAUNCHING and run_id:
                self._record(name, SUPERSEDED, last.run_id, last.attempt, new_run_id=run_id,
                             reason=f"run {run_id} was launched meanwhile", after=last.id)
            return
        if last.action == PLANNED and report.checklist.verdict.alive:
            # stop.json says who stopped it: the timeline and history read "stopped by the
            # recovery policy, attempt 1/3", not the user the watcher runs as
            results = await watch.stop(requested_by=recovery_stopper(last.attempt, max_restarts))
            bad = [r.message for r in results.values() if not r.ok]
            if bad:
                self._record(name, GAVE_UP, last.run_id, last.attempt, failure=failure_json(failure),
                             reason=f"could not stop the run: {'; '.join(bad)}", after=last.id,
                             notify=lambda a: self._notify_gave_up(name, a, failure, max_restarts))
                return
            last = self._record(name, STOPPED, last.run_id, last.attempt, at=last.detail.get("at"),
                                outcome="; ".join(r.message for r in results.values()), after=last.id,
                                **_nodes_detail(last.detail, watch.places_nodes), **_resume_detail(last.detail))
            if last is None:
                return
        at = last.detail.get("at")
        if last.action in (PLANNED, STOPPED) and isinstance(at, (int, float)) and self.clock() < at:
            await asyncio.sleep(min(TICK_S, at - self.clock()))   # the backoff, asked again each tick
            return
        await self._launch(name, watch, last, failure, max_restarts)

    def _bundle_of(self, name: str, action: Action) -> str | None:
        """The evidence bundle taken before the recovery `action` belongs to (its plan's)."""
        if action.detail.get("bundle"):
            return str(action.detail["bundle"])
        plan = next((a for a in reversed(self.log.actions(name))
                     if a.action == PLANNED and a.run_id == action.run_id and a.attempt == action.attempt), None)
        return str(plan.detail["bundle"]) if plan is not None and plan.detail.get("bundle") else None

    def _failure_of(self, name: str, last: Action) -> Failure | None:
        if last.failure is not None:
            return last.failure
        plan = next((a for a in reversed(self.log.actions(name))
                     if a.action == PLANNED and a.run_id == last.run_id and a.attempt == last.attempt), None)
        return plan.failure if plan is not None else None

    async def _launch(self, name: str, watch: RunWatch, last: Action, failure: Failure | None,
                      max_restarts: int) -> None:
        policy = RECOVER_SECTION.of(self.config).for_profile(name)
        n = last.attempt
        resume, from_step = False, None
        more = _nodes_detail(last.detail, watch.places_nodes)
        chosen = _resume_detail(last.detail)
        point = chosen.get("resume_from", {})
        if watch.profile.uses_bundled_trainer and (policy is None or policy.resume) and "from_scratch" not in chosen:
            # the checkpoint the plan chose (its --resume loads DFLASH_RESUME_FROM), else its newest
            ref = await watch.newest_checkpoint() if not point else None
            resume = bool(point) or ref is not None
            from_step = point.get("step") if point else (ref.step if ref is not None else None)
        request = LaunchRequest(relaunch=True, resume=resume, restart=n,
                                placement=Placement(exclude=tuple(more.get("exclude", ()))),
                                resume_from=point.get("path", ""), resume_step=point.get("step"),
                                diverged_at=point.get("diverged_at"))
        more.update(chosen)
        if last.action != LAUNCHING:
            last = self._record(name, LAUNCHING, last.run_id, n, resume=resume, from_step=from_step, after=last.id,
                                **more)
            if last is None:
                return   # cancelled by a person's stop before the launch: nothing launched
        try:
            result = await watch.launch(request)
        except (LaunchRefused, ConfigError) as exc:
            self._record(name, GAVE_UP, last.run_id, n, failure=failure_json(failure) if failure else {},
                         reason=f"the relaunch was refused: {exc}", after=last.id,
                         notify=lambda a: self._notify_gave_up(name, a, failure, max_restarts))
            return
        new_id = run_id_of(result.report)
        if not result.launched or result.report.checklist.verdict.failing:
            cl = result.report.checklist
            self._record(name, GAVE_UP, last.run_id, n, failure=failure_json(failure) if failure else {},
                         reason=f"the relaunch failed: {cl.verdict.value} {cl.summary}", after=last.id,
                         notify=lambda a: self._notify_gave_up(name, a, failure, max_restarts))
            return
        watch.heard(result.report)   # the new run's first state, recorded when it was seen
        done = self._record(name, LAUNCHED, last.run_id, n, new_run_id=new_id, from_step=from_step, resume=resume,
                            notify=lambda a: self._notify_restart(name, a, failure, max_restarts), after=last.id,
                            **more)
        if done is None:
            await self._stop_cancelled_launch(name, watch, last, new_id)

    async def _stop_cancelled_launch(self, name: str, watch: RunWatch, launching: Action, new_id: str) -> None:
        """A person's stop cancelled the restart while its launch was under way: the run it
        launched is stopped again, and recorded as cancelled (so it is never restarted)."""
        results = await watch.stop()
        self._record(name, CANCELLED, new_id, launching.attempt, was=LAUNCHED, new_run_id=new_id,
                     by=self._cancelled_by(name), reason=self._cancelled_words(name),
                     outcome="; ".join(r.message for r in results.values()))

    def _cancelled_by(self, name: str) -> str:
        last = self.log.last(name)
        return str(last.detail.get("by") or "") if last is not None and last.action == CANCELLED else ""

    def _cancelled_words(self, name: str) -> str:
        by = self._cancelled_by(name)
        return f"restart cancelled by {by}" if by else "another action was recorded meanwhile"

    # -- notifications ----------------------------------------------------------------------------

    def _send(self, name: str, event: str, title: str, lines: list[str]) -> Notification | None:
        urls = NOTIFY_SECTION.of(self.config).for_profile(name)
        change = self._latest.get(name)
        if not urls or change is None:
            return None
        watch = self.watches.get(name)
        if watch is not None:   # the time lost so far, from the recorded changes (goodput.py)
            changes = self.store.changes(name)
            good = goodput(changes, self.clock(), watch.profile.stall_after_s, stop_times(self.log.actions(name)))
            lines.append(good.lost_words())
            if (lost := priced_loss(changes, good)):
                lines.append(lost)
        lines.append(f"open it: {open_command(name, self.config.path)}")
        return Notification(name, change.state, event, title, "\n".join(lines), urls, change, self.clock())

    def _notify_restart(self, name: str, done: Action, failure: Failure | None,
                        max_restarts: int) -> Notification | None:
        point = _resume_detail(done.detail).get("resume_from")
        if done.detail.get("resume"):
            what = f"resumed from step {done.detail['from_step']}"
        elif point is not None:
            what = f"resumed from step {point['step'] if point['step'] is not None else '?'} (DFLASH_RESUME_FROM)"
        else:
            what = f"relaunched with DFLASH_RESTART={done.attempt}"
        scratch = _resume_detail(done.detail).get("from_scratch")
        lines = [f"restart {done.attempt}/{max_restarts} after {failure.state if failure else 'a failure'}"
                 + (f": {failure.where}" if failure and failure.where else ""),
                 f"run {done.detail.get('new_run_id') or '?'} {what} (was run {done.run_id})"]
        if point is not None:
            lines.insert(0, rollback_words(point))
        elif scratch:
            lines.insert(0, f"relaunched from scratch: {scratch}")
        if done.detail.get("exclude"):
            nodes = ", ".join(map(str, done.detail["exclude"]))
            why = str(done.detail.get("exclude_why") or FAILED_BEFORE)
            lines.append(f"excluding node {nodes} ({why})" if why == FAILED_BEFORE else f"excluding node {nodes}: {why}")
        elif done.detail.get("unhealthy"):
            nodes = ", ".join(map(str, done.detail["unhealthy"]))
            why = str(done.detail.get("unhealthy_why") or FAILED_BEFORE)
            lines.append(f"node {nodes} looked unhealthy ({why}); not excluded: {OWN_NODES}")
        if (bundle := self._bundle_of(name, done)) is not None:
            lines.append(f"evidence bundle (taken before the restart): {bundle}")
        return self._send(name, "restarted", f"dflash-tui: {name} restarted ({done.attempt}/{max_restarts})", lines)

    def _notify_gave_up(self, name: str, gave: Action, failure: Failure | None,
                        max_restarts: int) -> Notification | None:
        lines = [f"gave up after {gave.attempt}/{max_restarts} restarts: {gave.detail.get('reason', '')}"]
        if failure is not None:
            lines.append(f"{failure.state}: {failure.where}")
        lines.append(f"run {gave.run_id}")
        if (bundle := self._bundle_of(name, gave)) is not None:
            lines.append(f"evidence bundle: {bundle}")
        return self._send(name, "gave_up", f"dflash-tui: {name} recovery gave up", lines)
