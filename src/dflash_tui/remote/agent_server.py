"""The persistent remote agent: one stdlib-only python3 (3.8+) process per target.

This file is both a module (ShellOps and the tests import its parsers, so both ways of asking
a target parse /proc the same way) and the program text that `agent.py` ships to the target:
`python3 -c BOOTSTRAP`, the bootstrap reading this source (zlib + base64, one line) from stdin
and exec'ing it, so nothing is written on the target. After that stdin carries requests and
stdout carries answers, one JSON object per line:

    request  {"id": 7, "op": "stat", "args": {"paths": ["/run/x/launch.json"]}}
    answer   {"id": 7, "ok": true, "result": [...]}    or    {"id": 7, "ok": false, "error": "..."}

The agent announces itself unasked with id 0 (the `hello` answer), so starting it costs one
round trip. A bad request gets an error answer; it never ends the agent. The agent ends when
its stdin reaches EOF, i.e. when its channel closes, so it never outlives the dashboard.

Keep this file free of anything newer than Python 3.8 and of non-stdlib imports.
"""

import base64
import collections
import json
import os
import select
import shutil
import socket
import stat as statmod
import subprocess
import sys
import threading
import time
import traceback

PROTOCOL = 1
MIN_PYTHON = (3, 8)
# One answer is one line; keep it well under the readers' line limits once base64-encoded.
MAX_READ = 8 << 20

# op name -> function(**args) returning something JSON-serialisable.
HANDLERS = {}
# ops that may block (subprocesses, NVML): run in a thread so they never hold up a stat.
BLOCKING = set()


def register(name, fn, blocking=False):
    """Add an op. gpu/ (and anyone else) contributes ops through `extra_sources`."""
    HANDLERS[name] = fn
    if blocking:
        BLOCKING.add(name)
    else:
        BLOCKING.discard(name)
    return fn


class OpFailed(Exception):
    """An op's answer is an error the client should show as is (e.g. Permission denied)."""


# -- /proc parsing (shared with ShellOps, which reads the same files through sh) ----------


def parse_proc_stat(text):
    """(state, pgid, start_ticks) from /proc/<pid>/stat; comm may hold spaces and ')'."""
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[2]), int(rest[19])


def parse_cmdline(raw):
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def parse_nspid(status_text):
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            return [int(x) for x in line.split()[1:]]
    return []


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def pid_record(pid, stat_raw, cmdline_raw, status_raw):
    """One PidInfo-shaped dict from the raw bytes of the three /proc files (None = missing)."""
    rec = {"pid": pid, "alive": False, "start_ticks": None, "cmdline": [], "state": "",
           "pgid": None, "nspid": []}
    if stat_raw is None:
        return rec
    try:
        state, pgid, start = parse_proc_stat(stat_raw.decode("utf-8", "replace"))
    except (ValueError, IndexError):
        return rec
    rec.update(state=state, pgid=pgid, start_ticks=start, alive=state not in ("Z", "X"))
    if cmdline_raw is not None:
        rec["cmdline"] = parse_cmdline(cmdline_raw)
    if status_raw is not None:
        rec["nspid"] = parse_nspid(status_raw.decode("utf-8", "replace"))
    return rec


def _maybe(path):
    try:
        return _read_bytes(path)
    except OSError:
        return None


def pid_info_one(pid):
    pid = int(pid)
    if pid <= 0:
        raise OpFailed("pid must be a positive integer, got %d" % pid)
    base = "/proc/%d/" % pid
    return pid_record(pid, _maybe(base + "stat"), _maybe(base + "cmdline"),
                      _maybe(base + "status"))


# -- the run's process tree (one answer per poll: CPU time, states, threads, the program) ----

# A run whose tree is bigger than this is summarised from its first MAX_TREE processes.
MAX_TREE = 512


def parse_stat_usage(text):
    """(state, ppid, cpu ticks incl. reaped children, threads, resident pages) from /proc/<pid>/stat."""
    rest = text[text.rindex(")") + 2:].split()
    ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])   # utime stime cutime cstime
    return rest[0], int(rest[1]), ticks, int(rest[17]), int(rest[21])


def parse_children(raw):
    """The pids in /proc/<pid>/task/<tid>/children files (space-separated, concatenated)."""
    return [int(x) for x in raw.split() if x.isdigit()]


def proc_tree_record(pid, walked, cmdline_raw, status_raw, main_cmdline_raw, clk_tck, truncated,
                     in_run_dir=None, page_size=None):
    """The ProcTree-shaped dict from what a walk of the tree read, raw.

    walked: [(pid, stat bytes, children pids)] in walk order, the root first. CPU seconds are
    utime+stime of every live process of the tree plus the times of the children each one has
    reaped (cutime+cstime), so a worker that ended still counts and none counts twice. The RSS
    is the sum of the processes' resident pages (a shared page counts in each; None without the
    target's page size): what the same stat files say, at no cost of its own."""
    rec = {"pid": pid, "root": pid_record(pid, walked[0][1] if walked else None, cmdline_raw,
                                          status_raw),
           "procs": 0, "cpu_s": 0.0, "threads": 0, "states": {}, "main_pid": None,
           "main_argv": [], "clk_tck": clk_tck, "truncated": bool(truncated), "pids": [],
           "rss_bytes": None}
    rec["root"]["in_run_dir"] = in_run_dir
    ticks = pages = 0
    for i, (p, stat_raw, kids) in enumerate(walked):
        try:
            state, _ppid, t, threads, resident = parse_stat_usage(stat_raw.decode("utf-8", "replace"))
        except (ValueError, IndexError):
            continue
        pages += max(0, resident)
        rec["procs"] += 1
        rec["pids"].append(p)
        rec["threads"] += threads
        rec["states"][state] = rec["states"].get(state, 0) + 1
        ticks += t
        if i == 0 and kids:
            rec["main_pid"] = kids[0]
    rec["cpu_s"] = ticks / float(clk_tck or 100)
    if page_size and rec["procs"]:
        rec["rss_bytes"] = pages * int(page_size)
    if main_cmdline_raw is not None:
        rec["main_argv"] = parse_cmdline(main_cmdline_raw)
    return rec


def _proc_bytes(path):
    """A small /proc file's bytes, or None; raw os calls: this runs for every process of the
    tree on every poll."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _pread_all(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


# A read of a /proc seq_file (stat, a thread's children) stops short of the caller's buffer only
# at the file's end or when the kernel's own buffer, a page (4 KiB or more), is full, and then
# within one record (a child's "PID ") of it: a shorter read is the whole file, so the walk's
# files take one read each and only a children list of some 500 pids takes more.
_READ = 4096
_WHOLE_BELOW = _READ - 64


def _pread_all(fd):
    raw = os.pread(fd, _READ, 0)
    if len(raw) < _WHOLE_BELOW:
        return raw
    chunks = [raw]
    offset = len(raw)
    while True:
        more = os.pread(fd, 65536, offset)
        if not more:
            return b"".join(chunks)
        chunks.append(more)
        offset += len(more)


def _stat_threads(stat_raw):
    try:
        return int(stat_raw[stat_raw.rindex(b")") + 2:].split()[17])
    except (ValueError, IndexError):
        return 2   # unparseable: look at every task


def _children_of(pid, threads):
    """Children of every thread of pid (a child forked by a worker thread is listed under that
    thread's task); a single-threaded process has one task, its own pid, so no listdir."""
    if threads <= 1:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return []
    kids = []
    for tid in tids:
        raw = _proc_bytes("/proc/%d/task/%s/children" % (pid, tid))
        if raw:
            kids.extend(parse_children(raw))
    return kids


# -- the walk's files, held open from one walk of a tree to the next ------------------------
#
# Opening a /proc file costs three times reading it, and a run of 64 ranks of 4 threads is
# some 330 files a walk. So a walk keeps each process's stat and each thread's children file
# open for the next walk of the same tree, and reads them again from offset 0 (a seq_file
# regenerates). A held file stays bound to the process or thread it was opened for: once that
# one is gone, stat and comm fail (ESRCH) and children reads empty, whatever later takes its
# number. So a held process whose stat still reads is the very process the number names now, and
# a held thread whose comm still reads is alive; when stat's thread count equals the held
# threads and each of them is alive, they are all of its threads (a thread that ended and another
# that started fail the liveness; a count that changed fails the count), otherwise the task
# directory is listed again. The files are held for the processes of the last walk only, under
# a budget of descriptors (beyond it a process is read by path, as if nothing were held), and
# a tree not walked for HELD_IDLE_S is let go.

HELD_IDLE_S = 120.0
_held = {}          # root pid -> [monotonic time of its last walk, {pid: _Held}]
_held_lock = threading.Lock()
_held_fds = [0]     # descriptors held, all trees together


def _fd_budget():
    """Half the descriptors this process may open, at most 8192, less a margin."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 16
    except (ImportError, ValueError, OSError):
        soft = 1024
    return max(0, min(soft // 2, 8192) - 64)


FD_BUDGET = _fd_budget()


def _hold(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    _held_fds[0] += 1
    return fd


def _let_go(fd):
    if fd is not None:
        _held_fds[0] -= 1
        os.close(fd)


class _Held(object):
    """One process of a walked tree: its stat file and, per thread in the task directory's
    order, (tid, children file, comm file or None for the leader, whose stat proves it alive)."""

    __slots__ = ("pid", "stat_fd", "tasks")

    def __init__(self, pid, stat_fd):
        self.pid, self.stat_fd, self.tasks = pid, stat_fd, None

    def close(self):
        _let_go(self.stat_fd)
        self.stat_fd = None
        self._drop_tasks(self.tasks or ())
        self.tasks = None

    @staticmethod
    def _drop_tasks(tasks):
        for _tid, children_fd, comm_fd in tasks:
            _let_go(children_fd)
            _let_go(comm_fd)

    def stat(self):
        try:
            return _pread_all(self.stat_fd)
        except OSError:
            return None

    def children(self, threads):
        """Children of every thread, the held ones when they are still all of them; None when
        its threads' files would not fit the budget (nothing of them is held then)."""
        if self.tasks and len(self.tasks) == max(threads, 1) and (threads > 1 or self.tasks[0][0] == str(self.pid)):
            kids = self._read_tasks(strict=True)
            if kids is not None:
                return kids
        for attempt in range(3):
            listed = self._relist(threads)
            if listed is None:
                return []   # the process is gone
            if not listed:
                self._drop_tasks(self.tasks or ())
                self.tasks = None
                return None
            kids = self._read_tasks(strict=attempt < 2)
            if kids is not None:
                return kids
        return []

    def _read_tasks(self, strict):
        """The children of the held threads; None (strict) when one of them has ended."""
        kids = []
        for _tid, children_fd, comm_fd in self.tasks:
            try:
                raw = _pread_all(children_fd)
                if comm_fd is not None:
                    os.pread(comm_fd, 64, 0)
            except OSError:
                if strict:
                    return None
                continue
            if raw:
                kids.extend(parse_children(raw))
        return kids

    def _relist(self, threads):
        """Hold the current threads' files, keeping those of threads still alive; None when
        the process is gone, False when they would not fit the budget."""
        if threads <= 1:
            tids = [str(self.pid)]
        else:
            try:
                tids = os.listdir("/proc/%d/task" % self.pid)
            except OSError:
                return None
        if _held_fds[0] + 2 * len(tids) > FD_BUDGET + 2 * len(self.tasks or ()):
            return False
        leader = str(self.pid)
        old = {}
        for task in self.tasks or ():
            try:
                if task[2] is not None:
                    os.pread(task[2], 64, 0)
                old[task[0]] = task
            except OSError:
                self._drop_tasks([task])
        tasks = []
        for tid in tids:
            task = old.pop(tid, None)
            if task is None:
                base = "/proc/%d/task/%s/" % (self.pid, tid)
                children_fd = _hold(base + "children")
                if children_fd is None:
                    continue   # that thread ended since the listing
                comm_fd = None if tid == leader else _hold(base + "comm")
                if tid != leader and comm_fd is None:
                    _let_go(children_fd)
                    continue
                task = (tid, children_fd, comm_fd)
            tasks.append(task)
        self._drop_tasks(old.values())
        self.tasks = tasks
        return True


def _walk_one(p, held, kept):
    """(stat bytes, children pids) of process p, or None when it is gone; its files move from
    `held` (the last walk's) to `kept` (this walk's)."""
    h = held.pop(p, None)
    stat_raw = h.stat() if h is not None else None
    if stat_raw is None and h is not None:
        h.close()   # the process it was opened for has ended; the number may be another's now
        h = None
    if h is None:
        if _held_fds[0] + 2 <= FD_BUDGET:
            fd = _hold("/proc/%d/stat" % p)
            if fd is None:
                return None
            h = _Held(p, fd)
            stat_raw = h.stat()
            if stat_raw is None:
                h.close()
                return None
        else:
            stat_raw = _proc_bytes("/proc/%d/stat" % p)
            if stat_raw is None:
                return None
            return stat_raw, _children_of(p, _stat_threads(stat_raw))
    threads = _stat_threads(stat_raw)
    kids = h.children(threads)
    if kids is None:    # its threads' files are over the budget: read them by path
        kids = _children_of(p, threads)
    kept[p] = h
    return stat_raw, kids


def _walk(pid, max_procs):
    walked, queue, seen = [], collections.deque([pid]), set()
    now = time.monotonic()
    with _held_lock:
        for root in [r for r, (t, _) in _held.items() if now - t > HELD_IDLE_S and r != pid]:
            for h in _held.pop(root)[1].values():
                h.close()
        held = _held.pop(pid, (0, {}))[1]
        kept = {}
        try:
            while queue and len(walked) < max_procs:
                p = queue.popleft()
                if p in seen:
                    continue
                seen.add(p)
                got = _walk_one(p, held, kept)
                if got is None:
                    if p == pid:
                        break   # the root is gone: nothing below it to walk
                    continue
                walked.append((p, got[0], got[1]))
                queue.extend(got[1])
        finally:
            for h in held.values():
                h.close()
            if walked:
                _held[pid] = [now, kept]
            else:
                for h in kept.values():
                    h.close()
    return walked, bool(queue)


def same_dir(a, b):
    """Whether paths a and b are one directory (device and inode), None when either cannot be
    looked at (/proc/PID/cwd of another user's process)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return None
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def op_proc_tree(pid, max_procs=MAX_TREE, run_dir=None):
    """The wrapper `pid` and every descendant: one answer that replaces pid_info for a run.
    With `run_dir`, the root's `in_run_dir` says whether its working directory is that one."""
    pid, max_procs = int(pid), max(1, min(int(max_procs), MAX_TREE))
    if pid <= 0:
        raise OpFailed("pid must be a positive integer, got %d" % pid)
    walked, truncated = _walk(pid, max_procs)
    base = "/proc/%d/" % pid
    main = walked[0][2][0] if walked and walked[0][2] else None
    in_run_dir = same_dir(base + "cwd", run_dir) if run_dir is not None and walked else None
    return proc_tree_record(pid, walked, _proc_bytes(base + "cmdline"), _proc_bytes(base + "status"),
                            _proc_bytes("/proc/%d/cmdline" % main) if main else None,
                            _CLK_TCK, truncated, in_run_dir, _PAGE_SIZE)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else None


# -- ops ----------------------------------------------------------------------------------


def op_now():
    return time.time()


def _not_regular(path, kind):
    if kind == "dir":
        return OpFailed("cannot read %s: Is a directory" % path)
    return OpFailed("cannot read %s: it is a %s, not a regular file" % (path, kind))


_KINDS = {statmod.S_IFREG: "file", statmod.S_IFDIR: "dir", statmod.S_IFIFO: "fifo",
          statmod.S_IFSOCK: "socket", statmod.S_IFCHR: "char-device", statmod.S_IFBLK: "block-device"}


def file_kind(mode):
    """The file type of a stat mode, as FileStat.kind names it."""
    return _KINDS.get(statmod.S_IFMT(mode), "other")


def _no_stat(path, error=""):
    return {"path": path, "exists": False, "size": 0, "mtime": 0.0, "inode": 0,
            "is_dir": False, "kind": "", "error": error}


def stat_one(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _no_stat(path)
    except OSError as exc:
        return _no_stat(path, exc.strerror or str(exc))
    return _stat_record(path, st, os.access(path, os.R_OK))


def _stat_record(path, st, readable):
    kind = _KINDS.get(statmod.S_IFMT(st.st_mode), "other")
    return {"path": path, "exists": True, "size": st.st_size, "mtime": st.st_mtime,
            "inode": st.st_ino, "is_dir": kind == "dir", "kind": kind,
            "error": "" if readable else "Permission denied"}


def op_stat(paths):
    return [stat_one(p) for p in paths]


def _missing(path, offset):
    return {"path": path, "offset": offset, "data": "", "size": 0, "inode": 0, "exists": False}


def _pseudo(path):
    """A file of the kernel's (procfs, sysfs, cgroupfs): its size is no measure of its text."""
    return path.startswith(("/proc/", "/sys/"))


def op_read(path, offset=0, max_bytes=1 << 20):
    """At most max_bytes (capped at MAX_READ) of a REGULAR file from offset. The open never
    waits (O_NONBLOCK: a FIFO with no writer would block it forever) and anything but a
    regular file is refused, so no FIFO, device or socket in a run dir can hold the agent. A
    file of the kernel's (/proc, /sys) that says 0 bytes is read to its end, up to max_bytes."""
    offset, max_bytes = int(offset), min(int(max_bytes), MAX_READ)
    if offset < 0 or max_bytes < 0:
        raise OpFailed("offset and max_bytes must not be negative")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return _missing(path, offset)
    except OSError as exc:
        raise OpFailed("cannot read %s: %s" % (path, exc.strerror or exc))
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind != "file":
            raise _not_regular(path, kind)
        want = max(0, st.st_size - offset)
        if st.st_size == 0 and _pseudo(path):
            want = max_bytes   # procfs, sysfs, cgroupfs: their files say 0 bytes and hold text
        parts, want = [], min(max_bytes, want)
        pos = offset
        while want > 0:
            part = os.pread(fd, want, pos)
            if not part:
                break
            parts.append(part)
            pos += len(part)
            want -= len(part)
        data = b"".join(parts)
    finally:
        os.close(fd)
    return {"path": path, "offset": offset, "data": base64.b64encode(data).decode("ascii"),
            "size": st.st_size, "inode": st.st_ino, "exists": True}


def op_read_tail(path, max_bytes=64 << 10):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _missing(path, 0)
    except OSError as exc:
        raise OpFailed("cannot read %s: %s" % (path, exc.strerror or exc))
    kind = file_kind(st.st_mode)
    if kind != "file":
        raise _not_regular(path, kind)
    return op_read(path, max(0, st.st_size - int(max_bytes)), max_bytes)


def op_pid_info(pids):
    return [pid_info_one(p) for p in pids]


def own_groups():
    """The process groups a signal must never reach: this process's, and its parent's (the
    shell or the dashboard that started it)."""
    groups = {os.getpgrp()}
    try:
        groups.add(os.getpgid(os.getppid()))
    except OSError:
        pass
    return groups


def signal_refusal(info, start_ticks, cmdline, cwd_same, group, own):
    """Why `info` (a pid_record) must not be signalled, or None. The identity is proven, not
    guessed: the start time, the exact command line and (when asked) the working directory;
    pid 1, a group id below 2 (kill(-1), kill(0)) and a group that holds the asker are never
    signalled. ShellOps' _SIGNAL applies the same rules in sh (tests/remote/test_shell_ops_parity.py)."""
    if info["pid"] <= 1:
        return "pid %d is init: never signalled" % info["pid"]
    # No start time, no proof that pid is still that process: nothing is sent.
    if start_ticks is None or info["start_ticks"] != int(start_ticks):
        return "start time differs"
    if cmdline is not None and list(info["cmdline"]) != list(cmdline):
        return "command line differs"
    if cwd_same is False:
        return "working directory differs, or cannot be looked at"
    if group:
        pgid = info["pgid"]
        if pgid is None or pgid <= 1 or pgid != info["pid"]:
            # Signalling the group of a non-leader would reach processes we never verified.
            return "not a process group leader"
        if pgid in own:
            return "its process group holds the stopper"
    return None


def op_signal(pid, sig, start_ticks=None, cmdline=None, cwd=None, group=False):
    """Signal pid (or its process group) only if it is provably the process we were told
    about: "sent", "gone" or "mismatch" (nothing was sent)."""
    if int(pid) <= 1:
        return "mismatch"
    info = pid_info_one(pid)
    if not info["alive"]:
        return "gone"
    cwd_same = None
    if cwd is not None:
        cwd_same = same_dir("/proc/%d/cwd" % info["pid"], cwd) is True   # unreadable: not proven
    if signal_refusal(info, start_ticks, cmdline, cwd_same, group, own_groups()) is not None:
        return "mismatch"
    try:
        if group:
            os.killpg(info["pgid"], int(sig))
        else:
            os.kill(info["pid"], int(sig))
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        raise OpFailed("not permitted to signal pid %d (owned by another user)" % info["pid"])
    return "sent"


# -- waiting for a run's processes to end (the fleet's exit watch) ----------------------------

MAX_WAIT_PIDS = 256          # pids one wait may watch
MAX_WAIT_S = 300.0           # the longest one wait may last
MAX_WAITS = 32               # waits in flight at once, each a thread
EXIT_POLL_S = 0.2            # how often /proc is looked at where no pidfd can be had
_WAITS = threading.BoundedSemaphore(MAX_WAITS)


def _wait_list(pids):
    """[(pid, start_ticks)] from [[pid, start_ticks], ...], or OpFailed naming what is wrong."""
    if not isinstance(pids, list) or not pids:
        raise OpFailed("pids must be a non-empty list of [pid, start_ticks] pairs")
    if len(pids) > MAX_WAIT_PIDS:
        raise OpFailed("at most %d pids per wait_exit, got %d" % (MAX_WAIT_PIDS, len(pids)))
    out = []
    for item in pids:
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in item)
                or item[0] <= 0 or item[1] < 0):
            raise OpFailed("each of pids must be [pid, start_ticks], a positive pid and its start "
                           "time in ticks, got %s" % json.dumps(item)[:80])
        out.append((item[0], item[1]))
    return out


def process_ended(pid, start_ticks):
    """Whether that very process has ended: no /proc/<pid>/stat, a zombie, or another start
    time (the pid now belongs to another process)."""
    raw = _proc_bytes("/proc/%d/stat" % pid)
    if raw is None:
        return True
    try:
        state, _pgid, start = parse_proc_stat(raw.decode("utf-8", "replace"))
    except (ValueError, IndexError):
        return True   # not a process record we can read: let the asker look for itself
    return state in ("Z", "X") or start != start_ticks


def _pidfds(watched):
    """{fd: (pid, start_ticks)} of a pidfd per live process (readable once it exits), or None
    where pidfds cannot be had (Python < 3.9, Linux < 5.3, a sandbox that forbids them)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or not hasattr(select, "poll"):
        return None
    fds = {}
    for pid, start in watched:
        try:
            fds[pidfd_open(pid)] = (pid, start)
        except ProcessLookupError:
            continue   # already gone: the look at /proc says so
        except OSError:
            for fd in fds:
                os.close(fd)
            return None
    return fds


def op_wait_exit(pids, timeout_s=30.0):
    """Return as soon as any of `pids` ([[pid, start_ticks], ...]) has ended, with those that
    have (a pid whose start time differs has: the process it named is gone), or [] once
    `timeout_s` (0 to MAX_WAIT_S) passed with all of them alive. It sleeps in the kernel on
    pidfds where it can, else looks at /proc every EXIT_POLL_S; a blocking op, so it holds up
    no other request, and its fds are closed when it returns (the agent exits at EOF)."""
    watched = _wait_list(pids)
    try:
        timeout = float(timeout_s)
    except (TypeError, ValueError):
        raise OpFailed("timeout_s must be a number of seconds, got %s" % json.dumps(timeout_s)[:40])
    if timeout != timeout:
        raise OpFailed("timeout_s must be a number of seconds, got NaN")
    timeout = max(0.0, min(timeout, MAX_WAIT_S))
    if not _WAITS.acquire(False):
        raise OpFailed("%d waits are already in flight on this agent" % MAX_WAITS)
    fds = {}
    try:
        deadline = time.monotonic() + timeout
        # The pidfds first, then the look at /proc: a pidfd opened on a pid already reused is
        # caught by that look (its start time differs), so no exit falls between the two.
        fds = _pidfds(watched) or {}
        sleeping = set(fds)   # the pidfds still slept on
        waiter = select.poll() if fds else None
        for fd in fds:
            waiter.register(fd, select.POLLIN)
        while True:
            gone = [[pid, start] for pid, start in watched if process_ended(pid, start)]
            left = deadline - time.monotonic()
            if gone or left <= 0:
                return gone
            # Every process on a pidfd: sleep until one exits. Else /proc every EXIT_POLL_S.
            nap = left if len(sleeping) == len(watched) else min(EXIT_POLL_S, left)
            if waiter is None:
                time.sleep(nap)
                continue
            for fd, _ in waiter.poll(nap * 1000.0):
                # Readable, so ended by the next look at /proc; if not (a thread group whose
                # leader exited first), /proc is looked at from then on: never a busy loop.
                waiter.unregister(fd)
                sleeping.discard(fd)
    finally:
        for fd in fds:
            os.close(fd)
        _WAITS.release()


# -- stacks of a process that cannot run Python (its probe registered faulthandler) ---------

DUMP_WAIT_S = 1.0            # how long a dump may take to appear
DUMP_SETTLE_S = 0.03         # a dump is whole once its file stopped growing this long
DUMP_MAX_BYTES = 256 << 10


def signal_caught(status_raw, sig):
    """Whether /proc/<pid>/status's SigCgt says the process has a handler for `sig`."""
    for line in (status_raw or b"").decode("ascii", "replace").splitlines():
        if line.startswith("SigCgt:"):
            try:
                return bool(int(line.split()[1], 16) >> (int(sig) - 1) & 1)
            except (IndexError, ValueError):
                return False
    return False


def _dump_answer(status, data=b"", mtime=0.0):
    return {"status": status, "data": base64.b64encode(data[:DUMP_MAX_BYTES]).decode("ascii"),
            "time": mtime}


def op_dump_stacks(pid, sig, start_ticks, path, min_interval_s=5):
    """Ask process `pid` for every thread's stack on `sig`, the signal its probe registered
    faulthandler on, written to `path` (opened by the probe with O_APPEND, so emptying it
    first makes the dump start at 0). Sent only to that very process (start time), only if it
    catches `sig` (SigCgt: never a signal the program did not register a handler for), and at
    most once per `min_interval_s` (a dump newer than that is answered as "recent")."""
    info = pid_info_one(pid)
    if not info["alive"]:
        return _dump_answer("gone")
    if start_ticks is None or info["start_ticks"] != int(start_ticks):
        return _dump_answer("mismatch")
    if not signal_caught(_maybe("/proc/%d/status" % info["pid"]), sig):
        return _dump_answer("no-handler")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise OpFailed("cannot open %s: %s" % (path, exc.strerror or exc))
    try:
        st = os.fstat(fd)
        if file_kind(st.st_mode) != "file":
            raise OpFailed("cannot open %s: it is a %s, not a regular file" % (path, file_kind(st.st_mode)))
        # Whole seconds, as `stat -c %Y` and `date +%s` give them to the shell's twin.
        if st.st_size > 0 and int(time.time()) - int(st.st_mtime) < int(min_interval_s):
            return _dump_answer("recent", os.pread(fd, DUMP_MAX_BYTES, 0), st.st_mtime)
        os.ftruncate(fd, 0)
        try:
            os.kill(info["pid"], int(sig))
        except ProcessLookupError:
            return _dump_answer("gone")
        except PermissionError:
            raise OpFailed("not permitted to signal pid %d (owned by another user)" % info["pid"])
        deadline = time.time() + DUMP_WAIT_S
        size = 0
        while time.time() < deadline:
            time.sleep(DUMP_SETTLE_S)
            now_size = os.fstat(fd).st_size
            if now_size and now_size == size:
                break
            size = now_size
        st = os.fstat(fd)
        return _dump_answer("dumped" if st.st_size else "no-dump", os.pread(fd, DUMP_MAX_BYTES, 0), st.st_mtime)
    finally:
        os.close(fd)


PY_SPY_TIMEOUT_S = 10


def op_py_spy_dump(pid, start_ticks):
    """`py-spy dump --pid` of that very process, where py-spy is installed (it reads the
    stacks from outside, by ptrace; nothing of ours needs to run in the process)."""
    info = pid_info_one(pid)
    if not info["alive"]:
        return _dump_answer("gone")
    if start_ticks is None or info["start_ticks"] != int(start_ticks):
        return _dump_answer("mismatch")
    exe = shutil.which("py-spy")
    if exe is None:
        return _dump_answer("no-py-spy")
    try:
        res = subprocess.run([exe, "dump", "--pid", str(info["pid"])], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PY_SPY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return _dump_answer("failed", b"py-spy dump took more than %d s" % PY_SPY_TIMEOUT_S)
    return _dump_answer("dumped" if res.returncode == 0 else "failed", res.stdout, time.time())


def _user():
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


def op_hello():
    own = pid_info_one(os.getpid())
    return {"protocol": PROTOCOL, "python": "%d.%d.%d" % sys.version_info[:3],
            "executable": sys.executable, "pid": os.getpid(), "nspid": own["nspid"],
            "hostname": socket.gethostname(), "user": _user(), "uid": os.getuid(),
            "home": os.path.expanduser("~"), "ops": sorted(HANDLERS),
            "args": dict((name, _arg_names(fn)) for name, fn in HANDLERS.items()),
            "extras_failed": list(EXTRAS_FAILED)}


def _arg_names(fn):
    """The keyword arguments op `fn` takes: a client asks an argument only of an agent whose op
    takes it (an older agent's may not)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    return list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])


def op_which(names):
    return {n: shutil.which(n) for n in names}


def _nearest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def op_disk_free(path):
    """Free space where `path` is or would be created (its nearest existing ancestor)."""
    where = _nearest_existing(path)
    try:
        st = os.statvfs(where)
    except OSError as exc:
        raise OpFailed("cannot measure free space at %s: %s" % (where, exc.strerror or exc))
    return {"path": path, "checked": where, "free": st.f_bavail * st.f_frsize,
            "total": st.f_blocks * st.f_frsize}


def op_probe_dir(path, create=True):
    """Can a run directory live here? Creates it (when asked) and writes + removes a file,
    because os.access lies for root on read-only mounts."""
    rec = {"path": path, "exists": os.path.isdir(path), "created": False, "writable": False,
           "error": ""}
    if not rec["exists"] and os.path.lexists(path):
        rec["error"] = "exists and is not a directory"
        return rec
    if not rec["exists"]:
        if not create:
            rec["error"] = "No such file or directory"
            return rec
        try:
            os.makedirs(path)
        except FileExistsError:
            if not os.path.isdir(path):
                rec["error"] = "exists and is not a directory"
                return rec
        except OSError as exc:
            rec["error"] = exc.strerror or str(exc)
            return rec
        rec["exists"], rec["created"] = True, True
    probe = os.path.join(path, ".dflash-probe.%d" % os.getpid())
    try:
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.unlink(probe)
        rec["writable"] = True
    except OSError as exc:
        rec["error"] = exc.strerror or str(exc)
    return rec


def op_list_dir(path):
    """A stat of every entry of directory `path`, by name: what stat_one answers of each."""
    try:
        with os.scandir(path) as it:
            paths = [e.path for e in it]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise OpFailed("cannot list %s: %s" % (path, exc.strerror or exc))
    out = []
    # The entries' own paths (no join in Python), in name order: a listing's paths share
    # their directory, so their order is their names' order.
    paths.sort()
    for full in paths:
        try:
            st = os.stat(full)
        except FileNotFoundError:
            out.append(_no_stat(full))
            continue
        except OSError as exc:
            out.append(_no_stat(full, exc.strerror or str(exc)))
            continue
        out.append(_stat_record(full, st, os.access(full, os.R_OK)))
    return out


def _listing(path, notes):
    """os.scandir(path), for a walk: None for a folder gone since it was seen, and for one that
    cannot be listed, which the walk's notes then name."""
    try:
        return os.scandir(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.append("cannot list %s: %s" % (path, exc.strerror or exc))
        return None


class _FindFiles:
    """find_files' directory listings, kept between searches (one agent serves one dashboard).

    A search given `since` (the `mark` of an earlier answer of this agent) lists again only the
    directories whose (inode, mtime_ns) moved since they were listed, stats only their files,
    and answers only what changed since that mark: the found files of each directory that
    changed, and in "kept" the directories whose found files are as they were then. A new,
    renamed or removed entry moves its directory's mtime; a file rewritten in place does not,
    so its new stat comes with the next search with `rescan` (every directory listed again, the
    answer still only what changed) or without `since`, or when it is in `fresh`: the paths whose
    stats are asked again whatever their directory says, each a file or a directory to list again. A listing taken less than SETTLE_S after its directory's mtime is not
    trusted: a file system with coarse timestamps may move that directory again within the
    same tick."""

    SETTLE_S = 2.0
    MAX_DIRS = 8192          # listings kept (the least recently used go first)

    def __init__(self):
        self.lock = threading.Lock()
        self.token = base64.b16encode(os.urandom(6)).decode().lower()
        self.gen = 0
        # (patterns, dir) -> [(inode, mtime_ns), trusted, subdirs, records, entries, gen]
        self.dirs = collections.OrderedDict()

    def search(self, roots, patterns, max_depth, max_entries, max_found, skip, since, fresh, rescan):
        import fnmatch
        import re
        patterns = tuple(patterns)
        # One expression for all patterns: a name is matched once, not once per pattern.
        match = re.compile("|".join(fnmatch.translate(p) for p in patterns)).match if patterns else None
        skip, fresh = set(skip), set(fresh or ())
        base = since[1] if isinstance(since, list) and len(since) == 2 and since[0] == self.token else None
        found, kept, notes = [], {}, []
        acc = {"seen": 0, "found": 0, "listed": 0, "stated": 0}
        for root in roots:
            if root.startswith("~/"):
                root = os.path.join(os.path.expanduser("~"), root[2:])
            if os.path.isfile(root):
                found.append(stat_one(root))
                acc["found"] += 1
                acc["stated"] += 1
                continue
            queue = collections.deque([(root, 0)])
            while queue and acc["found"] < max_found and acc["seen"] <= max_entries:
                path, depth = queue.popleft()
                got = self._dir(path, patterns, base, rescan or path in fresh, fresh, max_entries, max_found, acc, notes,
                                match)
                if got is None:
                    continue
                subdirs, records, gen = got
                for name in subdirs:
                    if depth < max_depth and name not in skip:
                        queue.append((os.path.join(path, name), depth + 1))
                if records and base is not None and gen <= base:
                    kept[path] = None
                else:
                    found.extend(records)
        found = list(dict((r["path"], r) for r in found).values())   # a root found twice, once
        found.sort(key=lambda r: r["path"])
        return {"found": found, "notes": notes, "kept": list(kept), "full": base is None,
                "mark": [self.token, self.gen], "listed": acc["listed"], "stated": acc["stated"]}

    def _dir(self, path, patterns, base, relist, fresh, max_entries, max_found, acc, notes, match):
        """(subdirs, found records, gen of those records) of one directory; None when it cannot
        be listed."""
        key = (patterns, path)
        try:
            sig = os.stat(path)
        except FileNotFoundError:
            self.dirs.pop(key, None)
            return None
        except OSError as exc:
            notes.append("cannot list %s: %s" % (path, exc.strerror or exc))
            return None
        sig = (sig.st_ino, sig.st_mtime_ns)
        held = self.dirs.get(key)
        if (base is not None and held is not None and held[0] == sig and held[1] and not relist
                and acc["seen"] + held[4] <= max_entries and acc["found"] + len(held[3]) < max_found):
            self.dirs.move_to_end(key)
            acc["seen"] += held[4]
            acc["found"] += len(held[3])
            records = held[3]
            if fresh and any(r["path"] in fresh for r in records):
                records = [stat_one(r["path"]) if r["path"] in fresh else r for r in records]
                acc["stated"] += sum(1 for r in records if r["path"] in fresh)
                if records != held[3]:
                    self.gen += 1
                    held[3], held[5] = records, self.gen
            return held[2], held[3], held[5]
        listed_at = time.time()
        it = _listing(path, notes)
        if it is None:   # gone, or not listable (named in notes): its old listing says nothing now
            self.dirs.pop(key, None)
            return None
        acc["listed"] += 1
        subdirs, records, entries, whole = [], [], 0, True
        with it:
            for entry in it:
                acc["seen"] += 1
                entries += 1
                if acc["seen"] > max_entries:
                    notes.append("stopped looking after %d entries (in %s)" % (max_entries, path))
                    whole = False
                    break
                name = entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not name.startswith("."):
                            subdirs.append(name)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                if match is not None and match(name):
                    records.append(stat_one(entry.path))
                    acc["stated"] += 1
                    acc["found"] += 1
                    if acc["found"] >= max_found:
                        notes.append("stopped at %d files found (in %s)" % (max_found, path))
                        whole = False
                        break
        if not whole:
            self.dirs.pop(key, None)
            self.gen += 1
            return subdirs, records, self.gen
        gen = held[5] if held is not None and held[3] == records else self.gen + 1
        self.gen = max(self.gen, gen)
        self.dirs[key] = [sig, listed_at - sig[1] / 1e9 >= self.SETTLE_S, subdirs, records, entries, gen]
        self.dirs.move_to_end(key)
        while len(self.dirs) > self.MAX_DIRS:
            self.dirs.popitem(last=False)
        return subdirs, records, gen


_FIND = _FindFiles()


def op_find_files(roots, patterns, max_depth=3, max_entries=20000, max_found=512, skip=(), since=None, fresh=(),
                  rescan=False):
    """Regular files under `roots` whose name matches one of `patterns` (fnmatch), breadth
    first, at most `max_depth` directories down; hidden directories and those named in `skip`
    are not entered. A root that is a file is itself found. "~/" starts a root at $HOME.
    Stops after `max_entries` entries seen in all or `max_found` found, saying so in "notes";
    the found files' stat records come sorted by path. With `since` (an earlier answer's
    "mark"), only what changed since (_FindFiles), every directory listed again where `rescan`;
    "listed" and "stated": the directories this search listed and the files it stat'd."""
    with _FIND.lock:
        return _FIND.search(roots, patterns, max_depth, max_entries, max_found, skip, since, fresh, rescan)


def op_remove_if_holds(path, token, max_bytes=4096):
    """Remove PATH only if it is a regular file (not a link) whose first MAX_BYTES hold TOKEN:
    a launch gives back its own claim and never one another launcher has put there since."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise OpFailed("cannot look at %s: %s" % (path, exc.strerror or exc))
    if not statmod.S_ISREG(st.st_mode):
        return False
    try:
        with open(path, "rb") as f:
            held = token.encode() in f.read(max_bytes)
        if held:
            os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise OpFailed("cannot remove %s: %s" % (path, exc.strerror or exc))
    return held


def _item(fn, *args):
    """One part of a batched answer: {"ok": true, "result": ...} or {"ok": false, "error": ...}."""
    try:
        return {"ok": True, "result": fn(*args)}
    except OpFailed as exc:
        return {"ok": False, "error": str(exc)}


def op_observe(looks):
    """Looks at several run dirs in one request (a fleet's poll of one target's profiles): one
    answer per look of `looks` (each the keyword arguments of `observe_one`), in order, each
    {"ok": true, "result": ...} or {"ok": false, "error": ...}, so one bad look fails alone."""
    if not isinstance(looks, list):
        raise OpFailed("looks must be a list")
    return [_one_look(look) for look in looks]


def _one_look(look):
    try:
        if not isinstance(look, dict):
            raise OpFailed("a look must be an object")
        if "plan" in look:
            return {"ok": True, "result": observe_planned(**look)}
        return {"ok": True, "result": observe_one(**look)}
    except OutOfStep as exc:
        return {"ok": False, "error": str(exc), "resend": True}
    except OpFailed as exc:
        return {"ok": False, "error": str(exc)}
    except TypeError as exc:
        return {"ok": False, "error": "bad arguments for observe: %s" % exc}
    except Exception as exc:   # a look's bug must not fail the others
        return {"ok": False, "error": "observe failed: %s: %s" % (type(exc).__name__, exc)}


def observe_one(paths, reads=None, known=None, grown=None, list_dirs=(), proc_tree=None):
    """The first round of one look at a run dir, in one request: the clock, a stat of `paths`,
    the listings of `list_dirs`, then `reads` ({path: max_bytes}, from offset 0) of the files
    that exist and whose (inode, size, mtime) is not `known[path]` (the client holds those
    already), the new bytes of `grown` files ({path: [offset, max_bytes]}: read from offset
    when the file is bigger than that), and the process tree of `proc_tree` ({"pid",
    "run_dir"}). Each part answers what its own op would, in that order; reads are keyed by path."""
    reads, known, grown = reads or {}, known or {}, grown or {}
    now = op_now()
    stats = op_stat(paths)
    listings = dict((path, _item(op_list_dir, path)) for path in list_dirs)
    by_path = dict((st["path"], st) for st in stats)
    # A listed file's stat of a moment ago decides its read as well as a second stat would
    # (a probe report's, usually): one stat a file, not two.
    for item in listings.values():
        if item.get("ok"):
            for st in item["result"]:
                by_path.setdefault(st["path"], st)
    answers = {}
    for path, max_bytes in reads.items():
        st = by_path.get(path) or stat_one(path)
        if not st["exists"]:
            continue
        if known.get(path) == [st["inode"], st["size"], st["mtime"]]:
            continue
        answers[path] = _item(op_read, path, 0, max_bytes)
    for path, (offset, max_bytes) in grown.items():
        st = by_path.get(path)
        if st is not None and st["exists"] and st["kind"] == "file" and st["size"] > offset:
            answers[path] = _item(op_read, path, offset, max_bytes)
    tree = None
    if proc_tree:
        tree = _item(op_proc_tree, proc_tree["pid"], MAX_TREE, proc_tree.get("run_dir"))
    return {"now": now, "stats": stats, "reads": answers, "listings": listings, "proc_tree": tree}


# -- look plans: a look asked every second, sent once per connection ----------------------
#
# This process serves one client over one channel, so what it keeps here is what that client
# sent and was answered on this channel, and nothing of it outlives the channel: a client that
# reconnects talks to a new agent that knows no plan. Per plan: the look's arguments (a look
# sends only those that changed), the number of the last look applied (a look must be the next
# one, or the client and this agent disagree on what the other holds), and the parts of the last
# answer (an answer sends a stat, a listing entry or a tree field only when it changed).

PLANS = {}
MAX_PLANS = 4096


class OutOfStep(OpFailed):
    """A planned look this agent cannot apply (plan unknown, or a look of it missed): the
    client sends the plan again whole."""


def observe_planned(plan, seq, args=None, reset=False):
    """observe_one on plan `plan`'s arguments updated by `args`; `reset` starts the plan anew
    (its first look on this channel, or the client resending it whole). `seq` numbers the
    plan's looks from 1 at its reset. The answer: observe_one's, with "seq", and each stat,
    listing entry and process-tree field equal to the one this plan's last answer carried
    sent as null (stats and listing entries, by position) or left out (tree fields, the tree
    then {"ok": true, "delta": {...}})."""
    if args is not None and not isinstance(args, dict):
        raise OpFailed("args must be an object")
    state = PLANS.get(plan)
    if reset:
        if state is None and len(PLANS) >= MAX_PLANS:
            PLANS.clear()   # the clients of the dropped plans are told to resend them
        state = PLANS[plan] = {"args": {}, "seq": 0, "last": None}
    elif state is None:
        raise OutOfStep("look plan %r is not known here: send it whole" % (plan,))
    if seq != state["seq"] + 1:
        PLANS.pop(plan, None)
        raise OutOfStep("look plan %r: look %r after %r: send it whole" % (plan, seq, state["seq"]))
    state["args"].update(args or {})
    state["seq"] = seq
    full = observe_one(**state["args"])
    last, state["last"] = state["last"], full
    answer = dict(full, seq=seq)
    if last is not None:
        answer["stats"] = _unchanged_as_null(last["stats"], full["stats"])
        answer["listings"] = dict((path, _listing_delta(last["listings"].get(path), item))
                                  for path, item in full["listings"].items())
        answer["proc_tree"] = _tree_delta(last["proc_tree"], full["proc_tree"])
    return answer


def _unchanged_as_null(last, new):
    return [None if i < len(last) and last[i] == entry else entry for i, entry in enumerate(new)]


def _listing_delta(last, item):
    if last is None or not (last.get("ok") and item.get("ok")):
        return item
    return {"ok": True, "result": _unchanged_as_null(last["result"], item["result"])}


def _tree_delta(last, item):
    if last is None or item is None or not (last.get("ok") and item.get("ok")):
        return item
    before = last["result"]
    return {"ok": True, "delta": dict((k, v) for k, v in item["result"].items()
                                      if k not in before or before[k] != v)}


# -- metric files: found and read for run/evidence/metric_files/ (the dashboard decodes) ---
#
# One `metric_read` request per poll carries every question about a run's metric files: a
# bounded search of directories for the files of known names, the new bytes of files by
# offset, and rows of SQLite files opened read-only. The agent ships bytes and rows; it parses
# nothing. Bounded: entries looked at per search, bytes per answer, rows per query, time per
# query and per request (a view that never ends is interrupted), and a SQLite file locked by its
# writer answers at once ("database is locked"), never waits.

METRIC_READ_BUDGET = 6 << 20     # bytes of file data in one metric_read answer
METRIC_SQL_TIMEOUT_S = 0.2       # waiting for a writer's lock
METRIC_SQL_QUERY_S = 1.0         # one query's run (a progress handler interrupts it)
METRIC_SQL_REQUEST_S = 2.0       # every query of one metric_read request together


def trackio_dir():
    """Where trackio keeps its projects for this user: TRACKIO_DIR, else $HF_HOME/trackio
    (HF_HOME itself defaulting to $XDG_CACHE_HOME/huggingface, as huggingface_hub does)."""
    if os.environ.get("TRACKIO_DIR"):
        return os.path.expanduser(os.environ["TRACKIO_DIR"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return os.path.join(os.path.expanduser(home), "trackio")


def _trackio_projects(dirs, max_entries, notes):
    """The project databases (*.db) directly in each of `dirs` ("" is trackio_dir()), each
    stamped with the newer mtime of it and its WAL (trackio writes in WAL mode: the database
    file itself changes only at a checkpoint)."""
    found = []
    for d in dirs:
        d = os.path.expanduser(d) if d else trackio_dir()
        try:
            names = sorted(os.listdir(d))[:max_entries]
        except FileNotFoundError:
            continue
        except OSError as exc:
            notes.append("cannot list %s: %s" % (d, exc.strerror or exc))
            continue
        for name in names:
            if not name.endswith(".db") or name.startswith("."):
                continue
            rec = stat_one(os.path.join(d, name))
            if rec["kind"] != "file":
                continue
            wal = stat_one(rec["path"] + "-wal")
            if wal["kind"] == "file" and wal["mtime"] > rec["mtime"]:
                rec["mtime"] = wal["mtime"]
            rec["under"], rec["trackio"] = False, True
            found.append(rec)
    return found


METRIC_FIND_S = 1.5              # one search's time, every root together


def _mtime_key(entry):
    """A directory's place in the search: the most recently written first (a writer that
    creates its files there, as TensorBoard's does, freshens the directory's mtime)."""
    try:
        return -entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0


def metric_find(roots, patterns, max_depth=4, max_entries=200000, max_found=512, skip_top=(),
                deeper_under=(), deeper_by=3, trackio_dirs=(), max_seconds=METRIC_FIND_S):
    """Files under `roots` whose name matches one of `patterns` (fnmatch), at most `max_depth`
    directories down (`deeper_by` more below a directory named in `deeper_under`, such as
    mlruns), hidden directories and `skip_top` (of a root) skipped; the directory written most
    recently looked in first. Stops after `max_entries` entries per root or `max_seconds` in
    all, saying in "notes" how far it went and which directories it did not look in (or only in
    part). Then trackio's project databases in `trackio_dirs` (marked "trackio")."""
    import fnmatch
    import heapq
    import re
    found, notes = [], []
    found += _trackio_projects(trackio_dirs, max_entries, notes)
    wanted = re.compile("|".join("(?:%s)" % fnmatch.translate(p) for p in patterns) or "(?!)")
    deadline = time.monotonic() + float(max_seconds)
    for root in roots:
        root = os.path.expanduser(root)
        if os.path.isfile(root):     # a file named itself
            rec = stat_one(root)
            rec["under"] = False
            found.append(rec)
            continue
        heap, pushed, seen, looked, cut, part = [(0.0, 0, root, 0, False)], 1, 0, 0, "", ""
        while heap and len(found) < max_found and not cut:
            _, _, path, depth, deeper = heapq.heappop(heap)
            if seen >= max_entries or time.monotonic() > deadline:
                heapq.heappush(heap, (0.0, 0, path, depth, deeper))
                cut = "after %d entries" % seen
                break
            it = _listing(path, notes)
            if it is None:
                continue
            looked += 1
            with it:
                for entry in it:
                    seen += 1
                    if seen > max_entries or (seen & 1023 == 0 and time.monotonic() > deadline):
                        cut, part = "after %d entries" % (seen - 1), os.path.relpath(path, root)
                        break
                    name = entry.name
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if is_dir:
                        if name.startswith(".") or name == "__pycache__" or depth == 0 and name in skip_top:
                            continue
                        under = deeper or name in deeper_under
                        if depth < max_depth + (deeper_by if under else 0):
                            heapq.heappush(heap, (_mtime_key(entry), pushed, entry.path, depth + 1, under))
                            pushed += 1
                    elif (deeper and os.sep + "metrics" + os.sep in entry.path) or wanted.match(name):
                        rec = stat_one(entry.path)
                        if rec["kind"] == "file":
                            rec["under"] = bool(deeper)
                            found.append(rec)
                            if len(found) >= max_found:
                                notes.append("stopped at %d metric files under %s" % (max_found, root))
                                break
        if cut:
            if time.monotonic() > deadline:
                cut += " (%.1f s)" % float(max_seconds)
            rest = sorted(heap)
            rel = [os.path.relpath(p, root) for _, _, p, _, _ in rest]
            notes.append("stopped looking in %s %s in %d directories (the newest written first)%s; not looked in: %s%s"
                         % (root, cut, looked, "; %s only in part" % part if part else "",
                            ", ".join(rel[:5]) or "none", " and %d more" % (len(rel) - 5) if len(rel) > 5 else ""))
    return {"found": found, "notes": notes}


def metric_sql(path, query, params=(), max_rows=5000, deadline=None):
    """Rows of a read-only SELECT on the SQLite file `path` (never created, never written):
    at most `max_rows`, and interrupted at `deadline` (time.monotonic(); METRIC_SQL_QUERY_S
    from now at most) by a progress handler, whatever the file holds (a recursive view named
    like the table, a join of millions of rows): an error naming the file, never a wait."""
    import sqlite3
    try:
        from urllib.parse import quote
    except ImportError:   # pragma: no cover
        quote = lambda s: s
    if not query.lstrip().upper().startswith("SELECT"):
        raise OpFailed("only a SELECT is asked of %s" % path)
    st = stat_one(path)
    if st["kind"] != "file":
        return {"stat": st, "rows": []}
    try:
        con = sqlite3.connect("file:%s?mode=ro" % quote(path), uri=True, timeout=METRIC_SQL_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise OpFailed("cannot open %s: %s" % (path, exc))
    now = time.monotonic()
    stop = min(now + METRIC_SQL_QUERY_S, deadline if deadline is not None else now + METRIC_SQL_QUERY_S)
    # Called every 1000 virtual-machine steps (~0.1 ms): a non-zero answer interrupts the query.
    con.set_progress_handler(lambda: time.monotonic() > stop, 1000)
    try:
        con.execute("PRAGMA query_only = 1")
        rows = con.execute(query, list(params)).fetchmany(max(1, min(int(max_rows), 50000)))
    except sqlite3.OperationalError as exc:
        if time.monotonic() > stop:
            raise OpFailed("%s: no answer within %.1f s (a view or query that never ends?)" % (path, stop - now))
        raise OpFailed("%s: %s" % (path, exc))
    except sqlite3.Error as exc:
        raise OpFailed("%s: %s" % (path, exc))
    finally:
        con.close()
    return {"stat": st, "rows": [[c if not isinstance(c, bytes) else None for c in r] for r in rows]}


def metric_bytes(path, offset=0, max_bytes=1 << 20, inode=0, known=None, head=0, budget=None):
    """A file's stat and its bytes from `offset` (from 0 when its inode is not `inode` or it
    is shorter than `offset`: replaced or truncated; "restarted" says so); none when its
    (inode, size, mtime) is `known`. `head`: its first bytes too (a CSV header, compared)."""
    st = stat_one(path)
    out = {"stat": st, "offset": int(offset), "data": "", "restarted": False, "head": ""}
    if st["kind"] != "file" or st["error"]:
        return out
    if known is not None and list(known) == [st["inode"], st["size"], st["mtime"]]:
        return out
    offset = int(offset)
    if inode and (st["inode"] != inode or st["size"] < offset):
        offset, out["restarted"] = 0, True
    want = min(int(max_bytes), budget[0] if budget else int(max_bytes))
    if st["size"] > offset and want > 0:
        chunk = op_read(path, offset, want)
        out["data"] = chunk["data"]
        out["stat"] = dict(st, size=chunk["size"], inode=chunk["inode"])
        if budget:
            budget[0] -= len(chunk["data"]) * 3 // 4
    out["offset"] = offset
    if head and offset > 0:
        out["head"] = op_read(path, 0, int(head))["data"]
    return out


def op_metric_read(items):
    """Answers to `items`, in order, each {"ok": true, "result": ...} or {"ok": false, "error"}:
    {"find": {...metric_find arguments}}, {"read": path, ...metric_bytes arguments},
    {"sql": path, "query": ..., "params": [...], "max_rows": n}."""
    if not isinstance(items, list):
        raise OpFailed("items must be a list")
    budget = [METRIC_READ_BUDGET]
    sql_deadline = time.monotonic() + METRIC_SQL_REQUEST_S
    out = []
    for item in items:
        try:
            if not isinstance(item, dict):
                raise OpFailed("an item must be an object")
            if "find" in item:
                out.append({"ok": True, "result": metric_find(**item["find"])})
            elif "sql" in item:
                args = dict(item)
                if time.monotonic() >= sql_deadline:
                    raise OpFailed("%s: not read this poll (the time for SQLite reads was spent)" % args["sql"])
                out.append({"ok": True, "result": metric_sql(args.pop("sql"), deadline=sql_deadline, **args)})
            elif "read" in item:
                args = dict(item)
                out.append({"ok": True, "result": metric_bytes(args.pop("read"), budget=budget, **args)})
            else:
                raise OpFailed("an item asks for find, read or sql")
        except OpFailed as exc:
            out.append({"ok": False, "error": str(exc)})
        except TypeError as exc:
            out.append({"ok": False, "error": "bad arguments: %s" % exc})
    return out


for _name, _fn in (("hello", op_hello), ("now", op_now), ("stat", op_stat), ("read", op_read),
                   ("read_tail", op_read_tail), ("pid_info", op_pid_info),
                   ("signal", op_signal), ("which", op_which), ("disk_free", op_disk_free),
                   ("probe_dir", op_probe_dir), ("list_dir", op_list_dir),
                   ("proc_tree", op_proc_tree), ("dump_stacks", op_dump_stacks),
                   ("py_spy_dump", op_py_spy_dump), ("observe", op_observe),
                   ("remove_if_holds", op_remove_if_holds), ("wait_exit", op_wait_exit),
                   ("metric_read", op_metric_read), ("find_files", op_find_files)):
    # statvfs on a dead NFS mount can hang: keep it off the line that answers stat. Reads stay
    # on that line (a thread per request costs ~1 ms against 0.1 ms): they cannot block on a
    # FIFO or device, as op_read opens non-blocking and refuses anything but a regular file.
    # A stack dump waits up to a second for the dump to be written; py-spy runs a process; an
    # exit watch waits for a process to end. A metric read searches directories and opens
    # SQLite files (a slow mount, a locked database) in a thread of its own too; so does a
    # search for files (find_files) through directories that may be slow or huge.
    register(_name, _fn, blocking=_name in ("disk_free", "dump_stacks", "py_spy_dump", "wait_exit", "metric_read",
                                                "find_files"))

EXTRAS_FAILED = []


# -- serving ------------------------------------------------------------------------------


# Most of a look's answer is file data in base64 (a log's new bytes, the probe reports), whose
# alphabet JSON never escapes; the encoder would still scan every character of it. So the data
# of a look's reads is lifted out before encoding, a placeholder in its place, and put back
# between the quotes after: the line is byte for byte json.dumps' own. A placeholder holds a NUL
# (no path, argument or base64 text does) and a nonce drawn at start.
SPLICE_MIN = 512
_SPLICE_MARK = "\0" + base64.b16encode(os.urandom(8)).decode("ascii") + "-"
_SPLICE_SPLIT = json.dumps(_SPLICE_MARK)[:-1]


def _lift_look_data(looks, spliced):
    """op_observe's answer with each read's data of SPLICE_MIN characters or more replaced by a
    placeholder, the data appended to `spliced`; the answer given is left as it was."""
    out = []
    for look in looks:
        reads = look.get("result", {}).get("reads") if look.get("ok") else None
        if reads:
            lifted = {}
            for path, item in reads.items():
                data = item.get("result", {}).get("data") if item.get("ok") else None
                if isinstance(data, str) and len(data) >= SPLICE_MIN:
                    item = dict(item, result=dict(item["result"], data=_SPLICE_MARK + str(len(spliced))))
                    spliced.append(data)
                lifted[path] = item
            look = dict(look, result=dict(look["result"], reads=lifted))
        out.append(look)
    return out


def encode_line(obj, spliced=None):
    """One answer line: json.dumps(obj) with the data lifted into `spliced` put back."""
    text = json.dumps(obj, separators=(",", ":"))
    if not spliced:
        return (text + "\n").encode("utf-8")
    # Joined as bytes (json.dumps' text is ASCII, base64 is): one copy of the line, not two.
    pieces = text.split(_SPLICE_SPLIT)
    parts = [pieces[0].encode("ascii")]
    for piece in pieces[1:]:
        end = piece.index('"')
        parts.append(b'"')
        parts.append(spliced[int(piece[:end])].encode("ascii"))
        parts.append(piece[end:].encode("ascii"))
    parts.append(b"\n")
    return b"".join(parts)


class Server(object):
    def __init__(self, inp, out):
        self.inp = inp
        self.out = out
        self.lock = threading.Lock()
        self.serving = threading.current_thread()

    def send(self, obj, spliced=None):
        line = encode_line(obj, spliced)
        with self.lock:
            self.out.write(line)
            # The serving loop flushes once no request is waiting (one packet for the answers
            # to a batch of requests); a blocking op's thread answers at once.
            if threading.current_thread() is not self.serving:
                self.out.flush()

    def flush_if_idle(self):
        """Flush the answers unless another request is already waiting to be read."""
        try:
            waiting = bool(select.select([self.inp], [], [], 0)[0])
        except (OSError, ValueError):
            waiting = False
        if not waiting:
            with self.lock:
                self.out.flush()

    def answer(self, rid, op, args):
        try:
            fn = HANDLERS.get(op)
            if fn is None:
                raise OpFailed("unknown op %r (this agent has: %s)" % (op, ", ".join(sorted(HANDLERS))))
            result = fn(**args)
            spliced = []
            if op == "observe":
                result = _lift_look_data(result, spliced)
            self.send({"id": rid, "ok": True, "result": result}, spliced)
        except OpFailed as exc:
            self.send({"id": rid, "ok": False, "error": str(exc)})
        except TypeError as exc:
            self.send({"id": rid, "ok": False, "error": "bad arguments for %s: %s" % (op, exc)})
        except Exception as exc:   # an op's bug must not end the agent
            self.send({"id": rid, "ok": False, "error": "%s failed: %s: %s" % (
                op, type(exc).__name__, exc), "trace": traceback.format_exc(limit=5)})

    def handle_line(self, line):
        req = None
        try:
            req = json.loads(line.decode("utf-8"))
            if not isinstance(req, dict):
                raise ValueError("a request must be a JSON object")
            rid, op, args = req.get("id"), req["op"], req.get("args") or {}
            if not isinstance(args, dict):
                raise ValueError("args must be an object")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            rid = req.get("id") if isinstance(req, dict) else None
            self.send({"id": rid, "ok": False, "error": "bad request: %s" % exc})
            return
        if op in BLOCKING:
            t = threading.Thread(target=self.answer, args=(rid, op, args))
            t.daemon = True
            t.start()
        else:
            self.answer(rid, op, args)

    def serve(self):
        self.answer(0, "hello", {})
        with self.lock:
            self.out.flush()
        while True:
            line = self.inp.readline()
            if not line:
                return   # EOF: the channel closed, so the dashboard is gone
            if line.strip():
                self.handle_line(line)
            self.flush_if_idle()


def load_extras(extras):
    """Run each contributed source in its own namespace, with `register` available."""
    for name, source in extras:
        ns = {"__name__": "dflash_agent_extra_" + name, "register": register,
              "OpFailed": OpFailed}
        try:
            exec(compile(source, "<agent extra %s>" % name, "exec"), ns)
        except Exception as exc:
            EXTRAS_FAILED.append("%s: %s: %s" % (name, type(exc).__name__, exc))


def _private_stdio():
    """Move the protocol onto private fds: fd 0 becomes /dev/null and fd 1 a copy of fd 2, so
    a stray print() in an extra, or a subprocess it starts (nvidia-smi), can neither eat
    requests nor corrupt answers."""
    sys.stdout.flush()
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return inp, out


def main(extras=()):
    if sys.version_info < MIN_PYTHON:
        sys.stdout.write("dflash-agent: python %d.%d is older than 3.8\n" % sys.version_info[:2])
        sys.stdout.flush()
        sys.exit(3)
    inp, out = _private_stdio()
    load_extras(extras)
    try:
        Server(inp, out).serve()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    # Threads of blocking ops may still run; nobody is left to answer them.
    sys.stdout.flush()
    os._exit(0)
