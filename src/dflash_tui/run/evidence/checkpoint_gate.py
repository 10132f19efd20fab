"""FolderGate: whether a run's checkpoints may have changed since the last search, from one stat
of the few folders that hold them.

A search (checkpoints.py: `find_files` under the run dir and a profile's folders, a stat of every
file found) costs tens of milliseconds on a run dir of hundreds of checkpoints; a stat of a
handful of folders costs next to nothing and rides in the look's first request
(run/evidence/first_look.py). A new checkpoint, a rotated one (save_total_limit) and a file
renamed or created in a folder (trainer_state.json written last, .metadata renamed into place)
add or drop an entry of a folder, so they move that folder's mtime. So between searches a look
stats, in one request:

- a profile's checkpoint folders (those the target's stat can name: not a "~/" one),
- the folder each found checkpoint lies in (its parent: a new sibling, a rotated one); the run
  dir itself only as such (the bundled trainer renames its status.json there every second, so
  there its mtime says little: a run dir that keeps moving keeps the search at its cadence),
- the folder of each torn folder-checkpoint (the newest MAX_TORN; a file written into it later),
- the newest file-checkpoints themselves (a `last.pt` saved over in place moves no folder),

and the search runs again only when one of them moved (or appeared, or went), when a folder's
mtime is younger than SETTLE_S (a file system whose timestamps are coarse may move it again
within the same tick), while a checkpoint is being written or files wait to be judged (their
files grow in place), when nothing was found yet, or when the safety interval passed since the
last search: an older file rewritten in place, a folder-checkpoint's file cut short, and a first
checkpoint in a folder below the run dir that held none yet move no watched folder. A search
between safety searches lists again only the folders that moved (`scope`); a watched file that
moved is searched for with every file stat'd.

The safety search stats every file, tens of milliseconds for a run dir of hundreds of
checkpoints, so it runs every SAFETY_S (60 s) only where it is cheap: its interval is its last
run's time over SAFETY_SHARE (a 13 ms search, every 260 s), at most SAFETY_MAX_S.
"""

from __future__ import annotations

from ...remote.ops import FileStat

SAFETY_S = 60.0       # the shortest time a look trusts unmoved folders before searching anyway
SAFETY_MAX_S = 600.0  # and the longest
SAFETY_SHARE = 5e-5   # of the wall clock, what the safety search may take: a dearer one runs less often
SETTLE_S = 2.0        # a folder written to this recently may move again within one mtime tick


def _signature(st: FileStat) -> tuple:
    return (st.exists, st.inode, st.mtime)


class FolderGate:
    """The watched folders of the last search, their stats then, and whether they moved since."""

    def __init__(self, safety_s: float = SAFETY_S, share: float = SAFETY_SHARE) -> None:
        self.safety_s = safety_s             # 0: no gate, every look past the cadence searches
        self.share = share
        self.folders: tuple[str, ...] = ()   # what the next look stats (its first request carries it)
        self._then: dict[str, tuple] = {}    # each folder's stat as of the last search
        self._searched_at: float | None = None
        self._safety_took_s: float | None = None   # the last safety search's time
        self._file_moved = ""                # a watched file that moved (a search then stats every file)

    @property
    def safety_interval_s(self) -> float:
        """How long unmoved folders are trusted: SAFETY_S, longer where the safety search is dear."""
        took = self._safety_took_s
        if took is None or self.share <= 0:
            return self.safety_s
        return max(self.safety_s, min(took / self.share, SAFETY_MAX_S))

    def open(self) -> None:
        """The next look past the cadence searches whatever the folders say (a recovery plans)."""
        self._searched_at = None

    def searched(self, now: float, folders: tuple[str, ...] | None, stats: dict[str, FileStat],
                 scope: str = "", took_s: float | None = None) -> None:
        """A search of `scope` ran at `now` and took `took_s`; `stats`: the folders' stats asked
        before it (a change after them is seen at the next look); `folders`: what the next looks
        stat (None or (): no gate). A folder not asked this time keeps its older stat: one that
        moved since reads as moved (one search more), never as still."""
        self._searched_at = now
        self._file_moved = ""
        if scope == "every file" and took_s is not None:
            self._safety_took_s = took_s
        self.folders = folders or ()
        then = {**self._then, **{p: _signature(st) for p, st in stats.items()}}
        self._then = {p: then[p] for p in self.folders if p in then}

    def scope(self, now: float) -> str:
        """What a search now looks at again: "moved" within the safety interval (the folders whose
        mtime moved; the others as the last search found them), "every file" past it (every folder
        listed and every file stat'd; through the agent the answer holds only what changed), "all"
        for the first search, a recovery's and with no gate (everything, answered in full)."""
        if self.safety_s <= 0 or self._searched_at is None:
            return "all"
        if self._file_moved:
            return "every file"
        return "moved" if 0 <= now - self._searched_at < self.safety_interval_s else "every file"

    def why_search(self, now: float, busy: str, stats: dict[str, FileStat] | None) -> str:
        """Why this look searches, in words ("" when the folders say nothing changed). `busy`:
        why the last search's view cannot be trusted to stand ("" when it can)."""
        if self.safety_s <= 0:
            return "no gate"
        if self._searched_at is None:
            return "no search yet"
        if busy:
            return busy
        if not self.folders:
            return "no folders to watch"
        if not 0 <= now - self._searched_at < self.safety_interval_s:
            return "the safety interval passed"
        if stats is None:
            return "the folders could not be asked"
        for path in self.folders:
            st = stats.get(path)
            if st is None or path not in self._then:
                return f"{path} not watched before"
            if _signature(st) != self._then[path]:
                if st.exists and not st.is_dir:
                    self._file_moved = path
                return f"{path} moved"
            if st.exists and not now - st.mtime >= SETTLE_S:
                return f"{path} written to within {SETTLE_S:g} s"
        return ""
