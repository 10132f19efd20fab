"""What `--check` and `--bundle` add from the watcher's store, read only: the profile's recovery
state (recovery_state.py), its goodput (goodput.py) and its timeline (timeline.py). A store that
cannot be read adds an error instead; neither mode fails for it."""

from __future__ import annotations

import sqlite3
import time
from typing import Any
from pathlib import Path

from ...bundle.member import Member, json_bytes
from ...config import Config, ConfigError, Profile
from ...run.verdict.energy import run_cost
from ...run.verdict.report import RunReport
from ..store.change import run_id_of
from ..goodput.goodput import Goodput, goodput
from ..goodput.spend import spend_json
from .recovery_log import stop_times
from .recovery_state import read_actions, recovery_state
from ..store.store import ChangeStore, store_path
from ..notify.settings import NOTIFY_SECTION
from ..store.settings import WATCH_SECTION
from .settings import RECOVER_SECTION
from ..goodput.timeline import bands, timeline_json


def check_extras(config: Config, profile: Profile, report: RunReport,
                 now: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """({"recovery": {...}, "goodput": {...}, "energy": {...}, "cost": {...}}, the same in lines
    for the text) of `profile`, whose run is `report`'s."""
    now = time.time() if now is None else now
    run_id = run_id_of(report)
    path = store_path(WATCH_SECTION.of(config))
    try:
        changes, actions = _recorded(path, profile.name)
        state = recovery_state(RECOVER_SECTION.of(config).for_profile(profile.name), actions, run_id, now)
    except (sqlite3.Error, OSError, ConfigError) as exc:
        why = f"cannot read the watch store {path}: {exc}"
        energy, cost, words = energy_and_cost(profile, report, None)
        return {"recovery": {"state": "unknown", "reason": why}, "goodput": None,
                "energy": energy, "cost": cost}, [why, *words]
    good = goodput(changes, now, profile.stall_after_s, stop_times(actions))
    energy, cost, words = energy_and_cost(profile, report, good if changes else None)
    lines = [w for w in (state.words(), good.words() if changes else "", *words) if w]
    return {"recovery": state.to_json(), "goodput": good.to_json() if changes else None,
            "energy": energy, "cost": cost}, lines


def energy_and_cost(profile: Profile, report: RunReport, good: Goodput | None
                    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
    """(`"energy"`, `"cost"`, their lines) of the run in `report` (the watch's: run/verdict/
    energy.py), its cost priced over the watcher's goodput where recorded; None where unknown."""
    energy, cost = report.energy, report.cost
    if cost is not None and good is not None and report.launch is not None:
        gpus = len(energy.gpus) + len(energy.missing) if energy is not None else 0
        cost = run_cost(run_s=cost.seconds, gpus=gpus, energy=energy, per_gpu_hour=profile.cost_per_gpu_hour,
                        per_kwh=profile.cost_per_kwh, eta_s=report.progress.eta_s if report.progress else None,
                        wall_s=good.wall_s, lost_s_by_cause=good.badput_s)
    words = [w for w in (energy.words() if energy else "", cost.words() if cost else "") if w]
    return (energy.to_json() if energy else None), (cost.to_json() if cost else None), words


def recorded_timeline(config: Config, profile: Profile, now: float | None = None) -> dict[str, Any]:
    """The profile's recorded timeline and goodput as `--timeline --json` prints them (an
    evidence bundle's timeline.json); a store that cannot be read: {"error": why}."""
    now = time.time() if now is None else now
    path = store_path(WATCH_SECTION.of(config))
    try:
        changes, actions = _recorded(path, profile.name)
    except (sqlite3.Error, OSError, ConfigError) as exc:
        return {"profile": profile.name, "store": str(path), "error": f"cannot read the watch store: {exc}"}
    good = goodput(changes, now, profile.stall_after_s, stop_times(actions))
    return {**timeline_json(profile.name, bands(changes, now), str(path)), "goodput": good.to_json(),
            **spend_json(changes, good)}


def bundle_extras(config: Config, profile: Profile) -> tuple[tuple[str, ...], tuple[Member, ...]]:
    """What an evidence bundle of `profile` takes from this machine's config and store: the
    notify URLs (masked wherever they appear) and the timeline member. Blocking (SQLite)."""
    urls = (*NOTIFY_SECTION.of(config).urls, *(u for p in NOTIFY_SECTION.of(config).profiles.values() for u in p.urls))
    timeline = Member("timeline.json", "the watcher's recorded timeline and goodput of the profile",
                      json_bytes(recorded_timeline(config, profile)), time.time(), "this machine")
    return urls, (timeline,)


def _recorded(path: Path, profile: str) -> tuple[list, list]:
    """The profile's recorded changes and recovery actions (none where no store was written)."""
    changes = []
    if path.exists():
        with ChangeStore(path, readonly=True) as store:
            changes = store.changes(profile)
    return changes, read_actions(path, profile)
