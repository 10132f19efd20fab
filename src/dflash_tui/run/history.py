"""The runs kept in RUN_DIR/history/<id>/: the one reader of them, read-only.

A launch moves the last run's files there (run/launch/launch.py); checkpoints/ stays in the run dir,
so the next run can --resume from it. A history run is judged exactly as a live one: the real
`observe.gather` over its directory, then `health.evaluate` (its pid is long gone, so the
verdict is the one its exit.json, stop.json and log give). Nothing here writes anything.

API: `list_runs` (newest first), `open_run` (one, by id), `run_path`, `newest_checkpoint`, and
`previous_run` (the newest set-aside run's events, for the Metrics overlay of a relaunch).
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import re
from dataclasses import dataclass

from ..contract.rundir import (CHECKPOINT_META, CHECKPOINTS_DIR, EVENTS_JSONL, LAUNCH_JSON, TRAIN_LOG, inert_text,
                               checkpoint_recency)
from ..remote.base import TRANSPORT_FAILURES, TargetError
from ..remote.ops import RemoteOps
from .verdict.health import evaluate
from ..config import Limits
from .launch.launch import HISTORY_DIR
from .evidence.observe import Evidence, gather
from .verdict.report import RunReport, report_from
from .verdict.checklist import Checklist, Verdict

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
_STEP_DIR = re.compile(r"^step-(\d{8})$")
_META_MAX_BYTES = 256 << 10      # a checkpoint's meta.json: its run, line, time and the args
_CHECKPOINTS_READ = 64           # the highest this many step directories are looked at
MAX_RUNS = 200                   # the newest this many are read; older ones are left alone
_CONCURRENT_READS = 8
# The tail of the previous run's events.jsonl that the Metrics overlay reads: its recent curve.
EVENTS_TAIL_BYTES = 1 << 20


class HistoryError(ValueError):
    """A history run that cannot be opened; the message says which and why."""


@dataclass(frozen=True)
class HistoryRun:
    run_id: str                  # its directory under history/
    path: str
    verdict: Verdict
    summary: str
    checklist: Checklist         # as it ended
    evidence: Evidence
    start_time: float | None = None
    end_time: float | None = None
    steps: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    tau: float | None = None
    stopped_by: str | None = None
    stopped_at: float | None = None

    def report(self, profile: str, target_label: str) -> RunReport:
        """The run as the single-run view shows it (read-only: nothing in it is live)."""
        return report_from(self.evidence, self.checklist, profile=profile, target_label=target_label)


@dataclass(frozen=True)
class CheckpointRef:
    step: int
    path: str
    run_id: str = ""     # the run that saved it ("" when its meta.json does not say)

    def words(self) -> str:
        """ "step 120 (step-00000120) of run 20261205-011204-ab12cd" """
        of = f" of run {self.run_id}" if self.run_id else ""
        return f"step {self.step} ({posixpath.basename(self.path)}){of}"


def run_path(run_dir: str, run_id: str) -> str:
    """history/<run_id> of `run_dir`; a run id that is not one plain path component is refused."""
    if not _SAFE_ID.match(run_id) or run_id in (".", ".."):
        raise HistoryError(f"{run_id!r} is not a run id of {run_dir}/{HISTORY_DIR} "
                           "(letters, digits, '_', '.', '-')")
    return posixpath.join(run_dir, HISTORY_DIR, run_id)


async def _judge(ops: RemoteOps, run_id: str, path: str, limits: Limits) -> HistoryRun:
    ev = await gather(ops, path)
    cl = evaluate(ev, limits)
    st, ex, stop = ev.status, ev.exit, ev.stop
    end = ex.end_time if ex is not None else (stop.requested_time if stop is not None else None)
    if end is None and ev.exists(TRAIN_LOG):
        end = ev.files[TRAIN_LOG].mtime   # killed from outside: its log's last write
    return HistoryRun(run_id=run_id, path=path, verdict=cl.verdict, summary=cl.summary, checklist=cl,
                      evidence=ev, start_time=ev.launch.start_time if ev.launch else None, end_time=end,
                      steps=st.step if st else None, total_steps=(st.total_steps or None) if st else None,
                      loss=st.loss if st else None, tau=st.tau if st else None,
                      stopped_by=(stop.requested_by or "?") if stop else None,
                      stopped_at=stop.requested_time if stop else None)


async def list_runs(ops: RemoteOps, run_dir: str, limits: Limits = Limits(), *,
                    max_runs: int = MAX_RUNS) -> list[HistoryRun]:
    """Every run in history/, newest first (by start time, else by directory mtime).
    Raises TargetError when the target cannot be asked; an unreadable run is a verdict of its own."""
    entries = [e for e in await ops.list_dir(posixpath.join(run_dir, HISTORY_DIR))
               if e.is_dir and _SAFE_ID.match(posixpath.basename(e.path))]
    entries.sort(key=lambda e: e.mtime, reverse=True)
    sem = asyncio.Semaphore(_CONCURRENT_READS)

    async def one(e) -> HistoryRun:
        async with sem:
            return await _judge(ops, posixpath.basename(e.path), e.path, limits)

    runs = await asyncio.gather(*(one(e) for e in entries[:max_runs]))
    mtimes = {e.path: e.mtime for e in entries}
    return sorted(runs, key=lambda r: r.start_time if r.start_time is not None else mtimes[r.path],
                  reverse=True)


async def open_run(ops: RemoteOps, run_dir: str, run_id: str, limits: Limits = Limits()) -> HistoryRun:
    """One history run by id. Raises HistoryError when there is none by that id."""
    path = run_path(run_dir, run_id)
    (st,) = await ops.stat([path])
    if not st.exists or not st.is_dir:
        raise HistoryError(f"no run {run_id} in {run_dir}/{HISTORY_DIR}")
    run = await _judge(ops, run_id, path, limits)
    if not run.evidence.exists(LAUNCH_JSON) and run.verdict is Verdict.NO_RUN:
        raise HistoryError(f"{path} holds no run files")
    return run


async def newest_checkpoint(ops: RemoteOps, run_dir: str) -> CheckpointRef | None:
    """The newest complete checkpoint in RUN_DIR/checkpoints/, the one the trainer's --resume
    loads: the one saved last (contract/rundir.py `checkpoint_recency`), with the run that saved
    it; None when there is none."""
    root = posixpath.join(run_dir, CHECKPOINTS_DIR)
    found = sorted(((int(m.group(1)), e.path) for e in await ops.list_dir(root)
                    if e.is_dir and (m := _STEP_DIR.match(posixpath.basename(e.path)))), reverse=True)
    metas = await asyncio.gather(*(_checkpoint_meta(ops, path) for _, path in found[:_CHECKPOINTS_READ]))
    complete = [(checkpoint_recency(meta, step), step, path, meta)
                for (step, path), meta in zip(found, metas) if meta is not None]
    if not complete:
        return None
    _, step, path, meta = max(complete, key=lambda c: c[0])
    run_id = meta.get("run_id") if isinstance(meta, dict) else None
    return CheckpointRef(step, path, inert_text(run_id)[:80] if isinstance(run_id, str) else "")


async def _checkpoint_meta(ops: RemoteOps, path: str):
    """A checkpoint's meta.json parsed (anything JSON gives; {} when it is not JSON), or None
    when there is none: the checkpoint is incomplete."""
    try:
        chunk = await ops.read(posixpath.join(path, CHECKPOINT_META), 0, _META_MAX_BYTES)
    except TRANSPORT_FAILURES:
        raise
    except TargetError:
        return None          # a directory, unreadable: not a checkpoint --resume would load
    if not chunk.exists:
        return None
    try:
        return json.loads(chunk.data.decode("utf-8")) if chunk.size <= _META_MAX_BYTES else {}
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}


@dataclass(frozen=True)
class PreviousRun:
    run_id: str          # the history sub-directory's name (the run id it was set aside as)
    path: str            # that directory on the target
    event_lines: list[str]


async def previous_run(ops: RemoteOps, run_dir: str, *, exclude: str | None = None,
                       max_bytes: int = EVENTS_TAIL_BYTES) -> PreviousRun | None:
    """The most recently set-aside run of `run_dir` (not `exclude`) that has events.jsonl, with
    the tail of its events; an absent or unreadable history is None, never an error."""
    try:
        entries = await ops.list_dir(posixpath.join(run_dir, HISTORY_DIR))
    except TRANSPORT_FAILURES:
        raise
    except TargetError:
        return None   # no history/ yet
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
