"""The launch's checks: the launch command, the wrapper's launch.json, the log, the process;
and what the launch left when it never ran."""

from __future__ import annotations

import re

from ....contract.rundir import LAUNCH_OUT, TRAIN_LOG, LaunchRecord
from ....words import age_at as _age, duration as _duration, one_line as _one_line
from ...attempts import LaunchAttempt
from ...evidence.observe import Evidence
from ..checklist import Check, CheckId, CheckState

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

# dash/bash prefix their messages with the script name and line: "./launch.sh: 32: cannot ..."
SH_PREFIX = re.compile(r"^\S*launch\.sh: (line )?\d+: ")
DISK_HINT = "free space on the run dir's filesystem (old runs, history/, checkpoints), then relaunch"


def last_line(text: str) -> str:
    # The wrapper's own "dflash-tui: run ... ended" lines say nothing about the cause.
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("dflash-tui: ")]
    return SH_PREFIX.sub("", lines[-1].strip()) if lines else ""


def launch_cmd_check(attempt: LaunchAttempt | None, launch: LaunchRecord | None) -> Check | None:
    """The launch command this machine sent (None: this machine sent none for this run)."""
    if attempt is None:
        return None
    def c(state: CheckState, cause: str, hint: str = "") -> Check:
        return Check.of(CheckId.LAUNCH_CMD, state, cause, hint, attempt.target_time)
    if attempt.error:
        return c(FAIL, _one_line(attempt.transport_summary()), "check the connection and the container, then relaunch")
    if attempt.exit_status == 0 and attempt.pid and launch is None and attempt.stderr.strip():
        return c(FAIL, _one_line(attempt.transport_summary()), "the detach shell complained: fix what its stderr names")
    if attempt.exit_status == 0 and attempt.pid:
        if attempt.own_session is False and attempt.via == "setsid":
            return c(WARN, f"pid {attempt.pid} via setsid, but it was not seen in its own session",
                     "a channel close may still reach it: run the canary")
        if attempt.via == "nohup":
            return c(WARN, f"detached pid {attempt.pid} via nohup (no setsid on the target)",
                     "install util-linux (setsid) on the target")
        return c(OK, f"detached pid {attempt.pid} via {attempt.via}, own session")
    return c(FAIL, _one_line(attempt.transport_summary()),
             "the transport did not run the detach shell; try a plain command through it")


def never_started_cause(ev: Evidence, attempt: LaunchAttempt | None) -> str:
    if ev.launch_problem:
        return ev.launch_problem
    if attempt is not None and not attempt.wrapper_written:
        return f"launch.sh could not be written to {ev.run_dir}"
    if not ev.exists("launch.sh"):
        return f"no launch.sh and no launch.json in {ev.run_dir}: commands on this transport ran nothing"
    out = last_line(ev.launch_out)
    if out:
        return f"no launch.json; {LAUNCH_OUT} says: {out}"
    if attempt is not None and attempt.pid and ev.detached_proc is not None and not ev.detached_proc.alive:
        return f"the detached shell (pid {attempt.pid}) exited without writing launch.json"
    return f"no launch.json in {ev.run_dir}: the launch shell did not run"


def log_problem(ev: Evidence) -> str:
    """Why train.log cannot be read ("" when it can): deleted, a directory, unreadable, not opened."""
    launch = ev.launch
    log = ev.files.get(TRAIN_LOG)
    path = ev.path(TRAIN_LOG)
    if launch.log_error:
        why = SH_PREFIX.sub("", launch.log_error.strip())
    elif log is None or not log.exists:
        why = f"{path} does not exist although the wrapper opened it: deleted after the launch?"
    elif log.is_dir:
        why = f"{path} is a directory"
    elif log.error:
        why = f"{path}: {log.error}"
    else:
        return ""
    if "No space left on device" in why or "Disk quota exceeded" in why:
        why = f"disk full: {why}"
    return why


def nothing_launched_check(run_dir: str) -> Check:
    return Check.of(CheckId.LAUNCH_JSON, PENDING, f"nothing launched in {run_dir}", "launch with --launch or press r")


def launch_json_waiting_check(waited: float, deadline_s: float) -> Check:
    return Check.of(CheckId.LAUNCH_JSON, PENDING, f"waiting for launch.json ({waited:.1f} s of {deadline_s:.0f} s)", "")


def launch_json_missing_check(why: str, sent_at: float | None) -> Check:
    return Check.of(CheckId.LAUNCH_JSON, FAIL, why,
                    "the launch shell never ran; see the launch command's status and launch.out", sent_at)


def launch_json_check(launch: LaunchRecord) -> Check:
    return Check.of(CheckId.LAUNCH_JSON, OK, f"pid {launch.pid} on {launch.host or '?'} as {launch.user or '?'}", "",
                    launch.start_time)


def train_log_check(ev: Evidence) -> tuple[Check, str]:
    """The log's check, and why it cannot be read ("" when it can: LOG MISSING otherwise)."""
    why = log_problem(ev)
    if why:
        full = why.startswith("disk full: ")
        return Check.of(CheckId.TRAIN_LOG, FAIL, _one_line(why),
                        DISK_HINT if full else "fix the run dir's permissions/disk space/path and relaunch",
                        ev.launch.start_time), why
    log = ev.files[TRAIN_LOG]
    return Check.of(CheckId.TRAIN_LOG, OK, f"{log.size} bytes, written {_age(ev.now, log.mtime)}", "", log.mtime), ""


def process_gone_check(ev: Evidence) -> tuple[Check, str]:
    """The wrapper's pid gone (or another process's now), and those words: fine after a stop
    request or a clean exit."""
    launch = ev.launch
    reused = ev.proc is not None and not ev.proc.gone
    gone = f"pid {launch.pid} " + ("now belongs to another process (pid reused, or the run dir is a copy)"
                                   if reused else "is gone")
    expected = ev.stop is not None or (ev.exit is not None and ev.exit.exit_code == 0)
    return Check.of(CheckId.PROCESS, OK if expected else FAIL, gone, "", ev.exit.end_time if ev.exit else None), gone


def process_alive_check(launch: LaunchRecord, uptime: float) -> Check:
    return Check.of(CheckId.PROCESS, OK, f"pid {launch.pid}, up {_duration(uptime)}", "", launch.start_time)
