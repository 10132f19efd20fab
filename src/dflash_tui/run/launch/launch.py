"""Launch a run: preflight, put the last run's files aside, write launch.sh, detach it, judge.

The sequence is the same for every backend; where and how launch.sh is started, found alive,
stopped and observed is the profile's Launcher (run/launch/launcher.py, backends/). The start is ONE
command that returns at once (`Launcher.detach`); its exit status and output are kept
(run/attempts.py), because when a transport runs nothing, that is the only evidence there is. Then the run dir is polled until
launch.json appears or the deadline passes, so the caller gets a verdict, not a guess.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from dataclasses import dataclass, field, replace
from ...contract.rundir import (HISTORY_DIR, EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, STATUS_JSON,
                               STOP_JSON, TRAIN_LOG, rank_file_globs)

from ...config import Limits, Profile
from ...remote.base import CommandResult, CommandTimeout, Target
from ...remote.ops import RemoteOps
from ..attempts import LaunchAttempt
from .claim import ClaimRefused, take_claim
from .launcher import Launcher
from ..evidence.observe import Evidence
from .preflight import GpuSampler, PreflightResult
from .probe_install import install_probe
from .request import LaunchRequest, with_resume_from
from .stop import StopResult
from ..verdict.checklist import Check, CheckId, CheckState, Checklist, Verdict
from ..wrapper import new_run_id, render_wrapper

# The files that describe one run (the launcher's RUN_FILES) are set aside in HISTORY_DIR
# (contract/rundir.py); checkpoints/ stays, so a relaunch can --resume.
# How long a launch waits, past its deadline, for a detached wrapper that is alive but has not
# written launch.json yet, before it gives the claim back.
SETTLE_S = 30.0

# $1 = run dir, $2 = history sub-dir name, then the file names. Moves regular files only: a
# train.log that is a directory stays where it is, and the next launch says so (LOG MISSING).
_ARCHIVE = ('d=$1; h=$2; shift 2; cd -- "$d" || exit 1; mkdir -p -- "$h" || exit 1; '
            # plain names are moved if present; a name with * is a glob (the per-rank files)
            'for f in "$@"; do case $f in *"*"*) ;; *) if [ -f "$f" ]; then mv -f -- "$f" "$h/$f" || exit 1; fi; '
            'continue ;; esac; for g in $f; do if [ -f "$g" ]; then mv -f -- "$g" "$h/$g" || exit 1; fi; done; '
            'done; echo archived')
# $1 = run dir, $2 = launch.sh path; the script arrives on stdin.
_WRITE = ('set -e; umask 022; mkdir -p -- "$1"; tmp="$2.tmp.$$"; cat > "$tmp"; chmod 755 "$tmp"; '
          'mv -f "$tmp" "$2"; echo written')


class LaunchRefused(Exception):
    """A second launch into a run dir whose run is alive (relaunch stops it first), or one
    that another launch of the same run dir is in progress (run/launch/claim.py)."""


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
    resume_from: str = ""      # a resumed launch: the checkpoint it continues from, and its run


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


async def launch_run(profile: Profile, launcher: Launcher, ops: RemoteOps, request: LaunchRequest, *,
                     limits: Limits | None = None, on_attempt=None,
                     gpu_sample: GpuSampler | None = None) -> LaunchOutcome:
    """Launch as `request` asks (run/launch/request.py): its argv (default: the profile's
    trainer) in its run dir (default: the profile's), its restart number as the trainer's
    DFLASH_RESTART (run/wrapper.py), its placement given to `Launcher.detach`. Raises
    LaunchRefused for a placement the launcher cannot carry out, before anything is touched.

    `on_attempt(attempt)` is called as soon as the launch command returned (the CLI and the
    monitor store it); the returned outcome holds the first verdict. `gpu_sample`: the host's
    GPUs for the preflight's "gpu_health" check."""
    t0 = time.monotonic()
    refused = request.refused_placement(launcher.PLACES_NODES)
    if refused is not None:
        raise LaunchRefused(f"{launcher.label}: {refused}")
    target = launcher.target
    run_dir = request.run_dir or profile.run_dir
    own_trainer = request.argv is None
    argv = list(request.argv) if request.argv is not None else profile.trainer_argv
    limits = limits or profile.limits
    pre = None
    if request.preflight:
        pre = await launcher.preflight(ops, check_live_run=not request.relaunch, gpu_sample=gpu_sample,
                                       profile=profile if run_dir == profile.run_dir else _with_run_dir(profile, run_dir))
        if not pre.ok:
            out = not_launched(pre)
            out.seconds = time.monotonic() - t0
            return out
        if own_trainer and pre.program:
            # Run exactly what preflight checked: the program as found from the run dir.
            argv[0] = pre.program
    # What the rest of the launch runs where: the request with its defaults filled in.
    request = replace(request, run_dir=run_dir, argv=tuple(launcher.job_argv(argv)))

    # From here to the first verdict this launch owns the run dir: nothing below (the live-run
    # check, the stop, the archive, the write, the detach) may interleave with another launch.
    try:
        claim = await take_claim(target, ops, run_dir, "relaunch" if request.relaunch else "launch")
    except ClaimRefused as exc:
        if exc.ran_nothing is None:
            raise LaunchRefused(str(exc)) from None
        # The transport runs nothing (the incident's `pct exec`): no launch can happen through
        # it, so the evidence is the claim command's own status, judged like a failed write.
        attempt = await _unwritten(new_run_id(), run_dir, target, ops, exc.ran_nothing)
        if on_attempt is not None:
            on_attempt(attempt)
        ev, checklist = await first_verdict(launcher, ops, run_dir, attempt, limits)
        return LaunchOutcome(checklist, attempt.run_id, pre, attempt, ev, seconds=time.monotonic() - t0)
    try:
        return await _launch_claimed(profile, launcher, ops, request, pre=pre, limits=limits,
                                     on_attempt=on_attempt, t0=t0)
    finally:
        await claim.release()


async def _launch_claimed(profile: Profile, launcher: Launcher, ops: RemoteOps, request: LaunchRequest, *,
                          pre: PreflightResult | None, limits: Limits, on_attempt, t0: float) -> LaunchOutcome:
    """The launch once the claim is held; `request`'s run dir and argv are filled in."""
    run_dir, argv = request.run_dir, list(request.argv)
    target = launcher.target
    ev = await launcher.observe(ops, run_dir)
    stopped = None
    if launcher.alive(ev) and ev.exit is None:
        if not request.relaunch:
            raise LaunchRefused(f"{launcher.describe_live(ev)} is still running in {run_dir}; "
                                "stop it first, or relaunch")
        stopped = await launcher.stop(ops, run_dir, grace_s=profile.stop_grace_s)
        if not stopped.ok:
            check = Check.of(CheckId.RELAUNCH_STOP, CheckState.FAIL, stopped.message,
                          "stop it by hand, then launch", time.time())
            return _not_launched(check, [check], preflight=pre, stopped=stopped, seconds=time.monotonic() - t0)

    # Put the previous run's files aside (history/<run id>/), so nothing of it is read as ours.
    old = ev.launch.run_id if ev.launch is not None else ev.wrapper_run_id
    aside = posixpath.join(HISTORY_DIR, _history_name(old, ev.now))
    if any(ev.exists(n) for n in (LAUNCH_SH, LAUNCH_JSON, TRAIN_LOG, EXIT_JSON, STATUS_JSON, STOP_JSON, LAUNCH_OUT)):
        res = await target.run(["sh", "-c", _ARCHIVE, "dflash-archive", run_dir, aside, *launcher.RUN_FILES,
                                *rank_file_globs()], timeout=30)
        if not res.ok:
            check = Check.of(CheckId.ARCHIVE, CheckState.FAIL,
                          f"could not move the last run's files to {run_dir}/{HISTORY_DIR}: "
                          f"{res.stderr.strip() or res.exit_status}", "fix the run dir's permissions", time.time())
            return _not_launched(check, [*(pre.checks if pre else []), check], preflight=pre, stopped=stopped,
                                 seconds=time.monotonic() - t0)

    run_id = new_run_id()
    python = pre.program if pre is not None and pre.program and profile.uses_bundled_trainer else profile.python
    script = render_wrapper(run_dir, run_id, with_resume_from(argv, request.resume_from), python=python,
                            probe=profile.probe, options=request.program_options()).encode()
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
        attempt = await _unwritten(run_id, run_dir, target, ops, write_res)
    else:
        started = await launcher.detach(run_dir, run_id, request.placement)
        attempt = LaunchAttempt(run_id, run_dir, target.label, time.time(), None, started.exit_status,
                                stdout=started.stdout, stderr=started.stderr, pid=started.pid, via=started.via,
                                own_session=started.own_session, error=started.error or "",
                                gpu_energy_mj=pre.gpu_energy_mj if pre is not None else None)
        attempt.target_time = await ops.now()
    notes = [probe_problem] if probe_problem else []
    if on_attempt is not None:
        on_attempt(attempt)

    ev, checklist = await first_verdict(launcher, ops, run_dir, attempt, limits)
    ev, checklist = await _settle(launcher, ops, run_dir, attempt, limits, ev, checklist)
    return LaunchOutcome(checklist, run_id, pre, attempt, ev, stopped, seconds=time.monotonic() - t0, notes=notes)


async def _settle(launcher: Launcher, ops: RemoteOps, run_dir: str, attempt: LaunchAttempt, limits: Limits,
                  ev: Evidence, checklist: Checklist) -> tuple[Evidence, Checklist]:
    """A detached wrapper still alive without launch.json is a launch in progress, however
    late (a loaded target can take longer than the deadline): the claim stays ours, and we
    keep looking, until it writes launch.json or is gone (at most SETTLE_S). Another launch
    let in meanwhile would start a second trainer beside it."""
    deadline = time.monotonic() + SETTLE_S
    while (checklist.verdict is Verdict.NEVER_STARTED and ev.launch is None and ev.detached_proc is not None
           and not ev.detached_proc.gone and time.monotonic() < deadline):
        await asyncio.sleep(0.1)
        ev = await launcher.observe(ops, run_dir, attempt=attempt)
        checklist = launcher.judge(ev, limits)
    return ev, checklist


async def _unwritten(run_id: str, run_dir: str, target: Target, ops: RemoteOps,
                     res: CommandResult | None) -> LaunchAttempt:
    """The attempt of a launch whose launch.sh never reached the target: `res` is the command
    that should have put it (or the claim) there."""
    return LaunchAttempt(run_id=run_id, run_dir=run_dir, target=target.label, local_time=time.time(),
                         target_time=await ops.now(), exit_status=res.exit_status if res else None,
                         stdout=res.stdout if res else "", stderr=res.stderr if res else "",
                         wrapper_written=False)


async def first_verdict(launcher: Launcher, ops: RemoteOps, run_dir: str, attempt: LaunchAttempt,
                        limits: Limits, interval: float = 0.05) -> tuple[Evidence, Checklist]:
    """Poll until the wrapper has either proved it ran (launch.json) or missed the deadline.

    A missing launch.sh cannot appear later, so that case needs no waiting at all. A run that
    stays STARTING without launch.json past the deadline and SETTLE_S (a scheduler's job that
    started and whose wrapper has not written yet, a scheduler that does not answer) is
    returned as it is."""
    deadline = time.monotonic() + limits.launch_deadline_s + SETTLE_S
    while True:
        ev = await launcher.observe(ops, run_dir, attempt=attempt)
        checklist = launcher.judge(ev, limits)
        waiting = checklist.verdict is Verdict.STARTING and ev.launch is None
        if not waiting or time.monotonic() >= deadline:
            return ev, checklist
        await asyncio.sleep(interval)


def _with_run_dir(profile: Profile, run_dir: str) -> Profile:
    return replace(profile, run_dir=run_dir)
