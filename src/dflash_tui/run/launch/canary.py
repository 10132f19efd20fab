"""The canary: the test the incident never ran.

Launch `sleep N` through the same wrapper and the same transport as a real run, in its own run
dir (RUN_DIR/canary), then close the channel — for SSH, drop the whole connection — open a fresh
one and check the sleep is still the same live process. A transport that kills detached
children when its channel closes (SIGHUP, a process-group kill, a PTY teardown) fails here in a
few seconds, instead of silently eating a real launch.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ...config import Profile
from ...remote.base import TargetError
from ...remote.ops import RemoteOps
from .launch import LaunchRefused, launch_run
from .request import LaunchRequest
from .launcher import Launcher
from ..verdict.checklist import Check, CheckId, CheckState

CANARY_DIR = "canary"


@dataclass
class CanaryResult:
    ok: bool
    message: str                       # one line: what happened, and why if it failed
    run_dir: str
    pid: int | None = None
    seconds: float = 0.0
    checks: list[Check] = field(default_factory=list)


async def run_canary(profile: Profile, launcher: Launcher, ops: RemoteOps,
                     reopen: Callable[[], Awaitable[tuple[Launcher, RemoteOps]]], *, sleep_s: int = 30,
                     settle_s: float = 1.0) -> CanaryResult:
    """`reopen()` must close the current transport (its channels and its connection) and return
    the launcher and fresh ops over a NEW connection; the `launcher` and `ops` passed in are
    dead after it."""
    t0 = time.monotonic()
    run_dir = posixpath.join(profile.run_dir, CANARY_DIR)
    checks: list[Check] = []
    limits = profile.limits
    try:
        outcome = await launch_run(profile, launcher, ops, LaunchRequest(relaunch=True, preflight=False,
                                                                         argv=("sleep", str(int(sleep_s))),
                                                                         run_dir=run_dir), limits=limits)
    except LaunchRefused as exc:   # another canary of this run dir in progress, or no claim possible
        return CanaryResult(False, f"canary not launched: {exc}", run_dir, None, time.monotonic() - t0, checks)
    checks.extend(outcome.checklist.checks)
    if outcome.evidence is None or outcome.evidence.launch is None:
        return CanaryResult(False, f"canary {outcome.checklist.verdict.value}: {outcome.checklist.summary}",
                            run_dir, None, time.monotonic() - t0, checks)
    launch = outcome.evidence.launch

    # Close the channel the launch went through, and the connection under it.
    try:
        launcher, ops = await reopen()
    except TargetError as exc:
        return CanaryResult(False, f"could not reconnect after closing the channel: {exc}", run_dir,
                            launch.pid, time.monotonic() - t0, checks)
    await asyncio.sleep(settle_s)   # a SIGHUP or group kill on channel close lands by now

    ev = await launcher.observe(ops, run_dir)
    if ev.launch is None or ev.launch.run_id != launch.run_id:
        msg = f"launch.json of the canary vanished from {run_dir}"
        checks.append(Check.of(CheckId.CANARY, CheckState.FAIL, msg, "", time.time()))
        return CanaryResult(False, msg, run_dir, launch.pid, time.monotonic() - t0, checks)
    alive = launcher.alive(ev)
    cl = launcher.judge(ev, limits)
    if not alive:
        msg = (f"sleep (pid {launch.pid}) died when the channel closed: {cl.verdict.value}, {cl.summary}; "
               "this transport kills detached children (check setsid on the target)")
        checks.append(Check.of(CheckId.CANARY, CheckState.FAIL, msg,
                            "a real launch would die the same way", time.time()))
        return CanaryResult(False, msg, run_dir, launch.pid, time.monotonic() - t0, checks)

    via = outcome.attempt.via if outcome.attempt else "?"
    msg = (f"sleep (pid {launch.pid}, started via {via}) outlived the channel and a new connection; "
           f"detached launches work on {launcher.label}")
    checks.append(Check.of(CheckId.CANARY, CheckState.OK, msg, "", time.time()))
    stopped = await launcher.stop(ops, run_dir, grace_s=2.0, requested_by="dflash-tui canary")
    if not stopped.ok:
        msg += f"; but stopping it failed: {stopped.message}"
        return CanaryResult(False, msg, run_dir, launch.pid, time.monotonic() - t0, checks)
    return CanaryResult(True, msg, run_dir, launch.pid, time.monotonic() - t0, checks)

