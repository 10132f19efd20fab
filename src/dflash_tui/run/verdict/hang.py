"""Where a silent run is stuck: every thread of the run classified, and the run's one kind of hang.

Pure, from Evidence: the run probe's reports (a stale one replaced by the stack dump taken of
its process, run/stacks/records.py), the tracker's memory of stacks across polls (run/evidence/activity.py),
the CPU of the process tree, the collectives each rank reached and the first failure. The verdict
engine (run/verdict/health.py) asks two things of it: whether the run is compiling (the long grace
applies then, and only then), and, once the silence is past its limit, what kind of hang it is
and where, in one line (`Hang.words`).

The kind, first match wins (a run is one kind; its other threads wait for the one that is stuck):

| what the threads show                                           | kind        |
| a thread in a torch.distributed op, wait, barrier, rendezvous   | collective  |
| a thread in a GPU wait (synchronize, event/stream waits)        | gpu         |
| a main process waiting for its DataLoader workers               | dataloader  |
| a thread in the compiler (or importing) while the tree uses CPU | compiling / importing |
| two or more threads of one process in the program's own code    | deadlock    |
|   taking locks or blocked in a C call (standing still, CPU idle)|             |
| a process whose report is stale (no Python runs), busy CPU      | busy_c      |
| threads in the compiler while the tree is idle ("deadlock in   | compiler_stuck |
|   the compiler" when several)                                   |             |
| a process whose report is stale, idle CPU                       | stuck_c     |
| a thread in I/O / on a lock / asleep / blocked in a C call      | io / lock / sleep / blocked |
| a thread in the program's own code, busy                        | busy        |

A library's helper thread parked waiting for work (tqdm's monitor, rich's refresh thread, the
idle workers of a thread pool: `Classified.idle`) is no party of any of these and never the
thread named: it waits for the program, which is where the run stopped.

How long ("for 3 min"): a thread that waits (or runs no Python) has stood still since its
frames last changed at all (`ThreadView.since`, lines included); a thread that runs is in its
function since it entered it (its innermost own frame, the line aside: a loop is one place).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from enum import StrEnum

from ...contract.rundir import PROBE_INTERVAL_S, ProbeReport, ProbeThread
from ...words import cpu_use, duration
from ..stacks.records import CollectiveProgress
from ..evidence.observe import Evidence
from ..stacks.classify import Classified, ThreadClass, classify, frame_place
from ..evidence.memory import LookMemory
from .checklist import rank_ranges

# A report older than this is stale: the probe rewrites it every second, unless no Python can
# run in its process (a C call holding the GIL, a deadlock inside the interpreter).
STALE_AFTER_S = 5.0

C = ThreadClass
_WAITING = frozenset(c for c in ThreadClass if c.waits)    # `ThreadClass.waits`, as a set


@dataclass
class ThreadView:
    """One thread of one process of the run, as the engine reads it (the Threads pane and
    `--check --json` threads[] show these). Not frozen: a frozen dataclass's __init__ sets each
    field through object.__setattr__, 8x the cost, and a poll of 1,024 ranks builds 20,000 of
    these; nothing changes one after `judged_views` returns it."""

    pid: int
    rank: int | None
    name: str
    ident: int
    cls: ThreadClass
    doing: str = ""              # the call it is in: "all_reduce", "torch.cuda.synchronize"
    where: str = ""              # its innermost own frame, "function (file.py:line)"
    innermost: str = ""          # no own frame: the library function that runs it ("tqdm monitor (tqdm/_monitor.py:69)")
    since: float | None = None   # since when its stack stands where it is (target clock); None: unknown
    source: str = "probe"        # "probe", or the stack dump's: "faulthandler", "py-spy"
    stale: bool = False          # its process's report is stale: no Python ran since it was written
    daemon: bool = False
    ppid: int = 0
    dataloader_worker: bool = False
    idle: bool = False           # a library's helper parked waiting for work: no party of a hang
    acquiring: bool = False      # its lock wait takes a lock (a semaphore), not a wait for a signal
    still: float | None = None   # since when its frames are exactly these, lines included

    @property
    def main(self) -> bool:
        return self.name == "MainThread"

    def place(self) -> str:
        """ "torch.cuda.synchronize (train.py:7)", "all_reduce (train.py:42)", "f (x.py:3)". """
        if self.doing and self.where:
            return f"{self.doing} ({self.where.rsplit(' (', 1)[-1]}" if self.cls is not C.LIBRARY else self.where
        return self.where or self.doing or self.innermost or "an unknown frame"

    def to_dict(self) -> dict:
        return {"pid": self.pid, "rank": self.rank, "name": self.name, "class": self.cls.value,
                "doing": self.doing, "where": self.where or self.innermost, "since": self.since,
                "source": self.source, "stale": self.stale}


class HangKind(StrEnum):
    """The run's one kind of hang (the table above), first match wins."""

    COLLECTIVE = "collective"
    GPU = "gpu"
    DATALOADER = "dataloader"
    COMPILING = "compiling"            # a working compile past compile_stall_after_s
    IMPORTING = "importing"            # the imports of start-up, the same
    DEADLOCK = "deadlock"
    BUSY_C = "busy_c"
    COMPILER_STUCK = "compiler_stuck"
    STUCK_C = "stuck_c"
    IO = "io"
    LOCK = "lock"
    SLEEP = "sleep"
    BLOCKED = "blocked"
    BUSY = "busy"

    @classmethod
    def of(cls, thread_class: ThreadClass) -> "HangKind":
        """The kind named after one thread's class (compiling, importing, io, lock, sleep, blocked)."""
        return cls(thread_class.value)


@dataclass(frozen=True)
class Hang:
    kind: HangKind
    words: str                   # "hung in a collective: rank 0 waits in all_reduce (train.py:42) for 3 min; ..."
    since: float | None = None   # when the named threads stopped moving, if known


def _stale(ev: Evidence, p: ProbeReport) -> bool:
    return not p.ended and ev.now - p.time > STALE_AFTER_S


def _worker(threads: list[ProbeThread]) -> bool:
    # One search per thread through its frames joined, not one per frame (the path holds no
    # newline, so no match spans two frames): every process of a run of 1,024, each poll.
    return any("/torch/utils/data/_utils/worker.py" in "\n".join(t.frames) for t in threads)


def _probe_since(p: ProbeReport, t: ProbeThread) -> float | None:
    """The probe's own word on since when the thread's stack stands where it is, where it can
    be true: not after the report that says it, not before the probe started in the process."""
    s = t.stack_since
    if s is None or s > p.time or (p.start_time is not None and s < p.start_time):
        return None
    return s


def _probe_still(p: ProbeReport, t: ProbeThread) -> float | None:
    """The probe's word on since when the thread's frames are exactly these; an older probe's
    report (no such field) gives its `stack_since`, the nearest it knows."""
    s = t.frames_since
    if s is None:
        return _probe_since(p, t)
    if s > p.time or (p.start_time is not None and s < p.start_time):
        return None
    return s


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None or a <= b else b


def _classified(pid: int, threads: list[ProbeThread],
                memory: LookMemory) -> tuple[bool, list[tuple[Classified, str]]]:
    """(the process is a DataLoader worker, (class, innermost place) of each thread), kept in
    `memory.classified` while its report's thread list is the one classified."""
    hit = memory.classified.get(pid, threads)
    if hit is not None:
        return hit
    rows = []
    for t in threads:
        c = classify(t.frames, t.compile_state)
        rows.append((c, c.helper or (frame_place(t.frames[0]) if t.frames else "")))
    hit = _worker(threads), rows
    memory.classified.put(pid, threads, hit)
    return hit


# Each live report's views (`LookMemory.views`), while what they are made of is as it was: its
# thread list (as `LookMemory.classified`'s), its process's fields, the tracker's since of each thread, and a report time at
# least as late (a probe's since later than its report is believed once the report catches up:
# then only the same time). A stale report's, or one a stack dump replaces, is made afresh.
# Kept: ((pid, rank, ppid, start_time), time, later, each thread's (pid, ident), the tracker's
# since and still of each, the views, whether one waits for DataLoader workers).
def _kept_views(p: ProbeReport, since_of, still_of, memory: LookMemory) -> tuple[list[ThreadView], bool] | None:
    hit = memory.views.get(p.pid, p.threads)
    if (hit is None or hit[0] != (p.pid, p.rank, p.ppid, p.start_time) or p.time < hit[1]
            or hit[2] and p.time != hit[1]):
        return None
    keys = hit[3]
    if list(map(since_of.get, keys)) != hit[4] or list(map(still_of.get, keys)) != hit[5]:
        return None
    return hit[6], hit[7]


def _remember_views(p: ProbeReport, since_of, still_of, views: list[ThreadView], later: bool,
                    loading: bool, memory: LookMemory) -> None:
    keys = [(p.pid, t.ident) for t in p.threads]
    memory.views.put(p.pid, p.threads, ((p.pid, p.rank, p.ppid, p.start_time), p.time, later, keys,
                                  list(map(since_of.get, keys)), list(map(still_of.get, keys)), views, loading))


def thread_views(ev: Evidence, memory: LookMemory) -> list[ThreadView]:
    """Every thread of every live process of the run, classified; a stale report's threads come
    from the stack dump taken after it, when there is one. `memory`: the watch's (what earlier
    looks worked out of the same reports), or a fresh one."""
    act = ev.activity
    since_of = act.stack_since if act is not None else {}
    still_of = act.frames_since if act is not None else {}
    out: list[ThreadView] = []
    loading: set[int] = set()     # processes whose thread waits for DataLoader workers
    beating = {p.pid for p in ev.probes if not p.ended and not _stale(ev, p)}
    beat_at = last_beats(ev.probes)
    for p in ev.probes:
        if p.ended:
            continue
        dump = ev.hang.stack_dumps.get(p.pid)
        use_dump = dump is not None and dump.time > p.time
        threads = list(dump.threads) if use_dump else p.threads
        stale = p.pid not in beating
        if stale and not use_dump and ended_worker(p, beat_at.get(p.ppid), p.pid in ev.hang.gone):
            continue     # a DataLoader worker that ended with its loader (no atexit in workers)
        if not use_dump and not stale:
            kept = _kept_views(p, since_of, still_of, memory)
            if kept is not None:
                out.extend(kept[0])
                if kept[1]:
                    loading.add(p.pid)
                continue
        mine: list[ThreadView] = []
        later = False    # a probe's word on a thread's since was later than its report
        worker, classes = _classified(p.pid, threads, memory)
        for t, (c, inner) in zip(threads, classes):
            # Both are when the stack was first seen where it is, by the probe at its beats
            # (every second, since the process started) and by our own looks: the earlier knows more.
            since = _earliest(since_of.get((p.pid, t.ident)), None if use_dump else _probe_since(p, t))
            still = _earliest(still_of.get((p.pid, t.ident)), None if use_dump else _probe_still(p, t))
            if stale:   # no Python ran since the report: its stack stood still since then at least
                since, still = _earliest(since, p.time), _earliest(still, p.time)
            if not use_dump and (t.stack_since is not None and t.stack_since > p.time
                                 or t.frames_since is not None and t.frames_since > p.time):
                later = True
            mine.append(ThreadView(p.pid, p.rank, t.name, t.ident, c.cls, c.doing, c.where, inner, since,
                                   dump.source if use_dump else "probe", stale, t.daemon, p.ppid, worker,
                                   c.idle, c.acquiring, still))
            if c.cls is C.DATALOADER:
                loading.add(p.pid)
        out.extend(mine)
        if not use_dump and not stale:
            _remember_views(p, since_of, still_of, mine, later, p.pid in loading, memory)
    # A child of a process that waits for its DataLoader workers is one of them, wherever its
    # stack is (the worker loop may be beyond the frames kept).
    return [replace(v, dataloader_worker=True) if v.ppid in loading and not v.dataloader_worker else v
            for v in out]


_CLASS = operator.attrgetter("cls")


def compiling(views: list[ThreadView]) -> bool:
    return C.COMPILING in map(_CLASS, views)    # a look asks this of its every thread, several times


def importing(views: list[ThreadView]) -> bool:
    return C.IMPORTING in map(_CLASS, views)


def _busy(ev: Evidence) -> bool | None:
    return ev.activity.cpu_busy if ev.activity is not None else None


def compiling_busy(ev: Evidence, views: list[ThreadView]) -> bool:
    """The stacks show a compile (or the imports of start-up) that works: a thread in the
    compiler or the import machinery while the tree uses CPU (or its CPU is not measured yet).
    A compile at 0 % CPU is not compiling: it is stuck."""
    return (compiling(views) or importing(views)) and _busy(ev) is not False


def _for(now: float, since: float | None) -> str:
    """ " for 3 min"; nothing when not known, or under a second (a look that just began)."""
    return f" for {duration(now - since)}" if since is not None and now - since >= 1.0 else ""


def _oldest(views: list[ThreadView]) -> float | None:
    return min((v.since for v in views if v.since is not None), default=None)


def _who(v: ThreadView, ranks: bool) -> str:
    if ranks and v.rank is not None:
        return f"rank {v.rank}"
    return v.name


def _launcher(v: ThreadView, ranked: bool) -> bool:
    """torchrun's agent (or another launcher): the process without a rank among ranked ones.
    It starts and watches the ranks; it is never one of them."""
    return ranked and v.rank is None


def _pick(views: list[ThreadView]) -> ThreadView:
    """The thread that speaks for its process: the main thread unless it only waits for another."""
    order = {C.COLLECTIVE: 0, C.GPU: 1, C.DATALOADER: 2, C.COMPILING: 3, C.IMPORTING: 3, C.IO: 4, C.LOCK: 5, C.BLOCKED: 6,
             C.RUNNING: 7, C.SLEEP: 8, C.LIBRARY: 9, C.UNKNOWN: 10}
    joining = {v.pid for v in views if v.main and v.doing == "Thread.join"}

    def rank(v: ThreadView) -> float:
        # A wait for a signal or for work (a queue, an event) waits for another thread: after
        # a thread blocked where it is.
        return 6.5 if v.cls is C.LOCK and not v.acquiring else order[v.cls]
    return min(views, key=lambda v: (v.idle, v.daemon, rank(v), not v.main or v.pid in joining, v.name))


def _by_process(views: list[ThreadView]) -> dict[int, list[ThreadView]]:
    out: dict[int, list[ThreadView]] = {}
    for v in views:
        out.setdefault(v.pid, []).append(v)
    return out


def _still(v: ThreadView) -> ThreadView:
    """A thread that waits, or runs no Python, stood still since its frames last changed; one
    that runs is in its function since it entered it, whatever line."""
    if v.still is None or v.still == v.since or not v.stale and v.cls not in _WAITING:
        return v
    return replace(v, since=v.still)


def judged_views(ev: Evidence, memory: LookMemory) -> list[ThreadView]:
    """`thread_views` with what time and CPU add: own code in an idle tree is BLOCKED (each
    such thread is in a C call that waits, a plain lock, a sleep, a read, whatever its
    innermost Python frame says); a thread that waits has waited since its stack last changed
    at all."""
    blocked = _busy(ev) is False
    out = []
    for v in thread_views(ev, memory):     # one pass, a look's every thread
        if v.cls is C.UNKNOWN:
            continue
        if blocked and v.cls is C.RUNNING:
            v = replace(v, cls=C.BLOCKED)
        out.append(_still(v))
    return out


def diagnose(ev: Evidence, views: list[ThreadView] | None = None) -> Hang | None:
    """The run's kind of hang, in words, from its threads (None: no stacks to read). Where the
    Flight Recorder says a collective is pending and no thread is seen in one (NCCL returns to
    Python at once; the thread then waits at a later sync, on the GPU), its words follow.
    `views`: `judged_views(ev)` when the caller has them already."""
    hang = _diagnose(ev, judged_views(ev, LookMemory()) if views is None else views)
    if hang is None or hang.kind is HangKind.COLLECTIVE:
        return hang
    pending = [c for c in ev.hang.collectives if c.pending_op]
    seqs = _collective_words(ev.hang.collectives) if pending else ""
    return replace(hang, words=f"{hang.words}; {seqs}") if seqs else hang


def _diagnose(ev: Evidence, views: list[ThreadView]) -> Hang | None:
    ranked = any(v.rank is not None for v in views)
    views = [v for v in views if not _launcher(v, ranked)]
    if not views:
        return None
    now = ev.now
    cpu = cpu_use(ev.activity.cpu_cores) if ev.activity is not None and ev.activity.cpu_cores is not None else ""

    coll = [v for v in views if v.cls is C.COLLECTIVE and not v.dataloader_worker]
    if coll:
        return _collective(ev, views, coll, ranked)
    gpu = [v for v in views if v.cls is C.GPU]
    if gpu:
        since = _oldest(gpu)
        names = "; ".join(f"{_who(v, ranked)} in {v.place()}" for v in _one_per_process(gpu))
        return Hang(HangKind.GPU, f"waiting on the GPU: {names}{_for(now, since)}", since)
    loader = [v for v in views if v.cls is C.DATALOADER]
    if loader:
        return _dataloader(ev, views, loader)
    if compiling_busy(ev, views):
        cls = C.COMPILING if compiling(views) else C.IMPORTING
        comp = [v for v in views if v.cls is cls]
        since = _oldest(comp)
        what = ("compile never ended: {} in the compiler" if cls is C.COMPILING else
                "start-up never ended: {} importing modules").format(_threads(comp, ranked))
        return Hang(HangKind.of(cls), f"{what}{_for(now, since)}" + (f", {cpu}" if cpu else ""), since)
    procs = _by_process(views)
    for pid, vs in procs.items():
        waiting = sorted((v for v in vs if _deadlock_party(v)), key=lambda v: v.name)
        if len(waiting) >= 2 and not any(v.cls in (C.RUNNING, C.COMPILING) and not v.daemon for v in vs):
            since = _oldest(waiting)
            parts = "; ".join(_lock_words(v) for v in waiting)
            return Hang(HangKind.DEADLOCK, f"deadlock: {parts}{_for(now, since)}" + (f", {cpu}" if cpu else ""), since)
    stale = [v for v in views if v.stale]
    if stale and _busy(ev):
        v = _pick(stale)
        since = v.since
        return Hang(HangKind.BUSY_C, f"busy in C: {_who(v, ranked)} in {v.place()}" + (f", {cpu}" if cpu else "")
                    + f", stack unchanged{_for(now, since)} (pid {v.pid} runs no Python)", since)
    if compiling(views):
        # The incident's pattern: threads compiling one function at once wait for each other.
        comp = [v for v in views if v.cls is C.COMPILING]
        since = _oldest(comp)
        what = "deadlock in the compiler" if len(comp) > 1 else "stuck in the compiler"
        return Hang(HangKind.COMPILER_STUCK, f"{what}: {_threads(comp, ranked)} in the compiler"
                                      f"{_for(now, since)}, {cpu or 'CPU not measured'}", since)
    if stale:
        v = _pick(stale)
        return Hang(HangKind.STUCK_C, f"stuck in C: {_who(v, ranked)} in {v.place()}" + (f", {cpu}" if cpu else "")
                    + f", stack unchanged{_for(now, v.since)} (pid {v.pid} runs no Python)", v.since)
    lead = _pick([v for v in views if not v.daemon and not v.idle] or views)
    since = lead.since
    if lead.cls in (C.IO, C.LOCK, C.SLEEP, C.BLOCKED):
        return Hang(HangKind.of(lead.cls), f"{lead.cls.words}: {_who(lead, ranked)} in {lead.place()}"
                    f"{_for(now, since)}" + (f", {cpu}" if cpu else ""), since)
    return Hang(HangKind.BUSY, f"busy in {'its own code' if lead.cls is C.RUNNING else 'library code'}: "
                        f"{_who(lead, ranked)} in {lead.place()}{_for(now, since)}" + (f", {cpu}" if cpu else "")
                        + ", calling nothing else of the program", since)


def _one_per_process(views: list[ThreadView]) -> list[ThreadView]:
    return [_pick(vs) for vs in _by_process(views).values()]


def _threads(views: list[ThreadView], ranked: bool) -> str:
    """ "MainThread" or "8 threads of 1 process" """
    if len(views) == 1:
        return _who(views[0], ranked)
    procs = len({v.pid for v in views})
    return f"{len(views)} threads" + (f" of {procs} processes" if procs > 1 else "")


def _deadlock_party(v: ThreadView) -> bool:
    """A thread of the program's own code that stands taking a lock: blocked in a C call from
    its own line (a plain Lock, RLock), or in a wait that takes a lock (a semaphore). A wait
    for a signal or for work (a condition, an event, a queue, a future, a join) is no party;
    nor is a library's helper that waits for work."""
    if not v.where or v.idle:
        return False
    return v.cls is C.BLOCKED or (v.cls is C.LOCK and v.acquiring)


def _lock_words(v: ThreadView) -> str:
    if v.cls is C.LOCK:
        return f"{v.name} waits in {v.doing} in {v.where or v.innermost}"
    return f"{v.name} is blocked in {v.where or v.innermost} (a lock or another C call)"


def _collective(ev: Evidence, views: list[ThreadView], coll: list[ThreadView], ranked: bool) -> Hang:
    now = ev.now
    since = _oldest(coll)
    in_it = _one_per_process(coll)
    # Group the ranks that wait at the same place: "ranks 0, 2 wait in all_reduce (train.py:42)".
    groups: dict[str, list[ThreadView]] = {}
    for v in in_it:
        groups.setdefault(v.place(), []).append(v)
    parts = []
    for place, vs in groups.items():
        who = _rank_list(vs, ranked)
        verb = "wait" if who.startswith("ranks ") else "waits"
        parts.append(f"{who} {verb} in {place}{_for(now, _oldest(vs))}")
    words = "hung in a collective: " + "; ".join(parts)
    waiting_pids = {v.pid for v in coll}
    waiting_ranks = {v.rank for v in coll}
    # The other participants: without ranks, every other process; with ranks, one process per
    # rank that waits nowhere (a rank's children, its DataLoader workers, are not ranks).
    others: dict[object, list[ThreadView]] = {}
    for pid, vs in sorted(_by_process(views).items()):
        if pid in waiting_pids or any(v.dataloader_worker for v in vs):
            continue
        key = vs[0].rank if ranked else pid
        if not ranked or key not in waiting_ranks:
            others.setdefault(key, vs)
    for vs in others.values():
        v = _pick(vs)
        words += f"; {_who(v, ranked)} is not in it: {v.place()}"
        if v.stale:
            words += " (runs no Python)"
    seqs = _collective_words(ev.hang.collectives)
    if seqs:
        words += f"; {seqs}"
    return Hang(HangKind.COLLECTIVE, words, since)


def _rank_list(vs: list[ThreadView], ranked: bool) -> str:
    if not ranked:
        return ", ".join(v.name for v in vs)
    ranks = sorted({v.rank for v in vs if v.rank is not None})
    # Compact: "ranks 0-6, 8-63" (64 ranks listed one by one filled the summary's 400 characters).
    return ("rank " if len(ranks) == 1 else "ranks ") + rank_ranges(ranks)


def _collective_words(progress: list[CollectiveProgress]) -> str:
    """ "collectives reached: rank 0 #12, rank 1 #11 (rank 1 lags)" from the Flight Recorder."""
    seen = [c for c in progress if c.last_enqueued_seq is not None or c.last_completed_seq is not None]
    if not seen:
        return ""
    def reached(c: CollectiveProgress) -> int:
        return c.last_enqueued_seq if c.last_enqueued_seq is not None else c.last_completed_seq
    seen.sort(key=lambda c: c.rank)
    parts = []
    for c in seen:
        part = f"rank {c.rank} #{reached(c)}"
        if c.pending_op:
            part += f" ({c.pending_op} #{c.pending_seq} pending)" if c.pending_seq is not None else f" ({c.pending_op})"
        parts.append(part)
    words = "collectives reached: " + ", ".join(parts)
    low = min(reached(c) for c in seen)
    if low < max(reached(c) for c in seen):
        lagging = [str(c.rank) for c in seen if reached(c) == low]
        words += f" (rank{'s' if len(lagging) > 1 else ''} {', '.join(lagging)} lag{'s' if len(lagging) == 1 else ''})"
    return words


def _dataloader(ev: Evidence, views: list[ThreadView], loader: list[ThreadView]) -> Hang:
    now = ev.now
    workers = [v for v in views if v.dataloader_worker]
    since = _oldest(loader)
    if workers:
        named = [_pick(vs) for vs in _by_process(workers).values()]
        # The workers that are somewhere of their own (a read, a parse) say where; idle ones
        # (waiting at their index queue) do not.
        busy = [v for v in named if v.where] or named
        parts = "; ".join(f"worker pid {v.pid} in {v.place()}{_for(now, v.since)}" for v in busy[:4])
        more = f" (+{len(busy) - 4} more)" if len(busy) > 4 else ""
        return Hang(HangKind.DATALOADER, f"waiting for DataLoader workers: {parts}{more}", since)
    main = _pick(loader)
    return Hang(HangKind.DATALOADER, f"waiting for DataLoader workers: {main.name} in {main.place()}{_for(now, since)}"
                              f" (no worker's stack was read)", since)


# A parent that wrote reports this long after a worker's last one lived on while the worker
# was gone: two missed beats, not one late write.
_PARENT_BEAT_AFTER_S = 2 * PROBE_INTERVAL_S


def last_beats(probes: list[ProbeReport]) -> dict[int, float]:
    """Each live process's last report time, by pid."""
    return {p.pid: p.time for p in probes if not p.ended}


def ended_worker(p: ProbeReport, parent_time: float | None, gone: bool = False) -> bool:
    """A DataLoader worker that stopped beating is ended, not silent: its process is gone
    (`gone`: the target has no live process of its pid and start time), it was idle at its
    index queue when last seen, or its parent (the process that owns the DataLoader) beat on
    after it (`parent_time`: the parent's last report). A DataLoader shuts its workers down at
    an epoch's end or when an iteration is left early, also while they prefetch; a worker that
    holds its parent shows in the parent's own stack. Judged by the parent's beats after the
    worker's, not by whether the parent beats now: a parent starved of CPU for a few seconds
    does not bring its workers of a minute ago back to life; nor does it keep alive a worker
    whose process is gone, however close its last beat was to the parent's. A worker whose
    process lives on, busy when last seen, while its parent went silent with it, is silent."""
    if not _worker(p.threads):
        return False
    if gone or idle_worker(p):
        return True
    return parent_time is not None and parent_time - p.time >= _PARENT_BEAT_AFTER_S


def idle_worker(p: ProbeReport) -> bool:
    """A DataLoader worker waiting at its index queue: what a worker that exited normally with
    its DataLoader looked like last (multiprocessing ends workers without atexit)."""
    if not _worker(p.threads):
        return False
    main = next((t for t in p.threads if t.name == "MainThread"), None)
    if main is None or not main.frames:
        return False
    c = classify(main.frames)
    return c.cls in (C.LOCK, C.IO) or any("/torch/utils/data/_utils/worker.py" in f and "_worker_loop" in f
                                          for f in main.frames[:1])

