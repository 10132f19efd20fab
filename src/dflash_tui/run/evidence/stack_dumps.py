"""Stacks of the run's processes whose probe reports went stale, asked for from outside Python.

A probe report stops being rewritten exactly when no thread of its process can run Python (a C
call holding the GIL, every thread waiting inside the compiler), so for such a process the
report's frames are old. Its probe registered faulthandler on a real-time signal and declared
it (`ProbeReport.stack_signal`); the agent empties probe/<pid>.stack, sends that signal (only
to that very process, only if it catches it) and returns what faulthandler wrote from its C
handler. Where the report declares no signal, `py-spy dump` is asked instead, where the target
has it. Each process is asked at most once per DUMP_EVERY_S; between, its last dump stands.

Frames come out as the probe writes them ("file:line function", innermost first), and each
thread keeps its name from the report by its ident (faulthandler) or native id (py-spy).
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time

from ...contract.rundir import (FRAME_LINE_DIGITS, PROBE_DIR, PROBE_INTERVAL_S, ProbeReport, ProbeThread,
                                inert_text, probe_stack_name)
from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import RemoteOps, StackDumpAnswer
from ..eager import gather_eager
from ..stacks.records import StackDump
from .memory import LookMemory

# A report older than this many probe intervals is stale: its process could not run Python.
STALE_AFTER_S = 3 * PROBE_INTERVAL_S
DUMP_EVERY_S = 5                 # the least time between two dumps of one process
MAX_DUMPS = 32                   # processes asked per poll
MAX_FRAMES = 64                  # kept per thread (faulthandler writes at most 100)
_PROBE_MODULE = "dflash_probe.py"

# Thread idents are 64-bit (pthread_t), native ids at most 10 digits: a longer one is not a
# thread header. A frame's line number longer than FRAME_LINE_DIGITS is read, then left out.
_FH_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]{1,16})(?: \[[^\]]*\])? \(most recent call first\):$")
_FH_STACK = re.compile(r"^Stack \(most recent call first\):$")
_FH_FRAME = re.compile(r'^  File "(.*)", line ([0-9]+|\?\?\?) in (.*)$')
_SPY_THREAD = re.compile(r'^Thread (0x[0-9a-fA-F]{1,16}|[0-9]{1,10}) \(([^)]*)\)(?:: "(.*)")?$')
_SPY_FRAME = re.compile(r"^    (.*) \((.*):([0-9]+)\)$")


# What `LookMemory.dumps` keeps for a process the target found gone: it stays gone (its key is
# its pid and start time), and is never asked again.
_GONE = "gone"


class StackDumps(dict):
    """The dumps found (StackDump by pid), plus the pids of the stale reports whose process the
    target found gone ("gone", or "mismatch": its pid is another process's now)."""

    def __init__(self, dumps=(), gone=frozenset()) -> None:
        super().__init__(dumps)
        self.gone: frozenset[int] = frozenset(gone)


class _Threads(list):
    """Threads parsed from a dump, and the longest line number of the frames left out."""

    longest_line = 0


def _frame(frames: list[str] | None, path: str, line: str, func: str, out: _Threads) -> None:
    if frames is None or len(frames) >= MAX_FRAMES:
        return
    if len(line) > FRAME_LINE_DIGITS:
        out.longest_line = max(out.longest_line, len(line))
        return
    frames.append(f"{path}:{line} {func}")


def parse_faulthandler(text: str) -> list[tuple[int | None, list[str]]]:
    """(ident, frames) per thread of faulthandler's all-threads dump."""
    threads: list[tuple[int | None, list[str]]] = _Threads()
    frames: list[str] | None = None
    for line in text.splitlines():
        m = _FH_THREAD.match(line)
        if m or _FH_STACK.match(line):
            frames = []
            threads.append((int(m.group(1), 16) if m else None, frames))
            continue
        f = _FH_FRAME.match(line)
        if f:
            _frame(frames, f.group(1), f.group(2), f.group(3), threads)
    return threads


def parse_py_spy(text: str) -> list[tuple[int | None, int | None, str, list[str]]]:
    """(ident, native id, name, frames) per thread of `py-spy dump`'s output."""
    threads: list[tuple[int | None, int | None, str, list[str]]] = _Threads()
    frames: list[str] | None = None
    for line in text.splitlines():
        m = _SPY_THREAD.match(line)
        if m:
            frames = []
            tid = m.group(1)
            ident, native = (int(tid, 16), None) if tid.startswith("0x") else (None, int(tid))
            threads.append((ident, native, m.group(3) or "", frames))
            continue
        f = _SPY_FRAME.match(line)
        if f:
            _frame(frames, f.group(2), f.group(3), f.group(1).strip(), threads)
    return threads


def _is_probe_thread(frames: list[str]) -> bool:
    return any(posixpath.basename(f.rsplit(":", 1)[0]) == _PROBE_MODULE for f in frames)


def _thread(report: ProbeReport, ident: int | None, native: int | None, name: str,
            frames: list[str]) -> ProbeThread:
    known = next((t for t in report.threads
                  if (ident is not None and t.ident == ident)
                  or (native is not None and t.native_id == native)), None)
    if known is not None:
        return ProbeThread(name=known.name, ident=known.ident, native_id=known.native_id,
                           daemon=known.daemon, frames=frames)
    label = name or (f"Thread 0x{ident:x}" if ident is not None else f"thread {native}")
    return ProbeThread(name=label, ident=ident or 0, native_id=native, frames=frames)


def stack_dump_of(report: ProbeReport, answer: StackDumpAnswer, source: str) -> StackDump:
    """The dump in `answer` as a StackDump, its threads named from `report`; the probe's own
    thread left out (it is not the program's). The run can write the dump file itself, so its
    text is made inert first (contract/rundir.py inert_text): every name and frame from it is."""
    text = inert_text(answer.data.decode("utf-8", "replace"), keep_newlines=True)
    threads: list[ProbeThread] = []
    if source == "py-spy":
        parsed = parse_py_spy(text)
        for ident, native, name, frames in parsed:
            if not _is_probe_thread(frames):
                threads.append(_thread(report, ident, native, name, frames))
    else:
        parsed = parse_faulthandler(text)
        for ident, frames in parsed:
            if not _is_probe_thread(frames):
                threads.append(_thread(report, ident, None, "", frames))
    problem = ""
    if parsed.longest_line:
        what = "py-spy's dump" if source == "py-spy" else f"{PROBE_DIR}/{probe_stack_name(report.pid)}"
        problem = (f"{what}: a frame's line number has {parsed.longest_line} digits, not one a stack dump "
                   "writes; such frames were left out")
    return StackDump(pid=report.pid, time=answer.time, source=source, threads=tuple(threads), problem=problem)


def is_stale(report: ProbeReport, now: float) -> bool:
    """The process has not rewritten its report for STALE_AFTER_S and did not say it ended."""
    return not report.ended and now - report.time > STALE_AFTER_S


def _known_gone(report: ProbeReport, memory: LookMemory) -> bool:
    asked = memory.dumps.get((report.pid, report.start_ticks))
    return asked is not None and asked[1] is _GONE


def _asked_lately(report: ProbeReport, memory: LookMemory) -> bool:
    asked = memory.dumps.get((report.pid, report.start_ticks))
    return asked is not None and time.monotonic() - asked[0] < DUMP_EVERY_S


async def _still_there(ops: RemoteOps, reports: list[ProbeReport], memory: LookMemory) -> None:
    """Whether the processes asked for a dump lately (alive then) still are: one pid_info for
    them all, so that one that ended since is known gone at this look, not DUMP_EVERY_S later."""
    if not reports:
        return
    try:
        infos = await ops.pid_info([r.pid for r in reports])
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return   # nothing known of them this look: their next dump asks again
    for r, info in zip(reports, infos):
        if info.gone or info.start_ticks != r.start_ticks:
            memory.dumps.remember((r.pid, r.start_ticks), (time.monotonic(), _GONE))


async def _dump_one(ops: RemoteOps, run_dir: str, report: ProbeReport,
                    memory: LookMemory) -> tuple[StackDump | None, str | None]:
    # A dashboard polls every second, and the target is asked again only after DUMP_EVERY_S.
    key = (report.pid, report.start_ticks)
    asked = memory.dumps.get(key)
    if asked is not None and time.monotonic() - asked[0] < DUMP_EVERY_S:
        return asked[1], None
    memory.dumps.remember(key, (time.monotonic(), asked[1] if asked else None))
    name = f"{PROBE_DIR}/{probe_stack_name(report.pid)}"
    try:
        answer, source = None, "faulthandler"
        if report.stack_signal is not None:
            answer = await ops.dump_stacks(report.pid, report.stack_signal, start_ticks=report.start_ticks,
                                           path=posixpath.join(run_dir, name), min_interval_s=DUMP_EVERY_S)
        if answer is None or answer.status in ("no-handler", "no-dump"):
            answer, source = await ops.py_spy_dump(report.pid, start_ticks=report.start_ticks), "py-spy"
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return None, f"stacks of pid {report.pid}: {exc}"
    if answer.status in ("gone", "mismatch"):
        memory.dumps.remember(key, (time.monotonic(), _GONE))
        return None, None
    if answer.status not in ("dumped", "recent"):
        if answer.status == "failed":
            return None, f"stacks of pid {report.pid}: py-spy: {answer.data.decode('utf-8', 'replace').strip()[-200:]}"
        return None, None     # no handler and no py-spy: nothing to say about it
    dump = stack_dump_of(report, answer, source)
    memory.dumps.remember(key, (memory.dumps.get(key, (time.monotonic(),))[0], dump))
    return dump, None


async def gather_stack_dumps(ops: RemoteOps, run_dir: str, reports: list[ProbeReport],
                             now: float, memory: LookMemory | None = None) -> tuple[StackDumps, list[str]]:
    """Dumps of the processes whose reports are stale (by pid), with those found gone, and what
    could not be had. `memory`: this watch's dumps asked lately (none: ask afresh). A process
    once found gone is not asked again: a run whose DataLoader workers end every epoch leaves
    a stale report of each, and only those not known gone count against MAX_DUMPS."""
    memory = memory if memory is not None else LookMemory()
    stale = [r for r in reports if is_stale(r, now) and r.start_ticks is not None]
    gone = {r.pid for r in stale if _known_gone(r, memory)}
    ask = [r for r in stale if r.pid not in gone][:MAX_DUMPS]
    if not ask:
        return StackDumps(gone=gone), []
    lately = [r for r in ask if _asked_lately(r, memory)]
    results, _ = await gather_eager(asyncio.gather(*(_dump_one(ops, run_dir, r, memory) for r in ask)),
                                    _still_there(ops, lately, memory))
    gone.update(r.pid for r in ask if _known_gone(r, memory))
    dumps = StackDumps({r.pid: d for r, (d, _) in zip(ask, results) if d is not None and r.pid not in gone}, gone)
    return dumps, [p for _, p in results if p]
