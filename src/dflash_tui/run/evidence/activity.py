"""What advanced since the last look: CPU time, the log, steps, stacks. Memory across polls.

The verdict rule (run/verdict/health.py) needs evidence that only two observations give: is the
process tree's CPU time advancing, did the log grow, did a step go by, did a thread's stack
move. `ProgressTracker` keeps that memory for one run dir; `gather(..., tracker=...)` calls
`read_files()` (beside its proc_tree request) and `observe()` once per poll with what the poll
already fetched (the stat of train.log and events.jsonl, the process tree, the run probe's
reports and stack dumps); it reads only the NEW bytes of those files (by offset, bounded to a
window; a truncated or replaced file is read again from its start). The result is an
`Activity`, put into Evidence.

Polled every second (the dashboard, `--wait`), the tracker compares with its own earlier
samples. For a one-shot `--check`, the first observation proves what the run dir alone
proves: the log's mtime says when it last grew, events carry their own times, status.json its
own; only the CPU rate and moving stacks need two samples, so when the log has not grown in
the last CPU_WINDOW_S and the process is alive, `gather` takes a second process-tree and probe
sample that long after the first (`needs_second_sample`). Every time here is the target's clock.
"""

from __future__ import annotations

import collections
import functools
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ...contract.rundir import (EVENTS_JSONL, LAUNCH_JSON, LOG_GROWTH, LOG_GROWTH_MAX_BYTES, PROBE_INTERVAL_S,
                               TRAIN_LOG, EventKind, ProbeReport, SchemaError, parse_event, parse_log_growth)
from ...remote.base import TRANSPORT_FAILURES, TargetError
from ...remote.ops import DiskFree, FileStat, ProcTree, RemoteOps
from ..eager import gather_eager
from ..stacks.records import StackDump
from .divergence import DivergenceRules, DivergenceWatch, LossFinding
from .event_points import STEP_KINDS, points_from_events
from .checkpoints import CheckpointLooks
from .log_series import LogSeries
from .metric_files.reader import MetricFiles, MetricsView
from .metric_point import MetricPoint
from .progress import LogProgress, ProgressParser
from .log_growth import StepEnds
from .pace import FROM_STEP_EVENTS, Pace, line_intervals, step_times
from ..stacks.pauses import known_pause
from .step_clock import StepClock
from .memory import LookMemory
from .probe_files import ProbeReports
from .recent_reads import RecentReads
from .memory_runway import MemoryLooks
from .runway import RunwayLooks
from ..stacks.classify import ThreadClass, classify, own_code, parse_frame

# Bytes read per file per poll at most; a faster writer is skipped to its newest window.
WINDOW = 64 << 10
# The interval of the second sample a one-shot check takes to tell busy from idle.
CPU_WINDOW_S = 1.0
# A tree using less than this share of one core is idle (the noise of a sleeping process, a
# heartbeat thread, the clock tick's granularity at CPU_WINDOW_S).
BUSY_CORES = 0.05
# CPU samples older than this are forgotten: the rate is the recent one.
_CPU_HISTORY_S = 3.0
# The newest reports of each process its share of time waiting in collectives is counted over:
# about a minute of the probe's beats, so a rank that turned slow shows within that.
WAIT_WINDOW = 60
# Free space is asked for at most this often (statvfs runs in a thread of the agent).
DISK_EVERY_S = 10.0
# Below this much free space the run dir's filesystem is full for any practical purpose.
DISK_FULL_BYTES = 4 << 20


@dataclass(frozen=True)
class WaitShare:
    """Of one process's last reports (one a probe beat, at most WAIT_WINDOW), how many found a
    thread of it waiting in a collective: the share of its time it waits for the other ranks
    (the rest it spends in its own code, or elsewhere). `doing`: the collective it waited in."""

    samples: int
    waiting: int
    doing: str = ""

    @property
    def share(self) -> float:
        return self.waiting / self.samples if self.samples else 0.0


@dataclass(frozen=True)
class Activity:
    """What the run did, as far as its process tree, log and events show (target clock)."""

    samples: int                          # observations of this run so far (1: a one-shot look)
    log_grew_at: float | None = None      # when train.log last grew with the program's output
    program_output: bool = False          # the log holds output of the program (not only the wrapper's)
    output_polls: int = 0                 # observations that found new output of the program
    step: int | None = None               # latest step from the log or events.jsonl
    step_at: float | None = None          # when a step or a progress line was last seen to advance
    step_source: str = ""                 # "log" | "events"
    total: int | None = None              # total steps, where the log says (N/M)
    loss: float | None = None             # latest loss the log or a step event gave
    rate: float | None = None             # latest rate the log gave, in rate_unit
    rate_unit: str = ""                   # "it/s", "s/it", "tok/s", "samples/s"
    epoch: float | None = None
    step_epoch: float | None = None       # the epoch the log's step counts within (Lightning's bar)
    cpu_s: float | None = None            # CPU seconds of the tree so far
    cpu_cores: float | None = None        # recent CPU use in cores (None: one sample only)
    cpu_window_s: float | None = None     # over how long cpu_cores was measured
    cpu_busy_since: float | None = None   # start of the current stretch of busy samples
    procs: int = 0
    threads: int = 0
    states: str = ""                      # e.g. "1 running, 2 sleeping"
    checkpoint: str = ""                  # the latest checkpoint the program reported
    checkpoint_step: int | None = None
    checkpoint_s: float = 0.0             # the saves' seconds the trainer's checkpoint events reported
    disk: DiskFree | None = None          # free space of the run dir's filesystem, when asked
    disk_error: str = ""                  # a line of the log that said the disk is full
    # Stacks across polls (the run probe's reports, stack dumps): when a thread of the run last
    # moved from one look to the next (ProgressTracker.sample_stacks says which moves count:
    # progress that prints nothing), and where to; per thread (pid, ident), when its stack took
    # the form it has now (first seen so).
    stack_moved_at: float | None = None
    stack_moved_where: str = ""
    stack_moved_own: bool = False         # that move was in the program's own code (not a library's)
    stack_since: Mapping[tuple[int, int], float] = field(default_factory=dict)
    # Metric files (run/evidence/metric_files/): when one of this run's last gave a new step
    # (a training series' step past any before; target clock), and which; a program silent on
    # stdout that writes TensorBoard events progresses. A file that changed after it without a
    # new step (touched, garbage appended, the same step logged again) is no progress: when, which.
    metrics_at: float | None = None
    metrics_file: str = ""                # its source: "TensorBoard runs/exp1"
    metrics_changed_at: float | None = None
    metrics_changed_file: str = ""
    steps_per_s: float | None = None      # the step's recent rate over the looks (StepClock)
    # per thread, when its frames took exactly the form they have now, lines included (first
    # seen so): a thread that waits has stood still since then, wherever its function began.
    frames_since: Mapping[tuple[int, int], float] = field(default_factory=dict)
    # per process (pid), its share of time waiting in collectives, from its reports across polls
    waits: Mapping[int, WaitShare] = field(default_factory=dict)
    # The run's pace (run/evidence/pace.py): recent intervals between the progress the looks saw.
    intervals: tuple[float, ...] = ()
    pace_source: str = ""                 # where the slowest of them was learned (Pace.source)
    # What the watched training-loss series showed (run/evidence/divergence.py): a NaN, a
    # sustained spike, lone spikes, the last finite value.
    loss_finding: LossFinding = LossFinding()

    @property
    def advancing(self) -> bool:
        """Progress was seen, not only a first word: a step or progress line, a metric file
        that advanced, or output that kept coming after the first look."""
        return self.step_at is not None or self.metrics_at is not None or self.output_polls >= 2

    @property
    def cpu_busy(self) -> bool | None:
        return None if self.cpu_cores is None else self.cpu_cores >= BUSY_CORES

    @property
    def disk_full(self) -> bool:
        return self.disk is not None and self.disk.free < DISK_FULL_BYTES


_STATE_WORDS = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O wait", "T": "stopped",
                "t": "traced", "Z": "zombie", "I": "idle"}


def states_words(tree: ProcTree) -> str:
    return ", ".join(f"{n} {_STATE_WORDS.get(s, s)}" for s, n in tree.states)


# How often a run dir without log_growth (an older wrapper's run) is asked for it again.
GROWTH_RETRY_S = 10.0


async def _no_growths() -> list[tuple[float, int]] | None:
    return None


class _FileCursor:
    """Where the last read of one growing file ended, and its identity (inode)."""

    def __init__(self) -> None:
        self.offset: int | None = None   # None: never read
        self.inode: int | None = None
        # Where this look's prefetch of the file starts (`ProgressTracker.cursors`), None when
        # not asked: held bytes are taken up to there, so the read past them is the prefetch.
        self.asked: int | None = None

    async def new_bytes(self, ops: RemoteOps, path: str, st: FileStat,
                        reads: RecentReads) -> tuple[bytes, bool]:
        """(the bytes written since the last call, whether the file was restarted). Bytes that
        another reader of the file read already (`reads`) are taken from there, up to the size
        this look's stat saw; only the bytes past them are asked for."""
        if not st.exists or st.is_dir or st.error:
            return b"", False
        restarted = self.offset is not None and (st.inode != self.inode or st.size < self.offset)
        if restarted:
            reads.forget(path)                     # what was held is of the old file
        if self.offset is None or restarted:
            start = max(0, st.size - WINDOW)      # first look, or a new file: its newest window
        elif st.size == self.offset:
            return b"", False                      # nothing new: no read at all
        else:
            start = max(self.offset, st.size - WINDOW)
        # The newest window of the file (first look, restart, a burst past WINDOW) begins mid-line.
        mid_line = start > 0 and (self.offset is None or restarted or start > self.offset)
        asked, self.asked = self.asked, None
        held = reads.past(path, st.inode, start)
        data = b""
        if held is not None:
            # Up to where the prefetch was asked from: those bytes were held before this look's
            # stat (another reader may have read more since, past the size that stat saw).
            end = held.end if asked is None else min(held.end, max(asked, start))
            if end <= st.size:
                data = held.data[:end - start]
            # else: shorter than what was held, truncated: read it as it is now
        if start + len(data) < st.size:
            chunk = await ops.read(path, start + len(data), WINDOW)
            if not chunk.exists:
                return b"", False
            reads.record(chunk)
            if data and chunk.inode != st.inode:
                # Replaced between the stat and the read: what is held belongs to the old file.
                data, chunk = b"", await ops.read(path, start, WINDOW)
                if not chunk.exists:
                    return b"", False
                reads.record(chunk)
            data += chunk.data
            self.offset, self.inode = chunk.offset + len(chunk.data), chunk.inode
        else:
            self.offset, self.inode = start + len(data), st.inode
        if mid_line and b"\n" in data:
            data = data.split(b"\n", 1)[1]
        return data, restarted


def _signature(frames: list[str]) -> tuple[str, ...]:
    return _signature_of(tuple(frames))


# A thread's stack stays where it is for many looks: its signature is kept (bounded: a running
# thread's frames carry line numbers and keep changing).
@functools.lru_cache(maxsize=1024)
def _signature_of(frames: tuple[str, ...]) -> tuple[str, ...]:
    """What of a thread's stack counts as where it is. Its frames in the program's own code,
    innermost first, the innermost without its line: a loop inside one function (a spin, a
    busy phase) stays one signature; a call into another function of the program, or back out
    of it, changes it. A thread with no own frame in view (deep in a library, importing) is
    where its functions are, lines aside."""
    parsed = [parse_frame(f) for f in frames]
    own = [f for f, p in zip(frames, parsed) if own_code(p)]
    if own:
        f = parse_frame(own[0])
        return ("own", f"{f.path} {f.function}", *own[1:])
    return ("lib", *(f"{p.path} {p.function}" for p in parsed))


def progress_points(p: LogProgress) -> list[MetricPoint]:
    """The loss and the rate (named by its unit) a program's log showed at its step; none for a
    step counted within an epoch (Lightning's bar starts again each epoch)."""
    if p.step is None or p.step_epoch is not None:
        return []
    out = []
    if p.loss is not None and math.isfinite(p.loss):
        out.append(MetricPoint("loss", p.step, p.loss))
    if p.rate is not None and p.rate_unit and math.isfinite(p.rate):
        out.append(MetricPoint(p.rate_unit, p.step, p.rate))
    return out


class ProgressTracker:
    """Memory across polls of one run dir; a new run id starts it afresh."""

    def __init__(self, progress_regex: re.Pattern[str] | str | None = None, *,
                 second_sample: bool = True, metric_paths: tuple[str, ...] = (),
                 divergence: DivergenceRules = DivergenceRules(),
                 checkpoint_paths: tuple[str, ...] = (), memory_limit_bytes: int | None = None) -> None:
        self.progress_regex = progress_regex
        self.divergence_rules = divergence      # a profile's watch_series, nan_patience, spike_patience
        self.second_sample = second_sample
        self.metric_paths = tuple(metric_paths)   # a profile's `metrics`, relative to the run dir
        # The run's checkpoints (in the run dir and a profile's `checkpoints` folders) and the
        # disk runway of the next ones: judged files are kept across runs in the same dir.
        self.checkpoints = CheckpointLooks(tuple(checkpoint_paths))
        self.runway = RunwayLooks()
        # The run's host and GPU memory as trends over its steps (a profile's memory_limit_mb
        # stands in for the host's limit).
        self.memory = MemoryLooks(limit_bytes=memory_limit_bytes)
        # What was read of train.log and events.jsonl, by this tracker and by any other reader
        # of them that records there (the dashboard's log followers, run/evidence/logtail.py).
        self.reads = RecentReads()
        # What this run's looks hold parsed (records, probe reports, dumps): one watch's, never shared.
        self.looks = LookMemory()
        self._start(None)

    def _start(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.samples = 0
        if run_id is not None:
            self.reads.forget()   # a new run in the same dir: its files are read afresh
        self.parser = ProgressParser(self.progress_regex)
        self.log_series = LogSeries()
        self.divergence = DivergenceWatch(self.divergence_rules)
        self.metric_files = MetricFiles(self.metric_paths, self.divergence)
        self.metrics = MetricsView()
        self._clock = StepClock()
        self._log = _FileCursor()
        self._events = _FileCursor()
        self._cpu: collections.deque[tuple[float, float]] = collections.deque()
        self._busy_since: float | None = None
        self._log_grew_at: float | None = None
        self._output_polls = 0
        self._records = 0
        self._step_at: float | None = None
        self._step_source = ""
        self._ev_step: int | None = None
        self._ev_step_at: float | None = None
        self._ev_loss: float | None = None
        self._checkpoint = ""
        self._checkpoint_step: int | None = None
        self._checkpoint_s = 0.0
        self._disk: DiskFree | None = None
        self._disk_at: float | None = None
        # (pid, ident) -> (own-code frames, first seen with them); pid -> (report time, cpu_s, rate)
        self._stacks: dict[tuple[int, int], tuple[tuple[str, ...], float]] = {}
        self._frames: dict[tuple[int, int], tuple[tuple[str, ...], float]] = {}
        # Each thread's since and still (from _stacks and _frames) as the last Activity had them;
        # None once either changed.
        self._since: tuple[Mapping, Mapping] | None = None
        # pid -> (the thread list of its report sampled last, its threads' keys): a report whose
        # threads are that very list (run/evidence/probe_files.py's kept copy, or a read in which
        # no thread moved: contract/rundir.py parse_probe_after keeps the list) changes neither.
        self._sampled: dict[int, tuple[list, tuple[tuple[int, int], ...]]] = {}
        self._stack_moved_at: float | None = None
        self._stack_moved_where = ""
        self._stack_moved_own = False
        self._proc_cpu: dict[int, tuple[float, float, float | None]] = {}
        # pid -> (the seq of its last report sampled, one flag per report: waiting in a
        # collective, the collective it waited in last, its share of them)
        self._waits: dict[int, tuple[int, collections.deque[bool], str, WaitShare]] = {}
        self._pace = Pace()
        self._step_ends = StepEnds(self.progress_regex)   # the log's step lines log_growth has yet to time
        self._growth_missing_at: float | None = None       # when a read last found no log_growth
        # log_growth's (inode, size, mtime) when last parsed, and its growths: a look whose stat
        # shows the same file neither reads nor parses it again.
        self._growth_key: tuple[int, int, float] | None = None
        self._growths: list[tuple[float, int]] = []

    @property
    def progress(self) -> LogProgress:
        return self.parser.progress

    def needs_second_sample(self, now: float, log: FileStat | None, tree: ProcTree | None) -> bool:
        """A one-shot look that cannot tell busy from idle yet: alive, one CPU sample, and a log
        that has not grown in the last CPU_WINDOW_S (a growing log already proves progress)."""
        if not self.second_sample or tree is None or not tree.root.alive or len(self._cpu) != 1:
            return False
        return log is None or not log.exists or now - log.mtime > CPU_WINDOW_S

    def sample_cpu(self, now: float, tree: ProcTree | None) -> None:
        if tree is None or not tree.root.alive:
            return
        self._cpu.append((now, tree.cpu_s))
        while len(self._cpu) > 2 and now - self._cpu[1][0] >= _CPU_HISTORY_S:
            self._cpu.popleft()
        rate = self._cpu_rate()
        if rate is not None:
            if rate[0] >= BUSY_CORES:
                if self._busy_since is None:
                    self._busy_since = self._cpu[0][0]
            else:
                self._busy_since = None

    def _cpu_rate(self) -> tuple[float, float] | None:
        if len(self._cpu) < 2:
            return None
        (t0, c0), (t1, c1) = self._cpu[0], self._cpu[-1]
        if t1 - t0 <= 0.2:
            return None
        return max(0.0, c1 - c0) / (t1 - t0), t1 - t0

    async def read_files(self, ops: RemoteOps, run_dir: str, run_id: str | None, now: float,
                         files: dict[str, FileStat]) -> None:
        """The I/O half of an observation: the new bytes of train.log and events.jsonl and (at
        most every DISK_EVERY_S) the free space, all at once; the caller runs it beside its
        own proc_tree request, so a poll costs one more round trip at most."""
        if run_id != self.run_id:
            self._start(run_id)
        log, events = files.get(TRAIN_LOG), files.get(EVENTS_JSONL)
        launched = files.get(LAUNCH_JSON)
        # log_growth is read when the log grew or a step line read earlier awaits its time; a run
        # without one (an older wrapper's) is asked again at most every GROWTH_RETRY_S.
        log_grows = log is not None and log.exists and not log.is_dir and log.size != self._log.offset
        ask_growth = ((log_grows or self._step_ends.pending)
                      and (self._growth_missing_at is None or now - self._growth_missing_at >= GROWTH_RETRY_S))
        (log_data, restarted), (ev_data, _), _, _, growths = await gather_eager(
            self._read(ops, posixpath.join(run_dir, TRAIN_LOG), log, self._log),
            self._read(ops, posixpath.join(run_dir, EVENTS_JSONL), events, self._events),
            self._ask_disk(ops, run_dir, now),
            self.metric_files.poll(ops, run_dir, now, launched.mtime if launched and launched.exists else None),
            self._read_growths(ops, run_dir, now, files.get(LOG_GROWTH)) if ask_growth else _no_growths())
        if log is not None:
            if restarted:
                self.parser.reset()
                self.log_series.reset()
                self._step_ends.reset()
            before_output, before_records = self.parser.progress.output, self.parser.progress.records
            if log_data:
                if self.samples == 0:   # a first look: the pace its log lines' own times show
                    self._pace.took(line_intervals(log_data))
                if growths is not None and self._log.offset is not None:
                    self._step_ends.feed(log_data, self._log.offset - len(log_data))
                self.parser.feed(log_data)
                self.divergence.feed("loss", TRAIN_LOG, self.parser.take_losses())
                self.log_series.feed(log_data)
                self.metric_files.add_points("log", "log", "log", self.log_series.take())
            if growths:
                self._pace.grew(self._step_ends.times(growths))
            p = self.parser.progress
            if p.output > before_output:
                self._log_grew_at = log.mtime
                self._output_polls += 1
            if p.records > before_records:
                self._step_at, self._step_source = log.mtime, "log"
        if ev_data:
            if self.samples == 0:   # a first look: the pace its window of step events shows
                for t in step_times(ev_data):
                    self._pace.saw(t, FROM_STEP_EVENTS)
            self._events_fed(ev_data)
        if log_data and self._ev_step is None:
            # The step, loss and rate a program's own log shows are series of this run too (a
            # program that writes step events has them there, in full).
            self.metric_files.add_points("log", "log", "log", progress_points(self.parser.progress))
        self.metrics = self.metric_files.view()
        # -- the pace (learned stall limit): the newest progress this look saw ------------------
        self._pace.saw(max((t for t in (self._step_at, self._ev_step_at) if t is not None), default=None))

    def growth_prefetch(self, run_dir: str) -> dict[str, int]:
        """The read of log_growth a look's first request carries ({path: max bytes}) while the log
        is read: the agent sends it only when the file changed since this tracker held it, so the
        step lines are timed without a request of their own."""
        if self._log.offset is None or self._growth_missing_at is not None:
            return {}
        return {posixpath.join(run_dir, LOG_GROWTH): LOG_GROWTH_MAX_BYTES}

    def cursors(self, run_dir: str) -> dict[str, int]:
        """Where the next reads of train.log and events.jsonl start while they grow by less than
        a WINDOW ({path: offset}; a file never read is not in it): past this tracker's last read
        and past what another reader read of the same file since (`reads`). A look can ask for
        those bytes up front (run/evidence/first_look.py): `read_files` then takes held bytes up to there
        and reads from there, so the prefetch answers it; it still decides what it reads."""
        out = {}
        for name, c in ((TRAIN_LOG, self._log), (EVENTS_JSONL, self._events)):
            if c.offset is not None:
                path = posixpath.join(run_dir, name)
                out[path] = c.asked = self.reads.end(path, c.inode, c.offset)
        return out

    def observe(self, now: float, tree: ProcTree | None, probes: list[ProbeReport] = (),
                dumps: Mapping[int, StackDump] | None = None, phase: str | None = None) -> Activity:
        """The other half: this poll's process tree and stacks sampled, and what advanced.
        `phase`: the bundled trainer's, from status.json (its known pauses)."""
        self.samples += 1
        self.sample_cpu(now, tree)
        self.sample_stacks(probes, dumps)
        if known_pause(phase, probes, dumps, self.looks.pauses):   # the pace (learned stall limit) leaves it out
            self._pace.pausing()
        return self.activity(now, tree)

    def sample_stacks(self, probes: list[ProbeReport], dumps: Mapping[int, StackDump] | None = None) -> None:
        """Remember where each thread is (`_signature`). A report is the process's own view at
        `report.time`; a stack dump newer than it stands in for it (the report is stale). A
        non-daemon thread whose signature differs from the last look's moved: that is progress,
        even when nothing is printed (a daemon's loop, a heartbeat, is not; nor is a library's
        polling loop going round in a wait)."""
        seen: set[tuple[int, int]] = set()
        # A launcher (torchrun's agent: the one process without a rank among ranked ones)
        # loops over its workers; that loop is not the run's progress.
        ranked = any(p.rank is not None for p in probes)
        # Reports not read this look (run/evidence/probe_files.py's kept copies) carry their
        # file's newer mtime as their time but the CPU of their read: no new CPU sample.
        kept = ({p.pid for p in probes if p.pid not in probes.fresh}
                if isinstance(probes, ProbeReports) and probes.cached else ())
        for p in probes:
            if p.ended:
                self._sampled.pop(p.pid, None)   # its threads' memory goes below
                continue
            launcher = ranked and p.rank is None
            dump = (dumps or {}).get(p.pid)
            if dump is not None and dump.time > p.time:
                # The report is stale: no Python ran since about its next beat, so whatever
                # the dump shows moved by then, not when the dump was taken.
                threads, at = dump.threads, min(dump.time, p.time + PROBE_INTERVAL_S)
            else:
                threads, at = p.threads, p.time
            if p.pid not in kept:
                self._sample_proc_cpu(p)
            if not launcher:
                self._sample_wait(p)
            last = self._sampled.get(p.pid)
            if last is not None and last[0] is threads:
                seen.update(last[1])    # each thread's frames, signature and time as they are
                continue
            self._sampled[p.pid] = (threads, tuple((p.pid, t.ident) for t in threads))
            for t in threads:
                key = (p.pid, t.ident)
                seen.add(key)
                exact = tuple(t.frames)
                if key not in self._frames or self._frames[key][0] != exact:
                    self._frames[key] = (exact, at)
                    self._since = None
                sig = _signature(t.frames)
                before = self._stacks.get(key)
                if before is not None and before[0] == sig:
                    continue
                self._stacks[key] = (sig, at)
                self._since = None
                if (before is None or t.daemon or launcher or len(sig) < 2
                        or self._stack_moved_at is not None and at < self._stack_moved_at):
                    continue
                own = sig[0] == "own"
                if not own and (classify(t.frames, t.compile_state).cls.waits or self._idle(p.pid)):
                    continue   # a library's loop going round in a wait, or at no CPU
                self._stack_moved_at = at
                self._stack_moved_own = own
                c = classify(t.frames, t.compile_state)
                self._stack_moved_where = (f"{t.name} in {c.where}" if own else
                                           f"{t.name} in {parse_frame(t.frames[0]).place}")
        if probes:
            pids = {p.pid for p in probes}
            for key in [k for k in self._stacks if k not in seen and k[0] in pids]:
                del self._stacks[key]     # a thread that ended
                self._since = None
            for key in [k for k in self._frames if k not in seen and k[0] in pids]:
                del self._frames[key]
                self._since = None
            for pid in [pid for pid in self._sampled if pid not in pids]:
                del self._sampled[pid]

    def _sample_wait(self, p: ProbeReport) -> None:
        """The beats of process `p` not counted yet: did a non-daemon thread of it wait in a
        collective at each? A report holds its recent beats' stacks (ProbeReport.beats), so a
        report read every few seconds still counts every beat; one of an older probe counts
        once, its own threads. Each beat counts once (a look that finds the same report adds
        nothing)."""
        before = self._waits.get(p.pid)
        if before is not None and before[0] >= p.seq:
            return
        flags = before[1] if before is not None else collections.deque(maxlen=WAIT_WINDOW)
        doing = before[2] if before is not None else ""
        beats = p.beat_samples() if p.beats else [(p.seq, [t for t in p.threads if not t.daemon])]
        for seq, stacks in beats:
            if before is not None and seq <= before[0]:
                continue
            waiting = False
            for st in stacks:
                c = classify(st.frames, st.compile_state)
                if c.cls is ThreadClass.COLLECTIVE:
                    waiting, doing = True, c.doing or doing
                    break
            flags.append(waiting)
        self._waits[p.pid] = (p.seq, flags, doing, WaitShare(len(flags), sum(flags), doing))

    def _idle(self, pid: int) -> bool:
        """The process used less than BUSY_CORES between its last two reports."""
        rate = self._proc_cpu.get(pid, (0.0, 0.0, None))[2]
        return rate is not None and rate < BUSY_CORES

    def _sample_proc_cpu(self, p: ProbeReport) -> None:
        before = self._proc_cpu.get(p.pid)
        if before is not None and p.time == before[0]:
            return
        rate = None
        if before is not None and p.time - before[0] > 0.2:
            rate = max(0.0, p.cpu_s - before[1]) / (p.time - before[0])
        self._proc_cpu[p.pid] = (p.time, p.cpu_s, rate if rate is not None else (before[2] if before else None))

    async def _read_growths(self, ops: RemoteOps, run_dir: str, now: float,
                            st: FileStat | None) -> list[tuple[float, int]] | None:
        """When train.log grew (the wrapper's LOG_GROWTH: a few KiB); None when there is none
        (an older wrapper's run, a run dir it could not write). `st`: the look's stat of it,
        which spares the read of a file that did not change (or is not there)."""
        if st is not None and (not st.exists or st.is_dir):
            self._growth_missing_at = now
            return None
        key = (st.inode, st.size, st.mtime) if st is not None else None
        if key is not None and key == self._growth_key:
            return self._growths
        path = posixpath.join(run_dir, LOG_GROWTH)
        try:
            chunk = await ops.read(path, 0, LOG_GROWTH_MAX_BYTES)
        except TRANSPORT_FAILURES:
            raise
        except TargetError:
            chunk = None
        if chunk is None or not chunk.exists:
            self._growth_missing_at = now
            return None
        self._growth_missing_at = None
        # A line that is not a growth is skipped (its note unused): it costs the intervals around it.
        self._growths = parse_log_growth(chunk.data.decode("utf-8", "replace"))[0]
        self._growth_key = key
        if st is not None:
            self.looks.held(path, st)
        return self._growths

    async def _read(self, ops: RemoteOps, path: str, st: FileStat | None,
                    cursor: _FileCursor) -> tuple[bytes, bool]:
        if st is None:
            return b"", False
        try:
            return await cursor.new_bytes(ops, path, st, self.reads)
        except TRANSPORT_FAILURES:
            raise
        except TargetError:
            return b"", False      # unreadable now: the log check says why

    def _events_fed(self, data: bytes) -> None:
        cut = data.rfind(b"\n") + 1
        if cut < len(data) and self._events.offset is not None:
            # A half-written last line is read again, whole, at the next poll.
            self._events.offset -= len(data) - cut
        # Its step records' values: the newest of each series (--check --json "metrics") and
        # the divergence watch; the Metrics pane charts the file itself.
        points, _ = points_from_events(data[:cut].decode("utf-8", "replace").splitlines(), STEP_KINDS)
        self.metric_files.saw("events", "events", EVENTS_JSONL, points)
        # Only the newest valid step and the newest saved checkpoint count (and every save's
        # seconds, summed: goodput's checkpoint time), so the lines are read from the end (a busy
        # trainer writes a hundred steps between two polls): each is validated until a step is
        # found; after that only a line that can name a checkpoint (its word, or a JSON escape
        # that could spell it) is parsed.
        step_found = checkpoint_found = False
        for line in reversed(data[:cut].decode("utf-8", "replace").splitlines()):
            if step_found and "checkpoint" not in line and "\\" not in line:
                continue
            line = line.strip()
            if not line:
                continue
            try:
                e = parse_event(line)
            except SchemaError:
                continue
            kind = e.get("kind")
            if kind == EventKind.STEP.value and not step_found:
                step_found = True
                self._ev_step, self._ev_step_at, self._ev_loss = e["step"], e["time"], e.get("loss")
            elif kind == EventKind.CHECKPOINT.value and e.get("action") in ("saved", ""):
                self._checkpoint_s += max(0.0, e.get("seconds") or 0.0)
                if not checkpoint_found:
                    checkpoint_found = True
                    self._checkpoint, self._checkpoint_step = e.get("path") or "", e.get("step")

    async def _ask_disk(self, ops: RemoteOps, run_dir: str, now: float) -> None:
        if self._disk_at is not None and now - self._disk_at < DISK_EVERY_S:
            return
        self._disk_at = now
        try:
            self._disk = await ops.disk_free(run_dir)
        except TRANSPORT_FAILURES:
            raise
        except TargetError:
            self._disk = None

    def activity(self, now: float, tree: ProcTree | None) -> Activity:
        p = self.parser.progress
        if self._since is None:   # the stacks moved since the last look's: made afresh
            self._since = (MappingProxyType({k: v[1] for k, v in self._stacks.items()}),
                           MappingProxyType({k: v[1] for k, v in self._frames.items()}))
        since, still = self._since
        rate = self._cpu_rate()
        step, step_at, source = p.step, self._step_at, self._step_source
        if self._ev_step_at is not None and (step_at is None or self._ev_step_at >= step_at):
            step, step_at, source = self._ev_step, self._ev_step_at, "events"
        mp = self.metrics.progress
        if mp is not None and mp.total and p.total != mp.total:
            # The HF Trainer's exact count of its total (a log's N/M of another count, such as
            # a "Writing model shards 1/1" bar, is not the run's).
            self._clock.saw(mp.step, mp.at)
        else:
            self._clock.saw(step, step_at)
        return Activity(
            samples=self.samples, log_grew_at=self._log_grew_at, program_output=p.output > 0,
            output_polls=self._output_polls,
            step=step, step_at=step_at, step_source=source, total=p.total,
            loss=self._ev_loss if source == "events" and self._ev_loss is not None else p.loss,
            rate=p.rate, rate_unit=p.rate_unit, epoch=p.epoch,
            step_epoch=p.step_epoch if source == "log" else None,
            cpu_s=tree.cpu_s if tree is not None and tree.root.alive else None,
            cpu_cores=rate[0] if rate else None, cpu_window_s=rate[1] if rate else None,
            cpu_busy_since=self._busy_since,
            procs=tree.procs if tree is not None else 0, threads=tree.threads if tree is not None else 0,
            states=states_words(tree) if tree is not None else "",
            checkpoint=self._checkpoint or p.checkpoint, checkpoint_step=self._checkpoint_step,
            checkpoint_s=self._checkpoint_s,
            disk=self._disk, disk_error=p.disk_error,
            stack_moved_at=self._stack_moved_at, stack_moved_where=self._stack_moved_where,
            stack_moved_own=self._stack_moved_own,
            stack_since=since, frames_since=still,
            waits=MappingProxyType({pid: w[3] for pid, w in self._waits.items()}),
            metrics_at=self.metric_files.advanced_at, metrics_file=self.metric_files.advanced_file,
            loss_finding=self.divergence.finding(),
            metrics_changed_at=self.metric_files.changed_at, metrics_changed_file=self.metric_files.changed_file,
            steps_per_s=self._clock.steps_per_s(),
            intervals=self._pace.intervals, pace_source=self._pace.source)
