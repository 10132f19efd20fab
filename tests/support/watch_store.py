"""What a watcher recorded in its store, read by a test while the watcher runs: one profile's
verdict changes and its recovery's actions ([] before the watcher made the store)."""

from __future__ import annotations

from pathlib import Path

from dflash_tui.recording.recovery.recovery_log import RecoveryLog
from dflash_tui.recording.store.store import ChangeStore


def recorded_states(store: Path, profile: str) -> list[tuple[str, str]]:
    """(state, run id) of each recorded verdict change, oldest first."""
    if not store.exists():
        return []
    with ChangeStore(store, readonly=True) as s:
        return [(c.state, c.run_id) for c in s.changes(profile)]


def recorded_actions(store: Path, profile: str) -> list:
    """The recovery's recorded actions (recording/recovery/recovery_log.py), oldest first."""
    if not store.exists():
        return []
    with RecoveryLog(store, readonly=True) as rl:
        return rl.actions(profile)
