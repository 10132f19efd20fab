"""The questions `run/` and `gpu/` ask of a target, independent of how they are answered.

Two implementations (in `remote/`):
- `AgentOps`: a persistent stdlib-only python3 agent started once over one channel,
  speaking JSON lines (sub-millisecond per request). Used wherever the target has python3.
- `ShellOps`: one-shot POSIX-sh commands (`cat`, `test`, `kill -0`, /proc reads) for targets
  without python3. Slower, same answers.

All times are the TARGET's clock (`now()` included), so verdicts never depend on clock skew
between the laptop and the GPU host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class FileStat:
    path: str
    exists: bool
    size: int = 0
    mtime: float = 0.0
    inode: int = 0
    is_dir: bool = False
    error: str = ""   # e.g. "Permission denied" when it exists but cannot be read/stat'd
    # "file", "dir", "fifo", "socket", "char-device", "block-device", "other"; "" when it does
    # not exist. Only a "file" is ever opened: a FIFO would block the reader.
    kind: str = ""

    @property
    def is_regular(self) -> bool:
        return self.exists and self.kind in ("file", "") and not self.is_dir


@dataclass(frozen=True)
class FileChunk:
    path: str
    offset: int       # where this chunk starts
    data: bytes
    size: int         # file size at the time of the read
    inode: int        # lets a tailer notice rotation (new inode) and truncation (size < offset)
    exists: bool = True


@dataclass(frozen=True)
class PidInfo:
    pid: int
    alive: bool
    start_ticks: int | None = None   # /proc/<pid>/stat field 22
    cmdline: tuple[str, ...] = ()
    state: str = ""                  # /proc state letter; "Z" counts as not alive
    pgid: int | None = None
    nspid: tuple[int, ...] = ()      # NSpid line of /proc/<pid>/status (host view → innermost)
    # Whether its working directory is the run dir asked about (proc_tree's `run_dir`); None
    # when not asked, or when /proc/<pid>/cwd cannot be looked at (another user's process).
    in_run_dir: bool | None = None

    @property
    def gone(self) -> bool:
        """Ended: not there, or a zombie whose parent has not reaped it (it runs nothing)."""
        return not self.alive or self.state == "Z"


@dataclass(frozen=True)
class ProcTree:
    """A run's process tree in one answer: the wrapper's pid and all its descendants."""

    pid: int
    root: PidInfo                    # the wrapper itself, as pid_info gives it
    procs: int = 0                   # processes in the tree, the wrapper included
    cpu_s: float = 0.0               # utime+stime of them all, plus their reaped children's
    threads: int = 0
    states: tuple[tuple[str, int], ...] = ()   # (/proc state letter, how many), e.g. (("R", 1), ("S", 2))
    main_pid: int | None = None      # the wrapper's child: the program it runs
    main_argv: tuple[str, ...] = ()
    truncated: bool = False          # a tree bigger than the agent's cap (counted in part)
    pids: tuple[int, ...] = ()       # the processes counted, the wrapper first (walk order)
    rss_bytes: int | None = None     # their resident pages summed (shared ones in each); None: unknown


@dataclass(frozen=True)
class StackDumpAnswer:
    """What a request for a process's stacks got (`dump_stacks`, `py_spy_dump`)."""

    # "dumped"; "recent" (a dump younger than the rate limit, returned without a new signal);
    # "gone", "mismatch" (pid reused or no start time: nothing sent); "no-handler" (the process
    # does not catch that signal: nothing sent); "no-dump" (sent, nothing written in time);
    # "no-py-spy"; "failed" (py-spy's own message is the data).
    status: str
    data: bytes = b""
    time: float = 0.0     # when the dump was written (target clock)


class RemoteOps(Protocol):
    kind: str         # "agent" or "shell": how the answers are obtained
    label: str        # the target's name in every message

    async def now(self) -> float: ...
    async def stat(self, paths: list[str]) -> list[FileStat]: ...
    async def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> FileChunk: ...
    async def read_tail(self, path: str, max_bytes: int = 64 << 10) -> FileChunk: ...
    async def pid_info(self, pids: list[int]) -> list[PidInfo]: ...
    async def signal(self, pid: int, sig: int, *, start_ticks: int | None,
                     cmdline: Sequence[str] | None, cwd: str | None = None, group: bool = False) -> str:
        """Send sig to pid (or to its process group when `group`, pid being the group
        leader) only if pid provably is that process: the same start time, exactly this
        command line (unless None), this working directory (unless None; one that cannot be
        looked at is no proof). Never pid 1, a group id below 2 (kill(-1), kill(0)), or a group
        that holds the asker. Returns "sent", "gone" or "mismatch" (nothing was sent). Never a
        pattern kill."""
    async def proc_tree(self, pid: int, run_dir: str | None = None) -> ProcTree:
        """pid_info of `pid` plus the CPU time, states and threads of its whole tree; with
        `run_dir`, the root's `in_run_dir` too."""
    async def dump_stacks(self, pid: int, sig: int, *, start_ticks: int | None, path: str,
                          min_interval_s: float = 5.0) -> StackDumpAnswer:
        """Empty `path`, send `sig` to pid -- only if it still has that start time and its
        SigCgt shows a handler for sig, and no dump in `path` is younger than min_interval_s
        -- and return what the handler wrote there (the run probe's faulthandler)."""
    async def py_spy_dump(self, pid: int, *, start_ticks: int | None) -> StackDumpAnswer:
        """`py-spy dump --pid` of that process where py-spy is installed ("no-py-spy" else)."""
    async def remove_if_holds(self, path: str, token: str) -> bool:
        """Remove `path` only if it is a regular file (not a link) whose first 4 KiB hold
        `token`; True if it was removed. How a launch gives back its own claim."""
    async def disk_free(self, path: str) -> DiskFree:
        """Free space of the filesystem that holds `path` (or its nearest existing ancestor)."""
    async def find_files(self, roots: Sequence[str], patterns: Sequence[str], *, max_depth: int = 3,
                         max_entries: int = 20000, max_found: int = 512,
                         skip: Sequence[str] = ()) -> FoundFiles:
        """Regular files under `roots` whose name matches a pattern (fnmatch), at most
        `max_depth` directories down, hidden directories and those named in `skip` not entered;
        a root that is a file is found itself, "~/" starts at the target's $HOME. Bounded: at
        most `max_found` files (and, through the agent, `max_entries` entries seen), each
        limit that stopped the search said in `notes`."""
    async def close(self) -> None: ...


@runtime_checkable
class ExitWatch(Protocol):
    """What a target with the agent answers too (ShellOps has no way to wait on the target)."""

    async def wait_exit(self, pids: Sequence[tuple[int, int]], timeout_s: float) -> list[tuple[int, int]]:
        """As soon as any process of `pids` ((pid, start_ticks) each, the launch record's
        identity of a run's wrapper) has ended, those that have: gone, a zombie, or its pid now
        another process's (the start time differs); [] when all still run after `timeout_s`
        (clamped to 0-300 s). One wait holds no other request up."""


class LookOps(RemoteOps, Protocol):
    """What the agent answers too (ShellOps, one sh command per question, gains nothing from
    them): a look's first round in one request, and a run's metric files in one request."""

    async def observe(self, paths: list[str], *, reads: dict[str, int], known: dict[str, list],
                      grown: dict[str, tuple[int, int]] | None = None, list_dirs: Sequence[str] = (),
                      proc_tree: tuple[int, str | None] | None = None) -> dict:
        """The first round of a look at a run dir: run/evidence/first_look.py reads it."""

    async def metric_read(self, items: list[dict]) -> list[dict]:
        """A run's metric files: run/evidence/metric_files/ decodes the answers."""

    async def find_changes(self, roots: Sequence[str], patterns: Sequence[str], *, max_depth: int = 3,
                           max_entries: int = 20000, max_found: int = 512, skip: Sequence[str] = (),
                           since: tuple | None = None, fresh: Sequence[str] = (),
                           rescan: bool = False) -> FoundChanges:
        """`find_files`, answering only what changed since `since` (an earlier answer's mark):
        only the folders whose mtime moved are listed again and their files stat'd, and the
        paths of `fresh` (files, or folders to list again) whatever their folder says; with
        `rescan` every folder is listed and every file stat'd (the answer still only what changed)."""


def look_ops(ops: RemoteOps) -> LookOps | None:
    """`ops` as LookOps where its target answers them (the agent's, kind "agent"), else None.
    By the declared kind, not by isinstance: a wrapper that passes the agent's ops through
    (run/evidence/first_look.py's FirstLook) answers them too."""
    return ops if ops.kind == "agent" else None   # type: ignore[return-value]


@dataclass(frozen=True)
class FoundFiles:
    """What `find_files` found: the files' stats, sorted by path, and why it stopped early."""
    files: tuple[FileStat, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FoundChanges(FoundFiles):
    """What the agent's `find_changes` found since an earlier answer's `mark`: `files` only those
    of the folders that changed since, `kept` the folders whose found files are as they were
    then (all of `files` when `full`: the mark was not this agent's, or none was given).
    `listed`, `stated`: the folders the agent listed and the files it stat'd for this answer."""
    kept: tuple[str, ...] = ()
    full: bool = True
    mark: tuple | None = None
    listed: int = 0
    stated: int = 0


# -- the preflight questions, answered by both AgentOps and ShellOps


@dataclass(frozen=True)
class DiskFree:
    path: str         # the path asked about (may not exist yet)
    checked: str      # its nearest existing ancestor, where the space was measured
    free: int         # bytes available to an unprivileged writer
    total: int


@dataclass(frozen=True)
class DirProbe:
    path: str
    exists: bool
    created: bool     # this probe made it
    writable: bool    # a file was really written and removed (os.access lies on ro mounts)
    error: str = ""   # strerror of what failed, e.g. "Permission denied", "Read-only file system"


class PreflightOps(RemoteOps, Protocol):
    async def which(self, names: list[str]) -> dict[str, str | None]: ...
    async def probe_dir(self, path: str, create: bool = True) -> DirProbe: ...
    async def list_dir(self, path: str) -> list[FileStat]: ...
