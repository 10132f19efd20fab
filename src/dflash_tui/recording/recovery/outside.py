"""What `--check` and `--bundle` add from the watcher's store, read only: the profile's recovery
state (recovery_state.py), its goodput (goodput.py) and its timeline (timeline.py). A store that
cannot be read adds an error instead; neither mode fails for it."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from ...bundle.member import Member, json_bytes
from ...config import Config, ConfigError, Profile
from ...run.verdict.report import RunReport
from ..store.change import run_id_of
from ..goodput.goodput import goodput
from .recovery_log import stop_times
from .recovery_state import read_actions, recovery_state
from ..store.store import ChangeStore, store_path
from ..goodput.timeline import bands, timeline_json


def check_extras(config: Config, profile: Profile, report: RunReport,
                 now: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """({"recovery": {...}, "goodput": {...}}, the same in lines for the text) of `profile`,
    whose run is `report`'s."""
    now = time.time() if now is None else now
    run_id = run_id_of(report)
    path = store_path(config.watch)
    try:
        changes = []
        if path.exists():
            with ChangeStore(path, readonly=True) as store:
                changes = store.changes(profile.name)
        actions = read_actions(path, profile.name)
        state = recovery_state(config.recover.for_profile(profile.name), actions, run_id, now)
    except (sqlite3.Error, OSError, ConfigError) as exc:
        why = f"cannot read the watch store {path}: {exc}"
        return {"recovery": {"state": "unknown", "reason": why}, "goodput": None}, [why]
    good = goodput(changes, now, profile.stall_after_s, stop_times(actions))
    lines = [w for w in (state.words(), good.words() if changes else "") if w]
    return {"recovery": state.to_json(), "goodput": good.to_json() if changes else None}, lines


def recorded_timeline(config: Config, profile: Profile, now: float | None = None) -> dict[str, Any]:
    """The profile's recorded timeline and goodput as `--timeline --json` prints them (an
    evidence bundle's timeline.json); a store that cannot be read: {"error": why}."""
    now = time.time() if now is None else now
    path = store_path(config.watch)
    try:
        changes = []
        if path.exists():
            with ChangeStore(path, readonly=True) as store:
                changes = store.changes(profile.name)
        actions = read_actions(path, profile.name)
    except (sqlite3.Error, OSError, ConfigError) as exc:
        return {"profile": profile.name, "store": str(path), "error": f"cannot read the watch store: {exc}"}
    good = goodput(changes, now, profile.stall_after_s, stop_times(actions))
    return {**timeline_json(profile.name, bands(changes, now), str(path)), "goodput": good.to_json()}


def bundle_extras(config: Config, profile: Profile) -> tuple[tuple[str, ...], tuple[Member, ...]]:
    """What an evidence bundle of `profile` takes from this machine's config and store: the
    notify URLs (masked wherever they appear) and the timeline member. Blocking (SQLite)."""
    urls = (*config.notify.urls, *(u for p in config.notify.profiles.values() for u in p.urls))
    timeline = Member("timeline.json", "the watcher's recorded timeline and goodput of the profile",
                      json_bytes(recorded_timeline(config, profile)), time.time(), "this machine")
    return urls, (timeline,)
