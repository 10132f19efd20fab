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


def belongs_to(pid, leader, proc_root="/proc", max_depth=64):
    """True when pid is leader, is in leader's session or process group, or descends from it."""
    st = read_stat(pid, proc_root)
    if st is None:
        return False
    if leader in (st.pid, st.sid, st.pgid):
        return True
    seen = 0
    while st is not None and st.ppid > 1 and seen < max_depth:
        if st.ppid == leader:
            return True
        st = read_stat(st.ppid, proc_root)
        seen += 1
    return False


class RunPidMapper(object):
    """Marks GPU processes (host pids) as the run's, and gives their pid inside the container.

    The run is named by launch.json's (pid, start_ticks). Its host pid is looked up once and
    kept while that process lives; the /proc scan only happens again for a new run.
    """

    def __init__(self, proc_root="/proc"):
        self._proc_root = proc_root
        self._run = None          # (inner pid, start ticks)
        self._host_pid = None

    def host_pid(self, run_pid, start_ticks):
        key = (run_pid, start_ticks)
        if key == self._run and self._host_pid is not None:
            st = read_stat(self._host_pid, self._proc_root)
            if st is not None and (start_ticks is None or st.start_ticks == start_ticks):
                return self._host_pid
        self._run = key
        self._host_pid = find_host_pid(run_pid, start_ticks, self._proc_root)
        return self._host_pid

    def annotate(self, processes, run_pid=None, start_ticks=None):
        """Fill `container_pid` and `is_run_process` in the probe's process dicts, in place."""
        leader = None
        if run_pid is not None:
            leader = self.host_pid(run_pid, start_ticks)
        for proc in processes:
            nspid = read_nspid(proc["pid"], self._proc_root)
            proc["container_pid"] = nspid[-1] if len(nspid) > 1 else None
            proc["is_run_process"] = bool(
                leader is not None and belongs_to(proc["pid"], leader, self._proc_root))
        return leader
