"""Earlier runs of a run dir: `RUN_DIR/history/<run id>/`, where a relaunch sets them aside.

The reader the dashboard's Metrics overlay uses to compare a relaunch with the run before it.
Everything goes through RemoteOps, so it works the same on a local, SSH or container target;
an absent or unreadable history is "no previous run", never an error.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from ..contract.rundir import EVENTS_JSONL

from ..remote.base import CommandTimeout, ContainerNotRunning, TargetError, TargetUnreachable
from ..remote.ops import RemoteOps
from .launch import HISTORY_DIR

# The tail of the previous run's events.jsonl that is read: its recent curve, bounded.
EVENTS_TAIL_BYTES = 1 << 20


@dataclass(frozen=True)
class PreviousRun:
    run_id: str          # the history sub-directory's name (the run id it was set aside as)
    path: str            # that directory on the target
    event_lines: list[str]


async def previous_run(ops: RemoteOps, run_dir: str, *, exclude: str | None = None,
                       max_bytes: int = EVENTS_TAIL_BYTES) -> PreviousRun | None:
    """The most recently set-aside run of `run_dir` (not `exclude`) that has events.jsonl."""
    history = posixpath.join(run_dir, HISTORY_DIR)
    try:
        entries = await ops.list_dir(history)
    except (TargetUnreachable, CommandTimeout, ContainerNotRunning):
        raise
    except (TargetError, AttributeError):
        return None   # no history/ yet, or a transport without list_dir
    dirs = [e for e in entries if e.exists and e.is_dir and posixpath.basename(e.path) != exclude]
    # Newest first: the directory's mtime is when the relaunch moved the files into it.
    for entry in sorted(dirs, key=lambda e: e.mtime, reverse=True):
        chunk = await ops.read_tail(posixpath.join(entry.path, EVENTS_JSONL), max_bytes)
        if not chunk.exists or not chunk.data:
            continue
        text = chunk.data.decode("utf-8", "replace")
        if chunk.offset > 0:
            text = text.split("\n", 1)[1] if "\n" in text else ""   # the tail starts mid-line
        return PreviousRun(posixpath.basename(entry.path.rstrip("/")), entry.path, text.splitlines())
    return None
