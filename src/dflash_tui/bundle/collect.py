"""What an evidence bundle takes, and from where.

Everything about the run is read through one look of the watch (watch/host.py `look`: the
same observe.gather and judge a poll runs), so the stacks, the Flight Recorder tables and the
probe reports in the bundle are the ones its verdict was read from. Beside that look: the run
files as they are, the log window, the launch's environment names and versions on the run's
target, and the kernel log of the HOST (outside any container: where a container may not read
it). Each part that cannot be taken (the target unreachable, a command refused, the time bound
passed) is a `Missing` with its reason. Nothing here signals a process or writes on the target.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ..config import Profile
from ..contract.rundir import EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, STATUS_JSON, STOP_JSON, TRAIN_LOG, rank_file
from ..remote.base import Target, TargetError
from ..remote.ops import RemoteOps
from ..run.evidence.observe import Evidence
from ..run.verdict.checklist import CheckState
from ..run.verdict.report import RunReport
from ..watch.host import HostWatch
from .member import Member, Missing, json_bytes, jsonable

RUN_FILE_MAX_BYTES = 256 << 10
LOG_READ_BYTES = 4 << 20            # the log window is cut from this much of train.log's end
LOG_LAST_LINES = 2000
TRACEBACK_BEFORE, TRACEBACK_AFTER = 20, 80
PROBE_FILES_MAX = 4096
PROBE_FILE_MAX_BYTES = 1 << 20
KERNEL_LOG_LINES = 1000
PIP_FREEZE_MAX_BYTES = 256 << 10
COMMAND_S = 15.0                    # the longest one command on the target or host may take

_VERSIONS = r"""
import json, platform, sys
out = {"python": sys.version, "executable": sys.executable, "platform": platform.platform()}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception as exc:
        out["nccl"] = "unknown: %s" % exc
    out["cudnn"] = torch.backends.cudnn.version()
except Exception as exc:
    out["torch"] = "not importable: %s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


@dataclass
class Collected:
    members: list[Member] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    unreachable: str | None = None      # why the run's target could not be looked at
    verdict: str | None = None


class Collector:
    """Takes members until `deadline` (time.monotonic()); what is not taken by then is missing."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.out = Collected()

    def add(self, name: str, what: str, data: bytes, where: str) -> None:
        self.out.members.append(Member(name, what, data, time.time(), where))

    def miss(self, name: str, what: str, reason: str) -> None:
        self.out.missing.append(Missing(name, what, reason))

    async def step(self, name: str, what: str, take: Callable[[], Awaitable[None]], limit_s: float | None = None) -> bool:
        """Run `take` within the time left (and `limit_s`); a failure is `name` missing, with why."""
        left = self.deadline - time.monotonic()
        if limit_s is not None:
            left = min(left, limit_s)
        if left <= 0:
            self.miss(name, what, "not taken: the bundle's time bound had passed")
            return False
        try:
            await asyncio.wait_for(take(), left)
            return True
        except asyncio.TimeoutError:
            self.miss(name, what, f"not taken within {left:.0f} s (the bundle's time bound)")
        except TargetError as exc:
            self.miss(name, what, f"not taken: {exc}")
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            # A target's odd answer (not JSON, a file gone) costs this member, never the bundle.
            self.miss(name, what, f"not taken: {type(exc).__name__}: {exc}")
        return False


async def collect_host(c: Collector, hw: HostWatch, prefix: str = "") -> None:
    """Every member about the run `hw` watches on one host, under `prefix`."""
    session, profile = hw.session, hw.profile
    where_target, where_host = f"target {session.target.label}", f"host {session.host.label}"
    looked: list[tuple[Evidence, RunReport]] = []

    async def look() -> None:
        looked.append(await hw.look(gpus=True))

    if not await c.step(prefix + "verdict.json", "the verdict and its checklist", look):
        reason = c.out.missing[-1].reason
        c.out.unreachable = c.out.unreachable or reason
        if hw.last is not None:   # what this watch saw last, marked as such
            c.add(prefix + "verdict.json", "the verdict and its checklist as last seen (the target did not "
                  "answer now)", json_bytes(_report_json(hw.last)), f"this machine (watch of {session.target.label})")
        for name, what in (("stacks/", "stacks"), ("flight_recorder.json", "Flight Recorder tables"),
                           ("probe/", "the run probe's reports"), ("gpu.json", "GPU samples and NVML state"),
                           ("run/", "the run files"), ("log/train.log.window", "the log window"),
                           ("launch/", "environment names, versions, pip freeze")):
            c.miss(prefix + name, what, reason)
        await c.step(prefix + "host/kernel.log", "the host's kernel log", lambda: _kernel_log(c, session.host, prefix,
                                                                                             where_host), COMMAND_S)
        return
    ev, report = looked[0]
    c.out.verdict = c.out.verdict or report.checklist.verdict.value
    c.add(prefix + "verdict.json", "the verdict and its checklist", json_bytes(_report_json(report)), where_target)
    _stacks(c, prefix, ev, report, where_target)
    _flight_recorder(c, prefix, ev, report, where_target)
    if ev.scheduler is not None:
        c.add(prefix + "scheduler.json", "the scheduler's answers (job state, nodes, accounting)",
              json_bytes(ev.scheduler), where_host)
    ops = await session.ops()
    pid = ev.launch.pid if ev.launch is not None and report.pid_alive else None
    await asyncio.gather(
        c.step(prefix + "gpu.json", "one GPU sample now and NVML's state (ECC, Xid, clocks, power, driver)",
               lambda: _gpus(c, prefix, session, ev, where_host)),
        c.step(prefix + "run/", "the run files", lambda: _run_files(c, prefix, ops, ev, hw.session.rank, where_target)),
        c.step(prefix + "probe/", "the run probe's reports", lambda: _probe_files(c, prefix, ops, ev, where_target)),
        c.step(prefix + "log/train.log.window", "the log window",
               lambda: _log_window(c, prefix, ops, ev, where_target)),
        c.step(prefix + "launch/environment_names.json", "the wrapper's environment variable names",
               lambda: _environment_names(c, prefix, session.target, pid, where_target), COMMAND_S),
        c.step(prefix + "launch/versions.json", "python, torch, CUDA, NCCL of the run's interpreter",
               lambda: _versions(c, prefix, session.target, profile, where_target), COMMAND_S),
        c.step(prefix + "launch/pip_freeze.txt", "pip freeze of the run's interpreter",
               lambda: _pip_freeze(c, prefix, session.target, profile, where_target), COMMAND_S),
        c.step(prefix + "host/kernel.log", "the host's kernel log",
               lambda: _kernel_log(c, session.host, prefix, where_host), COMMAND_S),
    )
    if session.attempt is not None:
        c.add(prefix + "launch/attempt.json", "this machine's record of the launch it sent",
              json_bytes(session.attempt), "this machine")


def _report_json(report: RunReport) -> dict:
    launch = report.launch
    return {"profile": report.profile, "target": report.target_label, "run_dir": report.run_dir,
            "time": report.time, "connected": report.connected, "error": report.error,
            "stale_since": report.stale_since, "pid": launch.pid if launch else None,
            "run_id": launch.run_id if launch else None, "pid_alive": report.pid_alive,
            "uptime_s": report.uptime_s, "exit": jsonable(report.exit), "stop": jsonable(report.stop),
            "status": jsonable(report.status), "last_traceback": report.last_traceback,
            "progress": jsonable(report.progress), **report.checklist.to_dict()}


def _stacks(c: Collector, prefix: str, ev: Evidence, report: RunReport, where: str) -> None:
    d = report.checklist.to_dict()
    c.add(prefix + "stacks/grouped.json", "every rank's threads grouped by where they stand, as the verdict read them",
          json_bytes({"rank_groups": d["rank_groups"], "threads": d["threads"], "stragglers": d["stragglers"]}), where)
    raw = {"processes": [{"pid": p.pid, "rank": p.rank, "node": p.node, "time": p.time, "seq": p.seq,
                          "argv": p.argv, "ended": p.ended, "threads": jsonable(p.threads)} for p in ev.probes],
           "stack_dumps": [jsonable(d) for _, d in sorted(ev.hang.stack_dumps.items())],
           "problems": list(ev.hang.problems) + list(ev.probes.problems)}
    c.add(prefix + "stacks/raw.json", "every process's threads and frames (probe reports, stack dumps), raw",
          json_bytes(raw), where)


def _flight_recorder(c: Collector, prefix: str, ev: Evidence, report: RunReport, where: str) -> None:
    cl = report.checklist
    analysis = {"verdict": cl.verdict.value, "summary": cl.summary,
                "checks": [x.to_dict() for x in cl.checks if x.state is not CheckState.OK]}
    c.add(prefix + "flight_recorder.json", "each rank's collectives (Flight Recorder), the first failure, "
          "and the verdict's reading of them",
          json_bytes({"collectives": ev.hang.collectives, "root_cause": ev.hang.root_cause,
                      "bad_files": ev.hang.bad_files, "analysis": analysis}), where)


async def _gpus(c: Collector, prefix: str, session, ev: Evidence, where: str) -> None:
    snap = await session.gpu_snapshot(ev)
    c.add(prefix + "gpu.json", "one GPU sample now and NVML's state (ECC, Xid, clocks, power, driver)",
          json_bytes(snap), where)


async def _read(ops: RemoteOps, path: str, max_bytes: int, tail: bool = False) -> tuple[bytes | None, bool]:
    """(its bytes, whether it was cut); None: it does not exist."""
    chunk = await (ops.read_tail(path, max_bytes) if tail else ops.read(path, 0, max_bytes))
    if not chunk.exists:
        return None, False
    return chunk.data, chunk.size > len(chunk.data)


async def _run_files(c: Collector, prefix: str, ops: RemoteOps, ev: Evidence, rank: int, where: str) -> None:
    for name in (LAUNCH_JSON, EXIT_JSON, STOP_JSON, rank_file(STATUS_JSON, rank), LAUNCH_SH, LAUNCH_OUT):
        if not ev.exists(name) or ev.files[name].is_dir:
            continue
        data, cut = await _read(ops, ev.path(name), RUN_FILE_MAX_BYTES, tail=name == LAUNCH_OUT)
        if data is not None:
            c.add(f"{prefix}run/{name}", f"the run file {name}" + (" (its end)" if cut else ""), data, where)


async def _probe_files(c: Collector, prefix: str, ops: RemoteOps, ev: Evidence, where: str) -> None:
    # The probe's own code (sitecustomize.py and its modules) is no evidence: the product's.
    files = [st for st in ev.probes.listing if st.kind in ("file", "") and not st.is_dir
             and not st.path.endswith(".py")]
    for st in files[:PROBE_FILES_MAX]:
        data, cut = await _read(ops, st.path, PROBE_FILE_MAX_BYTES)
        if data is not None:
            name = posixpath.basename(st.path)
            c.add(f"{prefix}probe/{name}", "a file of the run's probe directory" + (" (its start)" if cut else ""),
                  data, where)
    if len(files) > PROBE_FILES_MAX:
        c.miss(prefix + "probe/", "the rest of the probe directory",
               f"{len(files) - PROBE_FILES_MAX} files past the first {PROBE_FILES_MAX}")


def log_window(text: str, last: int = LOG_LAST_LINES) -> str:
    """The last `last` lines, and the lines around each traceback before them; what is
    skipped is one marker line saying how many lines."""
    lines = text.split("\n")
    keep = set(range(max(0, len(lines) - last), len(lines)))
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" in line:
            keep.update(range(max(0, i - TRACEBACK_BEFORE), min(len(lines), i + TRACEBACK_AFTER)))
    out, skipped = [], 0
    for i, line in enumerate(lines):
        if i in keep:
            if skipped:
                out.append(f"[... {skipped} lines not kept ...]")
                skipped = 0
            out.append(line)
        else:
            skipped += 1
    return "\n".join(out)


async def _log_window(c: Collector, prefix: str, ops: RemoteOps, ev: Evidence, where: str) -> None:
    if not ev.exists(TRAIN_LOG) or ev.files[TRAIN_LOG].is_dir:
        c.miss(prefix + "log/train.log.window", "the log window", "the run dir holds no train.log")
        return
    chunk = await ops.read_tail(ev.path(TRAIN_LOG), LOG_READ_BYTES)
    text = chunk.data.decode("utf-8", "replace")
    if chunk.offset > 0:
        text = text.split("\n", 1)[1] if "\n" in text else ""
    head = f"[train.log: {chunk.size} bytes; the window below is cut from its last {len(chunk.data)}]\n"
    c.add(prefix + "log/train.log.window", f"the last {LOG_LAST_LINES} lines of train.log and the lines "
          "around each traceback", (head + log_window(text)).encode("utf-8"), where)


_ENV_NAMES = "tr '\\000' '\\n' < /proc/\"$1\"/environ | cut -d= -f1"


async def _environment_names(c: Collector, prefix: str, target: Target, pid: int | None, where: str) -> None:
    """The names in the wrapper's environment, cut on the target: its values never leave it."""
    if pid is None:
        c.miss(prefix + "launch/environment_names.json", "the wrapper's environment variable names",
               "the run's wrapper is not alive: its environment is gone")
        return
    out = await _command(target, ["sh", "-c", _ENV_NAMES, "sh", str(int(pid))])
    names = sorted({n for n in out.splitlines() if n})
    c.add(prefix + "launch/environment_names.json", "the wrapper's environment variable names (never their values)",
          json_bytes({"pid": pid, "names": names}), where)


async def _command(target: Target, argv: list[str]) -> str:
    res = await target.run(argv, timeout=COMMAND_S)
    if not res.ok:
        err = (res.stderr or res.stdout or "").strip().splitlines()
        raise TargetError(f"{argv[0]} exited {res.exit_status}" + (f": {err[-1][:200]}" if err else ""))
    return res.stdout


async def _versions(c: Collector, prefix: str, target: Target, profile: Profile, where: str) -> None:
    out = await _command(target, [profile.python, "-c", _VERSIONS])
    c.add(prefix + "launch/versions.json", "python, torch, CUDA, NCCL of the run's interpreter",
          json_bytes(json.loads(out.strip().splitlines()[-1])), where)


async def _pip_freeze(c: Collector, prefix: str, target: Target, profile: Profile, where: str) -> None:
    out = (await _command(target, [profile.python, "-m", "pip", "freeze", "--all"])).encode("utf-8", "replace")
    cut = len(out) > PIP_FREEZE_MAX_BYTES
    c.add(prefix + "launch/pip_freeze.txt", "pip freeze of the run's interpreter" + (" (its start)" if cut else ""),
          out[:PIP_FREEZE_MAX_BYTES], where)


_DMESG_REFUSED = re.compile(r"(?i)operation not permitted|permission denied|read kernel buffer failed")


async def _kernel_log(c: Collector, host: Target, prefix: str, where: str) -> None:
    """The kernel log's last lines, read on the host (outside a container): dmesg, else journalctl."""
    reasons = []
    for argv in (["dmesg", "--time-format", "iso"], ["journalctl", "-k", "-n", str(KERNEL_LOG_LINES), "--no-pager"]):
        try:
            text = await _command(host, argv)
        except TargetError as exc:
            reasons.append(str(exc))
            continue
        lines = text.splitlines()[-KERNEL_LOG_LINES:]
        c.add(prefix + "host/kernel.log", f"the host's kernel log, its last {len(lines)} lines ({argv[0]}, "
              "read outside any container)", "\n".join(lines).encode("utf-8"), where)
        return
    raise TargetError("; ".join(reasons) + (" (the kernel log needs a user allowed to read it on the host)"
                                             if any(_DMESG_REFUSED.search(r) for r in reasons) else ""))
