"""Read the run probe's reports (RUN_DIR/probe/<pid>.json) through RemoteOps.

One listing of the probe directory, then small reads of at most MAX_REPORTS reports. A report
that cannot be read or parsed is a problem string, never an exception; one of another run (left
behind in the directory) is not evidence about this one.

A look without memory (a one-shot stop or launch) reads the most recently written (a process
that ended stops rewriting its report, so live ones come first). A watch's looks (with its
LookMemory) reach every rank of a run of a thousand, at a bounded cost per poll: each look reads
the NEWEST reports, then the ones never read, then a rotating window through the rest, and
keeps the last parse of each; a report whose file did not change since is not read again. A
kept copy stands in for a report not read this look, honestly: where its file was rewritten
since (a newer mtime), the probe beat then, so the copy's `time` is that mtime (its stacks are
those of its last read); a process is never judged stale from a copy whose file is newer. The
first look of a watch reads up to FIRST_LOOK_REPORTS at once.

While the watch finds the run steady (LookMemory.steady, run/verdict/steady.py), a look reads
the ones never read and a turn of STEADY_REPORTS in turns, by path, whatever changed first (a
turn of more at over 256 ranks, so that each report is read again within BEAT_HISTORY looks): a
report is then at most a few looks old, and every beat's wait sample still arrives with it
(ProbeReport.beats keeps the last BEAT_HISTORY). The next look's turn is asked for up front.
"""

from __future__ import annotations

import functools
import posixpath
import re

from ...contract.rundir import BEAT_HISTORY, PROBE_DIR, ProbeReport, SchemaError, parse_probe_after
from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import FileStat, PreflightOps
from ..eager import gather_eager
from .memory import LookMemory

MAX_REPORTS = 64                 # reports read per look at most (a watch's look: FIRST_LOOK_REPORTS once)
NEWEST = 16                      # of which the most recently written, each look
FIRST_LOOK_REPORTS = 1024
STEADY_REPORTS = 16              # read per look, in turns, while the run is steady
REPORT_MAX_BYTES = 256 << 10     # a report of 256 threads with six frames each is ~100 KiB
_REPORT_NAME = re.compile(r"^[1-9][0-9]{0,9}\.json$")


class ProbeReports(list):
    """The reports found (a list of ProbeReport, by rank then pid), plus what went wrong."""

    def __init__(self, reports=(), problems=(), skipped: int = 0, listing=(), read=()) -> None:
        super().__init__(reports)
        self.problems: list[str] = list(problems)   # one line per unreadable report
        self.skipped = skipped                      # reports beyond MAX_REPORTS, not read
        # Every entry of the probe directory (stack dumps, Flight Recorder dumps, error files).
        self.listing: list[FileStat] = list(listing)
        self.read: list[str] = list(read)            # the reports' paths read this time
        self.cached = 0                              # reports not read this time: their kept copy
        self.fresh: set[int] = set()                 # the pids whose report was read this time


async def _read_one(ops: PreflightOps, st: FileStat, memory: LookMemory | None
                    ) -> tuple[ProbeReport | None, str | None]:
    name = f"{PROBE_DIR}/{posixpath.basename(st.path)}"
    try:
        chunk = await ops.read(st.path, 0, REPORT_MAX_BYTES)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return None, f"{name}: {exc}"
    if not chunk.exists:
        return None, None             # the process's last report was replaced or removed
    if chunk.size > REPORT_MAX_BYTES:
        return None, f"{name} is {chunk.size} bytes, too big to be a probe report"
    try:
        # A watch reads each report every beat: the threads that did not move keep their parse.
        before = memory.probe_threads.get(st.path) if memory is not None else None
        report, after = parse_probe_after(chunk.data.decode("utf-8"), name, before)
        if memory is not None and after is not None:
            memory.probe_threads[st.path] = after
        return report, None
    except UnicodeDecodeError:
        return None, f"{name} is not UTF-8 text"
    except SchemaError as exc:
        return None, str(exc)


async def gather_probes(ops: PreflightOps, run_dir: str, run_id: str | None,
                        memory: LookMemory | None = None) -> ProbeReports:
    """The probe reports of run `run_id` (any run's when None) in `run_dir`; with a watch's
    `memory`, every report's newest parse (this module's docstring)."""
    probe_dir = posixpath.join(run_dir, PROBE_DIR)
    try:
        listing = await ops.list_dir(probe_dir)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return ProbeReports(problems=[f"{probe_dir}: {exc}"])
    candidates = [st for st in listing if st.exists and not st.is_dir and _is_report(st.path)]
    candidates.sort(key=lambda st: st.mtime, reverse=True)
    if memory is None:
        read, kept = candidates[:MAX_REPORTS], []
    else:
        read, kept = _plan(candidates, memory)
    results = await gather_eager(*(_read_one(ops, st, memory) for st in read))
    found: list[ProbeReport] = []
    for st, (r, _) in zip(read, results):
        if memory is not None:
            memory.probe_reports[st.path] = (st.inode, st.size, st.mtime, r)
            memory.held(st.path, st)   # the next look's first request need not send it as it is
        if r is not None:
            found.append(r)
    fresh = {r.pid for r in found}
    for st, (_, _, _, r) in kept:
        if r is None:
            continue
        if st.mtime > r.time:
            # Rewritten since the copy was read: the probe beat by then (its stacks are older).
            # (A copy with one field set: `dataclasses.replace` calls every field's init, and
            # most of a look's reports of many ranks are such copies.)
            r = _at(r, st.mtime)
        found.append(r)
    reports = [r for r in found if run_id is None or r.run_id == run_id]
    reports.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    out = ProbeReports(reports, [p for _, p in results if p], skipped=len(candidates) - len(read) - len(kept),
                       listing=listing, read=[st.path for st in read])
    out.cached, out.fresh = len(kept), fresh
    return out


@functools.lru_cache(maxsize=4096)
def _is_report(path: str) -> bool:
    """Whether a listed file is named as a probe report: the same paths every look."""
    return _REPORT_NAME.match(posixpath.basename(path)) is not None


def _at(report: ProbeReport, time: float) -> ProbeReport:
    """`report` with `time` for its time."""
    copy = object.__new__(ProbeReport)
    copy.__dict__.update(report.__dict__, time=time)
    return copy


def _plan(candidates: list[FileStat], memory: LookMemory) -> tuple[list[FileStat], list[tuple[FileStat, tuple]]]:
    """(the reports to read this look, (stat, kept copy) of the others held) for a watch's look:
    the NEWEST changed ones, then those never read, then the rotating window; a report whose
    file is as it was when read is never read again."""
    held = memory.probe_reports
    paths = {st.path for st in candidates}
    for gone in [p for p in held if p not in paths]:
        del held[gone]
        memory.probe_threads.pop(gone, None)
    budget = MAX_REPORTS if held else FIRST_LOOK_REPORTS

    def same(st: FileStat) -> bool:
        h = held.get(st.path)
        return h is not None and h[:3] == (st.inode, st.size, st.mtime)
    if memory.steady and held:
        return _in_turns(candidates, memory, same)
    changed = [st for st in candidates if not same(st)]
    chosen: dict[str, FileStat] = {st.path: st for st in changed[:NEWEST]}
    for st in changed:
        if len(chosen) >= budget:
            break
        if st.path not in held:
            chosen.setdefault(st.path, st)
    rest = sorted((st for st in changed if st.path not in chosen), key=lambda st: st.path)
    if rest and len(chosen) < budget:
        start = memory.probe_cursor % len(rest)
        window = (rest[start:] + rest[:start])[:budget - len(chosen)]
        chosen.update((st.path, st) for st in window)
        memory.probe_cursor = start + len(window)
    read = list(chosen.values())
    kept = [(st, held[st.path]) for st in candidates if st.path not in chosen and st.path in held]
    # Asked for up front in the next look's first request. When the reports are few enough
    # (at most a look's reads and its NEWEST more), all of them: the next look reads most of
    # them, and which ones depends on whose beat comes first (the agent skips every report as
    # it was when held, and a look's reads asked one by one cost a request each); else the
    # newest and the window after this one.
    if len(candidates) <= MAX_REPORTS + NEWEST:
        memory.reports = [st.path for st in candidates]
    else:
        ahead = rest[memory.probe_cursor % len(rest):][:MAX_REPORTS - NEWEST] if rest else []
        memory.reports = [st.path for st in changed[:NEWEST]] + [st.path for st in ahead]
    return read, kept


def _in_turns(candidates: list[FileStat], memory: LookMemory, same) -> tuple[list[FileStat], list[tuple[FileStat, tuple]]]:
    """`_plan` for a steady run: those never read, and the changed ones of this look's turn of
    STEADY_REPORTS (by path, so that the next turn is known now and asked for up front)."""
    held = memory.probe_reports
    ordered = sorted(candidates, key=lambda st: st.path)
    n = len(ordered)
    if not n:
        return [], []
    # Each report read again before its probe's BEAT_HISTORY is rewritten past (a run of 1,024
    # ranks: 64 a look), never more than a look's MAX_REPORTS.
    size = min(MAX_REPORTS, max(STEADY_REPORTS, -(-n // BEAT_HISTORY)))
    start = memory.probe_cursor % n
    turn = (ordered[start:] + ordered[:start])[:size]
    memory.probe_cursor = start + len(turn)
    chosen = {st.path: st for st in candidates if st.path not in held}
    chosen.update((st.path, st) for st in turn if not same(st))
    read = list(chosen.values())
    kept = [(st, held[st.path]) for st in candidates if st.path not in chosen and st.path in held]
    after = memory.probe_cursor % n
    memory.reports = [st.path for st in (ordered[after:] + ordered[:after])[:size]]
    return read, kept
