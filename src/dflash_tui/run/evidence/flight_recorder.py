"""Where each rank's collectives stand, and the first failure, from the files torch leaves.

PyTorch's Flight Recorder dumps (RUN_DIR/probe/fr_rank_<rank>: written by torch on an NCCL
watchdog timeout, or by the run probe when a thread sits in torch.distributed) are pickles. The
run dir can be written by anyone who can write it, so they are read by an unpickler that builds
only plain data (dict, list, tuple, str, bytes, numbers, bool, None) and refuses every global:
no class is ever looked up, no callable ever called. Each file is read only up to
FR_MAX_BYTES. torchelastic's error files (JSON) give the first failure: rank, time, message and
traceback, as torchrun's "Root Cause" does.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import pickle
import posixpath
import re

from ...contract.rundir import ELASTIC_ERROR_FILE, ELASTIC_LOG_DIR, FR_DUMP_PREFIX, PROBE_DIR, ProbeReport
from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import FileStat, PreflightOps
from .memory import LookMemory
from ..stacks.records import CollectiveProgress, RankFailure

FR_MAX_BYTES = 8 << 20            # 2000 entries with their Python frames are ~1-3 MiB
ERROR_MAX_BYTES = 256 << 10
MAX_FR_FILES = 64
MAX_ERROR_FILES = 64
_FR_NAME = re.compile(r"^" + re.escape(FR_DUMP_PREFIX) + r"(\d{1,6})$")


class FlightRecorderError(ValueError):
    """A dump that is not one: one line saying what is wrong with it."""


class _DataOnly(pickle.Unpickler):
    """Plain data only: any global (a class, a function) is refused, so nothing is imported,
    constructed or called while reading a file someone else may have written."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refers to {module}.{name}, and only plain data is read")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("holds a persistent reference, and only plain data is read")


def load_dump(data: bytes, what: str) -> dict:
    """A Flight Recorder dump (pickle, or torch's JSON form) as a dict, or FlightRecorderError."""
    if len(data) > FR_MAX_BYTES:
        raise FlightRecorderError(f"{what} is {len(data)} bytes, more than a Flight Recorder dump")
    try:
        if data[:1] == b"{":
            obj = json.loads(data.decode("utf-8"))
        else:
            obj = _DataOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError, RecursionError, MemoryError,
            IndexError, KeyError, TypeError) as exc:
        raise FlightRecorderError(f"{what} is not a Flight Recorder dump: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("entries", []), list):
        raise FlightRecorderError(f"{what} is not a Flight Recorder dump (no entries)")
    return obj


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def progress_of(dump: dict, rank: int, time: float, pid: int | None = None) -> list[CollectiveProgress]:
    """One CollectiveProgress per process group of this rank's dump: the last collective it
    enqueued, started and completed (torch's pg_status), and the oldest one not completed."""
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    config = dump.get("pg_config") if isinstance(dump.get("pg_config"), dict) else {}
    entries = [e for e in dump.get("entries", []) if isinstance(e, dict)]
    groups: dict[str, dict] = {str(k): v for k, v in status.items() if isinstance(v, dict)}
    for e in entries:
        groups.setdefault(str(e.get("pg_id")), {})
    out = []
    for pg_id, st in sorted(groups.items()):
        completed = _int(st.get("last_completed_collective"))
        mine = [e for e in entries if str(e.get("pg_id")) == pg_id and not e.get("is_p2p")]
        pending = [e for e in mine if _int(e.get("collective_seq_id")) is not None
                   and (completed is None or _int(e["collective_seq_id"]) > completed)
                   and e.get("state") != "completed"]
        oldest = min(pending, key=lambda e: _int(e["collective_seq_id"]), default=None)
        name = ""
        pg = next((e.get("process_group") for e in mine if e.get("process_group")), None)
        if isinstance(pg, (tuple, list)) and len(pg) == 2:
            name = str(pg[1] or pg[0])
        elif isinstance(config.get(pg_id), dict):
            name = str(config[pg_id].get("desc") or config[pg_id].get("name") or "")
        started = _int(st.get("last_started_collective"))
        created = _int(oldest.get("time_created_ns")) if oldest else None
        out.append(CollectiveProgress(
            rank=rank, time=time, pid=pid, process_group=name or pg_id,
            last_enqueued_seq=_int(st.get("last_enqueued_collective")),
            last_started_seq=started if started is not None and started >= 0 else None,
            last_completed_seq=completed if completed is not None and completed >= 0 else None,
            pending_op=str(oldest.get("profiling_name", "")).rsplit(":", 1)[-1] if oldest else "",
            pending_seq=_int(oldest["collective_seq_id"]) if oldest else None,
            pending_since=created / 1e9 if created else None))
    return out


def failure_of(text: str, what: str, *, rank: int | None = None, pid: int | None = None,
               mtime: float = 0.0) -> RankFailure:
    """A torchelastic error file (the @record format) as a RankFailure, or FlightRecorderError."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        raise FlightRecorderError(f"{what} is not JSON") from None
    msg = obj.get("message") if isinstance(obj, dict) else None
    if isinstance(msg, str):                 # the newer plain form
        return RankFailure(time=mtime, message=msg.strip().splitlines()[-1][:300] if msg.strip() else "",
                           rank=rank, pid=pid, traceback=msg[-4000:])
    if not isinstance(msg, dict):
        raise FlightRecorderError(f"{what} is not a torchelastic error file (no message)")
    extra = msg.get("extraInfo") if isinstance(msg.get("extraInfo"), dict) else {}
    when = _int(extra.get("timestamp"))
    return RankFailure(time=float(when) if when else mtime, message=str(msg.get("message", ""))[:300],
                       rank=rank, pid=pid, traceback=str(extra.get("py_callstack", ""))[-4000:])


def _key(st: FileStat, *extra) -> tuple:
    # A dashboard looks every second; a dump or error file with the same inode, size and mtime
    # as at the last look is not read or parsed again (LookMemory.parsed).
    return (st.path, st.inode, st.size, st.mtime, *extra)


async def _read(ops: PreflightOps, st: FileStat, limit: int) -> tuple[bytes | None, str | None]:
    name = posixpath.relpath(st.path, posixpath.dirname(posixpath.dirname(st.path)))
    if not st.is_regular:
        return None, None
    if st.size > limit:
        return None, f"{name} is {st.size} bytes, more than {limit} read"
    try:
        chunk = await ops.read(st.path, 0, limit)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return None, f"{name}: {exc}"
    return (chunk.data if chunk.exists else None), None


async def _list(ops: PreflightOps, path: str) -> list[FileStat]:
    try:
        return await ops.list_dir(path)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return []


def _by_rank(reports: list[ProbeReport]) -> dict[int, ProbeReport]:
    return {r.rank: r for r in reports if r.rank is not None and not r.ended}


@functools.lru_cache(maxsize=1024)
def holds_distributed_files(paths: tuple[str, ...]) -> bool:
    """Whether a probe directory of these entries holds anything gather_collectives or
    gather_root_cause read (a Flight Recorder dump, torchelastic's error file or log dir).
    Asked every look of the same listing, so kept per listing."""
    names = [posixpath.basename(p) for p in paths]
    return any(_FR_NAME.match(n) or n in (ELASTIC_ERROR_FILE, ELASTIC_LOG_DIR) for n in names)


async def gather_collectives(ops: PreflightOps, run_dir: str, listing: list[FileStat],
                             reports: list[ProbeReport],
                             memory: LookMemory | None = None) -> tuple[list[CollectiveProgress], list[str]]:
    """The Flight Recorder dumps in the probe directory (`listing`), per rank and group."""
    parsed = (memory if memory is not None else LookMemory()).parsed
    ranks = _by_rank(reports)
    dumps = sorted(((int(m.group(1)), st) for st in listing
                    if (m := _FR_NAME.match(posixpath.basename(st.path)))), key=lambda x: x[0])
    out: list[CollectiveProgress] = []
    problems: list[str] = []
    for rank, st in dumps[:MAX_FR_FILES]:
        report = ranks.get(rank)
        key = _key(st, report.pid if report else None)
        if key not in parsed:
            data, problem = await _read(ops, st, FR_MAX_BYTES)
            if not data:
                if problem:
                    problems.append(problem)
                continue
            try:
                dump = load_dump(data, f"{PROBE_DIR}/{posixpath.basename(st.path)}")
                parsed.remember(key, progress_of(dump, rank, st.mtime, report.pid if report else None))
            except FlightRecorderError as exc:
                parsed.remember(key, str(exc))
        got = parsed[key]
        if isinstance(got, str):
            problems.append(got)
        else:
            out.extend(got)
    return out, problems


async def gather_root_cause(ops: PreflightOps, run_dir: str, listing: list[FileStat],
                            reports: list[ProbeReport],
                            memory: LookMemory | None = None) -> tuple[RankFailure | None, list[str]]:
    """The first failure by time among torchelastic's error files: each worker's under
    torchrun's log dir (its local rank from the path), and the run's own."""
    parsed = (memory if memory is not None else LookMemory()).parsed
    probe_dir = posixpath.join(run_dir, PROBE_DIR)
    names = {posixpath.basename(st.path): st for st in listing}
    found: list[tuple[FileStat, int | None]] = []
    if ELASTIC_ERROR_FILE in names:
        found.append((names[ELASTIC_ERROR_FILE], None))
    if ELASTIC_LOG_DIR in names and names[ELASTIC_LOG_DIR].is_dir:
        # <log dir>/<torchrun run id>/attempt_<n>/<local rank>/error.json: one round trip per
        # level (the listings of a level asked at once), then one stat of every error file.
        level = [posixpath.join(probe_dir, ELASTIC_LOG_DIR)]
        for _ in range(3):
            listings = await asyncio.gather(*(_list(ops, d) for d in level[:MAX_ERROR_FILES]))
            level = [st.path for listing in listings for st in listing if st.is_dir]
        locals_ = [d for d in level if posixpath.basename(d).isdigit()][:MAX_ERROR_FILES]
        stats = await ops.stat([posixpath.join(d, ELASTIC_ERROR_FILE) for d in locals_]) if locals_ else []
        found += [(st, int(posixpath.basename(d))) for d, st in zip(locals_, stats) if st.exists]
    failures: list[tuple[RankFailure, float]] = []     # with the file's mtime
    problems: list[str] = []
    for st, local_rank in found[:MAX_ERROR_FILES]:
        report = next((r for r in reports if local_rank is not None and r.local_rank == local_rank), None)
        key = _key(st, local_rank, report.pid if report else None)
        if key not in parsed:
            data, problem = await _read(ops, st, ERROR_MAX_BYTES)
            if not data:
                if problem:
                    problems.append(problem)
                continue
            try:
                parsed.remember(key, failure_of(data.decode("utf-8", "replace"), posixpath.relpath(st.path, run_dir),
                                          rank=report.rank if report else local_rank,
                                          pid=report.pid if report else None, mtime=st.mtime))
            except FlightRecorderError as exc:
                parsed.remember(key, str(exc))
        got = parsed[key]
        if isinstance(got, str):
            problems.append(got)
        else:
            failures.append((got, st.mtime))
    # torchrun's own file copies the first failure without its rank: a worker's, when there is
    # one, says whose it was. The files' timestamps are whole seconds, and the ranks that fail
    # because a peer died (gloo: "Connection closed by peer") fail within the same second: the
    # mtime says which file was written first.
    workers = [f for f in failures if f[0].rank is not None]
    first = min(workers or failures, key=lambda f: (f[0].time, f[1]), default=None)
    return (first[0] if first else None), problems
