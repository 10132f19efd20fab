"""Which GPU processes belong to the watched run, across a PID namespace (a container).

NVML runs on the host and reports HOST pids. The run's launch.json records the wrapper's pid
as seen where it ran, which inside a container (pct, docker) is a different number. The
kernel keeps both: the `NSpid:` line of /proc/<pid>/status lists a process's pid in every
namespace from the host's down to its own, so on the host the wrapper is the process whose
innermost NSpid equals launch.json's pid and whose start time (field 22 of /proc/<pid>/stat,
the same clock in every namespace) equals launch.json's start_ticks. The pair identifies it
even when several containers each have a pid 1234.

A GPU process is the run's when it is in the wrapper's session (the wrapper is started with
setsid, so the session id is the wrapper's pid), in its process group, or a descendant of it.

Like nvml_reader.py, this file is also sent as source to the remote agent: stdlib-only,
Python 3.8, no package imports, no `from __future__`.
"""

import os


class ProcStat(object):
    """The fields of /proc/<pid>/stat and /proc/<pid>/status this module needs."""

    __slots__ = ("pid", "ppid", "pgid", "sid", "start_ticks", "nspid")

    def __init__(self, pid, ppid, pgid, sid, start_ticks, nspid):
        self.pid = pid
        self.ppid = ppid
        self.pgid = pgid
        self.sid = sid
        self.start_ticks = start_ticks
        self.nspid = nspid


def read_stat(pid, proc_root="/proc"):
    """ProcStat of pid as seen through proc_root, or None when it is gone or unreadable."""
    try:
        with open("%s/%d/stat" % (proc_root, pid), "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    # The command name (field 2) may contain spaces and ')': split after the LAST ')'.
    rest = raw[raw.rfind(")") + 2:].split()
    try:
        ppid, pgid, sid, start = int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None
    return ProcStat(pid, ppid, pgid, sid, start, read_nspid(pid, proc_root))


def read_nspid(pid, proc_root="/proc"):
    """The NSpid line of /proc/<pid>/status: (pid in this /proc's namespace, ..., innermost).

    Kernels before 4.1 have no NSpid line; then the process is taken to be in this namespace.
    """
    try:
        with open("%s/%d/status" % (proc_root, pid), "rb") as fh:
            for line in fh:
                if line.startswith(b"NSpid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        return ()
    return (pid,)


def find_host_pid(inner_pid, start_ticks, proc_root="/proc"):
    """Host pid of the process whose innermost pid is inner_pid and that started at start_ticks.

    Checks the direct hit first (a run that is not in a container: same number on the host),
    then scans every process. Returns None when nothing matches, or when start_ticks is None
    and more than one process in different namespaces has that innermost pid (ambiguous).
    """
    direct = read_stat(inner_pid, proc_root)
    matches = []
    if direct is not None and len(direct.nspid) <= 1:
        if start_ticks is None:
            matches.append(inner_pid)   # a candidate only: a container may have the same number
        elif direct.start_ticks == start_ticks:
            return inner_pid
    try:
        names = os.listdir(proc_root)
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        nspid = read_nspid(pid, proc_root)
        if len(nspid) < 2 or nspid[-1] != inner_pid:
            continue
        if start_ticks is not None:
            st = read_stat(pid, proc_root)
            if st is not None and st.start_ticks == start_ticks:
                return pid
        else:
            matches.append(pid)
    if len(matches) == 1:
        return matches[0]
    return None


def lineage(pid, proc_root="/proc", max_depth=64):
    """The pids `pid` answers to: itself, its session and process group, and its ancestors short
    of init; empty when it is gone or unreadable."""
    st = read_stat(pid, proc_root)
    if st is None:
        return frozenset()
    found = set((st.pid, st.sid, st.pgid))
    seen = 0
    while st is not None and st.ppid > 1 and seen < max_depth:
        found.add(st.ppid)
        st = read_stat(st.ppid, proc_root)
        seen += 1
    return frozenset(found)


def belongs_to(pid, leader, proc_root="/proc", max_depth=64):
    """True when pid is leader, is in leader's session or process group, or descends from it."""
    return leader in lineage(pid, proc_root, max_depth)


class RunPidMapper(object):
    """Marks GPU processes (host pids) as a run's, and gives their pid inside the container.

    A run is named by launch.json's (pid, start_ticks). Its host pid is looked up once and kept
    while that process lives, for each run of the last ask (one sample may serve every run on
    the host): the /proc scan only happens again for a run that was not asked about last time.
    """

    def __init__(self, proc_root="/proc"):
        self._proc_root = proc_root
        self._host_pids = {}      # (inner pid, start ticks) -> host pid, the runs asked last

    def _host_pid(self, run):
        known = self._host_pids.get(run)
        if known is not None:
            st = read_stat(known, self._proc_root)
            if st is not None and (run[1] is None or st.start_ticks == run[1]):
                return known
        return find_host_pid(run[0], run[1], self._proc_root)

    def host_pids(self, runs):
        """The host pid of each run of `runs` ((pid, start ticks) pairs), None where no process
        matches; those found are kept for the next ask, and only those."""
        found = [self._host_pid(run) for run in runs]
        self._host_pids = dict((run, pid) for run, pid in zip(runs, found) if pid is not None)
        return found

    def host_pid(self, run_pid, start_ticks):
        return self.host_pids([(run_pid, start_ticks)])[0]

    def _mark(self, processes, leaders):
        """Fill `container_pid` in the process dicts, in place; for each leader (a host pid, or
        None), the pids of the processes that are its (in its session, group, or below it)."""
        mine = [[] for _ in leaders]
        lineages = {}
        for proc in processes:
            pid = proc["pid"]
            nspid = read_nspid(pid, self._proc_root)
            proc["container_pid"] = nspid[-1] if len(nspid) > 1 else None
            if not any(leader is not None for leader in leaders):
                continue
            if pid not in lineages:   # a process on several GPUs is listed once per GPU
                lineages[pid] = lineage(pid, self._proc_root)
            for i, leader in enumerate(leaders):
                if leader is not None and leader in lineages[pid] and pid not in mine[i]:
                    mine[i].append(pid)
        return mine

    def annotate(self, processes, run_pid=None, start_ticks=None):
        """Fill `container_pid` and `is_run_process` in the probe's process dicts, in place."""
        leader = None
        if run_pid is not None:
            leader = self.host_pid(run_pid, start_ticks)
        (mine,) = self._mark(processes, [leader])
        for proc in processes:
            proc["is_run_process"] = proc["pid"] in mine
        return leader

    def mark_runs(self, processes, runs):
        """For one sample serving several runs: fill `container_pid` (and `is_run_process`
        False: no single run is meant) in the process dicts, in place, and answer for each run
        of `runs` ((pid, start ticks) pairs, as launch.json records them) the host pids of the
        processes that are its, in the order of `runs`."""
        leaders = self.host_pids(runs) if processes else [None] * len(runs)
        mine = self._mark(processes, leaders)
        for proc in processes:
            proc["is_run_process"] = False
        return mine
