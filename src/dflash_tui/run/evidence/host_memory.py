"""The run's host memory on its target, read through RemoteOps `read` (procfs and cgroupfs files).

The memory of the run's process tree is the sum of each process's PSS (/proc/PID/smaps_rollup:
a page shared by N of them counts 1/N to each, so DataLoader workers forked from the trainer do
not count their shared pages several times); a process whose PSS cannot be read counts its RSS
(/proc/PID/status VmRSS). Its limit is the lowest memory limit of the cgroups it is in (v2
memory.max, v1 memory.limit_in_bytes, walking up to the root of the hierarchy as mounted on the
target: a container sees its own), else the host's MemTotal. The parsers are pure.
"""

from __future__ import annotations

import asyncio
import posixpath
from dataclasses import dataclass

from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import RemoteOps

READ_MAX = 16 << 10
TOGETHER = 16             # processes whose memory is asked at once (a shell target runs a command each)
CGROUP_ROOT = "/sys/fs/cgroup"
# A limit at least this big is no limit (cgroup v1 writes PAGE_COUNTER_MAX rounded to pages).
_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class HostLimit:
    bytes: int
    source: str            # "cgroup memory.max", "cgroup memory.limit_in_bytes", "host MemTotal"


def kb_field(text: str, name: str) -> int | None:
    """Bytes of a "Name:   123 kB" line (smaps_rollup, status, meminfo); None without one."""
    for line in text.splitlines():
        if line.startswith(name + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def limit_value(text: str) -> int | None:
    """A cgroup memory limit file's value in bytes; None for "max" or a number that is no limit."""
    word = text.strip()
    if not word.isdigit():
        return None
    n = int(word)
    return n if 0 < n < _NO_LIMIT else None


def limit_files(cgroup_text: str, root: str = CGROUP_ROOT) -> list[tuple[str, str]]:
    """(path, source) of every memory limit file that may bind a process in the cgroups that
    /proc/PID/cgroup lists, innermost first, up to the hierarchy's root."""
    out: list[tuple[str, str]] = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = posixpath.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        rel = posixpath.normpath("/" + path.strip()).lstrip("/")
        while True:
            out.append((posixpath.join(base, rel, name) if rel else posixpath.join(base, name), f"cgroup {name}"))
            if not rel:
                break
            rel = posixpath.dirname(rel)
    return out


async def _text(ops: RemoteOps, path: str) -> str | None:
    """A small procfs or cgroupfs file's text; None when it is not there or cannot be read."""
    try:
        chunk = await ops.read(path, 0, READ_MAX)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return None
    return chunk.data.decode("utf-8", "replace") if chunk.exists else None


def pss_path(pid: int) -> str:
    return f"/proc/{pid}/smaps_rollup"


def rss_path(pid: int) -> str:
    return f"/proc/{pid}/status"   # its VmRSS line


async def _process_memory(ops: RemoteOps, pid: int) -> int | None:
    text = await _text(ops, pss_path(pid))
    used = kb_field(text, "Pss") if text else None
    return await _process_rss(ops, pid) if used is None else used


async def _process_rss(ops: RemoteOps, pid: int) -> int | None:
    text = await _text(ops, rss_path(pid))
    return kb_field(text, "VmRSS") if text else None


async def tree_memory(ops: RemoteOps, pids: tuple[int, ...]) -> int | None:
    """The PSS of the processes `pids` (RSS where PSS cannot be read), asked TOGETHER at a time;
    None when none answered."""
    found: list[int | None] = []
    for i in range(0, len(pids), TOGETHER):
        found += await asyncio.gather(*(_process_memory(ops, p) for p in pids[i:i + TOGETHER]))
    got = [n for n in found if n is not None]
    return sum(got) if got else None


async def host_limit(ops: RemoteOps, pid: int, asked: list[str] | None = None,
                     absent: set[str] | None = None) -> HostLimit | None:
    """The lowest memory limit of `pid`'s cgroups, else the host's MemTotal; None when neither
    reads. `asked`: filled with the files read, for the next time's first request to carry;
    `absent`: the limit files that could not be read, skipped next time (a cgroup v2 root
    has no memory.max, and an unreadable one stays so) and filled with new ones."""
    read = asked if asked is not None else []
    absent = absent if absent is not None else set()
    read.append(f"/proc/{pid}/cgroup")
    cgroup = await _text(ops, read[-1])
    best: HostLimit | None = None
    for path, source in limit_files(cgroup or ""):
        if path in absent:
            continue
        text = await _text(ops, path)
        if text is None:
            absent.add(path)
            continue
        read.append(path)
        value = limit_value(text)
        if value is not None and (best is None or value < best.bytes):
            best = HostLimit(value, source)
    if best is not None:
        return best
    read.append("/proc/meminfo")
    total = kb_field(await _text(ops, read[-1]) or "", "MemTotal")
    return HostLimit(total, "host MemTotal") if total else None
