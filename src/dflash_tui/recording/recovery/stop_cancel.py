"""A person's stop and the recovery: the stop's own process (the CLI's --stop, the dashboard's
`s`) writes, in the watch store the watcher reads, that the restart pending for the profile is
cancelled, or that the run it stopped is not to be restarted (recovery_log.py `cancel`), so a
watcher in another process never undoes the stop. The cancel of a pending restart is announced:
its notice is committed in the outbox with it, and the watcher sends it.

Called before the stop's signal (so no restart starts during the stop's grace) and again after
it with the stopped run's id (a failure the watcher planned for while the stop ran).
"""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...config import Config, ConfigError
from ...run.launch.stop import StopResult
from ...watch.base import RunWatch
from ..store.change import run_id_of
from ..notify.notify import open_command
from .recovery_log import CANCELLED, IN_FLIGHT, Action, Notice, RecoveryLog
from ..store.store import store_path
from ..notify.settings import NOTIFY_SECTION
from ..store.settings import WATCH_SECTION
from .settings import RECOVER_SECTION


@dataclass(frozen=True)
class StopCancel:
    action: Action | None          # the `cancelled` recorded (None: nothing to cancel)

    @property
    def cancelled_restart(self) -> bool:
        return self.action is not None and self.action.detail.get("was") in IN_FLIGHT

    def words(self, max_restarts: int) -> str:
        """One line for the stop's output ("" when nothing was pending)."""
        a = self.action
        if a is None or not self.cancelled_restart:
            return ""
        return (f"recovery: restart {a.attempt}/{max_restarts} of run {a.run_id} cancelled "
                f"({a.detail.get('reason')}); the recovery stays off for this run until a run is launched")


def person() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:   # getuser raises when the uid has no name; the field is informative only
        return "a person"


def _notice(config: Config, max_restarts: int) -> Callable[[Action], Notice | None]:
    def make(a: Action) -> Notice | None:
        if not NOTIFY_SECTION.of(config).for_profile(a.profile):
            return None
        failure = a.failure
        title = f"dflash-tui: {a.profile} restart cancelled"
        body = "\n".join([
            f"restart {a.attempt}/{max_restarts}" + (f" after {failure.state}" if failure else "")
            + f" cancelled by {a.detail.get('by')} (a stop while it was pending)",
            f"run {a.run_id}: the recovery stays off for this run until a run is launched",
            f"open it: {open_command(a.profile, config.path)}"])
        return Notice(a.profile, a.time, CANCELLED, title, body)
    return make


def cancel_restart(config: Config, profile: str, run_id: str = "", *, store: str | None = None,
                   by: str | None = None, now: float | None = None) -> StopCancel:
    """Record a person's stop for `profile`'s recovery (nothing when it has no [recover]
    policy). Raises ConfigError (one line) when the store cannot be written."""
    policy = RECOVER_SECTION.of(config).for_profile(profile)
    path: Path = store_path(WATCH_SECTION.of(config), store)
    if policy is None:
        return StopCancel(None)
    with RecoveryLog(path) as rl:
        done = rl.cancel(profile, by or person(), time.time() if now is None else now, run_id,
                         _notice(config, policy.max_restarts))
    return StopCancel(done)


@dataclass(frozen=True)
class PersonStop:
    """A person's stop of a profile's run, with what it did to the recovery."""

    results: dict[str, StopResult]
    cancel: StopCancel
    problem: str = ""              # the store could not record it (the stop itself went ahead)

    def recovery_line(self, max_restarts: int) -> str:
        return self.problem or self.cancel.words(max_restarts)


async def stop_as_person(config: Config, watch: RunWatch, *, store: str | None = None) -> PersonStop:
    """`watch.stop()` as a person asks it: the pending restart cancelled before the signal,
    the stopped run disarmed after it (the watcher may have planned for it meanwhile)."""
    name = watch.profile.name
    problems = []

    def cancel(run_id: str) -> StopCancel:
        try:
            return cancel_restart(config, name, run_id, store=store)
        except ConfigError as exc:
            problems.append(f"recovery: the stop is not recorded in the watch store, so the watcher may "
                            f"restart the run: {exc}")
            return StopCancel(None)

    first = cancel("")
    results = await watch.stop()
    # The run is disarmed where the watcher could still act on it: one the stop ended, or one
    # that had failed already (not a FINISHED run: nothing to undo there).
    signalled = any(r.outcome in ("terminated", "killed") for r in results.values())
    report = watch.last if signalled or watch.last is not None else await watch.check()
    run_id = ""
    if signalled or report.checklist.verdict.failing:
        run_id = (run_id_of(report) if report is not None else "") or next(
            (r.run_id for r in results.values() if r.run_id), "")
    later = cancel(run_id or "")
    return PersonStop(results, first if first.action is not None else later, problems[0] if problems else "")
