"""Launch a run: preflight, put the last run's files aside, write launch.sh, detach it, judge.

The launch is ONE `Target.run` of a small sh that starts launch.sh in a new session and returns
at once (run/wrapper.py). Its exit status and output are kept (run/attempts.py), because when a
transport runs nothing, that is the only evidence there is. Then the run dir is polled until
launch.json appears or the deadline passes, so the caller gets a verdict, not a guess.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..contract.rundir import (EVENTS_JSONL, EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, STATUS_JSON,
                                 STOP_JSON, TRAIN_LOG)

from ..config import Profile
from ..remote.base import CommandTimeout, Target, TargetError, TargetUnreachable
from ..remote.ops import RemoteOps
from .attempts import LaunchAttempt
from .health import Limits, evaluate
from .observe import Evidence, gather, process_matches
from .preflight import PreflightResult, run_preflight
from .probe_install import install_probe
from .stop import StopResult, stop_run
from .verdict import Check, CheckState, Checklist, Verdict
from .wrapper import detach_argv, new_run_id, parse_detach_output, render_wrapper

# The files that describe one run; checkpoints/ stays, so a relaunch can --resume.
PER_RUN_FILES = (LAUNCH_SH, LAUNCH_JSON, LAUNCH_OUT, TRAIN_LOG, EVENTS_JSONL, STATUS_JSON, EXIT_JSON, STOP_JSON)
HISTORY_DIR = "history"

# $1 = run dir, $2 = history sub-dir name, then the file names. Moves regular files only: a
# train.log that is a directory stays where it is, and the next launch says so (LOG MISSING).
_ARCHIVE = ('d=$1; h="$1/$2"; shift 2; mkdir -p -- "$h" || exit 1; '
            'for f in "$@"; do if [ -f "$d/$f" ]; then mv -f -- "$d/$f" "$h/$f" || exit 1; fi; done; echo archived')
# $1 = run dir, $2 = launch.sh path; the script arrives on stdin.
_WRITE = ('set -e; umask 022; mkdir -p -- "$1"; tmp="$2.tmp.$$"; cat > "$tmp"; chmod 755 "$tmp"; '
          'mv -f "$tmp" "$2"; echo written')


class LaunchRefused(Exception):
    """A second launch into a run dir whose run is alive (relaunch stops it first)."""


@dataclass
class LaunchOutcome:
    checklist: Checklist
    run_id: str | None = None
    preflight: PreflightResult | None = None
    attempt: LaunchAttempt | None = None
    evidence: Evidence | None = None
    stopped: StopResult | None = None
    unreachable: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _not_launched(why: Check, checks: list[Check], unreachable: bool = False, **kw) -> LaunchOutcome:
    return LaunchOutcome(Checklist(Verdict.NOT_LAUNCHED, checks, why.cause),
                         unreachable=unreachable, **kw)


def not_launched(pre: PreflightResult) -> LaunchOutcome:
    """The outcome of a launch that its preflight refused."""
    first = pre.first_failure or pre.checks[-1]
    return _not_launched(first, pre.checks, pre.unreachable, preflight=pre)


def _history_name(old_run_id: str | None, now: float) -> str:
    # A run id read from the target is data: keep it to one safe path component.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", old_run_id or "")[:80].strip(".")
    return safe or time.strftime("unknown-%Y%m%d-%H%M%S", time.gmtime(now))


async def launch_run(profile: Profile, host: Target, target: Target, ops: RemoteOps, *,
                     argv: Sequence[str] | None = None, run_dir: str | None = None,
                     preflight: bool = True, relaunch: bool = False,
                     limits: Limits | None = None, on_attempt=None) -> LaunchOutcome:
    """Launch `argv` (default: the profile's trainer) in `run_dir` (default: the profile's).

    `on_attempt(attempt)` is called as soon as the launch command returned (the CLI and the
    monitor store it); the returned outcome holds the first verdict."""
    t0 = time.monotonic()
    run_dir = run_dir or profile.run_dir
    argv = list(argv) if argv is not None else profile.trainer_argv
    limits = limits or Limits.from_profile(profile)
    pre = None
    if preflight:
        pre = await run_preflight(profile if run_dir == profile.run_dir else _with_run_dir(profile, run_dir),
                                  host, target, ops, check_live_run=not relaunch)
        if not pre.ok:
            out = not_launched(pre)
            out.seconds = time.monotonic() - t0
            return out

    ev = await gather(ops, run_dir)
    stopped = None
    if ev.launch is not None and process_matches(ev.launch, ev.proc) and ev.exit is None:
        if not relaunch:
            raise LaunchRefused(f"run {ev.launch.run_id} (pid {ev.launch.pid}) is still running in {run_dir}; "
                                "stop it first, or relaunch")
        stopped = await stop_run(ops, target, run_dir, grace_s=profile.stop_grace_s)
        if not stopped.ok:
            check = Check("relaunch_stop", "Previous run stopped", CheckState.FAIL, stopped.message,
                          "stop it by hand, then launch", time.time())
            return _not_launched(check, [check], preflight=pre, stopped=stopped, seconds=time.monotonic() - t0)

    # Put the previous run's files aside (history/<run id>/), so nothing of it is read as ours.
    old = ev.launch.run_id if ev.launch is not None else ev.wrapper_run_id
    aside = posixpath.join(HISTORY_DIR, _history_name(old, ev.now))
    if any(ev.exists(n) for n in (LAUNCH_SH, LAUNCH_JSON, TRAIN_LOG, EXIT_JSON, STATUS_JSON, STOP_JSON, LAUNCH_OUT)):
        res = await target.run(["sh", "-c", _ARCHIVE, "dflash-archive", run_dir, aside, *PER_RUN_FILES], timeout=30)
        if not res.ok:
            check = Check("archive", "Previous run set aside", CheckState.FAIL,
                          f"could not move the last run's files to {run_dir}/{HISTORY_DIR}: "
                          f"{res.stderr.strip() or res.exit_status}", "fix the run dir's permissions", time.time())
            return _not_launched(check, [*(pre.checks if pre else []), check], preflight=pre, stopped=stopped,
                                 seconds=time.monotonic() - t0)

    run_id = new_run_id()
    script = render_wrapper(run_dir, run_id, argv, python=profile.python, probe=profile.probe).encode()
    wrapper_path = posixpath.join(run_dir, LAUNCH_SH)
    written = False
    write_res = None
    probe_problem = None
    try:
        # The run probe goes in beside launch.sh, at the same time (a launch costs no extra round trip).
        write_res, probe_problem = await asyncio.gather(
            target.run(["sh", "-c", _WRITE, "dflash-write", run_dir, wrapper_path], input=script, timeout=30),
            install_probe(target, ops, run_dir, aside) if profile.probe else asyncio.sleep(0))
        (st,) = await ops.stat([wrapper_path])
        written = st.exists and st.size == len(script)
    except CommandTimeout:
        written = False

    attempt: LaunchAttempt
    if not written:
        # No launch.sh on the target: sending the detach would only fail later; the evidence
        # is the write command's own status.
        attempt = LaunchAttempt(run_id=run_id, run_dir=run_dir, target=target.label, local_time=time.time(),
                                target_time=await ops.now(), exit_status=write_res.exit_status if write_res else None,
                                stdout=write_res.stdout if write_res else "", stderr=write_res.stderr if write_res else "",
                                wrapper_written=False)
    else:
        try:
            res = await target.run(detach_argv(run_dir), timeout=20)
        except TargetUnreachable as exc:
            attempt = LaunchAttempt(run_id, run_dir, target.label, time.time(), None, None, error=str(exc))
        except (CommandTimeout, TargetError) as exc:
            attempt = LaunchAttempt(run_id, run_dir, target.label, time.time(), None, None, error=str(exc))
        else:
            pid, via, own = parse_detach_output(res.stdout)
            attempt = LaunchAttempt(run_id, run_dir, target.label, time.time(), None, res.exit_status,
                                    stdout=res.stdout[-2000:], stderr=res.stderr[-2000:], pid=pid, via=via,
                                    own_session=own)
        attempt.target_time = await ops.now()
    notes = [probe_problem] if probe_problem else []
    if on_attempt is not None:
        on_attempt(attempt)

    ev, checklist = await first_verdict(ops, run_dir, attempt, limits)
    return LaunchOutcome(checklist, run_id, pre, attempt, ev, stopped, seconds=time.monotonic() - t0, notes=notes)


async def first_verdict(ops: RemoteOps, run_dir: str, attempt: LaunchAttempt, limits: Limits,
                        interval: float = 0.05) -> tuple[Evidence, Checklist]:
    """Poll until the wrapper has either proved it ran (launch.json) or missed the deadline.

    A missing launch.sh cannot appear later, so that case needs no waiting at all."""
    while True:
        ev = await gather(ops, run_dir, attempt=attempt)
        checklist = evaluate(ev, limits)
        waiting = checklist.verdict is Verdict.STARTING and ev.launch is None
        if not waiting:
            return ev, checklist
        await asyncio.sleep(interval)


def _with_run_dir(profile: Profile, run_dir: str) -> Profile:
    from dataclasses import replace
    return replace(profile, run_dir=run_dir)
