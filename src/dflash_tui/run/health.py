"""Evidence → Checklist: the verdict table (evaluate's docstring; docs/ARCHITECTURE.md tells it
in prose), and nothing the evidence lacks.

`HealthTracker` keeps each check's `since` across polls: the time its state last changed.
The words (ages, durations, one-line causes) are dflash_tui/words.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..contract.rundir import LAUNCH_OUT, LAUNCH_SH, TRAIN_LOG, CompileState, Phase, ThreadStatus, TrainStatus

from ..config import Profile
from ..gpu.sample import GpuSnapshot
from ..words import age_at as _age, duration as _duration, cpu_use, one_line as _one_line, signame as _signame, size
from .activity import Activity
from .gpu_check import gpu_check_for_status
from .observe import Evidence, current_run_id, process_matches
from .slurm_verdict import judge as judge_slurm_job
from .tracebacks import exception_line
from .verdict import Check, CheckState, Checklist, ThreadHealth, ThreadState, Verdict

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


def _last_line(text: str) -> str:
    # The wrapper's own "dflash-tui: run ... ended" lines say nothing about the cause.
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("dflash-tui: ")]
    return _SH_PREFIX.sub("", lines[-1].strip()) if lines else ""


def evaluate(ev: Evidence, limits: Limits = Limits()) -> Checklist:
    """The checklist for one observation. Pure: the same evidence gives the same checklist.

    The verdict table, top row first (the first row that matches decides):

    | observed after the launch command returns                          | verdict       |
    | nothing launched in the run dir                                    | NO RUN        |
    | no launch.json by launch_deadline_s (certain evidence: at once)    | NEVER STARTED |
    | launch.json, no train.log (or it cannot be opened; "disk full")    | LOG MISSING   |
    | pid gone (or exiting) after a stop request for this run (stop.json)| STOPPED       |
    | pid gone, exit.json with code 0                                    | FINISHED      |
    | pid gone, exit.json non-zero code or signal                        | CRASHED       |
    | pid gone, no exit.json                                             | KILLED        |
    | alive, status.json: a thread STUCK/FAILED, no heartbeat, or no     | STALLED       |
    |   step while nothing else advanced, past the limit (below)         |               |
    | alive, no status.json: nothing advanced for the limit (below)      | STALLED       |
    | alive, progress advancing from any source within the limit         | RUNNING       |
    | alive, no progress yet, within the limits                          | STARTING      |
    | (`with_gpu_check`) alive, STARTING/RUNNING, a GPU of the host lost | GPU LOST      |

    Progress is anything advancing: a step in status.json (its threads' last_step_time), a
    step or checkpoint line in train.log (run/progress.py), the log growing with the program's
    own output, a step event in events.jsonl (the bundled trainer's, the run probe's). A
    heartbeat (status.json's, a probe's) proves the process alive, never that it progresses.
    The limit is stall_after_s; compile_stall_after_s while compiling or warming up, and while
    the process tree is busy (CPU time advancing at >= 5 % of a core: data preparation, a long
    compile, an evaluation that prints nothing). A busy silent phase within that longer limit
    is RUNNING (STARTING before any progress) with a warn "progress" check naming the CPU use;
    past it, STALLED "busy but silent". Silent and idle past stall_after_s is STALLED "idle
    hang". Either way the words say what is silent, what is not and how much CPU the tree uses.
    Threads: a worker before the training phase is waiting, the main thread after the warm-up
    has no role left (never a stall), a failed compile or a reported error is FAILED.
    A full disk (free space of the run dir's filesystem, ENOSPC in the log or launch.out) is
    a failing "disk" check and the first words of a failing verdict's summary.
    """
    if ev.job is not None:   # a Slurm job: its states beside the evidence (run/slurm_verdict.py)
        return judge_slurm_job(ev, lambda plain: evaluate(replace(plain, job=None), limits))
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
        full = "No space left on device" in log_why or "Disk quota exceeded" in log_why
        if full:
            log_why = f"disk full: {log_why}"
        add(Check("train_log", "Log (train.log)", FAIL, _one_line(log_why),
                  _DISK_HINT if full else "fix the run dir's permissions/disk space/path and relaunch",
                  launch.start_time))
        return Checklist(Verdict.LOG_MISSING, checks, _one_line(log_why, 400))
    add(Check("train_log", "Log (train.log)", OK, f"{log.size} bytes, written {_age(now, log.mtime)}",
              "", log.mtime))

    # -- the process ----------------------------------------------------------------------------
    alive = process_matches(launch, ev.proc)
    stop = ev.stop
    if not alive:
        reused = ev.proc is not None and ev.proc.alive and not alive and ev.proc.state != "Z"
        gone = f"pid {launch.pid} " + ("now belongs to another process (pid reused)" if reused else "is gone")
        expected = stop is not None or (ev.exit is not None and ev.exit.exit_code == 0)
        add(Check("process", "Process", OK if expected else FAIL, gone, "", ev.exit.end_time if ev.exit else None))
        return _ended(ev, checks, gone)
    uptime = now - launch.start_time
    add(Check("process", "Process", OK, f"pid {launch.pid}, up {_duration(uptime)}", "", launch.start_time))
    if ev.exit is not None:
        # The wrapper writes exit.json just before it exits: the trainer has ended.
        return _ended(ev, checks, f"pid {launch.pid} is exiting")
    if stop is not None:
        add(Check("stop", "Stop requested", WARN, f"{stop.signal_sent or 'stop'} sent {_age(now, stop.requested_time)}"
                  f" by {stop.requested_by or '?'}", "wait for the grace period", stop.requested_time))

    # -- progress: the trainer's own status.json when there is one, else any program's evidence
    st = ev.status
    if st is None:
        return _any_program(ev, checks, limits, uptime)
    return _status_reporting(ev, st, checks, limits, uptime)


def _busy(ev: Evidence) -> bool | None:
    """Whether the run's process tree uses CPU now (None: not measured)."""
    return ev.activity.cpu_busy if ev.activity is not None else None


def _cpu_words(act: Activity | None) -> str:
    """ "idle (0 % CPU over 1 s; 2 processes, 2 sleeping)" or "busy (180 % CPU ...)". """
    if act is None or act.cpu_cores is None:
        return "CPU not measured"
    what = "busy" if act.cpu_busy else "idle"
    tree = f"{act.procs} process{'es' if act.procs != 1 else ''}, {act.threads} threads"
    return f"{what} ({cpu_use(act.cpu_cores)} over {_duration(act.cpu_window_s or 0)}; {tree}: {act.states})"


def _cpu_check(add, act: Activity | None) -> None:
    if act is None or act.cpu_s is None:
        return
    if act.cpu_cores is None:
        add(Check("cpu", "CPU (process tree)", PENDING,
                  f"{act.cpu_s:.1f} CPU seconds so far, {act.procs} processes; rate after a second sample", ""))
        return
    add(Check("cpu", "CPU (process tree)", OK, _cpu_words(act), ""))


def _disk_words(ev: Evidence) -> str:
    """ "disk full: 0 B free on /r (of 16.0 KiB)" when the run dir's filesystem is full, else "". """
    act = ev.activity
    if act is not None and act.disk_full:
        return (f"disk full: {size(act.disk.free)} free on {act.disk.checked} "
                f"(of {size(act.disk.total)})")
    if act is not None and act.disk_error:
        return f"disk full: the log says {act.disk_error!r}"
    for text in (ev.launch_out, ev.launch.log_error if ev.launch else ""):
        if text and ("No space left on device" in text or "Disk quota exceeded" in text):
            return f"disk full: {_last_line(text) or text.strip()}"
    return ""


_DISK_HINT = "free space on the run dir's filesystem (old runs, history/, checkpoints), then relaunch"


def _disk_check(ev: Evidence, add) -> str:
    words = _disk_words(ev)
    if words:
        add(Check("disk", "Disk space (run dir)", FAIL, _one_line(words), _DISK_HINT, None))
    return words


def _last_progress(ev: Evidence, *also: float | None) -> float | None:
    """The latest time anything advanced: log output, a step in the log or events.jsonl,
    a probe's step, or the times given (status.json's last step)."""
    act = ev.activity
    times = list(also)
    if act is not None:
        times += [act.log_grew_at if act.program_output else None, act.step_at]
    return max((t for t in times if t is not None), default=None)


def _progress_words(ev: Evidence) -> str:
    """ "step 120/1000, loss 2.31, 3.2 it/s" from the log/events, "" when none was read."""
    act = ev.activity
    if act is None or act.step is None and act.step_at is None:
        return ""
    return _one_line(", ".join(_parsed_parts(ev)))


def _parsed_parts(ev: Evidence) -> list[str]:
    act = ev.activity
    parts = []
    if act is not None and act.step is not None:
        total = f"/{act.total}" if act.total else ""
        parts.append(f"step {act.step}{total}")
    if act is not None and act.loss is not None:
        parts.append(f"loss {act.loss:.4g}")
    if act is not None and act.rate is not None:
        parts.append(f"{act.rate:.3g} {act.rate_unit}")
    return parts


def _probe_check(ev: Evidence, add, limits: Limits) -> None:
    """The run probe's per-process heartbeats: alive, not progress."""
    probes = [p for p in ev.probes if not p.ended]   # one that exited normally beats no more
    if not probes:
        return
    beats = [p.time for p in probes]                 # each report is rewritten by its heartbeat
    fresh = [b for b in beats if b is not None and ev.now - b <= limits.stall_after_s]
    state = OK if len(fresh) == len(probes) else WARN
    newest = max((b for b in beats if b is not None), default=None)
    add(Check("probe", "Probe heartbeats", state,
              f"{len(fresh)} of {len(probes)} process(es) beating, newest {_age(ev.now, newest)}",
              "" if state is OK else "a process of the run stopped beating: see the Threads pane", newest))


def _silence(ev: Evidence, silent_for: float, heartbeat: str = "") -> str:
    """What is silent and what is not, in one line: the STALLED summary's words."""
    act = ev.activity
    busy = _busy(ev)
    kind = "busy but silent" if busy else ("idle hang" if busy is False else "silent")
    quiet = ["no step", "no log output"]
    if heartbeat:
        quiet.append(heartbeat)
    cpu = _cpu_words(act)
    words = f"{kind}: {', '.join(quiet)} for {_duration(silent_for)}; " + (
        cpu if busy is None else f"process tree {cpu}")
    if act is not None and act.log_grew_at is not None and act.program_output:
        words += f"; last output {_age(ev.now, act.log_grew_at)}"
    return words


def _silence_limit(ev: Evidence, limits: Limits) -> float:
    """stall_after_s, or compile_stall_after_s while the tree is busy: a silent phase that burns
    CPU (data preparation, a long compile, an evaluation) is given the compile limit."""
    return limits.compile_stall_after_s if _busy(ev) else limits.stall_after_s


def _any_program(ev: Evidence, checks: list[Check], limits: Limits, uptime: float) -> Checklist:
    """A program that writes no status.json: its log, its events, its CPU, its probe."""
    add = checks.append
    now, launch, act = ev.now, ev.launch, ev.activity
    if ev.status_problem:
        add(Check("status", "status.json", WARN, _one_line(ev.status_problem), "judged from the log and CPU", None))
    _probe_check(ev, add, limits)
    _cpu_check(add, act)
    disk = _disk_check(ev, add)
    last = _last_progress(ev)
    silent_for = now - (last if last is not None else launch.start_time)
    parsed = _progress_words(ev)
    limit = _silence_limit(ev, limits)
    if last is None and silent_for <= limits.stall_after_s:
        add(Check("progress", "Progress (log, events)", PENDING,
                  f"no output from the program yet (up {_duration(uptime)})", ""))
        return Checklist(Verdict.STARTING, checks, f"pid {launch.pid} started, no output from the program yet")
    if silent_for <= limits.stall_after_s and not act.advancing:
        add(Check("progress", "Progress (log, events)", PENDING,
                  f"output {_age(now, last)}, no progress line yet (up {_duration(uptime)})", "", last))
        return Checklist(Verdict.STARTING, checks, f"pid {launch.pid} started, output {_age(now, last)}")
    if silent_for <= limits.stall_after_s:
        what = parsed or "log output"
        add(Check("progress", "Progress (log, events)", OK,
                  f"{what}, last {_age(now, last)}", "", last))
        summary = f"{parsed + ', ' if parsed else ''}output {_age(now, last)}, up {_duration(uptime)}"
        return Checklist(Verdict.RUNNING, checks, _one_line(summary, 400))
    if silent_for <= limit:
        # Busy and silent, within the compile limit: working on something that does not print.
        add(Check("progress", "Progress (log, events)", WARN,
                  f"no output for {_duration(silent_for)}, but the process tree is {_cpu_words(act)}",
                  f"a compile or data preparation? STALLED after compile_stall_after_s "
                  f"({limits.compile_stall_after_s:.0f} s) of this", last))
        verdict = Verdict.RUNNING if act.advancing else Verdict.STARTING
        summary = (f"silent for {_duration(silent_for)} but busy ({cpu_use(act.cpu_cores)}): "
                   f"a compile or data preparation?{' ' + parsed if parsed else ''}")
        return Checklist(verdict, checks, _one_line(summary, 400))
    why = _silence(ev, silent_for)
    hint = ("a loop that never reports, or a compile that never ends: look at the log and the threads"
            if _busy(ev) else "blocked on I/O, a lock or a peer: look at the log's last lines and the threads")
    if disk:
        why, hint = f"{disk}; {why}", _DISK_HINT
    limit_word = "compile_stall_after_s" if _busy(ev) else "stall_after_s"
    add(Check("progress", "Progress (log, events)", FAIL,
              _one_line(f"{why} (limit {limit_word} {limit:.0f} s)"), hint, last))
    return Checklist(Verdict.STALLED, checks, _one_line(why, 400))


def thread_states(st: TrainStatus | None, now: float, limits: Limits, *, live: bool) -> list[ThreadHealth]:
    """Each thread of status.json, judged once (the Threads pane and the "threads" check both
    use this). A worker before the training phase is waiting for the warm-up; the main thread
    after it has no role left (it waits for the pool), so its silence is never a stall."""
    if st is None:
        return []
    workers_running = st.phase not in (Phase.STARTING.value, Phase.WARMING.value)
    out = []
    for t in st.threads:
        out.append(_thread_state(t, now, limits, live=live, workers_running=workers_running))
    return out


def _thread_state(t: ThreadStatus, now: float, limits: Limits, *, live: bool, workers_running: bool) -> ThreadHealth:
    if t.compile_state == CompileState.FAILED.value or t.error:
        return ThreadHealth(t.name, ThreadState.FAILED, _one_line(t.error or "compile failed"))
    if not live:
        return ThreadHealth(t.name, ThreadState.ENDED)
    if t.role == "main" and workers_running:
        return ThreadHealth(t.name, ThreadState.DONE)
    if not workers_running and t.role != "main":
        return ThreadHealth(t.name, ThreadState.WAITING)
    limit = limits.compile_stall_after_s if t.compile_state in _COMPILING else limits.stall_after_s
    if t.last_beat_time is not None and now - t.last_beat_time > limit:
        return ThreadHealth(t.name, ThreadState.STUCK, f"silent {_age(now, t.last_beat_time)} (limit {limit:.0f} s)")
    return ThreadHealth(t.name, ThreadState.OK)


def _status_reporting(ev: Evidence, st: TrainStatus, checks: list[Check], limits: Limits,
                      uptime: float) -> Checklist:
    """A program that writes status.json (the bundled trainer): its heartbeat, threads, steps,
    with the log, events and CPU as further sources of progress."""
    add = checks.append
    now, launch = ev.now, ev.launch
    hb = st.heartbeat_time if st.heartbeat_time is not None else st.time
    hb_age = now - hb
    compiling = [t for t in st.threads if t.compile_state in _COMPILING]
    warming = st.phase == Phase.WARMING.value or bool(compiling)
    hb_limit = limits.compile_stall_after_s if warming else _silence_limit(ev, limits)
    if hb_age > hb_limit:
        add(Check("heartbeat", "Heartbeat", FAIL, f"last heartbeat {_age(now, hb)} (limit {hb_limit:.0f} s)",
                  "the process is alive but not beating: look for a deadlock or a stuck compile", hb))
    else:
        add(Check("heartbeat", "Heartbeat", OK, f"last heartbeat {_age(now, hb)}", "", hb))

    judged = thread_states(st, now, limits, live=True)
    by_name = {t.name: t for t in st.threads}
    trouble = [j for j in judged if j.trouble]
    if trouble:
        parts = [f"{j.name} ({by_name[j.name].device}) failed: {j.why}" if j.state is ThreadState.FAILED
                 else f"{j.name} ({by_name[j.name].device}, {by_name[j.name].compile_state}) {j.why}"
                 for j in trouble]
        went_silent = min((by_name[j.name].last_beat_time for j in trouble
                           if by_name[j.name].last_beat_time is not None), default=None)
        add(Check("threads", "Threads", FAIL, _one_line("; ".join(parts)),
                  "the named threads stopped; their compile state says where", went_silent))
    elif st.threads:
        states = sorted({t.compile_state for t in st.threads})
        waiting = any(j.state is ThreadState.WAITING for j in judged)
        what = "waiting for the warm-up" if waiting else "beating"
        add(Check("threads", "Threads", OK, f"{len(st.threads)} threads {what} ({', '.join(states)})", "",
                  launch.start_time))

    last_step = max((t.last_step_time for t in st.threads if t.last_step_time is not None), default=None)
    training = st.phase == Phase.TRAINING.value
    if st.step > 0 or last_step is not None:
        step_at = last_step if last_step is not None else st.time
        # Any source of progress counts: a step in status.json, the log growing, a step event.
        progress_at = _last_progress(ev, step_at)
        step_limit = _silence_limit(ev, limits)
        if training and now - progress_at > step_limit:
            add(Check("steps", "Steps advancing", FAIL, f"step {st.step} unchanged since {_age(now, step_at)}",
                      "heartbeats without steps: a worker is stuck (see Threads)", last_step))
        else:
            total = f"/{st.total_steps}" if st.total_steps else ""
            add(Check("steps", "Steps advancing", OK, f"step {st.step}{total}, last {_age(now, step_at)}",
                      "", last_step))
    elif uptime > limits.compile_stall_after_s:
        # Heartbeats alone do not make progress: a warm-up that never ends is a stall too.
        add(Check("steps", "Steps advancing", FAIL, f"phase {st.phase}, no step in {_duration(uptime)}",
                  f"longer than compile_stall_after_s ({limits.compile_stall_after_s:.0f} s): see the log",
                  launch.start_time + limits.compile_stall_after_s))
    else:
        add(Check("steps", "Steps advancing", PENDING, f"phase {st.phase}, no step yet", "", launch.start_time))
    if st.last_error:
        add(Check("errors", "Trainer errors", WARN, _one_line(st.last_error), "see the log", st.time))
    _probe_check(ev, add, limits)
    _cpu_check(add, ev.activity)
    disk = _disk_check(ev, add)

    failing = [c for c in checks if c.id in ("heartbeat", "threads", "steps") and c.state is FAIL]
    if failing:
        if trouble:
            names = ", ".join(f"{j.name} [{by_name[j.name].compile_state}]" for j in trouble)
            summary = f"threads stopped: {names}"
        else:
            silent_for = now - max(hb if failing[0].id == "heartbeat" else (_last_progress(ev, last_step or st.time)),
                                   launch.start_time)
            summary = _silence(ev, silent_for, heartbeat="no heartbeat" if failing[0].id == "heartbeat" else "")
            summary = f"{failing[0].cause}; {summary}"
        if disk:
            summary = f"{disk}; {summary}"
        return Checklist(Verdict.STALLED, checks, _one_line(summary, 400), judged)
    if not any(c.id == "steps" and c.state is OK for c in checks):
        return Checklist(Verdict.STARTING, checks, f"pid {launch.pid} alive, phase {st.phase}, heartbeats fresh",
                         judged)
    total = f"/{st.total_steps}" if st.total_steps else ""
    extra = "".join(f", {k} {v:.3g}" for k, v in (("loss", st.loss), ("τ", st.tau)) if v is not None)
    if st.step_time_s is not None:
        extra += f", {st.step_time_s * 1000:.0f} ms/step"
    if st.mfu is not None:
        extra += f", MFU {st.mfu * 100:.0f} %"
    return Checklist(Verdict.RUNNING, checks, f"step {st.step}{total}{extra}, up {_duration(uptime)}", judged)


def with_gpu_check(checklist: Checklist, ev: Evidence, snap: GpuSnapshot | None) -> Checklist:
    """`checklist` with the "gpus" check (run/gpu_check.py) from one GPU snapshot of the run's host.

    The one place both a RunWatch (the dashboard) and `dflash-tui --check` add it, so the two
    never disagree. The check changes the verdict in one case only: it fails (a GPU fell off
    the bus) while the run's process is alive (STARTING or RUNNING), which gives GPU LOST: the
    process may still beat for a while, but a run on a host with a lost GPU cannot go on. A
    STALLED summary gets the GPU words too: busy or idle, the SM use on the run's GPUs.
    A warn or pending GPU check (no NVML, still compiling) never changes the verdict, and a
    run that already ended keeps the verdict its own evidence gives.
    """
    alive = process_matches(ev.launch, ev.proc) if ev.launch is not None else None
    gpus = gpu_check_for_status(snap, ev.status, alive)
    checks = [*checklist.checks, gpus]
    if gpus.state is FAIL and alive and checklist.verdict in (Verdict.STARTING, Verdict.RUNNING):
        pid = ev.launch.pid if ev.launch is not None else "?"
        return Checklist(Verdict.GPU_LOST, checks,
                         _one_line(f"{gpus.cause}; pid {pid} is still alive but cannot go on", 400),
                         checklist.threads)
    summary = checklist.summary
    if checklist.verdict is Verdict.STALLED and snap is not None and snap.error is None:
        # What the GPUs do belongs to "what is silent and what is not" too.
        used = [g for g in snap.gpus if any(p.is_run_process for p in g.processes)]
        if used:
            util = max((g.util_sm_pct or 0.0) for g in used)
            summary = _one_line(f"{summary}; GPU {'busy' if util >= 5 else 'idle'} ({util:.0f} % SM "
                                f"on the run's {len(used)} GPU(s))", 400)
    return replace(checklist, checks=checks, summary=summary)


def _ended(ev: Evidence, checks: list[Check], gone: str) -> Checklist:
    """pid gone (or exiting): STOPPED after a stop request; else FINISHED / CRASHED from
    exit.json, KILLED without it."""
    add = checks.append
    ex = ev.exit
    stop = ev.stop
    threads = thread_states(ev.status, ev.now, Limits(), live=False)
    disk = _disk_check(ev, add)
    if stop is not None and (ex is None or ex.end_time >= stop.requested_time - 1):
        return _stopped(ev, checks, threads)
    if ex is None:
        why = ev.exit_problem or "no exit.json: the wrapper was killed before the trainer ended"
        hint = "killed from outside: SIGKILL, the OOM killer (dmesg) or a container stop"
        summary = f"{gone}, {why}"
        if disk and not ev.exit_problem:
            # Not necessarily killed: with the disk full the wrapper could not record the end.
            why = "no exit.json: the disk is full, so the wrapper could not record how the run ended"
            hint = _DISK_HINT
            summary = f"{disk}; {gone} and its exit status could not be recorded (no exit.json)"
        # When the wrapper died is not recorded; its log's last write is the nearest evidence.
        last_write = ev.files[TRAIN_LOG].mtime if ev.exists(TRAIN_LOG) else None
        add(Check("exit", "Exit status", FAIL, _one_line(why), hint, last_write))
        if ev.last_traceback:
            add(Check("traceback", "Last traceback", WARN, _one_line(exception_line(ev.last_traceback)),
                      "see the log", last_write))
        return Checklist(Verdict.KILLED, checks, _one_line(summary, 400), threads)
    if ex.exit_code == 0:
        add(Check("exit", "Exit status", OK, "exit code 0", "", ex.end_time))
        return Checklist(Verdict.FINISHED, checks, "finished with exit code 0", threads)
    what = f"killed by {_signame(ex.signal)}" if ex.exit_code is None else f"exit code {ex.exit_code}"
    add(Check("exit", "Exit status", FAIL, what, _DISK_HINT if disk else "see the traceback and the log",
              ex.end_time))
    cause = exception_line(ev.last_traceback)
    if not cause and ev.log_tail and ex.signal is None:
        cause = _last_line(ev.log_tail)
    if ev.last_traceback:
        add(Check("traceback", "Last traceback", FAIL, _one_line(cause), "read it in the log pane / train.log",
                  ex.end_time))
    summary = what + (f": {cause}" if cause else "") + (f"; {disk}" if disk else "")
    return Checklist(Verdict.CRASHED, checks, _one_line(summary, 400), threads)


def _stopped(ev: Evidence, checks: list[Check], threads: list[ThreadHealth]) -> Checklist:
    """Ended after a stop request for this run: who asked, when, how it ended, the checkpoint."""
    ex, stop, now = ev.exit, ev.stop, ev.now
    if ex is None:
        how = "SIGKILL after the grace period" if stop.signal_sent == "SIGKILL" else "killed with its wrapper"
    elif ex.exit_code is None:
        how = f"killed by {_signame(ex.signal)}"
    else:
        how = f"exit code {ex.exit_code}"
    by = stop.requested_by or "?"
    checks.append(Check("exit", "Exit status", OK, f"{how}, after the stop request", "",
                        ex.end_time if ex else None))
    checks.append(Check("stop", "Stop requested", OK,
                        f"{stop.signal_sent or 'stop'} by {by} {_age(now, stop.requested_time)}", "",
                        stop.requested_time))
    act = ev.activity
    where = ""
    if act is not None and act.checkpoint:
        step = f"step {act.checkpoint_step} " if act.checkpoint_step is not None else ""
        where = f"; last checkpoint {step}{act.checkpoint}"
        checks.append(Check("checkpoint", "Last checkpoint", OK, _one_line(f"{step}{act.checkpoint}"), ""))
    return Checklist(Verdict.STOPPED, checks,
                     _one_line(f"stopped by {by} {_age(now, stop.requested_time)} ({how}){where}", 400), threads)


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
