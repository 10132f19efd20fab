"""Where each rank's collectives stand, and the first failure, from the files torch leaves.

PyTorch's Flight Recorder dumps (RUN_DIR/probe/fr_rank_<rank>: written by torch on an NCCL
watchdog timeout, or by the run probe when a thread sits in torch.distributed) are pickles. The
run dir can be written by anyone who can write it, so they are read by an unpickler that builds
only plain data (dict, list, tuple, str, bytes, numbers, bool, None) and refuses every global:
no class is ever looked up, no callable ever called. Each file is read only up to
FR_MAX_BYTES, and walked opcode by opcode (pickletools) before it is loaded: an opcode plain data
never needs, or tuples nested deep enough to overflow the C stack when one is hashed as a dict
key, refuse it. Every number is an int64 and every name short inert text, or the dump is a
problem line naming the field; its work is one pass over at most MAX_FR_ENTRIES entries, and
MAX_FR_GROUPS process groups are kept. torchelastic's error files (JSON) give the first
failure: rank, time, message and traceback, as torchrun's "Root Cause" does.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import pickle
import pickletools
import posixpath
import re

from ...contract.rundir import (ELASTIC_ERROR_FILE, ELASTIC_LOG_DIR, FR_DUMP_PREFIX, PROBE_DIR, ProbeReport,
                                inert_text)
from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import FileStat, PreflightOps
from .memory import LookMemory
from ..stacks.records import CollectiveProgress, RankFailure

FR_MAX_BYTES = 8 << 20            # 2000 entries with their Python frames are ~1-3 MiB
ERROR_MAX_BYTES = 256 << 10
MAX_FR_FILES = 64
MAX_ERROR_FILES = 64
# Bounds on the work of one dump, far above what torch writes (2000 entries by default,
# TORCH_NCCL_TRACE_BUFFER_SIZE; a handful of process groups per rank). Past them the newest
# entries and the groups with a collective pending are read, and a problem line says so.
MAX_FR_ENTRIES = 20_000
MAX_FR_GROUPS = 32
# Hashing a tuple (a dict key) recurses in C with no limit: a pickle of a few MiB can nest one
# deep enough to overflow the C stack. torch's dumps nest tuples one or two deep.
MAX_TUPLE_DEPTH = 64
_TEXT_MAX = 200                   # a group name, an op name
_INT_LIMIT = 1 << 63              # torch's numbers are int64
_FR_NAME = re.compile(r"^" + re.escape(FR_DUMP_PREFIX) + r"(\d{1,6})$")
_DECIMAL = re.compile(r"-?[0-9]{1,19}")


class FlightRecorderError(ValueError):
    """A dump that is not one: one line saying what is wrong with it."""


class _DataOnly(pickle.Unpickler):
    """Plain data only: any global (a class, a function) is refused, so nothing is imported,
    constructed or called while reading a file someone else may have written."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refers to {module}.{name}, and only plain data is read")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("holds a persistent reference, and only plain data is read")


# Opcodes that build objects of classes (or call them): plain data never needs one. BUILD
# sets an object's state, which no dict, list or tuple has.
_CLASS_OPS = frozenset({"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX",
                        "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"})
_REFUSE, _MARK, _PUT, _MEMOIZE, _GET, _POP, _DUP, _TUPLE, _OTHER = range(9)


def _plan(op: pickletools.OpcodeInfo) -> tuple[int, bool, int, int]:
    """What one opcode does to the stack _scan follows: (kind, pops to a mark, items popped
    besides, items pushed)."""
    name = op.name
    marked = pickletools.markobject in op.stack_before
    kind = (_REFUSE if name in _CLASS_OPS else _MARK if name == "MARK" else _MEMOIZE if name == "MEMOIZE"
            else _PUT if name.endswith("PUT") else _GET if name.endswith("GET") else _POP if name == "POP"
            else _DUP if name == "DUP" else _TUPLE if name.startswith(("TUPLE", "EMPTY_TUPLE")) else _OTHER)
    return kind, marked, len(op.stack_before) - 2 * marked, len(op.stack_after)


_PLANS = {op.code: _plan(op) for op in pickletools.opcodes}


def _scan(data: bytes, what: str) -> None:
    """Refuse, before any object is built, a pickle that uses an opcode plain data never needs or
    nests tuples deeper than MAX_TUPLE_DEPTH: the pickle machine's stack is followed, each item
    with the depth of tuples it is (a list or dict is 0: neither is hashable)."""
    stack: list[int] = []
    marks: list[int] = []
    memo: dict = {}
    texts = ["", ""]                         # the last two texts pushed: STACK_GLOBAL's names
    broken = FlightRecorderError(f"{what} is not a Flight Recorder dump (a broken pickle)")
    for op, arg, _ in pickletools.genops(data):
        kind, marked, count, pushed = _PLANS[op.code]
        if kind == _OTHER and not marked and count == 0:
            stack += [0] * pushed            # a value: text, a number, an empty list or dict
            if isinstance(arg, str):
                texts = [texts[1], arg]
            continue
        if kind == _REFUSE:
            if op.name in ("GLOBAL", "INST", "STACK_GLOBAL"):
                module, name = arg.split(" ", 1) if isinstance(arg, str) and " " in arg else texts
                raise FlightRecorderError(f"{what} refers to {inert_text(module[:_TEXT_MAX])}."
                                          f"{inert_text(name[:_TEXT_MAX])}, and only plain data is read")
            raise FlightRecorderError(f"{what} is not plain data (pickle's {op.name}), so it is not read")
        if kind == _MARK:
            marks.append(len(stack))
            continue
        if kind in (_PUT, _MEMOIZE):
            if stack:
                memo[arg if kind == _PUT else len(memo)] = stack[-1]
            continue
        if kind == _POP and marks and marks[-1] == len(stack):
            marks.pop()                      # POP right after a MARK takes the mark
            continue
        popped: list[int] = []
        if marked:
            if not marks:
                raise broken
            mark = marks.pop()
            popped = stack[mark:]
            del stack[mark:]
        if count > len(stack):
            raise broken
        if count:
            popped += stack[-count:]
            del stack[-count:]
        if kind == _TUPLE:
            depth = 1 + max(popped, default=0)
            if depth > MAX_TUPLE_DEPTH:
                raise FlightRecorderError(f"{what} nests tuples more than {MAX_TUPLE_DEPTH} deep: "
                                          "not a Flight Recorder dump")
            stack.append(depth)
        elif kind == _GET:
            stack.append(memo.get(arg, 0))
        elif kind == _DUP:
            stack += popped * 2
        else:
            stack += [0] * pushed


def load_dump(data: bytes, what: str) -> dict:
    """A Flight Recorder dump (pickle, or torch's JSON form) as a dict, or FlightRecorderError."""
    if len(data) > FR_MAX_BYTES:
        raise FlightRecorderError(f"{what} is {len(data)} bytes, more than a Flight Recorder dump")
    try:
        if data[:1] == b"{":
            obj = json.loads(data.decode("utf-8"))
        else:
            _scan(data, what)
            obj = _DataOnly(io.BytesIO(data)).load()
    except FlightRecorderError:
        raise
    except (pickle.UnpicklingError, ValueError, RecursionError, MemoryError) as exc:
        raise FlightRecorderError(f"{what} is not a Flight Recorder dump: {_said(exc)}") from None
    except Exception as exc:   # the pickle machine on plain data: APPEND to a dict, ADDITEMS to a list, ...
        raise FlightRecorderError(f"{what} is not a Flight Recorder dump ({type(exc).__name__}: {_said(exc)})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("entries", []), list):
        raise FlightRecorderError(f"{what} is not a Flight Recorder dump (no entries)")
    return obj


def _said(exc: BaseException) -> str:
    return inert_text(str(exc)[:_TEXT_MAX])


def _shown(value) -> str:
    """A value of the dump as a problem line quotes it, short whatever it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        if -_INT_LIMIT < value < _INT_LIMIT:
            return str(value)
        return "an integer of more than 19 digits"
    if isinstance(value, str):
        return f"a text of {len(value)} characters" if len(value) > 40 else repr(inert_text(value))
    return f"a {type(value).__name__}"


class _Bad(Exception):
    """One field of the dump that is not what torch writes there (where, what it holds)."""


def _int(value, field: str) -> int | None:
    """An int64 of the dump (an int, or the decimal text torch's JSON form may give); None when
    absent; _Bad for anything else (a 5,000-digit integer, "²", a list)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and -_INT_LIMIT < value < _INT_LIMIT:
        return value
    if isinstance(value, float) and value.is_integer() and -_INT_LIMIT < value < _INT_LIMIT:
        return int(value)
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    big = isinstance(value, int) and not isinstance(value, bool)
    raise _Bad(f"{field} is {_shown(value)}, " + ("more than torch's 64-bit numbers" if big else "not a number"))


def _text(value, field: str) -> str:
    """A name of the dump (text, or a group's number), short and inert; _Bad for anything else."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(_int(value, field))
    if isinstance(value, str):
        return inert_text(value[:_TEXT_MAX])
    raise _Bad(f"{field} is {_shown(value)}, not a name")


def progress_of(dump: dict, rank: int, time: float, pid: int | None = None,
                what: str = "the dump") -> tuple[list[CollectiveProgress], list[str]]:
    """One CollectiveProgress per process group of this rank's dump: the last collective it
    enqueued, started and completed (torch's pg_status), and the oldest one not completed;
    and what was left unread (one line each). One pass over the entries, at most
    MAX_FR_ENTRIES of them and MAX_FR_GROUPS groups; a field that holds what torch never
    writes there (FlightRecorderError) makes the whole dump unread."""
    try:
        return _progress(dump, rank, time, pid, what)
    except _Bad as bad:
        raise FlightRecorderError(f"{what}: {bad}, so it is not read") from None


def _progress(dump: dict, rank: int, time: float, pid: int | None, what: str):
    notes: list[str] = []
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    config = dump.get("pg_config") if isinstance(dump.get("pg_config"), dict) else {}
    entries = dump.get("entries", [])
    if len(entries) > MAX_FR_ENTRIES:
        notes.append(f"{what} holds {len(entries)} entries; the newest {MAX_FR_ENTRIES} were read")
        entries = entries[-MAX_FR_ENTRIES:]
    groups: dict[str, dict] = {}
    for k, v in status.items():
        if isinstance(v, dict):
            groups[_text(k, "a pg_status key")] = v
    mine: dict[str, list[tuple[int | None, dict]]] = {}    # group -> (seq, entry), in order
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or e.get("pg_id") is None:
            continue
        pg_id = _text(e.get("pg_id"), f"entries[{i}].pg_id")
        groups.setdefault(pg_id, {})
        if e.get("is_p2p"):
            continue
        mine.setdefault(pg_id, []).append((_int(e.get("collective_seq_id"), f"entries[{i}].collective_seq_id"), e))
    out = []
    for pg_id in sorted(groups):
        st = groups[pg_id]
        completed = _int(st.get("last_completed_collective"), f"pg_status[{pg_id}].last_completed_collective")
        oldest, oldest_seq, name = None, None, ""
        for seq, e in mine.get(pg_id, ()):
            if not name and e.get("process_group"):
                pg = e["process_group"]
                if isinstance(pg, (tuple, list)) and len(pg) == 2:
                    name = _text(pg[1], "a process_group name") or _text(pg[0], "a process_group id")
            if (seq is not None and (completed is None or seq > completed) and e.get("state") != "completed"
                    and (oldest_seq is None or seq < oldest_seq)):
                oldest, oldest_seq = e, seq
        if not name and isinstance(config.get(pg_id), dict):
            cfg = config[pg_id]
            name = _text(cfg.get("desc"), "a pg_config desc") or _text(cfg.get("name"), "a pg_config name")
        started = _int(st.get("last_started_collective"), f"pg_status[{pg_id}].last_started_collective")
        created = _int(oldest.get("time_created_ns"), "an entry's time_created_ns") if oldest else None
        op = _text(oldest.get("profiling_name"), "an entry's profiling_name") if oldest else ""
        out.append(CollectiveProgress(
            rank=rank, time=time, pid=pid, process_group=name or pg_id,
            last_enqueued_seq=_int(st.get("last_enqueued_collective"), f"pg_status[{pg_id}].last_enqueued_collective"),
            last_started_seq=started if started is not None and started >= 0 else None,
            last_completed_seq=completed if completed is not None and completed >= 0 else None,
            pending_op=op.rsplit(":", 1)[-1],
            pending_seq=oldest_seq if oldest else None,
            pending_since=created / 1e9 if created else None))
    if len(out) > MAX_FR_GROUPS:
        notes.append(f"{what} holds {len(out)} process groups; {MAX_FR_GROUPS} were read, "
                     "those with a collective pending first")
        keep = set(map(id, sorted(out, key=lambda c: c.pending_seq is None)[:MAX_FR_GROUPS]))
        out = [c for c in out if id(c) in keep]
    return out, notes


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
    try:
        when = _int(extra.get("timestamp"), "its timestamp")
    except _Bad as bad:
        raise FlightRecorderError(f"{what}: {bad}, so it is not read") from None
    return RankFailure(time=float(when) if when else mtime, message=str(msg.get("message", ""))[:300],
                       rank=rank, pid=pid, traceback=str(extra.get("py_callstack", ""))[-4000:])


def _key(st: FileStat, *extra) -> tuple:
    # A dashboard looks every second; a dump or error file with the same inode, size and mtime
    # as at the last look is not read or parsed again (LookMemory.parsed).
    return (st.path, st.inode, st.size, st.mtime, *extra)


async def _read(ops: PreflightOps, st: FileStat, limit: int, problems: list[str]) -> bytes | None:
    """The file's bytes; None for one that is not a plain file or not there, and for one that
    cannot be read whole, which `problems` then names."""
    name = posixpath.relpath(st.path, posixpath.dirname(posixpath.dirname(st.path)))
    if not st.is_regular:
        return None
    if st.size > limit:
        problems.append(f"{name} is {st.size} bytes, more than {limit} read")
        return None
    try:
        chunk = await ops.read(st.path, 0, limit)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        problems.append(f"{name}: {exc}")
        return None
    return chunk.data if chunk.exists else None


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


def _parse_dump(data: bytes, what: str, rank: int, mtime: float,
                pid: int | None) -> tuple[list[CollectiveProgress], list[str]] | str:
    try:
        return progress_of(load_dump(data, what), rank, mtime, pid, what)
    except FlightRecorderError as exc:
        return str(exc)


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
            data = await _read(ops, st, FR_MAX_BYTES, problems)
            if not data:
                continue
            # Off the event loop: reading a dump of a few MiB takes a good part of a second.
            parsed.remember(key, await asyncio.to_thread(_parse_dump, data, f"{PROBE_DIR}/{posixpath.basename(st.path)}",
                                                         rank, st.mtime, report.pid if report else None))
        got = parsed[key]
        if isinstance(got, str):
            problems.append(got)
        else:
            out.extend(got[0])
            problems.extend(got[1])
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
            data = await _read(ops, st, ERROR_MAX_BYTES, problems)
            if not data:
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
