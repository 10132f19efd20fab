"""A run's checkpoints as evidence: found, each judged complete or torn, with bounded reads.

Found with one bounded `find_files` (RemoteOps: the agent and ShellOps alike) under the run dir
(CHECKPOINT_DEPTH directories down) and the folders a profile names (`checkpoints = ["ckpt/",
"~/out"]`, relative to the run dir). The formats, each judged by its own rule
(run/evidence/checkpoint_formats.py judges the bytes):

| format        | what it is                                  | complete when                         |
| dflash-train  | checkpoints/step-N/{state.pt, meta.json}    | meta.json (written last), state.pt whole |
| hf            | checkpoint-N/ (Hugging Face Trainer)        | trainer_state.json (written last) parses; every weight file whole |
| dcp           | a folder of *.distcp (torch.distributed.checkpoint) | .metadata (renamed into place last) |
| lightning     | *.ckpt                                      | a whole zip                           |
| torch.save    | *.pt, *.pth named as a checkpoint           | a whole zip                           |
| safetensors   | *.safetensors on its own                    | header offsets end at the file's size |

The search runs every 5 s at most, twice per checkpoint interval where saves come faster; and
between searches only when the folders that hold the checkpoints, or the newest file-checkpoints,
moved (run/evidence/checkpoint_gate.py: a look past that cadence stats them in its first request,
and searches again when one moved, a checkpoint is being written, files wait to be judged, or the
gate's safety interval passed: an older file rewritten in place moves nothing watched). A
checkpoint whose last write is younger than WRITING_S and is not complete is being written:
neither complete nor torn yet. Every file is judged once per (inode,
size, mtime); a look judges at most JUDGE_PER_LOOK new files (the newest first; a search a
recovery bounds, `expire(at_or_before=step)`, those at or before the step first), the rest at the
next looks; a folder whose found files are all as at the last search keeps the checkpoints
judged there (neither grouped nor judged again). Through the agent, a search within the gate's
safety interval asks only what changed since the last answer: the agent lists and stats again
only the folders whose mtime moved, and the unfinished checkpoints' paths (`fresh`: they grow in
place); the safety search lists and stats everything, answering only what changed; the first
search and `expire()`'s ask for everything.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import statistics
import time
from dataclasses import dataclass, field
from functools import cached_property

from ...contract.rundir import CHECKPOINT_META, CHECKPOINTS_DIR, HISTORY_DIR, PROBE_DIR, inert_text
from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import FileStat, RemoteOps, look_ops
from .checkpoint_formats import (SAFETENSORS_HEAD_BYTES, SAFETENSORS_HEADER_MAX, TRAINER_STATE_MAX, ZIP_TAIL_BYTES,
                                 is_zip, judge_safetensors, judge_trainer_state, judge_zip,
                                 safetensors_header_length)
from .checkpoint_gate import FolderGate
from .memory import Bounded
from .next_look import NextLook

CHECKPOINT_DEPTH = 3          # directories below the run dir (and below each named folder)
MAX_ENTRIES = 20_000          # entries a search looks at in all (the agent's bound)
MAX_FOUND = 2_000             # files found in all
JUDGE_PER_LOOK = 32           # files newly judged per look
WRITING_S = 60.0              # an incomplete checkpoint younger than this is being written
STALE_INTERVALS = 3           # no new checkpoint for this many intervals: a warn
PATTERNS = ("*.ckpt", "*.pt", "*.pth", "*.bin", "*.safetensors", ".metadata", "*.distcp",
            "trainer_state.json", CHECKPOINT_META)
SKIP = (HISTORY_DIR, PROBE_DIR, "__pycache__", "node_modules")
_HF_DIR = re.compile(r"^checkpoint-(\d+)$")
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STEP_IN_NAME = re.compile(r"(?:step|iter|global_step|checkpoint|ckpt)[=_-]?(\d+)", re.IGNORECASE)
_CHECKPOINT_WORD = re.compile(r"ckpt|checkpoint|step|epoch", re.IGNORECASE)
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")
MAX_FILES_JUDGED = 64         # weight files judged in one checkpoint folder
HEADER_READ_MAX = 8 << 20     # the longest safetensors header read (one read's cap)
MAX_WATCHED = 64              # folders a look stats between searches (more: the search runs at its cadence)
MAX_TORN_WATCHED = 16         # torn folder-checkpoints among them (the newest)
MAX_FILES_WATCHED = 2         # and the newest complete file-checkpoints
MAX_FRESH = 64                # unfinished checkpoints stat'd again at every search (the newest)
_FOLDER_FORMATS = frozenset({"hf", "dcp", "dflash-train"})


@dataclass(frozen=True)
class Checkpoint:
    path: str
    format: str                   # "hf", "dcp", "lightning", "torch.save", "safetensors", "dflash-train"
    step: int | None
    bytes: int
    mtime: float                  # its newest file's last write (target clock)
    why: str = ""                 # "" complete; else why it is torn
    writing: bool = False         # incomplete and written to within WRITING_S

    @property
    def complete(self) -> bool:
        return not self.why and not self.writing

    def to_dict(self, now: float) -> dict:
        return {"step": self.step, "path": self.path, "format": self.format, "bytes": self.bytes,
                "age_s": round(max(0.0, now - self.mtime), 1)}


@dataclass(frozen=True)
class CheckpointsView:
    """What the last search found: every checkpoint by last write, and what stopped it early."""

    found: tuple[Checkpoint, ...] = ()      # oldest first
    notes: tuple[str, ...] = ()
    unjudged: int = 0                       # files left for the next looks

    # Each read once per view (a look reads them several times; a view lives until the next search).
    @cached_property
    def complete(self) -> list[Checkpoint]:
        return [c for c in self.found if c.complete]

    @property
    def last_complete(self) -> Checkpoint | None:
        done = self.complete
        return done[-1] if done else None

    @property
    def newest(self) -> Checkpoint | None:
        return self.found[-1] if self.found else None

    @cached_property
    def torn(self) -> list[Checkpoint]:
        return [c for c in self.found if c.why]

    @cached_property
    def next_bytes(self) -> int:
        """The next save's likely size: the largest of the last 3 complete (0 without one)."""
        return max((c.bytes for c in self.complete[-3:]), default=0)

    @cached_property
    def memo(self) -> dict:
        """What is worked out of this view alone, once (the checks' words by their other inputs)."""
        return {}

    @cached_property
    def writing(self) -> bool:
        return any(c.writing for c in self.found)

    @cached_property
    def interval_s(self) -> float | None:
        """The median time between the last saves (up to 6 complete ones); None below two."""
        times = [c.mtime for c in self.complete][-6:]
        gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
        return statistics.median(gaps) if gaps else None

    @cached_property
    def step_interval(self) -> int | None:
        """Steps between the last two complete saves that name a step; None without two."""
        steps = [c.step for c in self.complete if c.step is not None][-2:]
        return steps[1] - steps[0] if len(steps) == 2 and steps[1] > steps[0] else None

    def to_json(self, now: float) -> dict:
        last = self.last_complete
        interval = self.interval_s
        return {"last_complete": last.to_dict(now) if last else None,
                "torn": [{"path": c.path, "why": c.why} for c in self.torn],
                "interval_s": round(interval, 1) if interval is not None else None,
                "notes": list(self.notes)}


def search_roots(run_dir: str, named: tuple[str, ...]) -> list[str]:
    """The run dir and a profile's `checkpoints` folders (relative to it; "~/" on the target)."""
    roots = [run_dir]
    for p in named:
        root = p if p.startswith(("/", "~/")) else posixpath.join(run_dir, p)
        root = root.rstrip("/") or "/"
        if root not in roots:
            roots.append(root)
    return roots


def watched_paths(roots: list[str], view: CheckpointsView) -> tuple[str, ...] | None:
    """The folders and files whose stat says whether `view` still holds (checkpoint_gate.py): a
    profile's folders (`roots` past the run dir; not a "~/" one, which the target's stat cannot
    name), the folder each found checkpoint lies in, each torn folder-checkpoint's own, and the
    newest file-checkpoints (saved over in place, as `last.pt` is, they move no folder). The run
    dir only as such a folder: the bundled trainer renames its status.json there every second.
    None where the gate cannot say: nothing found, too many folders."""
    if not view.found:
        return None
    paths = dict.fromkeys(r for r in roots[1:] if not r.startswith("~"))
    for c in view.found:
        paths[_parent(c.path) or "/"] = None
    for c in [c for c in view.torn if c.format in _FOLDER_FORMATS][-MAX_TORN_WATCHED:]:
        paths[c.path] = None
    for c in [c for c in view.complete if c.format not in _FOLDER_FORMATS][-MAX_FILES_WATCHED:]:
        paths[c.path] = None
    return tuple(paths) if len(paths) <= MAX_WATCHED else None


def cadence(every_s: float, view: CheckpointsView | None) -> float:
    """How often to look again: every `every_s`, and at least twice per checkpoint interval
    (never more than once a second), so a save is seen before the next one."""
    interval = view.interval_s if view is not None else None
    return min(every_s, max(1.0, interval / 2)) if interval else every_s


@dataclass
class _Group:
    path: str
    format: str
    step: int | None
    files: list[FileStat] = field(default_factory=list)


def group(files: tuple[FileStat, ...], named_roots: tuple[str, ...] = ()) -> list[_Group]:
    """The found files as checkpoints: a folder of one format's files, or a file on its own.
    A .pt/.pth/.bin on its own counts only where its path names a checkpoint (or it lies in a
    folder the profile names): a saved tensor of data is not one."""
    return [g for d, fs in _by_dir(files).items() for g in _dir_groups(d, fs, named_roots)]


def _by_dir(files: tuple[FileStat, ...]) -> dict[str, list[FileStat]]:
    by_dir: dict[str, list[FileStat]] = {}
    for f in files:
        by_dir.setdefault(_parent(f.path), []).append(f)
    return by_dir


def _dir_files(files: tuple[FileStat, ...]) -> dict[str, tuple[FileStat, ...]]:
    return {d: tuple(fs) for d, fs in _by_dir(files).items()}


def _parent(path: str) -> str:
    """posixpath.dirname of a path without a trailing "/" (a found file's, a checkpoint's), faster."""
    head, sep, _ = path.rpartition("/")
    return head or sep


def _dir_groups(d: str, fs: list[FileStat], named_roots: tuple[str, ...]) -> list[_Group]:
    """The checkpoints among one folder's found files (`group`)."""
    name = posixpath.basename(d)
    names = {posixpath.basename(f.path) for f in fs}
    hf, bundled = _HF_DIR.match(name), _STEP_DIR.match(name)
    if bundled and posixpath.basename(posixpath.dirname(d)) == CHECKPOINTS_DIR:
        return [_Group(d, "dflash-train", int(bundled.group(1)), fs)]
    if hf or "trainer_state.json" in names:
        return [_Group(d, "hf", int(hf.group(1)) if hf else None, fs)]
    if ".metadata" in names or any(n.endswith(".distcp") for n in names):
        return [_Group(d, "dcp", _step_of(name), fs)]
    out = []
    for f in fs:
        fmt = _file_format(f.path, named_roots)
        if fmt:
            out.append(_Group(f.path, fmt, _step_of(posixpath.basename(f.path)) or _step_of(name), [f]))
    return out


def _file_format(path: str, named_roots: tuple[str, ...]) -> str:
    base = posixpath.basename(path)
    if base.endswith(".ckpt"):
        return "lightning"
    if base.endswith(".safetensors"):
        return "safetensors"
    if base.endswith((".pt", ".pth", ".bin")) and (
            _CHECKPOINT_WORD.search(path) or any(path.startswith(r + "/") for r in named_roots)):
        return "torch.save"
    return ""


def _step_of(name: str) -> int | None:
    m = _STEP_IN_NAME.search(name)
    if m is None:
        return None
    try:
        return int(m.group(1))
    except ValueError:
        return None


class CheckpointLooks:
    """One run's checkpoints across looks: the judged files (by inode, size, mtime) and the last
    search. `look` searches at most every `every_s` seconds of the target's clock, and then only
    when the gate says the folders moved (`safety_s` 0: at every such look)."""

    def __init__(self, named: tuple[str, ...] = (), every_s: float = 5.0, safety_s: float | None = None) -> None:
        self.named = tuple(named)
        self.every_s = every_s
        self.judged: Bounded[tuple, tuple[str, int | None]] = Bounded(8192)
        self.view: CheckpointsView | None = None
        self.roots: list[str] = []
        self.gate = FolderGate() if safety_s is None else FolderGate(safety_s)
        self.why_searched = ""     # why the last look past the cadence searched ("": it did not)
        # a folder -> (its found files, its checkpoints), as the last search judged them
        self._settled: dict[str, tuple[tuple[FileStat, ...], tuple[Checkpoint, ...]]] = {}
        self._settled_roots: tuple[str, ...] = ()
        # The agent's account of the last search: each folder's found files, and the mark a
        # search that skips the unmoved folders asks since (None: the next one asks for all).
        self._found: dict[str, tuple[FileStat, ...]] = {}
        self._mark: tuple | None = None
        self._mark_roots: list[str] = []
        self._fresh: list[str] = []   # unfinished checkpoints (files, folders): stat'd at every search
        self._at: float | None = None
        self._first_up_to: int | None = None   # the next search judges the checkpoints up to this step first
        self._looking = asyncio.Lock()
        self._next = NextLook()       # when the next look comes: whether it asks the folders up front

    def due(self, now: float) -> bool:
        return self._at is None or not (0 <= now - self._at < cadence(self.every_s, self.view))

    def expire(self, at_or_before: int | None = None) -> None:
        """The next look searches whatever the cadence and the folders: a relaunch is about to
        choose one, and a run that saves every second has written several since a search 5 s old.
        `at_or_before`: the step that bounds the choice (a rollback's last good step): that search
        judges the checkpoints at or before it first, newest first, so the one to choose is judged
        even where more newer ones wait than a look judges (a diverged run saved on past its
        divergence before it was read: JUDGE_PER_LOOK of those alone would hide it)."""
        self._at = None
        self._first_up_to = at_or_before
        self.gate.open()

    def prefetch(self) -> list[str]:
        """The folders the next look stats, when it is likely to come past the cadence (its first
        request carries them; none without a gate, none at the looks between)."""
        if not self._next.due(self._at, cadence(self.every_s, self.view)):
            return []
        return self._watched()

    def _watched(self) -> list[str]:
        return list(self.gate.folders) if self.gate.safety_s > 0 else []

    async def look(self, ops: RemoteOps, run_dir: str, now: float) -> CheckpointsView | None:
        self._next.saw(now)
        # One look at a time: a look beside another's search (a recovery's check beside the
        # poller's look, after `expire`) answers with that search's view, never the one before it.
        async with self._looking:
            return await self._look(ops, run_dir, now)

    async def _look(self, ops: RemoteOps, run_dir: str, now: float) -> CheckpointsView | None:
        if not self.due(now):
            return self.view
        self._at = now
        self.roots = search_roots(run_dir, self.named)
        stats = await self._folder_stats(ops)
        self.why_searched = self.gate.why_search(now, self._busy(), stats)
        if not self.why_searched:
            return self.view
        scope = self.gate.scope(now)
        began = time.monotonic()
        self.view = await self._search(ops, now, scope)
        self.gate.searched(now, watched_paths(self.roots, self.view), stats or {}, scope, time.monotonic() - began)
        return self.view

    def _busy(self) -> str:
        """Why the last search's view may change with no folder moving ("" when it cannot)."""
        view = self.view
        if view is None:
            return "no search yet"
        if view.writing:
            return "a checkpoint is being written"
        return f"{view.unjudged} file(s) wait to be judged" if view.unjudged else ""

    async def _folder_stats(self, ops: RemoteOps) -> dict[str, FileStat] | None:
        folders = self._watched()
        if not folders:
            return {}
        try:
            return dict(zip(folders, await ops.stat(folders)))
        except TargetError as exc:
            if is_transport_failure(exc):
                raise
            return None

    async def _found_by_dir(self, ops: RemoteOps, scope: str) -> tuple[dict[str, tuple[FileStat, ...]], tuple[str, ...]]:
        """Each folder's found files and the search's notes. Through the agent, past the first
        search, the answer holds only what changed since the last one; with `scope` "moved" only
        the folders whose mtime moved (and the unfinished checkpoints) are listed and stat'd
        again, the others as the last search found them (FolderGate.scope)."""
        agent = look_ops(ops)
        limits = {"max_depth": CHECKPOINT_DEPTH, "max_entries": MAX_ENTRIES, "max_found": MAX_FOUND, "skip": SKIP}
        if agent is None:
            found = await ops.find_files(self.roots, PATTERNS, **limits)
            return _dir_files(found.files), found.notes
        since = self._mark if scope != "all" and self._mark_roots == self.roots else None
        changes = await agent.find_changes(self.roots, PATTERNS, since=since, fresh=self._fresh,
                                           rescan=scope != "moved", **limits)
        by_dir = _dir_files(changes.files)
        if not changes.full:
            if any(d not in self._found for d in changes.kept):   # not this search's to build on
                self._mark = None
                return await self._found_by_dir(ops, "all")
            for d in changes.kept:
                by_dir[d] = self._found[d]
        # An answer stopped by a limit is no base for the next: that one asks for all again.
        self._found, self._mark_roots = by_dir, list(self.roots)
        self._mark = None if changes.notes else changes.mark
        return by_dir, changes.notes

    async def _search(self, ops: RemoteOps, now: float, scope: str = "all") -> CheckpointsView:
        try:
            by_dir, found_notes = await self._found_by_dir(ops, scope)
        except TargetError as exc:
            if is_transport_failure(exc):
                raise
            self._mark = None
            return CheckpointsView(notes=(inert_text(str(exc))[:200],))
        named_roots = tuple(self.roots[1:])
        if named_roots != self._settled_roots:
            self._settled, self._settled_roots = {}, named_roots
        # A folder whose found files are all as at the last search holds the same checkpoints:
        # grouped and judged once (not one being written, nor one with files left to judge).
        held, settled = self._settled, {}
        checkpoints: list[Checkpoint] = []
        fresh: list[tuple[str, tuple[FileStat, ...], list[_Group]]] = []
        for d, fs in by_dir.items():
            kept = held.get(d)
            if kept is not None and (kept[0] is fs or kept[0] == fs):
                settled[d] = kept
                checkpoints.extend(kept[1])
            else:
                fresh.append((d, fs, _dir_groups(d, list(fs), named_roots)))
        jobs = sorted(((d, g) for d, _, groups in fresh for g in groups),
                      key=lambda job: max(f.mtime for f in job[1].files), reverse=True)
        up_to, self._first_up_to = self._first_up_to, None
        if up_to is not None:   # the candidates of a bounded choice first (a stable sort: newest first still)
            jobs.sort(key=lambda job: job[1].step is None or job[1].step > up_to)
        budget = [JUDGE_PER_LOOK]
        unjudged, judged, unsettled = 0, {}, set()
        waiting: list[tuple[float, str]] = []
        for d, g in jobs:
            c, left = await self._judge(ops, g, now, budget)
            unjudged += left
            if left or (c is not None and c.writing):
                unsettled.add(d)
            if c is None:   # its files wait for the budget, or it is no checkpoint (a pickle)
                if left:
                    waiting.append((max(f.mtime for f in g.files), g.path))
                continue
            checkpoints.append(c)
            judged.setdefault(d, []).append(c)
        for d, fs, _ in fresh:
            if d not in unsettled:
                settled[d] = (fs, tuple(judged.get(d, ())))
        self._settled = settled
        checkpoints.sort(key=lambda c: (c.mtime, c.step if c.step is not None else -1))
        # Unfinished checkpoints grow in place, which moves no folder: asked again at every search.
        unfinished = waiting + [(c.mtime, c.path) for c in checkpoints if not c.complete]
        self._fresh = [p for _, p in sorted(unfinished, reverse=True)[:MAX_FRESH]]
        notes = list(found_notes)
        if unjudged:
            notes.append(f"{unjudged} checkpoint file(s) left to judge at the next looks")
        return CheckpointsView(tuple(checkpoints), tuple(notes), unjudged)

    async def _judge(self, ops: RemoteOps, g: _Group, now: float, budget: list[int]) -> tuple[Checkpoint | None, int]:
        """The group as a Checkpoint (None while any of its files waits for the budget) and
        how many of its files wait."""
        files = {posixpath.basename(f.path): f for f in g.files}
        mtime = max(f.mtime for f in g.files)
        total = sum(f.size for f in g.files)
        step, why = g.step, ""
        if g.format == "hf":
            state = files.get("trainer_state.json")
            if state is None:
                why = "no trainer_state.json (the Trainer writes it last)"
            else:
                r = await self._file(ops, state, budget, "trainer_state")
                if r is None:
                    return None, 1
                why, step = r[0], (r[1] if r[1] is not None else step)
            weights = [f for n, f in sorted(files.items()) if n.endswith(_WEIGHTS)][:MAX_FILES_JUDGED]
            if not why and not any(n.startswith(("model", "pytorch_model", "adapter_model")) for n in files):
                why = "no weight file (model.safetensors, pytorch_model.bin)"
            why, waiting = (why, 0) if why else await self._all_whole(ops, weights, budget)
            if waiting:
                return None, waiting
        elif g.format == "dflash-train":
            if CHECKPOINT_META not in files:
                why = f"no {CHECKPOINT_META} (the trainer writes it last)"
            elif "state.pt" not in files:
                why = "no state.pt"
            else:
                why, waiting = await self._all_whole(ops, [files["state.pt"]], budget)
                if waiting:
                    return None, waiting
        elif g.format == "dcp":
            meta = files.get(".metadata")
            if meta is None:
                why = "no .metadata (torch.distributed.checkpoint renames it into place last)"
            elif meta.size == 0:
                why = ".metadata is empty"
        else:
            (f,) = g.files
            r = await self._file(ops, f, budget, "safetensors" if g.format == "safetensors" else "zip")
            if r is None:
                return None, 1
            why = r[0]
            if why == "not a zip":
                return None, 0      # a legacy (pickle) torch.save or not a checkpoint at all: not judged
        writing = bool(why) and 0 <= now - mtime < WRITING_S
        return Checkpoint(g.path, g.format, step, total, mtime, "" if writing else why, writing), 0

    async def _all_whole(self, ops: RemoteOps, files: list[FileStat], budget: list[int]) -> tuple[str, int]:
        """The first weight file that is not whole, in words ("" when all are), and how many
        files wait for the budget."""
        waiting = 0
        for f in files:
            kind = "safetensors" if f.path.endswith(".safetensors") else "zip"
            r = await self._file(ops, f, budget, kind)
            if r is None:
                waiting += 1
            elif r[0] and r[0] != "not a zip":
                return f"{posixpath.basename(f.path)}: {r[0]}", 0
        return "", waiting

    async def _file(self, ops: RemoteOps, f: FileStat, budget: list[int], kind: str) -> tuple[str, int | None] | None:
        """(why, step) of one file, from the memory or from bounded reads; None when this
        look's budget is spent."""
        key = (f.path, f.inode, f.size, f.mtime, kind)
        if key in self.judged:
            return self.judged[key]
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        try:
            r = await _judge_file(ops, f, kind)
        except TargetError as exc:
            if is_transport_failure(exc):
                raise
            r = (f"cannot read it: {inert_text(str(exc))[:160]}", None)
        self.judged.remember(key, r)
        return r


async def _judge_file(ops: RemoteOps, f: FileStat, kind: str) -> tuple[str, int | None]:
    if f.error:
        return f"cannot read it: {f.error}", None
    if kind == "trainer_state":
        chunk = await ops.read(f.path, 0, TRAINER_STATE_MAX)
        return judge_trainer_state(chunk.data, chunk.size)
    if kind == "safetensors":
        head = await ops.read(f.path, 0, SAFETENSORS_HEAD_BYTES)
        n = safetensors_header_length(head.data)
        if n is not None and len(head.data) < 8 + n <= min(head.size, 8 + SAFETENSORS_HEADER_MAX):
            if 8 + n > HEADER_READ_MAX:
                return "", None   # a header this long is read no further: it fits, that is all we know
            head = await ops.read(f.path, 0, 8 + n)
        return judge_safetensors(head.data, head.size), None
    head = await ops.read(f.path, 0, 4)
    if not is_zip(head.data):
        return ("not a zip" if head.size >= 4 else f"{head.size} bytes: too short for a zip"), None
    tail = await ops.read_tail(f.path, ZIP_TAIL_BYTES)
    return judge_zip(tail.data, tail.size), None
