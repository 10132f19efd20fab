"""Evidence → Checklist: the verdict ladder (evaluate's docstring holds the verdict table;
docs/ARCHITECTURE.md tells it in prose), and nothing the evidence lacks.

The checks are built in run/verdict/checks/ (one builder each); where a silent run is stuck comes from its stacks
(run/verdict/hang.py). `HealthTracker` keeps each check's `since` across polls: the time its state last
changed. The words (ages, durations, one-line causes) are dflash_tui/words.py's.
"""

from __future__ import annotations

from dataclasses import replace

from ...contract.rundir import TRAIN_LOG, CompileState, Phase, ThreadStatus, TrainStatus

from ...config import Limits
from ...gpu.sample import GpuSnapshot
from ...words import age_at as _age, cpu_use, duration as _duration, gpu_busy, one_line as _one_line, signame as _signame
from .checks.ended import (checkpoint_check, exit_check, killed_by_signal, no_exit_check, root_cause_check,
                           stop_lives_on_check,
                           stopped_checks, stopping_check, traceback_check)
from .checks.checkpoints import checkpoint_check as checkpoint_check_of, runway_check
from .checks.gpus import gpus_check
from .checks.memory import memory_check
from .checks.loss import loss_check
from .checks.launch import (DISK_HINT, last_line, launch_cmd_check, launch_json_check, launch_json_missing_check,
                            launch_json_waiting_check, never_started_cause, nothing_launched_check,
                            process_alive_check, process_gone_check, train_log_check)
from .checks.machine import cpu_check, disk_check, probe_check, probe_files_check, stacks_check
from .checks.progress import (busy_silent_check, compiling_check, last_progress, last_progress_words,
                              metric_files_check, no_output_check, no_progress_line_check, progress_check,
                              progress_words, silence_words,
                              silent_check, stack_moves_check, stall_limit_check, status_problem_check,
                              unlogged_progress_words)
from .checks.trainer import (heartbeat_check, no_step_check, steps_check, steps_stalled_check, threads_check,
                             trainer_errors_check)
from .gpu_facts import gpu_facts, run_gpu
from .gpu_health import gpu_health_check
from .hang import Hang, ThreadView, compiling, compiling_busy, diagnose, importing, judged_views
from ..stacks.classify import ThreadClass
from ..evidence.memory import LookMemory
from ..evidence.observe import Evidence, current_run_id, process_matches
from ..evidence.fault_dump import last_fault_dump
from ..evidence.tracebacks import exception_line
from .rank_groups import group_ranks
from .stragglers import paces, stragglers, with_stragglers
from .stall_limit import StallLimit, run_pause, stall_limit
from .checklist import Check, CheckId, CheckState, Checklist, ThreadHealth, ThreadState, Verdict

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

_COMPILING = {CompileState.WARMING.value, CompileState.COMPILING.value, CompileState.WAITING_AT_GATE.value,
              CompileState.PENDING.value}


# How long past stop_grace_s a stop may still be under way: the stopper's wait after SIGKILL
# (run/launch/stop.py, 5 s) and a poll or two. A launcher whose stop waits longer (a scheduler's
# cancel) declares its own (`Launcher.STOP_SLACK_S`) and its `judge` passes it.
STOP_SLACK_S = 10.0


def evaluate(ev: Evidence, limits: Limits = Limits(), *, stop_slack_s: float = STOP_SLACK_S,
             memory: LookMemory | None = None) -> Checklist:
    """The checklist for one observation. Pure: the same evidence gives the same checklist.
    `stop_slack_s`: how long past stop_grace_s the run's stopper may still be at work.
    `memory`: the watch's memory of its looks (run/evidence/memory.py), where what is worked out
    of an unchanged probe report is kept for the next look; None: a fresh one (a one-shot look).
    It saves work and never changes the checklist.

    The verdict table, top row first (the first row that matches decides):

    | observed after the launch command returns                          | verdict       |
    | nothing launched in the run dir                                    | NO RUN        |
    | no launch.json by launch_deadline_s (certain evidence: at once)    | NEVER STARTED |
    | launch.json, no train.log (or it cannot be opened; "disk full")    | LOG MISSING   |
    | pid gone (or exiting) after a stop request for this run (stop.json)| STOPPED       |
    | pid gone, exit.json with code 0                                    | FINISHED      |
    | pid gone, exit.json non-zero code or signal                        | CRASHED       |
    | pid gone, no exit.json                                             | KILLED        |
    | alive after a stop request for this run (stop.json), within        | STOPPING      |
    |   stop_grace_s and the SIGKILL wait; its output then is no progress|               |
    | alive, status.json: a thread STUCK/FAILED, no heartbeat, or no     | STALLED       |
    |   step while nothing else advanced, past the limit (below)         |               |
    | alive, no status.json: nothing advanced for the limit (below)      | STALLED       |
    | alive, progress advancing from any source within the limit         | RUNNING       |
    | alive, no output, but its stacks move (progress that never reaches | RUNNING (warn)|
    |   the log) past stall_after_s                                      |               |
    | alive, no progress yet, within the limits                          | STARTING      |
    | (`with_gpu_check`) alive, STARTING/RUNNING, a GPU of the host lost | GPU LOST      |

    Progress is anything advancing: a step in status.json (its threads' last_step_time), a
    step or checkpoint line in train.log (run/evidence/progress.py), the log growing with the program's
    own output, a step event in events.jsonl (the bundled trainer's, the run probe's). A
    heartbeat (status.json's, a probe's) proves the process alive, never that it progresses.
    A non-daemon thread whose frames in the program's own code change from one look to the
    next progresses too, but that never reaches the log: RUNNING with a warn saying so.

    The limit is stall_after_s; compile_stall_after_s while compiling: the bundled trainer
    says it is warming up or compiling, or the run probe's stacks show a thread in the
    compiler (dynamo, inductor, triton) while the tree uses CPU. A busy silence that is not a
    compile gets stall_after_s: its stacks say what it is (run/verdict/hang.py). Only a program with
    no stacks at all (not Python, or run without the probe) still gets the longer limit for
    a busy silence, as nothing tells its compile from its hang. Once the run has shown its
    pace, the progress silence's limit is learned from it (run/verdict/stall_limit.py:
    max(10 s, 5x its slowest recent interval), stall_after_s the ceiling; an evaluation or a
    checkpoint save keeps stall_after_s; `learn_stall`), and is the checklist's stall_limit_s.
    STALLED says the kind of hang and where (run/verdict/hang.py: in a collective, waiting on the GPU,
    for DataLoader workers, a deadlock, busy in C, ...); with no stacks, what is silent, what
    is not and how much CPU the tree uses ("busy but silent", "idle hang").
    Threads: a worker before the training phase is waiting, the main thread after the warm-up
    has no role left (never a stall), a failed compile or a reported error is FAILED.
    A full disk (free space of the run dir's filesystem, ENOSPC in the log or launch.out) is
    a failing "disk" check and the first words of a failing verdict's summary.
    The run's checkpoints (run/evidence/checkpoints.py) give the "checkpoint" check and, while it
    lives, the disk runway of the next ones the "disk" check (warn: the one after the next
    cannot fit; fail: the next cannot); neither changes the verdict. While it lives, its host
    memory and its memory on each GPU give the "memory" check (warn: a steady growth fills its
    limit within the hour); it never changes the verdict.
    """
    return _with_bad_files(_with_loss(_with_memory(_with_checkpoints(_judge(ev, limits, stop_slack_s, memory if memory is not None else LookMemory()), ev), ev), ev), ev)


def _with_loss(cl: Checklist, ev: Evidence) -> Checklist:
    """The checklist with the "loss" check (run/verdict/checks/loss.py) from the divergence
    watch's finding. A divergence makes a live run that moves (STARTING, RUNNING) DIVERGED:
    its steps are wasted; every other verdict stands (a hang, a crash, an end say more), its
    check failing beside it. A summary that dropped the loss keeps the last finite value."""
    finding = ev.activity.loss_finding if ev.activity is not None else None
    check = loss_check(finding)
    if check is None:
        return cl
    checks = [*cl.checks, check]
    d = finding.divergence
    if d is not None and cl.verdict in (Verdict.STARTING, Verdict.RUNNING):
        return replace(cl, verdict=Verdict.DIVERGED, checks=checks, summary=_one_line(d.words(), 400))
    return cl.with_parts(checks=checks)


def _with_checkpoints(cl: Checklist, ev: Evidence) -> Checklist:
    """The checklist with the run's checkpoints judged (`checkpoint`: the last complete one; a
    warn for a torn newest one or saves that stopped) and, while the run lives, the disk runway
    of the next ones (`disk`). Neither changes the verdict; a check the ladder already made
    (the log's checkpoint of a STOPPED run, a full disk) stands."""
    have = {c.id for c in cl.checks}
    alive = cl.verdict.alive
    extra = [c for c in (checkpoint_check_of(ev.checkpoints, ev.now, alive),
                         runway_check(ev.runway) if alive else None)
             if c is not None and c.id not in have]
    return cl.with_parts(checks=[*cl.checks, *extra]) if extra else cl


def _with_memory(cl: Checklist, ev: Evidence) -> Checklist:
    """The checklist with the run's memory runway (`memory`, run/verdict/checks/memory.py) while
    it lives: a warn when a steady growth fills its limit within the hour; never the verdict."""
    check = memory_check(ev.memory) if cl.verdict.alive else None
    return cl.with_parts(checks=[*cl.checks, check]) if check is not None else cl


def _with_bad_files(cl: Checklist, ev: Evidence) -> Checklist:
    """The checklist with a warn naming the probe directory's files that could not be read
    (probe reports, Flight Recorder dumps, error files, stack dumps), and one naming the metric
    files that could not (all) be read: the verdict stands without them, and each note says
    which file and what is wrong with it."""
    notes = [c for c in (probe_files_check([*ev.probes.problems, *ev.hang.bad_files]),
                         metric_files_check(ev.metrics)) if c is not None]
    return cl.with_parts(checks=[*cl.checks, *notes]) if notes else cl


def _judge(ev: Evidence, limits: Limits, stop_slack_s: float, memory: LookMemory) -> Checklist:
    checks: list[Check] = []
    run_id = current_run_id(ev)
    attempt = ev.attempt if ev.attempt is not None and ev.attempt.run_id == run_id else None
    cmd = launch_cmd_check(attempt, ev.launch)
    if cmd is not None:
        checks.append(cmd)

    if ev.launch is None:                              # NO RUN, STARTING, NEVER STARTED
        return _not_launched(ev, attempt, run_id, checks, limits)
    launch = ev.launch
    checks.append(launch_json_check(launch))

    log, log_why = train_log_check(ev)                 # LOG MISSING
    checks.append(log)
    if log_why:
        return Checklist(Verdict.LOG_MISSING, checks, _one_line(log_why, 400))

    alive = process_matches(launch, ev.proc)           # STOPPED, FINISHED, CRASHED, KILLED
    if not alive:
        process, gone = process_gone_check(ev)
        checks.append(process)
        return _ended(ev, checks, gone, limits)
    uptime = ev.now - launch.start_time
    checks.append(process_alive_check(launch, uptime))
    if ev.exit is not None:
        # The wrapper writes exit.json just before it exits: the trainer has ended.
        return _ended(ev, checks, f"pid {launch.pid} is exiting", limits)
    if ev.stop is not None:
        stopping = _stopping(ev, checks, limits, stop_slack_s)
        if stopping is not None:
            return _with_stacks(stopping, judged_views(ev, memory), ev)

    # Alive: STALLED, RUNNING or STARTING, from the trainer's status.json when there is one,
    # else from any program's evidence.
    views = judged_views(ev, memory)
    if ev.status is None:
        return _with_stacks(_any_program(ev, checks, limits, uptime, views, memory), views, ev)
    return _with_stacks(_status_reporting(ev, ev.status, checks, limits, uptime, views, memory), views, ev)


def _with_stacks(cl: Checklist, views: list[ThreadView], ev: Evidence) -> Checklist:
    """The checklist's threads with every probed thread's class and where (the Threads pane and
    `--check --json` threads[] show them): a thread of status.json gets its own stack's; the
    others follow, one per thread. While STALLED, a thread that waits (or runs no Python) is
    STUCK, its why the class and where. `views`: hang.py `judged_views` of `ev`."""
    if not views:
        return cl
    stalled = cl.verdict is Verdict.STALLED
    out = list(cl.threads)
    named = {t.name: i for i, t in enumerate(out)}
    status_pid = ev.status.pid if ev.status is not None else None
    whys: dict[tuple, str] = {}
    for v in views:
        i = named.get(v.name) if v.pid == status_pid else None
        if i is not None:
            out[i] = out[i].with_stack(v.pid, v.rank, v.ident, v.cls.value, v.doing, v.where or v.innermost,
                                       v.since, v.source, v.stale)
            continue
        # A library's helper parked waiting for work (tqdm's monitor) is not where a run stopped.
        stuck = stalled and (v.cls.waits or v.cls.compiles or v.stale) and not v.idle
        why = ""
        if stuck:   # the same words for every thread at one place: a hung run of 1,024 ranks has few
            key = (v.cls, v.doing, v.where, v.innermost)
            why = whys.get(key)
            if why is None:
                why = whys[key] = _one_line(f"{v.cls.words} in {v.place()}")
        # (`_value_`: the member's value as `.value` gives it, without the enum's descriptor, a
        # look's every thread.)
        out.append(ThreadHealth.probed(v.name, ThreadState.STUCK if stuck else ThreadState.OK, why,
                                       v.pid, v.rank, v.ident, v.cls._value_, v.doing, v.where or v.innermost,
                                       v.since, v.source, v.stale))
    cl = cl.with_parts(threads=out, rank_groups=group_ranks(out, _nodes_of(out, ev)))
    return with_stragglers(cl, stragglers(paces(((("", p) for p in ev.probes)),
                                              {("", pid): w for pid, w in (ev.activity.waits.items()
                                                                           if ev.activity is not None else ())})))


def _nodes_of(threads: list[ThreadHealth], ev: Evidence) -> list[str] | None:
    """Each thread's node as its process's report names it, when the run dir holds reports from
    more than one node (a job on several nodes writing to a shared run dir); else None."""
    node = {p.pid: p.node for p in ev.probes}
    if len({n for n in node.values() if n}) < 2:
        return None
    return [node.get(t.pid, "") if t.pid is not None else "" for t in threads]


def _not_launched(ev: Evidence, attempt, run_id: str | None, checks: list[Check], limits: Limits) -> Checklist:
    """No launch.json: nothing launched (NO RUN), the wrapper still within its deadline
    (STARTING), or it never ran (NEVER STARTED)."""
    add = checks.append
    if run_id is None and not ev.exists("launch.sh"):
        add(nothing_launched_check(ev.run_dir))
        return Checklist(Verdict.NO_RUN, checks, f"no run in {ev.run_dir}")
    sent_at = attempt.target_time if attempt and attempt.target_time is not None else (
        ev.files["launch.sh"].mtime if ev.exists("launch.sh") else None)
    waited = (ev.now - sent_at) if sent_at is not None else None
    # No need to wait out the deadline when the evidence is already final: the transport
    # failed, launch.sh is not there, the detach shell printed nothing, or the detached
    # process is gone without having written launch.json.
    certain = attempt is not None and (
        bool(attempt.error) or not attempt.wrapper_written or attempt.pid is None
        or (ev.detached_proc is not None and ev.detached_proc.gone))
    if waited is not None and waited < limits.launch_deadline_s and not ev.launch_problem and not certain:
        add(launch_json_waiting_check(waited, limits.launch_deadline_s))
        return Checklist(Verdict.STARTING, checks, "launch sent; waiting for the wrapper")
    why = never_started_cause(ev, attempt)
    add(launch_json_missing_check(why, sent_at))
    summary = why
    if attempt is not None and not attempt.error:
        summary += "; " + attempt.transport_summary()
    return Checklist(Verdict.NEVER_STARTED, checks, _one_line(summary, 400))


def _stopping(ev: Evidence, checks: list[Check], limits: Limits, slack: float) -> Checklist | None:
    """A stop under way (stop.json for this run, the wrapper alive): STOPPING, whatever the
    program says meanwhile (a program that saves on SIGTERM writes lines, which are no progress).
    Past stop_grace_s and the SIGKILL wait the stop did not end it (the stopper was interrupted,
    or the process survives SIGKILL): None, with a failing "stop" check, and the run is judged
    as any live run."""
    stop, now, pid = ev.stop, ev.now, ev.launch.pid
    sent, by = stop.signal_sent or "stop", stop.requested_by or "?"
    if now - stop.requested_time > limits.stop_grace_s + slack:
        checks.append(stop_lives_on_check(stop, sent, now, pid))
        return None
    if sent == "SIGKILL":
        how = f"SIGKILL sent after stop_grace_s ({limits.stop_grace_s:.0f} s), pid {pid} still exiting"
    else:
        how = f"pid {pid} still alive, SIGKILL after stop_grace_s ({limits.stop_grace_s:.0f} s)"
    checks.append(stopping_check(stop, sent, now, how))
    disk_c, _ = disk_check(ev)
    if disk_c is not None:
        checks.append(disk_c)
    return Checklist(Verdict.STOPPING, checks,
                     _one_line(f"stopping: {sent} sent by {by} {_age(now, stop.requested_time)}; {how}", 400),
                     thread_states(ev.status, now, limits, live=True))


# -- alive: how long a silence may last, and what it is ----------------------------------------

def _busy(ev: Evidence) -> bool | None:
    """Whether the run's process tree uses CPU now (None: not measured)."""
    return ev.activity.cpu_busy if ev.activity is not None else None


def _silence_limit(ev: Evidence, limits: Limits, views: list[ThreadView], trainer_compiling: bool = False) -> float:
    """compile_stall_after_s while compiling (the trainer says so, or the stacks show a compile
    that uses CPU); stall_after_s for any other silence. Without stacks (no probe reports),
    a busy silence keeps the compile limit: nothing tells a compile from a hang then."""
    if trainer_compiling or compiling_busy(ev, views):
        return limits.compile_stall_after_s
    if not views and _busy(ev):
        return limits.compile_stall_after_s
    return limits.stall_after_s


# -- the silence limit learned from the run's pace (run/verdict/stall_limit.py) ----------------

def _pace_limit(ev: Evidence, limits: Limits, fixed: float, memory: LookMemory) -> StallLimit:
    """The limit in force for the run's progress: learned from its pace once it has one, except
    in a known pause (compiling: `fixed`; evaluating, saving a checkpoint)."""
    intervals = ev.activity.intervals if ev.activity is not None else ()
    # Stacks are read for a pause only where a learned limit could apply.
    may_learn = limits.learn_stall and fixed == limits.stall_after_s and len(intervals) > 0
    return stall_limit(fixed, stall_after_s=limits.stall_after_s, learn=limits.learn_stall,
                       intervals=intervals, pause=run_pause(ev, memory) if may_learn else "",
                       source=ev.activity.pace_source if ev.activity is not None else "")


def _limit_check(checks: list[Check], stall: StallLimit) -> None:
    limit = stall_limit_check(stall)
    if limit is not None:
        checks.append(limit)


def _with_limit(summary: str, stall: StallLimit, silent_for: float) -> str:
    words = stall.stalled_words(silent_for)
    return f"{summary}; {words}" if words else summary

# -- end of the learned limit ---------------------------------------------------------------------


def _stack_moved(ev: Evidence, within_s: float) -> bool:
    """A non-daemon thread's own frames changed within the limit (stall_after_s, or the one
    learned from the pace: a move into where the run then hangs is no progress past it):
    progress the log lacks."""
    act = ev.activity
    return act is not None and act.stack_moved_at is not None and ev.now - act.stack_moved_at <= within_s


def _stalled_words(ev: Evidence, views: list[ThreadView], silent_for: float, heartbeat: str = "") -> tuple[str, Hang | None]:
    """The STALLED summary: the kind of hang and where, from the stacks; else what is silent."""
    hang = diagnose(ev, views) if views else None
    if hang is None:
        return silence_words(ev, silent_for, heartbeat), None
    quiet = "no step, no log output" + (f", {heartbeat}" if heartbeat else "")
    return f"{hang.words}; {quiet} for {_duration(silent_for)}", hang


def _any_program(ev: Evidence, checks: list[Check], limits: Limits, uptime: float,
                 views: list[ThreadView], memory: LookMemory) -> Checklist:
    """A program that writes no status.json: its log, its events, its CPU, its stacks
    (`views`: hang.py `judged_views` of `ev`)."""
    add = checks.append
    now, launch, act = ev.now, ev.launch, ev.activity
    if ev.status_problem:
        add(status_problem_check(ev.status_problem))
    for c in (probe_check(ev, limits.stall_after_s), cpu_check(act, uptime)):
        if c is not None:
            add(c)
    disk, disk_words = disk_check(ev)
    if disk is not None:
        add(disk)
    last = last_progress(ev)
    silent_for = now - (last if last is not None else launch.start_time)
    parsed = progress_words(ev)
    limit = _silence_limit(ev, limits, views)
    stall = _pace_limit(ev, limits, limit, memory)     # the learned limit, or the fixed one
    _limit_check(checks, stall)
    quiet_s = min(stall.seconds, limits.stall_after_s)   # how long a silence is RUNNING
    moved = _stack_moved(ev, quiet_s)

    def verdict(v: Verdict, summary: str, hang: Hang | None = None) -> Checklist:
        stacks = stacks_check(ev, views, hang, v is Verdict.STALLED)
        return Checklist(v, checks + ([stacks] if stacks is not None else []), _one_line(summary, 400),
                         stall_limit_s=stall.seconds, stall_limit_why=stall.to_words())

    if silent_for <= quiet_s:
        if last is None:
            add(no_output_check(uptime))
            return verdict(Verdict.STARTING, f"pid {launch.pid} started, no output from the program yet")
        if not act.advancing:
            add(no_progress_line_check(now, last, uptime))
            return verdict(Verdict.STARTING, f"pid {launch.pid} started, {last_progress_words(ev, now, last)}")
        add(progress_check(parsed, now, last))
        latest = last_progress_words(ev, now, last)
        if latest.startswith("metrics written") and "metrics written" in parsed:
            latest = ""    # the progress words said it, with the file
        return verdict(Verdict.RUNNING, ", ".join(w for w in (parsed, latest, f"up {_duration(uptime)}") if w))
    silent = "no output yet" if last is None else f"no output for {_duration(silent_for)}"
    advanced = act is not None and act.advancing
    if silent_for <= limit and (compiling(views) or importing(views)):
        # A compile (or the imports of start-up) that uses CPU: the long limit.
        what, where = ("compiling", "the compiler") if compiling(views) else ("importing modules", "imports")
        cls = ThreadClass.COMPILING if what == "compiling" else ThreadClass.IMPORTING
        n = sum(1 for v in views if v.cls is cls)
        add(compiling_check(silent, what, where, n, act, limits.compile_stall_after_s, last))
        return verdict(Verdict.RUNNING if advanced else Verdict.STARTING,
                       f"{what}: {silent}, {cpu_use(act.cpu_cores if act else None)}{'; ' + parsed if parsed else ''}")
    if moved:
        # Its stack moves: it works, but its progress never reaches the log. A move through the
        # program's own code is progress (RUNNING); one only in a library's keeps a run that
        # never advanced STARTING (start-up, a library warming up).
        if act.stack_moved_own:
            why = unlogged_progress_words(ev, views)
            moves, hint = f"its stack moves ({act.stack_moved_where})", f"its progress does not reach the log: {why}"
            summary = f"{silent} but {moves}: its progress does not reach the log ({why})"
        else:
            moves = f"its stack moves in library code ({act.stack_moved_where})"
            hint = "starting up, or working inside a library: STALLED once its stack stands still"
            summary = f"{silent} but {moves}"
        add(stack_moves_check(silent, moves, hint, now, act))
        return verdict(Verdict.RUNNING if act.stack_moved_own or advanced else Verdict.STARTING, summary)
    if silent_for <= limit and limit > limits.stall_after_s:
        # No stacks to tell what it is: busy and silent, within the compile limit.
        add(busy_silent_check(silent, act, limits.compile_stall_after_s, last))
        return verdict(Verdict.RUNNING if advanced else Verdict.STARTING,
                       f"silent for {_duration(silent_for)} but busy ({cpu_use(act.cpu_cores)}): "
                       f"a compile or data preparation?{' ' + parsed if parsed else ''}")
    why, hang = _stalled_words(ev, views, silent_for)
    if hang is not None:
        hint = "the stacks say where: each stuck thread with the frame it waits in"
    elif _busy(ev):
        hint = "a loop that never reports, or a compile that never ends: look at the log and the threads"
    else:
        hint = "blocked on I/O, a lock or a peer: look at the log's last lines and the threads"
    if disk_words:
        why, hint = f"{disk_words}; {why}", DISK_HINT
    add(silent_check(silent, stall, hint, last))
    return verdict(Verdict.STALLED, _with_limit(why, stall, silent_for), hang)


def _status_reporting(ev: Evidence, st: TrainStatus, checks: list[Check], limits: Limits,
                      uptime: float, views: list[ThreadView], memory: LookMemory) -> Checklist:
    """A program that writes status.json (the bundled trainer): its heartbeat, threads, steps,
    with the log, events and CPU as further sources of progress."""
    add = checks.append
    now, launch = ev.now, ev.launch
    hb = st.heartbeat_time if st.heartbeat_time is not None else st.time
    compiling = [t for t in st.threads if t.compile_state in _COMPILING]
    warming = st.phase == Phase.WARMING.value or bool(compiling)
    hb_limit = _silence_limit(ev, limits, views, trainer_compiling=warming)
    add(heartbeat_check(now, hb, hb_limit))

    judged = thread_states(st, now, limits, live=True)
    by_name = {t.name: t for t in st.threads}
    trouble = [j for j in judged if j.trouble]
    threads = threads_check(st, judged, launch.start_time)
    if threads is not None:
        add(threads)

    last_step = max((t.last_step_time for t in st.threads if t.last_step_time is not None), default=None)
    training = st.phase == Phase.TRAINING.value
    stall = _pace_limit(ev, limits, _silence_limit(ev, limits, views), memory)   # the learned limit, or the fixed one
    if st.step > 0 or last_step is not None:
        step_at = last_step if last_step is not None else st.time
        # Any source of progress counts: a step in status.json, the log growing, a step event.
        progress_at = last_progress(ev, step_at)
        if training and now - progress_at > stall.seconds:
            add(steps_stalled_check(st, now, step_at, last_step, stall))
        else:
            add(steps_check(st, now, step_at, last_step))
    else:
        add(no_step_check(st, uptime, limits.compile_stall_after_s, launch.start_time))
    errors = trainer_errors_check(st)
    if errors is not None:
        add(errors)
    _limit_check(checks, stall)
    for c in (probe_check(ev, limits.stall_after_s), cpu_check(ev.activity, uptime)):
        if c is not None:
            add(c)
    disk_c, disk = disk_check(ev)
    if disk_c is not None:
        add(disk_c)

    failing = [c for c in checks if c.id in (CheckId.HEARTBEAT, CheckId.THREADS, CheckId.STEPS) and c.state is FAIL]
    if failing:
        hang = None
        if trouble:
            names = ", ".join(f"{j.name} [{by_name[j.name].compile_state}]" for j in trouble)
            summary = f"threads stopped: {names}"
        else:
            silent_for = now - max(hb if failing[0].id == CheckId.HEARTBEAT else (last_progress(ev, last_step or st.time)),
                                   launch.start_time)
            summary, hang = _stalled_words(ev, views, silent_for,
                                           heartbeat="no heartbeat" if failing[0].id == CheckId.HEARTBEAT else "")
            summary = f"{failing[0].cause}; {summary}"
            if failing[0].id == CheckId.STEPS:
                summary = _with_limit(summary, stall, silent_for)
        if disk:
            summary = f"{disk}; {summary}"
        stacks = stacks_check(ev, views, hang, True)
        return Checklist(Verdict.STALLED, checks + ([stacks] if stacks else []), _one_line(summary, 400), judged,
                         stall_limit_s=stall.seconds, stall_limit_why=stall.to_words())
    stacks = stacks_check(ev, views, None, False)
    if stacks is not None:
        add(stacks)
    if not any(c.id == CheckId.STEPS and c.state is OK for c in checks):
        return Checklist(Verdict.STARTING, checks, f"pid {launch.pid} alive, phase {st.phase}, heartbeats fresh",
                         judged, stall_limit_s=stall.seconds, stall_limit_why=stall.to_words())
    total = f"/{st.total_steps}" if st.total_steps else ""
    extra = "".join(f", {k} {v:.3g}" for k, v in (("loss", st.loss), ("τ", st.tau)) if v is not None)
    if st.step_time_s is not None:
        extra += f", {st.step_time_s * 1000:.0f} ms/step"
    if st.mfu is not None:
        extra += f", MFU {st.mfu * 100:.0f} %"
    return Checklist(Verdict.RUNNING, checks, f"step {st.step}{total}{extra}, up {_duration(uptime)}", judged,
                     stall_limit_s=stall.seconds, stall_limit_why=stall.to_words())



def with_gpu_check(checklist: Checklist, ev: Evidence, snap: GpuSnapshot | None) -> Checklist:
    """`checklist` with the "gpus" check (run/verdict/checks/gpus.py `gpus_check`) from one GPU snapshot of
    the run's host.

    The one place both a RunWatch (the dashboard) and `dflash-tui --check` add it, so the two
    never disagree. The check changes the verdict in one case only: it fails (a GPU fell off
    the bus) while the run's process is alive (STARTING or RUNNING), which gives GPU LOST: the
    process may still beat for a while, but a run on a host with a lost GPU cannot go on. A
    STALLED summary gets the GPU words too: busy or idle, the SM use of the run's own
    processes where NVML gives it per process (another user's kernel is never the run's),
    else of the run's GPUs as devices, with the power against its limit and the SM clock
    against its top, or "but drawing 80 W of 700 W: a kernel that spins, not compute"
    (run/verdict/gpu_facts.py). The "gpu_health" check (run/verdict/gpu_health.py) goes with
    it and never changes the verdict; so does "memory", made again from `ev.memory`, which holds
    this snapshot's GPUs where the caller noted them. The sample's GPUs go with the checklist (`gpus`, for
    `--check --json`). A warn or pending GPU check never changes the verdict,
    and a run that already ended keeps the verdict its own evidence gives.
    """
    alive = process_matches(ev.launch, ev.proc) if ev.launch is not None else None
    gpus = gpus_check(snap, ev, alive)
    # The memory runway again: the snapshot's GPUs joined the host's memory in `ev.memory`
    # (the caller noted them: watch/session.py `note_gpus`).
    checks = [*_with_memory(checklist.with_parts(checks=[c for c in checklist.checks if c.id != CheckId.MEMORY]),
                            ev).checks, gpus]
    if snap is not None and snap.gpus and snap.error is None:
        # The node's GPU health, where its GPUs were read (no GPU, no driver, a lost GPU: "gpus"
        # says it once), before "gpus", which stays the last check (scripts read it there).
        run_gpus = {g.index for g in snap.gpus if any(p.is_run_process for p in g.processes)}
        checks.insert(-1, gpu_health_check(snap, run_gpus=run_gpus or None))
    facts = gpu_facts(snap)
    if gpus.state is FAIL and alive and checklist.verdict in (Verdict.STARTING, Verdict.RUNNING):
        pid = ev.launch.pid if ev.launch is not None else "?"
        return Checklist(Verdict.GPU_LOST, checks,
                         _one_line(f"{gpus.cause}; pid {pid} is still alive but cannot go on", 400),
                         checklist.threads, gpus=facts)
    summary = checklist.summary
    if checklist.verdict is Verdict.STALLED and snap is not None and snap.error is None:
        # What the GPUs do belongs to "what is silent and what is not" too: busy on arithmetic,
        # or busy on a kernel that spins (power tells), or idle.
        found = run_gpu(snap)
        if found is not None:
            f, pct, whose = found
            words = gpu_busy(f.index, pct, whose, f.power_w, f.power_limit_w, f.sm_clock_mhz,
                             f.sm_clock_max_mhz, f.spinning)
            summary = _one_line(f"{summary}; {words}", 400)
    return replace(checklist, checks=checks, summary=summary, gpus=facts)


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


def _ended(ev: Evidence, checks: list[Check], gone: str, limits: Limits) -> Checklist:
    """pid gone (or exiting): STOPPED after a stop request; else FINISHED / CRASHED from
    exit.json, KILLED without it."""
    add = checks.append
    ex = ev.exit
    stop = ev.stop
    threads = thread_states(ev.status, ev.now, limits, live=False)
    disk_c, disk = disk_check(ev)
    if disk_c is not None:
        add(disk_c)
    if stop is not None and (ex is None or ex.end_time >= stop.requested_time - 1):
        return _stopped(ev, checks, threads)
    if ex is None:
        why = ev.exit_problem or "no exit.json: the wrapper was killed before the trainer ended"
        hint = "killed from outside: SIGKILL, the OOM killer (dmesg) or a container stop"
        summary = f"{gone}, {why}"
        if disk and not ev.exit_problem:
            # Not necessarily killed: with the disk full the wrapper could not record the end.
            why = "no exit.json: the disk is full, so the wrapper could not record how the run ended"
            hint = DISK_HINT
            summary = f"{disk}; {gone} and its exit status could not be recorded (no exit.json)"
        # When the wrapper died is not recorded; its log's last write is the nearest evidence.
        last_write = ev.files[TRAIN_LOG].mtime if ev.exists(TRAIN_LOG) else None
        add(no_exit_check(why, hint, last_write))
        if ev.last_traceback:
            add(traceback_check(ev.last_traceback, last_write, crashed=False))
        root = _root_cause(ev, checks, last_write)
        if root:
            summary = f"{summary}; {root}"
        return Checklist(Verdict.KILLED, checks, _one_line(summary, 400), threads)
    if ex.exit_code == 0:
        add(exit_check(ex, "", disk))
        return Checklist(Verdict.FINISHED, checks, "finished with exit code 0", threads)
    hint = ""
    if ex.exit_code is None:
        what, hint = killed_by_signal(_signame(ex.signal), last_fault_dump(ev.log_tail))
    else:
        what = f"exit code {ex.exit_code}"
    root = _root_cause(ev, checks, ex.end_time)
    if root:
        what = f"{what}; {root}"
    add(exit_check(ex, what, disk, hint))
    cause = exception_line(ev.last_traceback)
    if not cause and ev.log_tail and ex.signal is None:
        cause = last_line(ev.log_tail)
    if ev.last_traceback:
        add(traceback_check(ev.last_traceback, ex.end_time, crashed=True, cause=cause))
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
    checks += stopped_checks(how, ex, stop, now)
    checkpoint, saved = checkpoint_check(ev.activity)
    where = ""
    if checkpoint is not None:
        where = f"; last checkpoint {saved}"
        checks.append(checkpoint)
    return Checklist(Verdict.STOPPED, checks,
                     _one_line(f"stopped by {by} {_age(now, stop.requested_time)} ({how}){where}", 400), threads)


def _root_cause(ev: Evidence, checks: list[Check], when: float | None) -> str:
    """torchrun's root cause of a distributed run that died: the rank that failed first, from
    its torchelastic error file, with its traceback's last line ("" when there is none)."""
    rc = ev.hang.root_cause
    if rc is None:
        return ""
    who = f"rank {rc.rank}" if rc.rank is not None else (f"pid {rc.pid}" if rc.pid is not None else "a rank")
    line = exception_line(rc.traceback) if rc.traceback else ""
    words = f"{who} failed first ({_age(ev.now, rc.time)}): {line or _one_line(rc.message)}"
    checks.append(root_cause_check(words, rc.time))
    return words


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
            out.append(c.since_at(since))
        return checklist.with_parts(checks=out)
