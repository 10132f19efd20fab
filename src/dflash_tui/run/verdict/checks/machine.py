"""The machine's checks: the process tree's CPU, the run dir's disk, the run probe's
heartbeats and files, the threads' stacks."""

from __future__ import annotations

from ....words import age_at as _age, cpu_use, duration as _duration, one_line as _one_line, size
from ...evidence.activity import Activity
from ...evidence.observe import Evidence
from ...stacks.classify import ThreadClass
from ..checklist import Check, CheckId, CheckState
from ..hang import STALE_AFTER_S, Hang, ThreadView, ended_worker, last_beats
from .launch import DISK_HINT, last_line

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING


def cpu_words(act: Activity | None) -> str:
    """ "idle (0 % CPU over 1 s; 2 processes, 2 sleeping)" or "busy (180 % CPU ...)". """
    if act is None or act.cpu_cores is None:
        return "CPU not measured"
    what = "busy" if act.cpu_busy else "idle"
    tree = f"{act.procs} process{'es' if act.procs != 1 else ''}, {act.threads} threads"
    return f"{what} ({cpu_use(act.cpu_cores)} over {_duration(act.cpu_window_s or 0)}; {tree}: {act.states})"


def cpu_check(act: Activity | None, uptime: float) -> Check | None:
    """The process tree's CPU: its recent rate, or, from one sample, its lifetime average."""
    if act is None or act.cpu_s is None:
        return None
    if act.cpu_cores is None:
        avg = f", {cpu_use(act.cpu_s / uptime)} on average" if uptime > 0 else ""
        return Check.of(CheckId.CPU, OK,
                     f"{act.cpu_s:.1f} CPU seconds in {_duration(uptime)}{avg}; {act.procs} processes, "
                     f"{act.states or 'states unknown'}")
    return Check.of(CheckId.CPU, OK, cpu_words(act))


def disk_words(ev: Evidence) -> str:
    """ "disk full: 0 B free on /r (of 16.0 KiB)" when the run dir's filesystem is full, else "". """
    act = ev.activity
    if act is not None and act.disk_full:
        return f"disk full: {size(act.disk.free)} free on {act.disk.checked} (of {size(act.disk.total)})"
    if act is not None and act.disk_error:
        return f"disk full: the log says {act.disk_error!r}"
    for text in (ev.launch_out, ev.launch.log_error if ev.launch else ""):
        if text and ("No space left on device" in text or "Disk quota exceeded" in text):
            return f"disk full: {last_line(text) or text.strip()}"
    return ""


def disk_check(ev: Evidence) -> tuple[Check | None, str]:
    words = disk_words(ev)
    return (Check.of(CheckId.DISK, FAIL, _one_line(words), DISK_HINT, None) if words else None), words


def probe_check(ev: Evidence, limits_stall_s: float) -> Check | None:
    """The run probe's per-process heartbeats: alive, not progress. A process that exited
    normally (its last report says so, or it was a DataLoader worker idle at its queue, which
    multiprocessing ends without atexit) is not missing."""
    live = [p for p in ev.probes if not p.ended]
    if not live:
        return None
    # One pass, by each report's own time: `p not in fresh` would compare reports field by field,
    # quadratic in the processes (seconds at 1,024 ranks).
    limit = max(limits_stall_s, STALE_AFTER_S)
    fresh: list = []
    silent: list = []
    gone_workers: list = []
    beating = set()
    for p in live:
        if ev.now - p.time <= limit:
            fresh.append(p)
            beating.add(p.pid)
    beat_at = last_beats(live)
    for p in live:
        if p.pid not in beating:
            (gone_workers if ended_worker(p, beat_at.get(p.ppid), p.pid in ev.hang.gone) else silent).append(p)
    newest = max((p.time for p in live), default=None)
    cause = f"{len(fresh)} of {len(fresh) + len(silent)} process(es) beating, newest {_age(ev.now, newest)}"
    if gone_workers:
        cause += f"; {len(gone_workers)} DataLoader worker(s) ended"
    if silent:
        cause += "; silent: " + ", ".join(f"pid {p.pid} ({_age(ev.now, p.time)})" for p in silent[:4])
        return Check.of(CheckId.PROBE, WARN, cause,
                     "a process that runs no Python (a C call holding the GIL), or one that died",
                     newest)
    return Check.of(CheckId.PROBE, OK, cause, "", newest)


def stacks_check(ev: Evidence, views: list[ThreadView], hang: Hang | None, stalled: bool) -> Check | None:
    """What the run's threads do, by class ("4 running, 2 in a collective"); the hang's words
    when the verdict is STALLED."""
    if not views:
        return None
    counts: dict[ThreadClass, int] = {}
    for v in views:
        counts[v.cls] = counts.get(v.cls, 0) + 1
    procs = len({v.pid for v in views})
    what = ", ".join(f"{n} {cls.words}" for cls, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    cause = f"{len(views)} thread(s) in {procs} process(es): {what}"
    if stalled and hang is not None:
        return Check.of(CheckId.STACKS, FAIL, _one_line(hang.words, 300),
                     "the named thread is where the run stopped: what it waits on (a peer, a lock, I/O) holds the run", hang.since)
    return Check.of(CheckId.STACKS, OK, _one_line(cause, 300))


def probe_files_check(bad: list[str]) -> Check | None:
    """The probe directory's files that could not be read (probe reports, Flight Recorder
    dumps, error files, stack dumps), each with what is wrong: the verdict stands without them."""
    if not bad:
        return None
    return Check.of(CheckId.PROBE_FILES, WARN, _one_line("; ".join(bad), 300), "the verdict is judged without them")
