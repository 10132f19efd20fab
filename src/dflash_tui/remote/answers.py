"""The agent's JSON answers as RemoteOps records.

AgentOps decodes the agent's replies with these; ShellOps builds the same dicts from shell
output (through agent_server's own functions) and decodes them the same way, so both
implementations give identical records.
"""

from __future__ import annotations

import base64
import functools

from ..contract.rundir import inert_text

from .ops import DirProbe, DiskFree, FileChunk, FileStat, FoundChanges, FoundFiles, PidInfo, ProcTree, StackDumpAnswer


def filestat_from(d: dict) -> FileStat:
    return _filestat(d["path"], d["exists"], d["size"], d["mtime"], d["inode"], d["is_dir"],
                     d.get("error", ""), d.get("kind", ""))


# A poll stats the same files every second and most answers are the last one's again: the
# FileStat (frozen, so shared safely) made for an answer is kept. Bounded: mtimes move.
@functools.lru_cache(maxsize=4096)
def _filestat(path, exists, size, mtime, inode, is_dir, error, kind) -> FileStat:
    return FileStat(path=path, exists=bool(exists), size=int(size), mtime=float(mtime), inode=int(inode),
                    is_dir=bool(is_dir), error=error, kind=kind)


def chunk_from(d: dict) -> FileChunk:
    return FileChunk(path=d["path"], offset=int(d["offset"]), data=base64.b64decode(d["data"]),
                     size=int(d["size"]), inode=int(d["inode"]), exists=bool(d["exists"]))


def pidinfo_from(d: dict) -> PidInfo:
    # A command line is anyone's text: inert (contract/rundir.py inert_text) before anything shows it.
    return PidInfo(pid=int(d["pid"]), alive=bool(d["alive"]), start_ticks=d["start_ticks"],
                   cmdline=tuple(inert_text(a) for a in d["cmdline"]), state=d["state"], pgid=d["pgid"],
                   nspid=tuple(d["nspid"]), in_run_dir=d.get("in_run_dir"))


def proctree_from(d: dict, *, root: PidInfo | None = None, main_argv: tuple[str, ...] | None = None) -> ProcTree:
    """`root`, `main_argv`: their records as decoded from the same raw values before."""
    return ProcTree(pid=int(d["pid"]), root=root if root is not None else pidinfo_from(d["root"]),
                    procs=int(d["procs"]), cpu_s=float(d["cpu_s"]), threads=int(d["threads"]),
                    states=tuple(sorted((str(k), int(v)) for k, v in d["states"].items())),
                    main_pid=d["main_pid"],
                    main_argv=main_argv if main_argv is not None else tuple(inert_text(a) for a in d["main_argv"]),
                    truncated=bool(d["truncated"]), pids=tuple(int(p) for p in d.get("pids", ())),
                    rss_bytes=int(d["rss_bytes"]) if d.get("rss_bytes") is not None else None)


def diskfree_from(d: dict) -> DiskFree:
    return DiskFree(path=d["path"], checked=d["checked"], free=int(d["free"]),
                    total=int(d["total"]))


def dirprobe_from(d: dict) -> DirProbe:
    return DirProbe(path=d["path"], exists=bool(d["exists"]), created=bool(d["created"]),
                    writable=bool(d["writable"]), error=d.get("error", ""))


def stackdump_from(d: dict) -> StackDumpAnswer:
    return StackDumpAnswer(status=str(d["status"]), data=base64.b64decode(d["data"]), time=float(d["time"]))


def exits_from(d: list) -> list[tuple[int, int]]:
    """wait_exit's answer: the (pid, start_ticks) of each process that ended."""
    return [(int(pid), int(start)) for pid, start in d]


def found_from(d: dict) -> FoundFiles:
    """find_files' answer; a note is anyone's path in words: inert."""
    return FoundFiles(files=tuple(filestat_from(r) for r in d["found"]),
                      notes=tuple(inert_text(n) for n in d["notes"]))


def changes_from(d: dict) -> FoundChanges:
    """find_files' answer to a search with `since` (AgentOps.find_changes)."""
    mark = d.get("mark")
    return FoundChanges(files=tuple(filestat_from(r) for r in d["found"]),
                        notes=tuple(inert_text(n) for n in d["notes"]), kept=tuple(d.get("kept", ())),
                        full=bool(d.get("full", True)), mark=tuple(mark) if mark else None,
                        listed=int(d.get("listed", 0)), stated=int(d.get("stated", 0)))
