"""Helpers the run tests share: a profile that launches a stand-in program, and a liveness probe."""

from __future__ import annotations

import sys
from pathlib import Path

from dflash_tui.config import Profile
from tests.support.run_standins import PROGRAM


def standin_profile(run_dir: Path, mode: str, *args: str, **kw) -> Profile:
    """A profile whose "trainer" is tests/support/run_standins.py in `mode`, with short limits so
    every verdict is reached in seconds. `kw` overrides (host, container, limits, ...)."""
    base = dict(name="t", run_dir=str(run_dir), python=sys.executable,
                command=(sys.executable, PROGRAM, mode), train_args=tuple(args),
                stall_after_s=1.5, compile_stall_after_s=1.5, stop_grace_s=2.0, min_free_gb=0.0)
    base.update(kw)
    return Profile(**base)


def alive(pid: int) -> bool:
    """Whether this machine's pid runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
