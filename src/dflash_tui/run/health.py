"""Evidence → Checklist: the verdict table (docs/ARCHITECTURE.md), and nothing the evidence lacks.

| observed after the launch command returns               | verdict       |
| no launch.json by the deadline (about a second)         | NEVER STARTED |
| launch.json, no train.log                               | LOG MISSING   |
| pid gone, exit.json with code 0                         | FINISHED      |
| pid gone, exit.json non-zero code or signal             | CRASHED       |
| pid gone, no exit.json                                  | KILLED        |
| pid alive, no heartbeat for longer than the stall limit | STALLED       |
| pid alive, heartbeats fresh, steps advancing            | RUNNING       |
| pid alive (STARTING/RUNNING), a GPU of the host is lost | GPU LOST      |  (`with_gpu_check`)

Between those: STARTING (alive, log present, no step yet, within limits) and NO RUN (nothing was
ever launched here). `HealthTracker` keeps each check's `since` across polls: the time its
state last changed.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass, replace

from ..contract.rundir import LAUNCH_OUT, LAUNCH_SH, TRAIN_LOG, CompileState, Phase

from ..config import Profile
from ..gpu.health import gpu_check_for_status
from ..gpu.sample import GpuSnapshot
from .observe import Evidence, current_run_id, process_matches
from .tracebacks import exception_line
from .verdict import Check, CheckState, Checklist, Verdict

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

_COMPILING = {CompileState.WARMING.value, CompileState.COMPILING.value, CompileState.WAITING_AT_GATE.value,
              CompileState.PENDING.value}
# dash/bash prefix their messages with the script name and line: "./launch.sh: 32: cannot ..."
_SH_PREFIX = re.compile(r"^\S*launch\.sh: (line )?\d+: ")


@dataclass(frozen=True)
class Limits:
    stall_after_s: float = 60.0
    compile_stall_after_s: float = 900.0
    launch_deadline_s: float = 1.0

    @classmethod
    def from_profile(cls, p: Profile) -> "Limits":
        return cls(p.stall_after_s, p.compile_stall_after_s, p.launch_deadline_s)


def _age(now: float, t: float | None) -> str:
    if t is None:
        return "never"
    s = max(0.0, now - t)
    if s < 90:
        return f"{s:.0f} s ago" if s >= 1 else "just now"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    return f"{s / 3600:.1f} h ago"


def _signame(num: int | None) -> str:
    if num is None:
        return "?"
    try:
        return _signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_line(text: str) -> str:
    # The wrapper's own "dflash-tui: run ... ended" lines say nothing about the cause.
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("dflash-tui: ")]
    return _SH_PREFIX.sub("", lines[-1].strip()) if lines else ""


def evaluate(ev: Evidence, limits: Limits = Limits()) -> Checklist:
    """The checklist for one observation. Pure: the same evidence gives the same checklist."""
    now = ev.now
    checks: list[Check] = []
    add = checks.append
    run_id = current_run_id(ev)
    attempt = ev.attempt if ev.attempt is not None and ev.attempt.run_id == run_id else None

    # -- the launch command (only known to the machine that sent it) ---------------------------
    if attempt is not None:
        if attempt.error:
            add(Check("launch_cmd", "Launch command", FAIL, _one_line(attempt.transport_summary()),
                      "check the connection and the container, then relaunch", attempt.target_time))
        elif attempt.exit_status == 0 and attempt.pid and ev.launch is None and attempt.stderr.strip():
            add(Check("launch_cmd", "Launch command", FAIL, _one_line(attempt.transport_summary()),
                      "the detach shell complained: fix what its stderr names", attempt.target_time))
        elif attempt.exit_status == 0 and attempt.pid:
            if attempt.own_session is False and attempt.via == "setsid":
                add(Check("launch_cmd", "Launch command", WARN,
                          f"pid {attempt.pid} via setsid, but it was not seen in its own session",
                          "a channel close may still reach it: run the canary", attempt.target_time))
            else:
                how = "nohup (no setsid on the target)" if attempt.via == "nohup" else f"{attempt.via}, own session"
                add(Check("launch_cmd", "Launch command", OK if attempt.via != "nohup" else WARN,
                          f"detached pid {attempt.pid} via {how}",
                          "" if attempt.via != "nohup" else "install util-linux (setsid) on the target",
                          attempt.target_time))
        else:
            add(Check("launch_cmd", "Launch command", FAIL, _one_line(attempt.transport_summary()),
                      "the transport did not run the detach shell; try a plain command through it",
                      attempt.target_time))

    # -- launch.json: did the wrapper shell run? -------------------------------------------------
    if ev.launch is None:
        if run_id is None and not ev.exists(LAUNCH_SH):
            add(Check("launch_json", "Wrapper ran (launch.json)", PENDING,
                      f"nothing launched in {ev.run_dir}", "launch with --launch or press r"))
            return Checklist(Verdict.NO_RUN, checks, f"no run in {ev.run_dir}")
        sent_at = attempt.target_time if attempt and attempt.target_time is not None else (
            ev.files[LAUNCH_SH].mtime if ev.exists(LAUNCH_SH) else None)
        waited = (now - sent_at) if sent_at is not None else None
        # No need to wait out the deadline when the evidence is already final: the transport
        # failed, launch.sh is not there, the detach shell printed nothing, or the detached
        # process is gone without having written launch.json.
        certain = attempt is not None and (
            bool(attempt.error) or not attempt.wrapper_written or attempt.pid is None
            or (ev.detached_proc is not None and (not ev.detached_proc.alive or ev.detached_proc.state == "Z")))
        if waited is not None and waited < limits.launch_deadline_s and not ev.launch_problem and not certain:
            add(Check("launch_json", "Wrapper ran (launch.json)", PENDING,
                      f"waiting for launch.json ({waited:.1f} s of {limits.launch_deadline_s:.0f} s)", ""))
            return Checklist(Verdict.STARTING, checks, "launch sent; waiting for the wrapper")
        why = _never_started_cause(ev, attempt)
        add(Check("launch_json", "Wrapper ran (launch.json)", FAIL, why,
                  "the launch shell never ran; see the launch command's status and launch.out",
                  sent_at))
        summary = why
        if attempt is not None and not attempt.error:
            summary += "; " + attempt.transport_summary()
        return Checklist(Verdict.NEVER_STARTED, checks, _one_line(summary, 400))
    launch = ev.launch
    add(Check("launch_json", "Wrapper ran (launch.json)", OK,
              f"pid {launch.pid} on {launch.host or '?'} as {launch.user or '?'}", "", launch.start_time))

    # -- train.log ------------------------------------------------------------------------------
    log = ev.files.get(TRAIN_LOG)
    log_path = ev.path(TRAIN_LOG)
    log_why = ""
    if launch.log_error:
        log_why = _SH_PREFIX.sub("", launch.log_error.strip())
    elif log is None or not log.exists:
        log_why = f"{log_path} does not exist although the wrapper opened it: deleted after the launch?"
    elif log.is_dir:
        log_why = f"{log_path} is a directory"
    elif log.error:
        log_why = f"{log_path}: {log.error}"
    if log_why:
        add(Check("train_log", "Log (train.log)", FAIL, _one_line(log_why),
                  "fix the run dir's permissions/disk space/path and relaunch", launch.start_time))
        return Checklist(Verdict.LOG_MISSING, checks, _one_line(log_why, 400))
    add(Check("train_log", "Log (train.log)", OK, f"{log.size} bytes, written {_age(now, log.mtime)}",
              "", log.mtime))

    # -- the process ----------------------------------------------------------------------------
    alive = process_matches(launch, ev.proc)
    stop = ev.stop
    if not alive:
        reused = ev.proc is not None and ev.proc.alive and not alive and ev.proc.state != "Z"
        gone = f"pid {launch.pid} " + ("now belongs to another process (pid reused)" if reused else "is gone")
        add(Check("process", "Process", FAIL if (ev.exit is None or ev.exit.exit_code != 0) else OK,
                  gone, "", ev.exit.end_time if ev.exit else None))
        return _ended(ev, checks, gone)
    uptime = now - launch.start_time
    add(Check("process", "Process", OK, f"pid {launch.pid}, up {_duration(uptime)}", "", launch.start_time))
    if ev.exit is not None:
        # The wrapper writes exit.json just before it exits: the trainer has ended.
        return _ended(ev, checks, f"pid {launch.pid} is exiting")
    if stop is not None:
        add(Check("stop", "Stop requested", WARN, f"{stop.signal_sent or 'stop'} sent {_age(now, stop.requested_time)}"
                  f" by {stop.requested_by or '?'}", "wait for the grace period", stop.requested_time))

    # -- heartbeat, threads, steps --------------------------------------------------------------
    st = ev.status
    if st is None:
        why = ev.status_problem or "no status.json yet"
        if uptime > limits.stall_after_s:
            add(Check("heartbeat", "Heartbeat", FAIL, f"{why}, {_duration(uptime)} after the start",
                      "the trainer is alive but silent: look at the log's last lines", launch.start_time))
            return Checklist(Verdict.STALLED, checks,
                             _one_line(f"no heartbeat in {_duration(uptime)} since the start ({why})"))
        add(Check("heartbeat", "Heartbeat", PENDING, f"{why} (up {_duration(uptime)})", ""))
        return Checklist(Verdict.STARTING, checks, f"pid {launch.pid} started, waiting for the first heartbeat")

    hb = st.heartbeat_time if st.heartbeat_time is not None else st.time
    hb_age = now - hb
    compiling = [t for t in st.threads if t.compile_state in _COMPILING]
    hb_limit = limits.compile_stall_after_s if (st.phase == Phase.WARMING.value or compiling) else limits.stall_after_s
    if hb_age > hb_limit:
        add(Check("heartbeat", "Heartbeat", FAIL, f"last heartbeat {_age(now, hb)} (limit {hb_limit:.0f} s)",
                  "the process is alive but not beating: look for a deadlock or a stuck compile", hb))
    else:
        add(Check("heartbeat", "Heartbeat", OK, f"last heartbeat {_age(now, hb)}", "", hb))

    stalled_threads = []
    failed_threads = []
    # Workers start only after the main thread's warm-up: before the training phase a worker's
    # silence is waiting, not stalling (the process heartbeat still covers the warm-up itself).
    workers_running = st.phase not in (Phase.STARTING.value, Phase.WARMING.value)
    for t in st.threads:
        limit = limits.compile_stall_after_s if t.compile_state in _COMPILING else limits.stall_after_s
        if t.compile_state == CompileState.FAILED.value:
            failed_threads.append(t)
        elif workers_running and t.last_beat_time is not None and now - t.last_beat_time > limit:
            stalled_threads.append(t)
    if failed_threads or stalled_threads:
        parts = [f"{t.name} ({t.device}) failed: {t.error or 'compile failed'}" for t in failed_threads]
        parts += [f"{t.name} ({t.device}, {t.compile_state}) silent {_age(now, t.last_beat_time)}"
                  for t in stalled_threads]
        add(Check("threads", "Threads", FAIL, _one_line("; ".join(parts)),
                  "the named threads stopped; their compile state says where", None))
    elif st.threads:
        states = sorted({t.compile_state for t in st.threads})
        what = "beating" if workers_running else "waiting for the warm-up"
        add(Check("threads", "Threads", OK, f"{len(st.threads)} threads {what} ({', '.join(states)})", ""))

    last_step = max((t.last_step_time for t in st.threads if t.last_step_time is not None), default=None)
    training = st.phase == Phase.TRAINING.value
    if st.step > 0 or last_step is not None:
        step_age = now - (last_step if last_step is not None else st.time)
        if training and step_age > limits.stall_after_s:
            add(Check("steps", "Steps advancing", FAIL, f"step {st.step} unchanged since {_age(now, last_step or st.time)}",
                      "heartbeats without steps: a worker is stuck (see Threads)", last_step))
        else:
            total = f"/{st.total_steps}" if st.total_steps else ""
            add(Check("steps", "Steps advancing", OK, f"step {st.step}{total}, last {_age(now, last_step or st.time)}",
                      "", last_step))
    elif uptime > limits.compile_stall_after_s:
        # Heartbeats alone do not make progress: a warm-up that never ends is a stall too.
        add(Check("steps", "Steps advancing", FAIL, f"phase {st.phase}, no step in {_duration(uptime)}",
                  f"longer than compile_stall_after_s ({limits.compile_stall_after_s:.0f} s): see the log", None))
    else:
        add(Check("steps", "Steps advancing", PENDING, f"phase {st.phase}, no step yet", ""))
    if st.last_error:
        add(Check("errors", "Trainer errors", WARN, _one_line(st.last_error), "see the log", None))

    failing = [c for c in checks if c.id in ("heartbeat", "threads", "steps") and c.state is FAIL]
    if failing:
        if stalled_threads or failed_threads:
            names = ", ".join(f"{t.name} [{t.compile_state}]" for t in failed_threads + stalled_threads)
            summary = f"threads stopped: {names}"
        else:
            summary = failing[0].cause
        return Checklist(Verdict.STALLED, checks, _one_line(summary, 400))
    if not any(c.id == "steps" and c.state is OK for c in checks):
        return Checklist(Verdict.STARTING, checks, f"pid {launch.pid} alive, phase {st.phase}, heartbeats fresh")
    total = f"/{st.total_steps}" if st.total_steps else ""
    extra = "".join(f", {k} {v:.3g}" for k, v in (("loss", st.loss), ("τ", st.tau)) if v is not None)
    return Checklist(Verdict.RUNNING, checks, f"step {st.step}{total}{extra}, up {_duration(uptime)}")


def with_gpu_check(checklist: Checklist, ev: Evidence, snap: GpuSnapshot | None) -> Checklist:
    """`checklist` with the "gpus" check (gpu/health.py) from one GPU snapshot of the run's host.

    The one place both RunMonitor (the dashboard) and `dflash-tui --check` add it, so the two
    never disagree. The check changes the verdict in one case only: it fails (a GPU fell off
    the bus) while the run's process is alive (STARTING or RUNNING), which gives GPU LOST: the
    process may still beat for a while, but a run on a host with a lost GPU cannot go on.
    A warn or pending GPU check (no NVML, still compiling) never changes the verdict, and a
    run that already ended keeps the verdict its own evidence gives.
    """
    alive = process_matches(ev.launch, ev.proc) if ev.launch is not None else None
    gpus = gpu_check_for_status(snap, ev.status, alive)
    checks = [*checklist.checks, gpus]
    if gpus.state is FAIL and alive and checklist.verdict in (Verdict.STARTING, Verdict.RUNNING):
        pid = ev.launch.pid if ev.launch is not None else "?"
        return Checklist(Verdict.GPU_LOST, checks,
                         _one_line(f"{gpus.cause}; pid {pid} is still alive but cannot go on", 400))
    return replace(checklist, checks=checks)


def _ended(ev: Evidence, checks: list[Check], gone: str) -> Checklist:
    """pid gone (or exiting): FINISHED / CRASHED from exit.json, KILLED without it."""
    add = checks.append
    ex = ev.exit
    stop = ev.stop
    stopped = f" after a stop request ({stop.signal_sent or 'stop'} by {stop.requested_by or '?'})" if stop else ""
    if ex is None:
        why = ev.exit_problem or "no exit.json: the wrapper was killed before the trainer ended"
        add(Check("exit", "Exit status", FAIL, _one_line(why),
                  "killed from outside: SIGKILL, the OOM killer (dmesg) or a container stop", None))
        if ev.last_traceback:
            add(Check("traceback", "Last traceback", WARN, _one_line(exception_line(ev.last_traceback)),
                      "see the log", None))
        return Checklist(Verdict.KILLED, checks, _one_line(f"{gone}, {why}{stopped}", 400))
    if ex.exit_code == 0:
        add(Check("exit", "Exit status", OK, "exit code 0", "", ex.end_time))
        return Checklist(Verdict.FINISHED, checks, f"finished with exit code 0{stopped}")
    what = f"killed by {_signame(ex.signal)}" if ex.exit_code is None else f"exit code {ex.exit_code}"
    add(Check("exit", "Exit status", FAIL, what + stopped, "see the traceback and the log", ex.end_time))
    cause = exception_line(ev.last_traceback)
    if not cause and ev.log_tail and ex.signal is None:
        cause = _last_line(ev.log_tail)
    if ev.last_traceback:
        add(Check("traceback", "Last traceback", FAIL, _one_line(cause), "read it in the log pane / train.log",
                  ex.end_time))
    summary = what + (f": {cause}" if cause else "") + stopped
    return Checklist(Verdict.CRASHED, checks, _one_line(summary, 400))


def _never_started_cause(ev: Evidence, attempt) -> str:
    if ev.launch_problem:
        return ev.launch_problem
    if attempt is not None and not attempt.wrapper_written:
        return f"launch.sh could not be written to {ev.run_dir}"
    if not ev.exists(LAUNCH_SH):
        return (f"no launch.sh and no launch.json in {ev.run_dir}: commands on this transport ran nothing")
    out = _last_line(ev.launch_out)
    if out:
        return f"no launch.json; {LAUNCH_OUT} says: {out}"
    if attempt is not None and attempt.pid and ev.detached_proc is not None and not ev.detached_proc.alive:
        return f"the detached shell (pid {attempt.pid}) exited without writing launch.json"
    return f"no launch.json in {ev.run_dir}: the launch shell did not run"


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class HealthTracker:
    """Keeps, per check id, when its state last changed, across polls of one run."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[CheckState, float]] = {}
        self._run_id: str | None = None

    def reset(self) -> None:
        self._since.clear()

    def update(self, checklist: Checklist, now: float, run_id: str | None = None) -> Checklist:
        if run_id != self._run_id:
            self._since.clear()
            self._run_id = run_id
        out = []
        for c in checklist.checks:
            prev = self._since.get(c.id)
            if prev is not None and prev[0] is c.state:
                since = prev[1]
            else:
                # First sight of this state: the evidence's own time when it has one (e.g. the
                # heartbeat's), else now.
                since = c.since if c.since is not None and prev is None else now
                self._since[c.id] = (c.state, since)
            out.append(replace(c, since=since))
        return replace(checklist, checks=out)
