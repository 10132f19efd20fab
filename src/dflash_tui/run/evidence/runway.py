"""Disk runway: whether the run's next checkpoints fit where they are written.

From the checkpoints a look found (run/evidence/checkpoints.py: the newest complete one's size,
the interval between saves), the log's growth, and the free space of the file systems the run
writes to (the checkpoints' folder and the run dir, `disk_free` on the target): the next save's
size and when it comes, and how many such saves still fit. The `disk` check reads it
(run/verdict/checks/machine.py). Free space is asked at most every `every_s` seconds.
"""

from __future__ import annotations

import collections
import math
import posixpath
from dataclasses import dataclass

from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import DiskFree, RemoteOps
from .checkpoints import CheckpointsView, cadence

LOG_WINDOW_S = 120.0     # the log's growth rate is measured over this much of the recent past
_SAME_FS_SLACK = 1 << 20  # two answers this close, of one total size, are one file system


@dataclass(frozen=True)
class DiskRunway:
    path: str                          # the folder the next checkpoint goes to
    free_bytes: int                    # free there, as an unprivileged writer sees it
    next_checkpoint_bytes: int         # the newest complete checkpoint's size (the largest of the last 3)
    next_checkpoint_in_s: float | None  # when it is due (0: overdue); None without an interval
    saves_left: int                    # checkpoints of that size that still fit (after the log's growth)
    next_step: int | None = None       # the step it is likely saved at
    interval_s: float | None = None
    log_bytes_per_s: float = 0.0       # the log's growth, counted where it shares the file system

    def to_json(self) -> dict:
        return {"path": self.path, "free_bytes": self.free_bytes,
                "next_checkpoint_bytes": self.next_checkpoint_bytes,
                "next_checkpoint_in_s": (round(self.next_checkpoint_in_s, 1)
                                         if self.next_checkpoint_in_s is not None else None),
                "saves_left": self.saves_left}


def checkpoint_folder(path: str, fmt: str) -> str:
    """Where the next checkpoint of this one's kind is written: beside it."""
    return posixpath.dirname(path.rstrip("/")) or "/"


def runway(view: CheckpointsView, where: DiskFree, run_dir_free: DiskFree | None, now: float,
           log_bytes_per_s: float = 0.0) -> DiskRunway | None:
    """Pure: the runway of the checkpoints' file system; None without a complete checkpoint."""
    last = view.last_complete
    if last is None:
        return None
    size = view.next_bytes
    interval = view.interval_s
    due = None if interval is None else max(0.0, last.mtime + interval - now)
    same_fs = run_dir_free is not None and run_dir_free.total == where.total and abs(
        run_dir_free.free - where.free) <= _SAME_FS_SLACK
    rate = log_bytes_per_s if same_fs else 0.0
    avail = where.free - rate * (due or 0.0)
    left = max(0, math.floor(avail / size)) if size > 0 else 1 << 30
    step_gap = view.step_interval
    next_step = last.step + step_gap if last.step is not None and step_gap else None
    return DiskRunway(_folder_of(view), where.free, size, due, left, next_step, interval, rate)


def _folder_of(view: CheckpointsView) -> str:
    """Where the next save goes, worked out once per view (a look asks it twice)."""
    folder = view.memo.get("folder")
    if folder is None:
        last = view.last_complete
        folder = view.memo["folder"] = checkpoint_folder(last.path, last.format)
    return folder


class RunwayLooks:
    """One run's runway across looks: free space (asked every `every_s` s) and the log's size."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._frees: dict[str, DiskFree | None] = {}
        self._at: float | None = None
        self._log: collections.deque[tuple[float, int]] = collections.deque()

    def log_rate(self, now: float, log_size: int | None, started: float | None) -> float:
        """Bytes per second the log grew over the recent looks; from one look, its average since
        `started` (the launch)."""
        if log_size is None:
            return 0.0
        log = self._log
        if log and (log_size < log[-1][1] or now < log[-1][0]):
            log.clear()      # a new or rotated log, a clock that went back
        log.append((now, log_size))
        while len(log) > 2 and now - log[1][0] > LOG_WINDOW_S:
            log.popleft()
        if len(log) >= 2 and log[-1][0] > log[0][0]:
            return (log[-1][1] - log[0][1]) / (log[-1][0] - log[0][0])
        return log_size / (now - started) if started is not None and now > started else 0.0

    async def look(self, ops: RemoteOps, run_dir: str, view: CheckpointsView | None, now: float,
                   log_rate: float) -> DiskRunway | None:
        last = view.last_complete if view is not None else None
        if last is None:
            return None
        folder = _folder_of(view)
        if self._at is None or not (0 <= now - self._at < cadence(self.every_s, view)) or folder not in self._frees:
            self._at = now
            self._frees = {p: await self._free(ops, p) for p in dict.fromkeys((folder, run_dir))}
        where = self._frees.get(folder)
        if where is None:
            return None
        return runway(view, where, self._frees.get(run_dir), now, log_rate)

    @staticmethod
    async def _free(ops: RemoteOps, path: str) -> DiskFree | None:
        try:
            return await ops.disk_free(path)
        except TargetError as exc:
            if is_transport_failure(exc):
                raise
            return None
