"""The run's memory series kept on this machine between processes: a `--check` is one look, and a
trend needs many, so each look's samples are written here (under the state directory, one small
file per profile and target) and the next process goes on from them. Bounded: a series holds at
most memtrend.WINDOW samples. Losing the file only costs the trend's history."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..config import Profile, state_dir
from ..contract.rundir import atomic_write_text

_MAX_BYTES = 256 << 10


def _path_for(profile: Profile) -> Path:
    key = hashlib.sha256(f"{profile.where()}\0{profile.run_dir}".encode()).hexdigest()[:16]
    return state_dir() / "memory" / f"{profile.name}-{key}.json"


def load_memory_series(profile: Profile) -> object:
    """What `save_memory_series` wrote for this profile, or None (missing, unreadable, not JSON)."""
    path = _path_for(profile)
    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def save_memory_series(profile: Profile, data: dict) -> None:
    path = _path_for(profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, separators=(",", ":")))
    except OSError:
        pass   # the next look starts the trend again; the run and its verdict are untouched
