"""MetricFiles: a run's metric files found, read incrementally, and reduced to metric points.

Discovery: the run dir (the program's working directory) and the profile's `metrics` paths
(relative to the run dir), level by level (the directories of a level newest written first),
at most MAX_DEPTH directories down (mlruns/ three more), hidden directories and the run dir's
own probe/ and history/ skipped, at most MAX_ENTRIES entries per root and the agent's
METRIC_FIND_S per search: where it stops, a note says how far it went and which directories it
did not look in.
Files by name: events.out.tfevents.* (a directory of them is one TensorBoard run), metrics.csv
(Lightning's CSVLogger), trainer_state.json (the newest one: the HF Trainer writes one per
checkpoint), mlflow.db, and mlruns/<exp>/<run>/metrics/<key> (the newest run). trackio keeps
its projects outside the run dir: the *.db directly in trackio's directory (the agent's
TRACKIO_DIR, else $HF_HOME/trackio) and in a profile's `metrics` directory named trackio; the
newest project written since the launch is read (a .db file the profile names, whatever its
age). Newest writer first; at most MAX_TB_DIRS TensorBoard runs and MAX_CSV CSV files are read.

Reading: ONE `metric_read` request per poll (remote/agent_server.py) carries every question:
the new bytes of each file from its cursor (a replaced or truncated file is read again from
its start), the rows of mlflow.db and of the trackio project past the last id, and, every DISCOVER_EVERY_S, the
search itself. A poll whose search finds a file not read before asks for its bytes at once in
a second request (so a one-shot check reads what it found); every other poll is one request.
Bounded: TB_WINDOW bytes per event file per poll (a 2 GB file is caught up over polls), the
agent's budget per answer, MAX_ROWS rows, hf_state.MAX_BYTES for trainer_state.json. What
cannot be read is a note of its source, never an exception: a record cut short waits for its
rest, a broken record stops that file with a note, a JSON file rewritten while read is read
again at the next poll, a locked SQLite file says so and is asked again.

Progress is a new step, not a fresh file: a source advances when a point of a training series
(not a system monitor's: gpu/, system/, ...) has a step higher than any it gave before; its time
is the file's mtime, or the writer's own time of that step's first record where the format has
one (TensorBoard's wall_time), whichever is older, so a one-shot look at a file a monitoring
thread keeps fresh (touched, garbage appended, the same step logged again) sees when the last
step was made. A file that changed without a new step is `changed_at` / `changed_file`.

Targets without the agent (ShellOps) get the same answers from its single ops (fallback.py),
SQLite aside.
"""

from __future__ import annotations

import base64
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ....remote.base import TRANSPORT_FAILURES, TargetError
from ....remote.ops import look_ops
from ....contract.rundir import TRAIN_LOG
from ..divergence import DivergenceWatch
from ..metric_history import MetricHistory
from ..metric_point import BEYOND_WORDS, MetricPoint, is_step
from . import csv_logger, hf_state, mlflow, tensorboard, trackio
from .fallback import metric_read_over
from .tfrecord import RESYNC_SCAN, resync, split_records

DISCOVER_EVERY_S = 10.0
MAX_DEPTH = 4
MAX_ENTRIES = 200_000     # a directory of 100,000 files is read whole (~0.1 s)
# Event bytes read per file per poll (decoding costs ~5 us a scalar: 512 KiB is ~50 ms).
TB_WINDOW = 512 << 10
# A file found bigger than this is read from its newest TB_FIRST_TAIL bytes on (the charts keep
# 5000 points a series: the start of a 2 GB file would never be drawn), resynced by CRC.
TB_FIRST_TAIL = 4 << 20
CSV_WINDOW = 1 << 20
MLRUNS_WINDOW = 256 << 10
MAX_TB_DIRS = 8
MAX_CSV = 4
MAX_MLRUNS_KEYS = 64
# A SQLite store whose query was interrupted (the agent bounds each in time): asked again after
# this long, so a store that never answers costs one bounded query per this, not every poll.
SQL_RETRY_S = 30.0
PATTERNS = (tensorboard.EVENT_FILE, csv_logger.NAME, hf_state.NAME, mlflow.DB_NAME)
# Names under the run dir that are dflash's own (the run probe's files, earlier runs' records).
SKIP_TOP = ("probe", "history")
_LOSS_NAMES = frozenset({"loss", "train_loss", "lm_loss", "train_loss_step", "loss_train"})
# First words of a series a system monitor logs (GPU use, memory, power): no training progress.
_SYSTEM_WORDS = frozenset({"system", "sys", "gpu", "gpus", "hw", "hardware", "monitor", "monitoring", "cpu",
                           "mem", "memory", "nvml", "power", "temp", "temperature"})
_FIRST_WORD = re.compile(r"[/.:_\-]")
_TAGS = {"tensorboard": "tb", "csv": "csv", "trainer_state": "hf", "mlflow": "mlflow", "mlruns": "mlflow",
         "trackio": "trackio"}
_KIND_WORDS = {"tensorboard": "TensorBoard", "csv": "metrics.csv", "trainer_state": "trainer_state.json",
               "mlflow": "MLflow", "mlruns": "MLflow mlruns", "trackio": "trackio"}


@dataclass(frozen=True)
class MetricSource:
    """One source as the Metrics pane lists it and --check --json names it."""

    kind: str                  # "tensorboard" | "csv" | "trainer_state" | "mlflow" | "mlruns" | "trackio"
    path: str                  # the directory (TensorBoard, an mlruns run) or the file
    label: str                 # "TensorBoard runs/exp1, 3 tags"
    series: int
    written_at: float | None   # the newest write read from it (target clock)
    note: str = ""
    where: str = ""            # "TensorBoard runs/exp1": the label without its count


@dataclass(frozen=True)
class MetricProgress:
    step: int
    total: int | None
    source: str                # e.g. "trainer_state.json out/checkpoint-40"
    at: float | None           # when that step was written (target clock)


@dataclass(frozen=True)
class MetricsView:
    """One poll's metrics of a run: its sources, each series' newest point, the points new
    this poll, every series' history since the run's first point (what the Metrics pane
    draws, whenever it is opened), the series of files written before this run's launch (the
    previous run's, drawn dotted), and the progress they tell."""

    sources: tuple[MetricSource, ...] = ()
    latest: Mapping[str, tuple[int, float, str]] = field(default_factory=dict)
    points: tuple[MetricPoint, ...] = ()
    notes: tuple[str, ...] = ()
    progress: MetricProgress | None = None
    written_at: float | None = None          # when a metric file (this run's) last gave a new step
    written_file: str = ""                   # which source that was ("TensorBoard runs/exp1")
    # name -> (steps, values): run/evidence/metric_history.py, bounded and decimated
    history: Mapping[str, tuple[tuple[int, ...], tuple[float, ...]]] = field(default_factory=dict)
    history_version: int = 0                 # moves when any series of `history` changed
    previous: Mapping[str, tuple[tuple[int, ...], tuple[float, ...]]] = field(default_factory=dict)
    previous_sources: tuple[str, ...] = ()   # "TensorBoard runs/exp1": files older than the launch
    changed_at: float | None = None          # when a metric file (this run's) last changed at all
    changed_file: str = ""

    def newest_loss(self) -> float | None:
        """The training loss among the series, for a line that has room for one number:
        "loss" itself, else the newest of the series named like one ("train/loss", "tb:loss",
        "train_loss", "lm_loss"), evaluation losses aside."""
        if "loss" in self.latest:
            return self.latest["loss"][1]
        named = [(step, value) for name, (step, value, _) in self.latest.items()
                 if name.rsplit(":", 1)[-1].replace("/", "_") in _LOSS_NAMES]
        return max(named)[1] if named else None


def is_training_series(name: str) -> bool:
    """Whether a series tells training progress: any but a system monitor's ("gpu/util",
    "system/gpu.0.memory", "gpu0_mem")."""
    return _FIRST_WORD.split(name.lower(), 1)[0].rstrip("0123456789") not in _SYSTEM_WORDS


def _b64(text: str) -> bytes:
    return base64.b64decode(text) if text else b""


class _Cursor:
    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.inode = 0
        self.mtime: float | None = None
        self.resync = False         # offset is at an arbitrary byte: find a record's start first

    def ask(self, max_bytes: int, **extra) -> dict:
        return {"read": self.path, "offset": self.offset, "max_bytes": max_bytes, "inode": self.inode, **extra}


class _Source:
    kind = ""

    def __init__(self, path: str, rel: str) -> None:
        self.path, self.rel = path, rel
        self.names: set[str] = set()
        self.written_at: float | None = None
        self.note = ""
        self.top = -1                        # the highest step of a training series it gave
        self.changed_at: float | None = None  # the newest mtime of its files (a write, a touch)
        self.beyond = 0                      # steps and totals beyond 2^53 ignored (see _got)
        self.now = 0.0                       # the poll's target clock, set before absorb
        # Written before this run's launch: the previous run's (drawn dotted, never this run's series).
        self.previous = False
        self.step: int | None = None         # the newest step of its points

    @property
    def key(self) -> str:
        """Its identity in the series space (stable while it is read)."""
        return self.path

    def read_paths(self) -> set[str]:
        """The files it reads (a directory's source: those found in it so far)."""
        return {self.path}

    @property
    def tag(self) -> str:
        return _TAGS[self.kind]

    def where(self) -> str:
        """"TensorBoard runs/exp1", "metrics.csv lightning_logs/version_0": the kind says
        the file's name, so a file source is named by its directory."""
        rel = posixpath.dirname(self.rel) or "." if self.kind in ("csv", "trainer_state") else self.rel
        return f"{_KIND_WORDS[self.kind]} {rel}"

    def label(self) -> str:
        n = len(self.names)
        one, many = {"tensorboard": ("tag", "tags"), "csv": ("column", "columns"),
                     "trainer_state": ("series", "series")}.get(self.kind, ("metric", "metrics"))
        return f"{self.where()}, {n} {one if n == 1 else many}"

    def notes(self) -> str:
        """Its note, and the steps it gave that no run makes."""
        beyond = f"{self.beyond} step(s) or total(s) {BEYOND_WORDS} ignored" if self.beyond else ""
        return "; ".join(filter(None, (self.note, beyond)))

    def view(self) -> MetricSource:
        return MetricSource(self.kind, self.path, self.label(), len(self.names), self.written_at, self.notes(),
                            self.where())

    def asks(self) -> list[dict]:
        raise NotImplementedError

    def absorb(self, answers: list[dict]) -> tuple[list[MetricPoint], float | None]:
        """(points, when a new step was made, else None) of the answers to `asks()`."""
        raise NotImplementedError

    def _file_answer(self, item: dict, notes: list[str]) -> dict | None:
        """A read's answer for one file where the file is there (its mtime seen); else None, and
        a read that failed says why in `notes`."""
        res, err = _answer(item)
        if res is None:
            notes.append(err)
            return None
        if not res["stat"].get("exists"):
            return None
        self._saw(res["stat"].get("mtime"))
        return res

    def _saw(self, mtime) -> None:
        if isinstance(mtime, (int, float)) and (self.changed_at is None or mtime > self.changed_at):
            self.changed_at = float(mtime)

    def _advanced(self, points: list[MetricPoint], mtime: float | None, when: float | None = None) -> float | None:
        """When a new step was made, if `points` hold one (a training series' step past any
        before): `mtime`, or the writer's own `when` of it where older; else None."""
        top = max((p.step for p in points if is_training_series(p.name)), default=-1)
        if top <= self.top or mtime is None:
            return None
        self.top = top
        if when is not None and math.isfinite(when) and 0 < when < mtime:
            mtime = when
        return self._wrote(mtime)

    def _wrote(self, mtime: float | None) -> float | None:
        if mtime is not None and (self.written_at is None or mtime > self.written_at):
            self.written_at = mtime
        return mtime

    def _got(self, points: list[MetricPoint]) -> list[MetricPoint]:
        """The points a run could have made (a step beyond 2^53 is ignored and counted)."""
        kept = [p for p in points if is_step(p.step)]
        self.beyond += len(points) - len(kept)
        self.names.update(p.name for p in kept)
        if kept:
            self.step = max(self.step if self.step is not None else kept[0].step, max(p.step for p in kept))
        return kept


def _answer(item: dict) -> tuple[dict | None, str]:
    if not item.get("ok"):
        return None, str(item.get("error", "failed"))
    return item.get("result") or {}, ""


class _TensorBoard(_Source):
    kind = "tensorboard"

    def __init__(self, path: str, rel: str) -> None:
        super().__init__(path, rel)
        self.files: dict[str, _Cursor] = {}
        self.broken: dict[str, str] = {}
        self._bad = 0
        self.tail_from = 0        # a file this big was read from its newest part only

    def read_paths(self) -> set[str]:
        return set(self.files) or {self.path}

    def add_file(self, path: str, size: int = 0) -> None:
        if path not in self.files:
            c = self.files[path] = _Cursor(path)
            if size > TB_FIRST_TAIL:
                c.offset, c.resync = size - TB_FIRST_TAIL, True
                self.tail_from = max(self.tail_from, c.offset)

    def asks(self) -> list[dict]:
        if not tensorboard.available():
            self.note = tensorboard.MISSING
            return []
        return [c.ask(TB_WINDOW) for p, c in sorted(self.files.items()) if p not in self.broken]

    def absorb(self, answers):
        points, newest, found_all = [], None, []
        cursors = [c for p, c in sorted(self.files.items()) if p not in self.broken]
        notes = []
        for c, item in zip(cursors, answers):
            res = self._file_answer(item, notes)
            if res is None:
                continue
            st = res["stat"]
            data = _b64(res.get("data", ""))
            start = int(res.get("offset", c.offset))
            c.inode = st["inode"]
            if res.get("restarted"):
                c.resync = False        # replaced or truncated: read from its start
            if not data:
                c.offset = start
                continue
            if c.resync:
                at = resync(data)
                if at is None:          # no record start in sight: look further next poll
                    c.offset = start + min(len(data), RESYNC_SCAN)
                    continue
                data, start, c.resync = data[at:], start + at, False
            framed = split_records(data, start)
            c.offset = start + framed.consumed + framed.skip
            self._bad += framed.bad_data
            if framed.broken:
                self.broken[c.path] = framed.broken
                notes.append(f"{posixpath.basename(c.path)}: {framed.broken}; read no further")
            found, bad = tensorboard.scalars(framed.records)
            self._bad += bad
            if framed.records:
                newest = max(newest or st["mtime"], st["mtime"])
            found_all += found
            points += [MetricPoint(s.tag, s.step, s.value) for s in found]
        if self._bad:
            notes.append(f"{self._bad} damaged record(s) skipped")
        if self.tail_from:
            notes.append(f"read from its newest {TB_FIRST_TAIL >> 20} MiB")
        self.note = "; ".join(notes)
        points = self._got(points)
        top = max((p.step for p in points if is_training_series(p.name)), default=-1)
        # When the newest step was first written, by the writer's clock (its records' wall_time).
        when = min((x.wall_time for x in found_all if x.step == top and is_training_series(x.tag)), default=None)
        return points, self._advanced(points, newest, when)


class _Csv(_Source):
    kind = "csv"

    def __init__(self, path: str, rel: str) -> None:
        super().__init__(path, rel)
        self.cursor = _Cursor(path)
        self.csv = csv_logger.CsvMetrics()

    def asks(self):
        head = len(self.csv.header_bytes) if self.csv.header is not None else 0
        # A broken file: its stat only (no bytes) until it is replaced or rewritten.
        return [self.cursor.ask(0 if self.csv.broken else CSV_WINDOW, head=head)]

    def absorb(self, answers):
        failed: list[str] = []
        res = self._file_answer(answers[0], failed)
        self.note = "; ".join(failed)
        if res is None:
            return [], None
        if self.csv.broken and not res.get("restarted"):
            self.note = self._broken_words()
            if res["stat"].get("size", 0) >= self.cursor.offset:
                return [], None
        c, st = self.cursor, res["stat"]
        data, start = _b64(res.get("data", "")), int(res.get("offset", 0))
        head = _b64(res.get("head", ""))
        if res.get("restarted") or (head and head != self.csv.header_bytes):
            # Replaced, truncated, or rewritten under a new header: read it again from its start.
            self.csv.restart()
            if start > 0:
                c.offset, c.inode = 0, st["inode"]
                return [], None
        c.inode = st["inode"]
        if not data:
            return [], None
        c.offset = start + len(data)
        points = self.csv.feed(data)
        if self.csv.broken:
            self.note = self._broken_words()
        points = self._got(points)
        return points, self._advanced(points, st["mtime"])

    def _broken_words(self) -> str:
        return f"{self.csv.broken}; read no further"


class _TrainerState(_Source):
    kind = "trainer_state"

    def __init__(self, path: str, rel: str) -> None:
        super().__init__(path, rel)
        self.known: list | None = None
        self.last: dict[str, int] = {}
        self.state: hf_state.TrainerState | None = None
        self.mtime: float | None = None
        self.found_mtime = 0.0
        self.unread = ""             # why the file as it is now cannot be read (kept until it changes)

    @property
    def key(self) -> str:
        return "trainer_state"       # one source, whichever checkpoint holds the newest file

    def moved_to(self, path: str, rel: str) -> None:
        """A newer checkpoint's trainer_state.json: the same history, longer."""
        self.path, self.rel, self.known, self.unread = path, rel, None, ""

    def asks(self):
        return [{"read": self.path, "offset": 0, "max_bytes": hf_state.MAX_BYTES + 1, "known": self.known}]

    def absorb(self, answers):
        failed: list[str] = []
        res = self._file_answer(answers[0], failed)
        self.note = "; ".join(failed)
        if res is None:
            return [], None
        st = res["stat"]
        data = _b64(res.get("data", ""))
        if not data:
            self.note = self.note or self.unread      # unchanged: still the file it was
            return [], None
        self.unread = ""
        if len(data) > hf_state.MAX_BYTES:
            self.unread = f"{self.rel} is over {hf_state.MAX_BYTES >> 20} MB: not read"
        else:
            try:
                state = hf_state.parse(data)
            except hf_state.Unreadable as exc:
                self.unread = f"{self.rel}: {exc}: not read (read again when it changes)"
            except ValueError:
                self.note = f"{self.rel} did not parse (being rewritten?): read again at the next poll"
                return [], None
        if self.unread:
            self.note = self.unread
            self.known = [st["inode"], st["size"], st["mtime"]]
            return [], None
        self.known = [st["inode"], st["size"], st["mtime"]]
        self.state, self.mtime = state, st["mtime"]
        self.beyond = state.beyond
        new = [p for p in state.points if p.step > self.last.get(p.name, -1)]
        for p in new:
            self.last[p.name] = max(p.step, self.last.get(p.name, -1))
        steps = [MetricPoint("global_step", state.global_step, 0.0)] if state.global_step is not None else []
        new = self._got(new)
        return new, self._advanced(new + steps, st["mtime"])


class _SqliteRows(_Source):
    """A SQLite store read by rowid, the rows added since the last poll: `rows` is the format's
    module (its ROWS_QUERY, MAX_ROWS and points_of_rows)."""

    rows = mlflow

    def __init__(self, path: str, rel: str) -> None:
        super().__init__(path, rel)
        self.rowid = 0
        self.run = ""
        self.read_once = False
        self.retry_at = 0.0                  # not asked before this (target clock): see SQL_RETRY_S

    def asks(self):
        if self.now < self.retry_at:
            return []
        return [{"sql": self.path, "query": self.rows.ROWS_QUERY, "params": [self.rowid, self.rows.MAX_ROWS],
                 "max_rows": self.rows.MAX_ROWS}]

    def absorb(self, answers):
        res, err = _answer(answers[0])
        if res is None:
            err = err.replace(f"{self.path}: ", "")      # the source names its file already
            if "no answer within" in err or "not read this poll" in err:
                self.retry_at = self.now + SQL_RETRY_S
                self.note = f"{err}; asked again in {SQL_RETRY_S:.0f} s"
            else:
                self.note = err + ("; asked again at the next poll" if "locked" in err else "")
            return [], None
        self.note = ""
        points, last, run = self.rows.points_of_rows(res.get("rows") or [])
        if last is not None:
            self.rowid = last
        if run:
            self.run = run
        st = res.get("stat") or {}
        self._saw(st.get("mtime"))
        points = self._got(points)
        # Rows land in a WAL file before the database file: the file's mtime lags, so after
        # the first read new rows count as written now (the answer's stat time).
        at = self._advanced(points, st.get("mtime") if not self.read_once else max(st.get("mtime", 0.0), self.now))
        if at is not None and self.read_once:
            self._saw(at)
        self.read_once = True
        return points, at


class _MlflowDb(_SqliteRows):
    kind = "mlflow"
    rows = mlflow


class _Trackio(_SqliteRows):
    """The newest run of one trackio project (the newest project written since the launch)."""

    kind = "trackio"
    rows = trackio

    def __init__(self, path: str, rel: str) -> None:
        super().__init__(path, rel)
        self.found_mtime = 0.0
        self.named = False           # a file the profile names: kept whatever else is written

    @property
    def key(self) -> str:
        return "trackio"             # one source: a newer project replaces it

    def moved_to(self, path: str, rel: str) -> None:
        self.path, self.rel, self.rowid, self.run, self.read_once, self.retry_at = path, rel, 0, "", False, 0.0

    def where(self) -> str:
        run = f" run {self.run}" if self.run else ""
        return f"trackio project {trackio.project_of(self.path)}{run}"


class _Mlruns(_Source):
    kind = "mlruns"

    def __init__(self, path: str, rel: str) -> None:
        super().__init__(path, rel)
        self.files: dict[str, tuple[_Cursor, mlflow.MlrunsFile]] = {}

    def read_paths(self) -> set[str]:
        return set(self.files) or {self.path}

    def add_file(self, path: str, key: str) -> None:
        if path not in self.files and len(self.files) < MAX_MLRUNS_KEYS:
            self.files[path] = (_Cursor(path), mlflow.MlrunsFile(key))

    def asks(self):
        return [c.ask(MLRUNS_WINDOW) for _, (c, _) in sorted(self.files.items())]

    def absorb(self, answers):
        points, newest, notes = [], None, []
        for (c, f), item in zip([v for _, v in sorted(self.files.items())], answers):
            res = self._file_answer(item, notes)
            if res is None:
                continue
            st = res["stat"]
            if res.get("restarted"):
                f.restart()
            data, start = _b64(res.get("data", "")), int(res.get("offset", 0))
            c.inode, c.offset = st["inode"], start + len(data)
            got = f.feed(data) if data else []
            if got:
                newest = max(newest or 0.0, st["mtime"])
            points += got
        self.note = "; ".join(notes)
        points = self._got(points)
        return points, self._advanced(points, newest)


# trainer_state.json holds the very records the HF Trainer prints as its log's dict lines: its
# series and the log's of the same name are one quantity, one series, the file's points first.
_SAME_AS_LOG = frozenset({"trainer_state"})
_TAKE_ORDER = {"trainer_state": 0, "log": 1}
PREVIOUS = "previous:"   # the key prefix of a source written before this run's launch


class SeriesNames:
    """One name space for every source: a name keeps its plain form for the first source that
    gives it; a second source's series of that name is named with its source ("tb:loss").
    trainer_state.json and the log are one source here (_SAME_AS_LOG)."""

    def __init__(self) -> None:
        self._owner: dict[str, tuple[str, str]] = {}     # display name -> (source key, base)
        self._names: dict[tuple[str, str], str] = {}     # (source key, base) -> display name

    def name(self, key: str, tag: str, base: str, rel: str = "") -> str:
        key = "log" if key in _SAME_AS_LOG else key
        got = self._names.get((key, base))
        if got is not None:
            return got
        for candidate in (base, f"{tag}:{base}", f"{tag}:{rel}/{base}"):
            if candidate not in self._owner:
                break
        self._owner[candidate] = (key, base)
        self._names[(key, base)] = candidate
        return candidate


class MetricFiles:
    """The metric files of one run dir across polls (one watch's; a new run starts it anew)."""

    def __init__(self, paths: tuple[str, ...] = (), watch: DivergenceWatch | None = None) -> None:
        self.paths = tuple(paths)
        # Every point taken goes to the divergence watch first, NaN and Inf included; only the
        # finite ones are charted and kept as the newest values.
        self.watch = watch
        self.sources: dict[str, _Source] = {}
        self.names = SeriesNames()
        self.notes: list[str] = []
        self.requests = 0                   # metric_read requests sent (tests, benchmarks)
        self._found_at: float | None = None
        self._pending: list[tuple[str, str, str, str, list[MetricPoint]]] = []
        self._latest: dict[str, tuple[int, float, str]] = {}
        self.history = MetricHistory()           # this run's series, from their first point
        self.previous = MetricHistory()          # the series of files older than the launch
        self._file_owned: set[str] = set()       # names trainer_state.json gives (the log's are dropped)
        self.advanced_at: float | None = None    # when a new step was last made (this run's files)
        self.advanced_file = ""
        self.changed_at: float | None = None     # when a file of this run's last changed (new step or not)
        self.changed_file = ""

    # -- what the poll found ---------------------------------------------------------------
    def take(self) -> list[MetricPoint]:
        """The points read since the last take, named in the one series space and added to
        the history: trainer_state.json's first, then the log's (their names stay plain; a
        series the file gives replaces the log's of that name), then each file source's in a
        fixed order."""
        raw, self._pending = self._pending, []
        raw.sort(key=lambda r: (_TAKE_ORDER.get(r[0], len(_TAKE_ORDER)), r[0]))
        out = []
        watch = self.watch
        for key, tag, label, rel, points in raw:
            watched: dict[str, list[tuple[int, float]]] = {}
            for p in points:
                name = self.names.name(key, tag, p.name, rel)
                if key in _SAME_AS_LOG and name not in self._file_owned:
                    self._file_owned.add(name)
                    self.history.drop(name)     # the log's points of it: the file has them all
                elif key == "log" and name in self._file_owned:
                    continue
                if watch is not None and watch.watches(name):
                    watched.setdefault(name, []).append((p.step, p.value))
                if p.value - p.value == 0.0:        # finite
                    out.append(MetricPoint(name, p.step, p.value))
                    self._latest[name] = (p.step, p.value, label)
            for name, values in watched.items():
                watch.feed(name, TRAIN_LOG if key == "log" else label, values)
        self.history.add(out)
        return out

    def latest(self) -> dict[str, tuple[int, float, str]]:
        """display name -> (step, value, source label) of each series' newest point taken."""
        return dict(self._latest)

    def view(self) -> "MetricsView":
        """What this poll read, for the report: take() first."""
        points = self.take()
        previous = tuple(sorted(s.where() for s in self.sources.values() if s.previous and s.names))
        return MetricsView(tuple(self.views()), dict(self._latest), tuple(points), tuple(self.notes),
                           self.progress(), self.advanced_at, self.advanced_file,
                           self.history.snapshot(), self.history.version, self.previous.snapshot(), previous,
                           self.changed_at, self.changed_file)

    def views(self) -> list[MetricSource]:
        return sorted((s.view() for s in self.sources.values() if not s.previous),
                      key=lambda v: -(v.written_at or 0.0))

    def progress(self) -> MetricProgress | None:
        """The HF Trainer's global_step of max_steps; else the newest step of the metric file
        this run wrote last (a program that logs only to TensorBoard), its total unknown."""
        current = [s for s in self.sources.values() if not s.previous]
        hf = [s for s in current if isinstance(s, _TrainerState) and s.state is not None]
        if hf and hf[0].state.global_step is not None:
            s = hf[0]
            return MetricProgress(s.state.global_step, s.state.max_steps, s.where(), s.mtime)
        stepped = [s for s in current if s.step is not None and s.written_at is not None]
        if not stepped:
            return None
        s = max(stepped, key=lambda s: s.written_at)
        return MetricProgress(s.step, None, s.where(), s.written_at)

    def saw(self, key: str, tag: str, label: str, points: list[MetricPoint]) -> None:
        """Points charted elsewhere (events.jsonl: the Metrics pane reads the file itself): the
        newest value of each series, and the divergence watch, only."""
        if not points:
            return
        watched: dict[str, list[tuple[int, float]]] = {}
        for p in points:
            name = self.names.name(key, tag, p.name)
            if self.watch is not None and self.watch.watches(name):
                watched.setdefault(name, []).append((p.step, p.value))
            if p.value - p.value == 0.0:
                self._latest[name] = (p.step, p.value, label)
        for name, values in watched.items():
            self.watch.feed(name, label, values)

    def add_points(self, key: str, tag: str, label: str, points: list[MetricPoint], rel: str = "") -> None:
        """Points of a source read elsewhere (the log's metric lines) into the same space."""
        if points:
            self._pending.append((key, tag, label, rel, points))

    # -- one poll ---------------------------------------------------------------------------
    async def poll(self, ops, run_dir: str, now: float, floor: float | None = None) -> None:
        """Ask for what is new (see the module's docstring). `floor`: writes older than it
        (the launch) are metrics, but not progress of this run."""
        # "~" is the target user's home: the agent expands it there.
        roots = [run_dir] + [p if p.startswith("~") else posixpath.normpath(posixpath.join(run_dir, p))
                             for p in self.paths]
        items: list[dict] = []
        finding = self._found_at is None or now - self._found_at >= DISCOVER_EVERY_S
        if finding:
            self._found_at = now
            items.append({"find": {"roots": roots, "patterns": list(PATTERNS), "max_depth": MAX_DEPTH,
                                   "max_entries": MAX_ENTRIES, "skip_top": list(SKIP_TOP),
                                   "deeper_under": [mlflow.MLRUNS], "trackio_dirs": self._trackio_dirs(roots)}})
        hf = self.sources.get("trainer_state")
        if not finding and hf is not None:
            # The Trainer moves its newest state into a new checkpoint-N/ at every save: the
            # directory above them is listed every poll (one level, bounded), not every 10 s.
            finding = True
            items.append({"find": {"roots": [posixpath.dirname(posixpath.dirname(hf.path))],
                                   "patterns": [hf_state.NAME], "max_depth": 1, "max_entries": 2000}})
        for s in self.sources.values():
            s.now = now
        asked = [(s, s.asks()) for s in self._ordered()]
        for _, a in asked:
            items += a
        if not items:
            return
        answers = await self._ask(ops, items)
        if answers is None:
            return
        if finding:
            res, err = _answer(answers[0])
            answers = answers[1:]
            if len(items[0]["find"]["patterns"]) > 1:     # the full search, not the checkpoints' listing
                self.notes = [err] if err else list((res or {}).get("notes") or [])
            before = {k: len(self._files_of(s)) for k, s in self.sources.items()}
            self._found(((res or {}).get("found") or []), run_dir, floor)
        self._absorb(asked, answers, now, floor)
        if finding:
            # Files found now and never read: their bytes in a second request, this poll.
            new = [(s, s.asks()) for k, s in self.sources.items() if len(self._files_of(s)) != before.get(k, -1)]
            new = [(s, a) for s, a in new if a]
            if new:
                more = await self._ask(ops, [i for _, a in new for i in a])
                if more is not None:
                    self._absorb(new, more, now, floor)

    def _trackio_dirs(self, roots: list[str]) -> list[str]:
        """trackio's directory as the agent finds it (""), and any the profile names."""
        return [""] + [r for r in roots[1:] if posixpath.basename(r.rstrip("/")) == trackio.DIR_NAME]

    @staticmethod
    def _files_of(s: _Source) -> set:
        return s.read_paths()

    def _ordered(self) -> list[_Source]:
        return [self.sources[k] for k in sorted(self.sources)]

    async def _ask(self, ops, items: list[dict]) -> list[dict] | None:
        self.requests += 1
        try:
            agent = look_ops(ops)
            return await (agent.metric_read(items) if agent is not None else metric_read_over(ops, items))
        except TRANSPORT_FAILURES:
            raise
        except TargetError as exc:
            self.notes = [f"metric files: {exc.message}"]
            return None

    def _absorb(self, asked, answers, now: float, floor: float | None) -> None:
        i = 0
        for source, a in asked:
            if not a:
                continue                     # not asked this poll
            part, i = answers[i:i + len(a)], i + len(a)
            if len(part) < len(a):
                break
            source.now = now
            points, at = source.absorb(part)
            if source.previous:
                self.previous.add(points)       # by their own names: drawn under this run's
                continue
            if points:
                self.add_points(source.key, source.tag, source.where(), points, source.rel)
            if at is not None and (floor is None or at >= floor):
                if self.advanced_at is None or at >= self.advanced_at:
                    self.advanced_at, self.advanced_file = at, source.where()
            ch = source.changed_at
            if ch is not None and (floor is None or ch >= floor) and (self.changed_at is None or ch > self.changed_at):
                self.changed_at, self.changed_file = ch, source.where()

    def _found(self, found: list[dict], run_dir: str, floor: float | None = None) -> None:
        def rel(path: str) -> str:
            r = posixpath.relpath(path, run_dir)
            return path if r.startswith("..") else r

        found = sorted(found, key=lambda st: -float(st.get("mtime", 0.0)))
        tb_dirs: list[str] = []
        csvs = 0
        for st in found:
            path = st["path"]
            name = posixpath.basename(path)
            if st.get("under") and "/metrics/" in path:
                run, key = path.split("/metrics/", 1)
                if not any(isinstance(s, _Mlruns) for s in self.sources.values()):
                    self.sources[run] = _Mlruns(run, rel(run))
                src = self.sources.get(run)
                if isinstance(src, _Mlruns):
                    src.add_file(path, key)
            elif name.startswith("events.out.tfevents."):
                # One writer, one file: a file older than the launch is the previous run's,
                # even in the directory this run writes to.
                d = posixpath.dirname(path)
                old = self._older(st, floor)
                key = PREVIOUS + d if old else d
                if key not in self.sources:
                    if len([s for s in self.sources.values() if isinstance(s, _TensorBoard)]) >= MAX_TB_DIRS:
                        continue
                    src = self.sources[key] = _TensorBoard(d, rel(d))
                    src.previous = old
                if d not in tb_dirs:
                    tb_dirs.append(d)
                self.sources[key].add_file(path, int(st.get("size", 0)))
            elif name == csv_logger.NAME:
                old = self._older(st, floor)
                if not old and PREVIOUS + path in self.sources:
                    del self.sources[PREVIOUS + path]    # written again since: this run's, read anew
                key = PREVIOUS + path if old else path
                if key not in self.sources and csvs < MAX_CSV:
                    src = self.sources[key] = _Csv(path, rel(path))
                    src.previous = old
                csvs += 1
            elif name == hf_state.NAME:
                mtime = float(st.get("mtime", 0.0))
                old = self._older(st, floor)
                key = PREVIOUS + "trainer_state" if old else "trainer_state"
                hf = self.sources.get(key)
                if hf is None:
                    hf = self.sources[key] = _TrainerState(path, rel(path))
                    hf.found_mtime, hf.previous = mtime, old
                elif hf.path != path and mtime > hf.found_mtime:
                    hf.moved_to(path, rel(path))
                    hf.found_mtime = mtime
            elif name == mlflow.DB_NAME:
                if path not in self.sources:
                    self.sources[path] = _MlflowDb(path, rel(path))
            elif trackio.is_project_file(name):
                self._found_trackio(st, rel(path), floor)

    @staticmethod
    def _older(st: dict, floor: float | None) -> bool:
        """Written last before this run's launch (launch.json's mtime): the previous run's."""
        return floor is not None and float(st.get("mtime", 0.0)) < floor

    def _found_trackio(self, st: dict, rel: str, floor: float | None) -> None:
        """The trackio project to read: one a profile names as a file, else the newest written
        since the launch (the directory holds every project this user ever logged)."""
        mtime = float(st.get("mtime", 0.0))
        if st.get("trackio") and floor is not None and mtime < floor:
            return
        src = self.sources.get("trackio")
        if src is None:
            src = self.sources["trackio"] = _Trackio(st["path"], rel)
            src.found_mtime, src.named = mtime, not st.get("trackio")
        elif isinstance(src, _Trackio) and src.path != st["path"] and mtime > src.found_mtime + 1.0 \
                and not src.named:
            src.moved_to(st["path"], rel)
            src.found_mtime = mtime
        elif isinstance(src, _Trackio) and src.path == st["path"]:
            src.found_mtime = max(src.found_mtime, mtime)
