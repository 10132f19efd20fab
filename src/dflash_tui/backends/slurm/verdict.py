"""A Slurm job's states beside the evidence-based verdicts. Pure: evidence in, checklist out.

The Slurm launcher's `judge` calls `judge_job` for a run that has a job (`SlurmEvidence.job` in
`Evidence.scheduler`), passing run/verdict/health.py's `evaluate` as `evidence_verdict`, so the
run dir's own evidence keeps deciding everything the scheduler does not know (FINISHED, CRASHED
with its traceback, STALLED, ...).

| the job (squeue / scontrol / sacct; slurm.out once the scheduler forgot it) | verdict |
| pending, waiting (resources, priority, QOS or account limits, a dependency, begin time)      | QUEUED (no verdict yet) |
| pending and never starting by itself: held (user, admin), dependency never satisfiable,
|   a partition limit it exceeds                                                               | BLOCKED |
| pending again after a failed launch ("launch failed requeued held"), no launch.json          | NEVER STARTED |
| running, no launch.json yet                                                                  | STARTING |
| running, launch.json: the evidence (pid alive = the job runs, where its host is not ours)    | RUNNING, STALLED, ... |
| a stop request in the run dir (stop.json) and the job ended or was cancelled                 | STOPPED |
| ended TIMEOUT / DEADLINE; "DUE TO TIME LIMIT" in slurm.out                                   | TIMEOUT |
| ended PREEMPTED; "DUE TO PREEMPTION"                                                         | PREEMPTED |
| ended OUT_OF_MEMORY; slurmstepd's "exceeded memory limit" / "oom-kill"                       | OUT OF MEMORY |
| ended NODE_FAIL / BOOT_FAIL; "DUE TO NODE FAILURE"                                           | NODE FAIL |
| ended CANCELLED ("CANCELLED AT" in slurm.out), no stop request                               | CANCELLED (by whom, when sacct says) |
| ended before launch.json (any other state, or unknown to the scheduler)                      | NEVER STARTED (Slurm's reason, slurm.out) |
| ended COMPLETED / FAILED, or unknown to the scheduler, after launch.json                     | the evidence: FINISHED, CRASHED, KILLED |
| the controller does not answer (a warn check says so)                                        | the evidence, the wrapper counted alive; STARTING while no launch.json |
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable

from ...remote.ops import PidInfo
from ...words import one_line
from ...run.evidence.observe import Evidence, process_matches
from ...run.wrapper import LEGACY_WRAPPER_ARGV
from ...run.verdict.checklist import Check, CheckId, CheckState, Checklist, SchedulerFacts, Verdict
from .evidence import slurm_of
from .job import JobState, SlurmJob
from .spec import KEYS

JOB_LABEL = f"{KEYS.title} job"   # the job's check, as the checklist labels it

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

# Pending reasons, in words. The ones that never resolve by themselves are BLOCKED.
_PENDING_WORDS = {
    "Resources": "waiting for resources: the nodes it asks for are busy",
    "Priority": "waiting behind jobs of higher priority",
    "Dependency": "waiting for the job it depends on",
    "BeginTime": "waiting for its begin time",
    "ReqNodeNotAvail": "a node it needs is not available (down, drained or reserved)",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "Reservation": "waiting for its reservation",
    "Licenses": "waiting for licenses",
    "NodeDown": "a node it needs is down",
    "Cleaning": "waiting for its nodes to be cleaned up after the last job",
    "None": "waiting to be scheduled",
    "": "waiting to be scheduled",
}
_BLOCKED_WORDS = {
    "DependencyNeverSatisfied": "its dependency can never be satisfied (the job it waits on failed or was "
                                "cancelled): it will never start",
    "JobHeldUser": "held by its user: it will not start until released",
    "JobHeldAdmin": "held by an administrator: it will not start until released",
    "PartitionTimeLimit": "its time limit is longer than the partition allows: it will never start",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows: it will never start",
    "PartitionConfig": "it asks for more than the partition has: it will never start",
    "InvalidQOS": "its QOS is not valid for it: it will never start",
    "InvalidAccount": "its account is not valid: it will never start",
}
_BLOCKED_HINTS = {
    "JobHeldUser": "release it (scontrol release {job}) or cancel it (dflash-tui --stop)",
    "JobHeldAdmin": "ask the cluster's administrators, or cancel it (dflash-tui --stop)",
    "DependencyNeverSatisfied": "cancel it (dflash-tui --stop) and launch without the dependency",
}
_REQUEUED_HELD = ("launch failed requeued held", "launch_failed_requeued_held")
# slurmstepd's own lines in the job's stderr (slurm.out): they outlive the job's record.
_STEPD_END = re.compile(r"\*\*\* JOB (\d+) ON (\S+) CANCELLED AT (\S+)(?: DUE TO ([A-Z ]+?))?(?:,[^*]*)? \*\*\*")
_OOM = re.compile(r"exceeded (job )?memory limit|oom[-_ ]kill|Out Of Memory", re.IGNORECASE)
_DUE_TO = {"TIME LIMIT": JobState.TIMEOUT, "PREEMPTION": JobState.PREEMPTED, "NODE FAILURE": JobState.NODE_FAIL}
_ENDED_VERDICTS = {
    JobState.TIMEOUT: Verdict.TIMEOUT, JobState.DEADLINE: Verdict.TIMEOUT, JobState.PREEMPTED: Verdict.PREEMPTED,
    JobState.OUT_OF_MEMORY: Verdict.OUT_OF_MEMORY, JobState.NODE_FAIL: Verdict.NODE_FAIL,
    JobState.BOOT_FAIL: Verdict.NODE_FAIL, JobState.CANCELLED: Verdict.CANCELLED,
}
_ENDED_WORDS = {
    Verdict.TIMEOUT: ("hit its time limit{limit}", "ask for more time (time_limit) or resume from the last checkpoint"),
    Verdict.PREEMPTED: ("was preempted by a job of higher priority",
                        "relaunch (--relaunch --resume continues from the last checkpoint); a QOS without "
                        "preemption avoids it"),
    Verdict.OUT_OF_MEMORY: ("was killed for exceeding its memory limit",
                            "ask for more memory (sbatch_args = [\"--mem=...\"]) or use less"),
    Verdict.NODE_FAIL: ("lost a node{nodes}", "relaunch; tell the cluster's administrators if it repeats"),
    Verdict.CANCELLED: ("was cancelled from outside{by}: the run dir has no stop request",
                        "see who cancelled it (sacct -j {job} -o State) before relaunching"),
}


def pending_words(reason: str) -> tuple[str, bool]:
    """(the reason in words, whether it blocks the job for good)."""
    if reason in _BLOCKED_WORDS:
        return _BLOCKED_WORDS[reason], True
    if reason in _PENDING_WORDS:
        return _PENDING_WORDS[reason], False
    if reason.startswith("QOS"):
        return f"held back by its QOS's limits ({reason})", False
    if reason.startswith("Assoc"):
        return f"held back by its account's limits ({reason})", False
    return f"waiting ({reason})", False


def stepd_end(slurm_out: str, job_id: str) -> tuple[JobState, str] | None:
    """(the end state slurmstepd wrote for this job, its time) from slurm.out, or None."""
    found = None
    for m in _STEPD_END.finditer(slurm_out):
        if m.group(1) == job_id:
            found = (_DUE_TO.get((m.group(4) or "").strip(), JobState.CANCELLED), m.group(3))
    if found is None and _OOM.search(slurm_out):
        return JobState.OUT_OF_MEMORY, ""
    if found is not None and found[0] is JobState.CANCELLED and _OOM.search(slurm_out):
        return JobState.OUT_OF_MEMORY, found[1]   # slurmstepd cancels the job it found over its memory limit
    return found


def _job_words(job: SlurmJob) -> str:
    where = f" on {job.node_list}" if job.node_list else ""
    part = f" (partition {job.partition})" if job.partition else ""
    return f"job {job.job_id} {job.state or 'unknown'}{where}{part}"


def _stopped_run(ev: Evidence) -> bool:
    rec = slurm_of(ev).record
    return ev.stop is not None and (rec is None or ev.stop.run_id == rec.run_id)


def _out_tail(ev: Evidence) -> str:
    lines = [l for l in slurm_of(ev).out.splitlines() if l.strip()]
    return one_line(" | ".join(lines[-3:]), 300) if lines else ""


def judge_job(ev: Evidence, evidence_verdict: Callable[[Evidence], Checklist]) -> Checklist:
    """The checklist of a run with a Slurm job; `scheduler` carries the job's facts under
    "slurm" (the header and --check --json show them)."""
    job = slurm_of(ev).job
    assert job is not None
    cl = _judge(ev, job, evidence_verdict)
    reason = job.reason if job.pending else ""
    facts = {**job.to_dict(), "pending_reason": reason or None,
             "pending_words": pending_words(reason)[0] if job.pending else None}
    cl.scheduler = SchedulerFacts(KEYS.name, facts, headline(facts), active=facts["active"],
                                  nodes=(job.node_list,) if job.node_list else (), failed_nodes=job.failed_nodes)
    return cl


def _job_check(state: CheckState, cause: str, hint: str = "", since: float | None = None) -> Check:
    """The job's check: the scheduler's id, Slurm's words."""
    return Check.of(CheckId.SCHEDULER_JOB, state, cause, hint, since, label=JOB_LABEL)


def headline(facts: dict) -> tuple[tuple[str, str], ...]:
    """The job in the header: its id, partition, nodes, and why it waits."""
    shown = [("job", str(facts["job_id"]))]
    for key, label in (("partition", "partition"), ("node_list", "nodes"), ("pending_reason", "pending")):
        if facts.get(key):
            shown.append((label, str(facts[key])))
    return tuple(shown)


def _judge(ev: Evidence, job: SlurmJob, evidence_verdict: Callable[[Evidence], Checklist]) -> Checklist:
    now = ev.now
    if not job.answered:
        check = _job_check(WARN, one_line(f"job {job.job_id}: Slurm does not answer: {job.error}"),
                           "the controller may be restarting; nothing is concluded from its silence", now)
        if ev.launch is None:
            return Checklist(Verdict.STARTING, [check], f"job {job.job_id}: waiting for Slurm to answer")
        return _with(evidence_verdict(_plain(_vouched(ev))), check)

    if job.known and job.pending:
        return _pending(ev, job)

    if job.known and job.active:
        check = _job_check(OK, _job_words(job), "", now)
        if ev.launch is None:
            return Checklist(Verdict.STARTING, [check, Check.of(CheckId.LAUNCH_JSON, PENDING,
                                                             f"job {job.job_id} started; waiting for launch.json", "")],
                             f"job {job.job_id} running on {job.node_list or '?'}; waiting for the wrapper")
        return _with(evidence_verdict(_plain(_vouched(ev))), check)

    return _ended(ev, job, evidence_verdict)


def _pending(ev: Evidence, job: SlurmJob) -> Checklist:
    if ev.launch is None and (job.reason in _REQUEUED_HELD or (job.restarts > 0 and job.reason == "JobHeldAdmin")):
        why = (f"job {job.job_id} was requeued and held before its script ran (Slurm: {job.reason or 'held'}; "
               "a node's prolog or the job's launch failed)")
        out = _out_tail(ev)
        check = _job_check(FAIL, one_line(why + (f"; slurm.out: {out}" if out else "")),
                           f"see slurm.out and `scontrol show job {job.job_id}`; cancel it (--stop) and relaunch",
                           ev.now)
        return Checklist(Verdict.NEVER_STARTED, [check], one_line(why + (f"; {out}" if out else ""), 400))
    words, blocked = pending_words(job.reason)
    if _stopped_run(ev):
        check = _job_check(WARN, f"job {job.job_id} pending; a stop was requested "
                           f"{'by ' + ev.stop.requested_by if ev.stop and ev.stop.requested_by else ''}".strip(),
                           "the cancel is on its way", ev.now)
        return Checklist(Verdict.QUEUED, [check], f"job {job.job_id} pending; stop requested")
    part = f" in partition {job.partition}" if job.partition else ""
    cause = f"job {job.job_id} pending{part}: {words}"
    if blocked:
        hint = _BLOCKED_HINTS.get(job.reason, "fix the job's request, cancel it (--stop) and relaunch").format(
            job=job.job_id)
        return Checklist(Verdict.BLOCKED, [_job_check(FAIL, cause, hint, ev.now)], cause)
    hint = f"Slurm's reason: {job.reason or 'None'}; squeue -j {job.job_id}"
    return Checklist(Verdict.QUEUED, [_job_check(PENDING, cause, hint, ev.now)], cause)


def _vouched(ev: Evidence) -> Evidence:
    """While Slurm says the job runs, its batch host's wrapper is alive even where this login
    host cannot see its pid (another machine): the job's state stands for the pid check. While
    Slurm does not answer, the last word was "running" too: its silence is never an end."""
    launch = ev.launch
    if launch is None or ev.exit is not None or process_matches(launch, ev.proc):
        return ev
    job = slurm_of(ev).job
    if job is None or not (job.active or not job.answered):
        return ev
    # The job id (slurm.json) is the identity here: what the batch host runs is the job's copy
    # of launch.sh, so the stand-in carries the argv and run dir launch.json recorded.
    return replace(ev, proc=PidInfo(pid=launch.pid, alive=True, start_ticks=launch.start_ticks, state="R",
                                    pgid=launch.pgid, cmdline=tuple(launch.wrapper_argv or LEGACY_WRAPPER_ARGV),
                                    in_run_dir=True))


def job_vouches(ev: Evidence) -> bool:
    """The job stands for the wrapper's pid, which this host may not see (see `_vouched`)."""
    job = slurm_of(ev).job
    return job is not None and ev.exit is None and (job.active or not job.answered)


def _plain(ev: Evidence) -> Evidence:
    # The launch command's check is the job's here: sbatch printed no pid to judge.
    return replace(ev, attempt=None)


def _with(cl: Checklist, first: Check) -> Checklist:
    # The evidence's checklist whole (its rank groups, stragglers, silence limit), the job first.
    return cl.with_parts(checks=[first, *cl.checks])


def _ended(ev: Evidence, job: SlurmJob, evidence_verdict: Callable[[Evidence], Checklist]) -> Checklist:
    stepd = stepd_end(slurm_of(ev).out, job.job_id)
    state = job.state if job.known else ""
    # slurmstepd's words are more precise than a plain CANCELLED/FAILED: "DUE TO TIME LIMIT",
    # "exceeded memory limit" (a FAILED job that the memory enforcement killed).
    if stepd is not None and (not state or state in (JobState.CANCELLED, JobState.FAILED)):
        state = stepd[0]
    when = stepd[1] if stepd is not None else job.end_time
    known = (f"{_job_words(job)}, ended {when}".rstrip(", ") if job.known else
             f"job {job.job_id} is no longer known to Slurm (asked {', '.join(job.sources_asked) or 'squeue, scontrol'})"
             + (f"; slurm.out says {state}" if state else ""))
    if _stopped_run(ev):
        check = _job_check(OK, known, "", ev.now)
        if ev.launch is None:
            stop = ev.stop
            return Checklist(Verdict.STOPPED, [check], f"job {job.job_id} cancelled before it started, by request of "
                             f"{stop.requested_by or '?'}" if stop else f"job {job.job_id} cancelled")
        return _with(evidence_verdict(_plain(ev)), check)
    verdict = _ENDED_VERDICTS.get(state)
    if (ev.launch is None and verdict is Verdict.CANCELLED and job.known and job.node_list and stepd is None):
        # Given nodes, then cancelled without slurmstepd's "CANCELLED AT" line: Slurm itself
        # ended it before its script ran (a node's prolog failed, and the job may not requeue).
        verdict = None
    if ev.launch is None and verdict in (None, Verdict.NODE_FAIL):
        reason = job.reason if job.reason and job.reason != "None" else ""
        code = f", exit code {job.exit_code}" if job.exit_code and job.exit_code != "0:0" else ""
        given = f" on {job.node_list}" if job.node_list else ""
        why = (f"job {job.job_id} ended {state or '(state unknown)'}{given}{' (' + reason + ')' if reason else ''}"
               f"{code} before its script wrote launch.json (a node's prolog, the job's launch or its output "
               "file failed)")
        if not job.known and not state:
            why = f"{known}, and the wrapper never wrote launch.json"
        out = _out_tail(ev)
        check = Check.of(CheckId.LAUNCH_JSON, FAIL,
                      one_line(why + (f"; slurm.out: {out}" if out else "; slurm.out is empty or missing")),
                      "the job's script did not run: is run_dir on storage the compute nodes share? "
                      f"see slurm.out and `scontrol show job {job.job_id}`", ev.now)
        return Checklist(Verdict.NEVER_STARTED, [check], one_line(why + (f"; {out}" if out else ""), 400))
    if verdict is None:
        cl = evidence_verdict(_plain(ev))
        # COMPLETED (or no word from Slurm) is the job's ok; any other end (FAILED, ...) is the
        # job's failure, red beside a failing verdict and a warning beside the program's own end.
        mark = OK if state in (JobState.COMPLETED, "") else FAIL if cl.verdict.failing else WARN
        return _with(cl, _job_check(mark, known, "", ev.now))
    by = ""
    if verdict is Verdict.CANCELLED:
        by = f" by uid {job.cancelled_by}" if job.cancelled_by else " (Slurm names who only with accounting: sacct)"
    limit = f" ({job.time_limit})" if job.time_limit else ""
    words, hint = _ENDED_WORDS[verdict]
    nodes = f" of {job.node_list}" if job.node_list else ""
    if job.failed_nodes:
        nodes += f" ({', '.join(job.failed_nodes)} out of service)"
    text = words.format(limit=limit, nodes=nodes, by=by)
    cause = f"job {job.job_id} {text}" + (f" at {when}" if when else "")
    hint = hint.format(job=job.job_id)
    check = _job_check(FAIL, one_line(cause), hint, ev.now)
    if ev.launch is None:
        return Checklist(verdict, [check], one_line(cause + "; its script never started", 400))
    plain = evidence_verdict(_plain(ev))
    # The program's own end (its exit code, a traceback) stays in the list, after the job's.
    return Checklist(verdict, [check, *plain.checks], one_line(f"{cause}; {plain.summary}", 400), plain.threads,
                     rank_groups=plain.rank_groups, stall_limit_s=plain.stall_limit_s,
                     stall_limit_why=plain.stall_limit_why)
