"""Where a profile's recovery stands, from the watcher's recovery log: what `--check --json`
carries as "recovery" and the dashboard's header shows. Read only: neither ever acts.

States: `off` (no [recover] policy for the profile), `armed` (on; nothing to do now),
`waiting` (a restart is planned; `next_in_s` until its backoff is over), `restarting` (the
relaunch is under way), `gave_up` (`reason`; until a run is launched by hand), `cancelled`
(a person stopped the run or cancelled its pending restart: `reason` "restart cancelled by
root@host"; off for that run until a run is launched by hand).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...config import Config, ConfigError
from ...words import duration
from .recovery_log import CANCELLED, GAVE_UP, LAUNCHING, PLANNED, STOPPED, Action, RecoveryLog, chain_of
from ..store.store import store_path
from ..store.settings import WATCH_SECTION
from .settings import RECOVER_SECTION, RecoverPolicy


@dataclass(frozen=True)
class RecoveryState:
    state: str
    restarts: int = 0             # restarts made in the current chain (or under way)
    max_restarts: int = 0
    next_in_s: float | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "restarts": self.restarts, "max_restarts": self.max_restarts,
                "next_in_s": None if self.next_in_s is None else round(self.next_in_s, 1), "reason": self.reason}

    def words(self) -> str:
        """One line for the header and --check's text ("" when off)."""
        if self.state == "waiting":
            return f"recovery {self.restarts}/{self.max_restarts}, next in {duration(self.next_in_s or 0)}"
        if self.state == "restarting":
            return f"recovery {self.restarts}/{self.max_restarts}, restarting"
        if self.state == "gave_up":
            return f"gave up: {self.reason}"
        if self.state == "cancelled":
            return f"recovery off for this run: {self.reason}; a launch arms it again"
        if self.state == "armed":
            return f"recovery armed, {self.restarts}/{self.max_restarts} restarts"
        return ""


def recovery_state(policy: RecoverPolicy | None, actions: list[Action], run_id: str, now: float) -> RecoveryState:
    """`actions`: the profile's recovery log, oldest first; `run_id`: the run there now."""
    if policy is None:
        return RecoveryState("off")
    m = policy.max_restarts
    last = actions[-1] if actions else None
    if last is not None and last.action in (PLANNED, STOPPED):
        at = last.detail.get("at")
        left = max(0.0, at - now) if isinstance(at, (int, float)) else 0.0
        return RecoveryState("waiting" if left > 0 else "restarting", last.attempt, m, left)
    if last is not None and last.action == LAUNCHING:
        return RecoveryState("restarting", last.attempt, m, 0.0)
    if last is not None and last.action == CANCELLED and last.run_id == run_id:
        return RecoveryState("cancelled", last.attempt, m, reason=str(last.detail.get("reason", "")))
    if last is not None and last.action == GAVE_UP and last.run_id == run_id:
        return RecoveryState("gave_up", last.attempt, m, reason=str(last.detail.get("reason", "")))
    return RecoveryState("armed", len(chain_of(actions, run_id)), m)


def read_actions(path: Path, profile: str) -> list[Action]:
    """The profile's recovery log from the store at `path` (none when there is no store)."""
    if not path.exists():
        return []
    with RecoveryLog(path, readonly=True) as rl:
        return rl.actions(profile)


def recovery_words(config: Config, store: str | None = None) -> Callable[[str, str], str]:
    """(profile, run id) -> its recovery state in words, for the dashboard's header; "" when off
    or when the store cannot be read (the header is no place for the store's trouble)."""
    def words(profile: str, run_id: str) -> str:
        try:
            return state_for(config, profile, run_id, time.time(), store).words()
        except (sqlite3.Error, OSError, ConfigError):
            return ""
    return words


def state_for(config: Config, profile: str, run_id: str, now: float, store: str | None = None) -> RecoveryState:
    policy = RECOVER_SECTION.of(config).for_profile(profile)
    if policy is None:
        return RecoveryState("off")
    return recovery_state(policy, read_actions(store_path(WATCH_SECTION.of(config), store), profile), run_id, now)
