"""RunWatch: the one seam for "watch one run", whatever runs it (one host, or several nodes).

Every consumer (the CLI, the fleet poller, the dashboard's sources, the watch daemon) holds a
RunWatch and nothing under it. What a RunWatch offers (watch/README.md, "RunWatch"):

- `poll()`     one observation as a RunReport; never raises for transport trouble: a target that
               does not answer is the last report marked stale (`unreachable_report`), retried
               with capped backoff. For the dashboard and the fleet.
- `check(gpus=)`  one observation for the headless modes: a target that cannot be reached raises
               TargetError (exit 3) instead; `gpus=True` adds the "gpus" check from one bounded
               GPU sample of the host.
- `reports()`  poll() now, then once per `interval` (sooner after an action).
- `launch()/relaunch()/stop()/canary()`  the run's verbs behind ONE lock: a second action while
               one is in flight raises ActionInFlight rather than interleave.
- `close()`    what the watch opened (its sessions; nothing it borrowed from a SharedTransport).
- `last`       the newest report; `add_listener(fn)`: `fn(previous, current)` is called whenever
               a new report changes the verdict or the state of a check (`changed`), the one place
               a change of verdict is observable (notifications and the watch daemon hang here).

Every report goes through `_settle`: evidence -> run/verdict/health.py `evaluate` -> `with_gpu_check` ->
HealthTracker (each check's `since`) -> `report_from`, once, for poll, check and launch alike.
A launch's report is the caller's (the CLI prints it); `last` and the listeners see the polls.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import AsyncIterator, Callable

from ..config import Limits, Profile
from ..run.launch.canary import CanaryResult
from ..run.launch.launch import LaunchOutcome
from ..run.launch.request import LaunchRequest, as_request, relaunching
from ..run.verdict.report import RunReport
from ..run.launch.stop import StopResult
from ..run.verdict.checklist import Check, CheckId, CheckState, Checklist, Verdict
from ..gpu.sample import GpuSnapshot
from ..run.history import CheckpointRef, HistoryRun, PreviousRun
from .files import LineFollower

Listener = Callable[[RunReport | None, RunReport], None]


class ActionInFlight(RuntimeError):
    """Another launch/stop/canary is running; the caller should wait for it."""


@dataclass
class LaunchResult:
    """What a launch did. `outcomes`, `stopped`: per node (one host: one entry, its profile's name)."""

    report: RunReport                        # the run just after the launch, settled like a poll
    outcomes: dict[str, LaunchOutcome]
    stopped: dict[str, StopResult] = field(default_factory=dict)   # relaunch: the old run's stops
    seconds: float = 0.0

    @property
    def launched(self) -> bool:
        return all(o.run_id for o in self.outcomes.values())

    @property
    def unreachable(self) -> bool:
        return any(o.unreachable for o in self.outcomes.values())

    def words(self) -> tuple[bool, str]:
        """(whether it went well, one line saying what it did), for a person: the dashboard's
        notification of `r`, the watcher's log."""
        cl = self.report.checklist
        if len(self.outcomes) == 1:
            (outcome,) = self.outcomes.values()
            if outcome.unreachable or not outcome.run_id:
                return False, outcome.checklist.summary or f"not launched: {outcome.checklist.verdict.value}"
            parts = [outcome.stopped.message] if outcome.stopped is not None else []
            parts.append(f"launched run {outcome.run_id} in {outcome.seconds:.1f} s: {outcome.checklist.verdict.value}"
                         + (f", resuming from checkpoint {outcome.resume_from}" if outcome.resume_from else ""))
            ok = not outcome.checklist.verdict.failing
            text = "; ".join(parts)
            return ok, text if ok else text + (f" ({outcome.checklist.summary})" if outcome.checklist.summary else "")
        if not self.launched or cl.verdict.failing:
            return False, f"{cl.verdict.value}: {cl.summary}"
        ids = ", ".join(f"{n} {o.run_id}" for n, o in self.outcomes.items())
        return True, f"launched {len(self.outcomes)} nodes in {self.seconds:.1f} s ({ids}): {cl.verdict.value}"


def stop_words(results: dict[str, StopResult]) -> tuple[bool, str]:
    """(every stop verified, one line): a node's result named by its node."""
    if len(results) == 1:
        (res,) = results.values()
        return res.ok, res.message
    return all(r.ok for r in results.values()), "; ".join(f"node {n}: {r.message}" for n, r in results.items())


def canary_words(results: dict[str, CanaryResult]) -> tuple[bool, str]:
    """(the canary passed everywhere, one line)."""
    ok = all(r.ok for r in results.values())
    if len(results) == 1:
        (res,) = results.values()
        text = res.message
    else:
        text = "; ".join(f"node {n}: {'passed' if r.ok else 'FAILED'}: {r.message}" for n, r in results.items())
    return ok, f"canary passed: {text}" if ok else f"canary FAILED: {text}"


def unreachable_report(last: RunReport | None, *, profile: str, target_label: str, run_dir: str,
                       why: str, hint: str, error: str | None = None) -> RunReport:
    """The last report marked stale (`error`, default `why`), or, for a target never reached,
    a NO RUN report whose one failing check says why. The one place this report is made."""
    now = time.time()
    error = why if error is None else error
    if last is not None:
        return replace(last, connected=False, stale_since=last.stale_since or now, error=error)
    check = Check.of(CheckId.TRANSPORT, CheckState.FAIL, why, hint, now)
    return RunReport(time=now, profile=profile, target_label=target_label, run_dir=run_dir,
                     checklist=Checklist(Verdict.NO_RUN, [check], f"cannot reach {target_label}"),
                     connected=False, stale_since=now, error=why)


def changed(previous: RunReport | None, current: RunReport) -> bool:
    """Whether `current` says something new: another verdict, a check in another state (or a
    check come or gone), or another run (a relaunch that crashed again before a poll saw it
    start has the checklist of the run before it). Ages, steps and stale marks alone are not a
    change."""
    if previous is None:
        return True
    if previous.checklist.verdict is not current.checklist.verdict:
        return True
    if (previous.launch and previous.launch.run_id) != (current.launch and current.launch.run_id):
        return True
    before = {c.id: c.state for c in previous.checklist.checks}
    return before != {c.id: c.state for c in current.checklist.checks}


Pid = tuple[int, int]   # (pid, start_ticks): one process, never another that reused its pid


def running_pid(report: RunReport | None) -> Pid | None:
    """The wrapper of a RUNNING run as an exit watch names it, when the report proves it alive
    and recorded its start time; None otherwise."""
    if (report is None or not report.connected or report.checklist.verdict is not Verdict.RUNNING
            or report.pid_alive is not True or report.launch is None or report.launch.start_ticks is None):
        return None
    return (report.launch.pid, report.launch.start_ticks)


class RunWatch(ABC):
    """The base of HostWatch (one host) and NodesWatch (a run on several nodes)."""

    profile: Profile
    limits: Limits
    label: str      # where the run is, in words: "root@gpu1 · pct:200", the nodes

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.last: RunReport | None = None
        self._listeners: list[Listener] = []
        self._action = asyncio.Lock()
        self._launches = 0   # odd while a launch or relaunch is in flight; +2 per launch
        self._before_launch: frozenset[str] = frozenset()   # the run ids `last` named when it began
        self._wake = asyncio.Event()

    # -- what a backend of the watch implements -------------------------------------------------

    @abstractmethod
    async def _poll(self) -> RunReport: ...

    @abstractmethod
    async def _check(self, gpus: bool) -> RunReport: ...

    @abstractmethod
    async def _launch(self, request: LaunchRequest) -> LaunchResult: ...

    @abstractmethod
    async def _stop(self, requested_by: str | None = None) -> dict[str, StopResult]: ...

    @abstractmethod
    async def _canary(self, sleep_s: int) -> dict[str, CanaryResult]: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def newest_checkpoint(self) -> CheckpointRef | None:
        """What a resume would continue from (on several nodes: rank 0's); None: nothing.
        Raises TargetError when the run's host cannot be reached."""

    @property
    @abstractmethod
    def places_nodes(self) -> bool:
        """Whether a launch can be placed: told which nodes to avoid (`LaunchRequest.placement`),
        as a scheduler's backend can (`Launcher.PLACES_NODES`). A recovery asks before it plans
        an exclusion."""

    @abstractmethod
    def host_watches(self) -> list[tuple[str, "RunWatch"]]:
        """The one-host watches under this one, each with its node's name: itself ("") for a
        run on one host, one per node otherwise. Whoever samples a host's GPUs for all its runs
        (the fleet) lends that watch the sample (`gpus.lend`: its "gpus" check, GPU LOST)."""

    # -- the run's files and GPUs, for whoever shows them live ----------------------------------

    @abstractmethod
    def follow(self, name: str) -> LineFollower:
        """A file of the run dir (train.log, events.jsonl), its new complete lines at each poll;
        on several nodes every node's lines, prefixed with its name (events.jsonl: rank 0's)."""

    @abstractmethod
    def follow_path(self, path: str) -> LineFollower:
        """Any file where the run lives (a history run's), followed the same way."""

    @abstractmethod
    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        """The run before the shown one in the run dir's history/ (rank 0's on several nodes)."""

    @abstractmethod
    async def history(self) -> list[HistoryRun] | None:
        """The runs kept in history/ (None: no one list, a run on several nodes)."""

    @abstractmethod
    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        """The GPUs of the run's hosts, live (merged over the nodes); the watch's "gpus" check
        reads the same samples while this stream runs."""

    @abstractmethod
    async def stop_gpu_stream(self) -> None:
        """End what gpu_snapshots started (the lent samples, if any, serve the check again)."""

    @property
    @abstractmethod
    def retry_in(self) -> float | None:
        """Seconds until the next reconnect attempt while disconnected (None when connected)."""

    # -- observing ----------------------------------------------------------------------------

    def add_listener(self, fn: Listener) -> None:
        """`fn(previous, current)` after every report that `changed` something (see module doc)."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        self._listeners.remove(fn)

    def _publish(self, report: RunReport) -> RunReport:
        previous, self.last = self.last, report
        if self._listeners and changed(previous, report):
            for fn in list(self._listeners):
                fn(previous, report)
        return report

    def heard(self, report: RunReport) -> None:
        """A report an action's caller holds (a launch's, settled like a poll's), heard by the
        listeners as a poll's would be: the watcher records a run it relaunched from the launch,
        not from the first poll after the action."""
        self._publish(report)

    # Several nodes are relaunched one by one: a poll in between combines them half done.
    launch_mixes_runs = False

    async def poll(self) -> RunReport:
        """One observation; never raises for transport trouble (it is in the report). On several
        nodes, one that overlapped a launch is heard only when every node's run in it is a new
        one: else it may see the relaunch half done (one node's run already moved to history, a
        new rank 0 beside the old rank 1's crash), a state no run had; the launch's caller hears
        its result (`heard`)."""
        before = self._launches
        report = await self._poll()
        if self.launch_mixes_runs and (before % 2 or self._launches != before) and not all(
                i is not None and i not in self._before_launch for i in _run_ids(report)):
            return report
        return self._publish(report)

    def search_checkpoints_now(self, at_or_before: int | None = None) -> None:
        """The next look searches the run's checkpoints whatever their cadence (the recovery is
        about to choose the one a relaunch resumes from), judging first those at or before
        `at_or_before` (a rollback's last good step; None: the newest first). A watch that finds
        none: nothing."""

    async def check(self, *, gpus: bool = False) -> RunReport:
        """One observation; raises TargetError when one host cannot be reached (a node of several
        that cannot is in the report). `gpus`: one bounded GPU sample for the "gpus" check."""
        return self._publish(await self._check(gpus))

    async def reports(self) -> AsyncIterator[RunReport]:
        """Forever: a report now, then one per interval (sooner after an action; a watch may
        look less often while its run is steady: `_pause_s`)."""
        while True:
            yield await self.poll()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), await self._pause_s())
            except asyncio.TimeoutError:
                pass

    async def _pause_s(self) -> float:
        """How long `reports` waits before its next look (an action or `_wake` ends it sooner)."""
        return self.interval

    # -- the actions, one at a time -------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._action.locked()

    async def _act(self, coro_fn):
        if self._action.locked():
            raise ActionInFlight("a launch, stop or canary is already in flight")
        async with self._action:
            try:
                return await coro_fn()
            finally:
                self._wake.set()

    async def _launching(self, coro) -> LaunchResult:
        self._before_launch = frozenset(i for i in _run_ids(self.last) if i) if self.last else frozenset()
        self._launches += 1
        try:
            return await coro
        finally:
            self._launches += 1

    async def launch(self, request: LaunchRequest | None = None, /, **fields) -> LaunchResult:
        """Launch as `request` asks (run/launch/request.py; or its fields as keywords:
        `launch(preflight=False)`): preflight, then launch; raises LaunchRefused when the run
        dir's run is still alive and the request is no relaunch, or when it asks for a
        placement this watch cannot carry out (`places_nodes`). A relaunch stops the live run
        (if any) first; `resume` continues from the newest checkpoint (on several nodes: every
        node, from rank 0's); `gpus`: the result's report carries the "gpus" check from one GPU
        sample."""
        request = as_request(request, fields)
        return await self._act(lambda: self._launching(self._launch(request)))

    async def relaunch(self, request: LaunchRequest | None = None, /, **fields) -> LaunchResult:
        """`launch`, as a relaunch."""
        return await self.launch(relaunching(request, fields))

    async def stop(self, requested_by: str | None = None) -> dict[str, StopResult]:
        """The run stopped by its recorded pid (every node at once); per node. `requested_by`:
        who asks, as stop.json records it (None: this user at this host)."""
        return await self._act(lambda: self._stop(requested_by))

    async def canary(self, sleep_s: int = 30) -> dict[str, CanaryResult]:
        """`sleep` launched through the same wrapper and transport (run/launch/canary.py); per node."""
        return await self._act(lambda: self._canary(sleep_s))

    async def __aenter__(self) -> "RunWatch":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _run_ids(report: RunReport) -> list[str | None]:
    """The run id of each node's run in a report (one: a run on one host); None: no launch.json."""
    return [p.launch.run_id if p.launch else None for p in ([n.report for n in report.nodes] or [report])]
