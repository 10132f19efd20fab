"""Stop a run by its recorded pid: stop.json, SIGTERM to its group, grace, SIGKILL.

The wrapper is its own session and process-group leader, so signalling the group reaches the
trainer and anything it started, and nothing else. Only a process proven to be this run dir's
wrapper is signalled (observe.wrapper_refusal: start time, exact command line, working
directory), and every signal goes through `RemoteOps.signal`, which checks the same proof again
on the target at the moment it signals: a pid that belongs to another process, to a copy of the
run dir, or to init, or a group that holds the stopper, is never signalled ("mismatch"), and
that is reported.
"""

from __future__ import annotations

import asyncio
import getpass
import posixpath
import signal
import socket
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from ...contract.rundir import STOP_JSON, StopRecord, to_json

from ...remote.base import Target, TargetError
from ...remote.ops import RemoteOps
from ..evidence.observe import gather, process_matches, wrapper_refusal
from ..wrapper import LEGACY_WRAPPER_ARGV, wrapper_argv


@dataclass
class StopResult:
    # "not-running" | "terminated" | "killed" | "no-run": ok; "mismatch" (the pid is another
    # process now), "unverified" (launch.json has no start time), "survived": nothing stopped
    outcome: str
    pid: int | None
    run_id: str | None
    seconds: float
    message: str          # one line for the user
    record: StopRecord | None = None   # the request, once one was made
    recorded: bool = True              # stop.json was written on the target

    @property
    def ok(self) -> bool:
        return self.outcome in ("not-running", "terminated", "killed", "no-run")


def _requested_by() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:   # getuser raises when the uid has no name; the field is informative only
        return "dflash-tui"


async def _write_stop(target: Target, run_dir: str, record: StopRecord) -> bool:
    try:
        await target.write_file(posixpath.join(run_dir, STOP_JSON), (to_json(record) + "\n").encode())
        return True
    except TargetError:
        # stop.json explains the end of the run to a later reader; a run that must stop is
        # stopped even when this note cannot be written (the caller remembers it locally).
        return False


def _same_process(launch, info) -> bool:
    """The process we signalled is still there (alive, the same start time)."""
    return not info.gone and info.start_ticks == launch.start_ticks


async def _wait_gone(ops: RemoteOps, launch, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        (info,) = await ops.pid_info([launch.pid])
        if not _same_process(launch, info):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


async def stop_run(ops: RemoteOps, target: Target, run_dir: str, *, grace_s: float = 10.0,
                   requested_by: str | None = None,
                   before_signal: Callable[[], Awaitable[None]] | None = None) -> StopResult:
    """`before_signal`: awaited once the run is proven and stop.json written, just before the
    SIGTERM (the nodes of one run send theirs together: watch/nodes_session.py `SignalTogether`)."""
    t0 = time.monotonic()
    ev = await gather(ops, run_dir)
    launch = ev.launch
    if launch is None and ev.launch_problem:
        return StopResult("unverified", None, None, time.monotonic() - t0,
                          f"{ev.launch_problem}: no process can be verified as the run, nothing was signalled")
    if launch is None:
        return StopResult("no-run", None, None, 0.0, f"no launch.json in {run_dir}: nothing to stop")
    proc = ev.proc
    if proc is not None and not proc.gone:
        if launch.start_ticks is None:
            # Without the start time nothing tells this pid from a process that reused it.
            return StopResult("unverified", launch.pid, launch.run_id, time.monotonic() - t0,
                              f"launch.json of run {launch.run_id} has no start time, so pid {launch.pid} cannot "
                              "be verified as the run: nothing was signalled; check it on the target "
                              f"(`ps -o pid,lstart,args -p {launch.pid}`) and stop it by hand")
        if proc.start_ticks != launch.start_ticks:
            return StopResult("mismatch", launch.pid, launch.run_id, time.monotonic() - t0,
                              f"pid {launch.pid} now belongs to another process (its start time differs): "
                              f"nothing was signalled; run {launch.run_id} is not running")
        why = wrapper_refusal(launch, proc)
        if why is not None:
            return StopResult("mismatch", launch.pid, launch.run_id, time.monotonic() - t0,
                              f"pid {launch.pid} is alive but is not provably the wrapper of {run_dir}: {why}; "
                              "nothing was signalled")
    if not process_matches(launch, ev.proc):
        return StopResult("not-running", launch.pid, launch.run_id, time.monotonic() - t0,
                          f"run {launch.run_id} (pid {launch.pid}) is not running")
    # What the target checks again at the moment it signals: the same proof as above, the argv
    # as this run dir's wrapper has it (raw, as /proc holds it).
    proof = dict(start_ticks=launch.start_ticks, group=True, cwd=run_dir,
                 cmdline=wrapper_argv(run_dir, launch.run_id) if launch.wrapper_argv else LEGACY_WRAPPER_ARGV)
    record = StopRecord(run_id=launch.run_id, pid=launch.pid, requested_time=await ops.now(),
                        requested_by=requested_by or _requested_by(), signal_sent="SIGTERM")
    recorded = await _write_stop(target, run_dir, record)

    def result(outcome: str, message: str) -> StopResult:
        return StopResult(outcome, launch.pid, launch.run_id, time.monotonic() - t0, message,
                          record=record, recorded=recorded)

    if before_signal is not None:
        await before_signal()
    sent = await ops.signal(launch.pid, signal.SIGTERM, **proof)
    if sent == "mismatch":
        return result("mismatch", f"pid {launch.pid} could not be proven on the target to be the wrapper "
                                  "(start time, command line, working directory or process group): "
                                  "nothing was signalled")
    if sent == "gone" or await _wait_gone(ops, launch, grace_s):
        return result("terminated", f"run {launch.run_id} (pid {launch.pid}) ended after SIGTERM")

    record.signal_sent = "SIGKILL"
    recorded = await _write_stop(target, run_dir, record) and recorded
    sent = await ops.signal(launch.pid, signal.SIGKILL, **proof)
    if sent == "mismatch":
        return result("mismatch", f"pid {launch.pid} was reused during the grace period: SIGKILL not sent")
    if sent == "gone" or await _wait_gone(ops, launch, 5.0):
        return result("killed", f"run {launch.run_id} (pid {launch.pid}) ignored SIGTERM for {grace_s:.0f} s; "
                                "SIGKILL ended it")
    return result("survived", f"pid {launch.pid} is still alive after SIGKILL (uninterruptible sleep? "
                              f"check `cat /proc/{launch.pid}/stat` on the target)")
