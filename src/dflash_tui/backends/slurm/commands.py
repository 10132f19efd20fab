"""The scheduler's commands on the login host, over a Target: sbatch, squeue + scontrol (and
sacct when both no longer know the job), scancel of exactly one job id.

Every command is an argv (no user string is spliced into a shell line); the one sh used runs
squeue and scontrol in one round trip with the job id as `$1`. A job missing from one squeue
answer is asked of scontrol in the same round trip, and only when both say it does not exist
is sacct asked; a controller that does not answer is `answered=False`, never an end.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from dataclasses import dataclass

from ...contract.rundir import LAUNCH_SH, SLURM_OUT, inert_text
from ...remote.base import CommandResult, CommandTimeout, Target
from ...run.launch.environment import env_input, with_env_from_stdin
from ...run.launch.request import Placement
from .job import (KNOWN_STATES, SACCT_FIELDS, SQUEUE_FORMAT, SlurmJob, controller_silent, invalid_id,
                  parse_failed_nodes, parse_sacct, parse_scontrol, parse_squeue, unanswered, unknown_job)
from .spec import SlurmSpec, merge_exclude, sbatch_options

# `timeout`'s exit status when it ended the command (124: its signal; 137: the KILL after).
_TIMED_OUT = (124, 137)
# $1 = job id, $2 = squeue's format, $3 = each command's limit in seconds. Each command's
# output, then its status on a line of its own.
_QUERY = ('j=$1; t=; if command -v timeout >/dev/null 2>&1; then t="timeout -k 1 $3"; fi; '
          '$t squeue -h -j "$j" -o "$2" 2>&1; echo "@@rc=$?"; '
          '$t scontrol show job -o "$j" 2>&1; echo "@@rc=$?"')
# $1 = the limit in seconds, then the command's argv.
_BOUNDED = ('if command -v timeout >/dev/null 2>&1; then exec timeout -k 1 "$@"; fi; '
            'shift; exec "$@"')
_TIMEOUT_S = 20.0
# What the Target waits beyond the limit on the login host (the kill, the round trip).
_MARGIN_S = 3.0
_JOB_ID = re.compile(r"[0-9]{1,20}", re.ASCII)


def valid_job_id(text: str) -> bool:
    """A Slurm job id: ASCII digits ("²" is a digit to str.isdigit, and no job's id)."""
    return _JOB_ID.fullmatch(text) is not None


def bounded_argv(argv: list[str], limit_s: float) -> list[str]:
    """`argv` run under `timeout` on the login host, where it has one."""
    return ["sh", "-c", _BOUNDED, "dflash-slurm", f"{max(1.0, limit_s):.0f}", *argv]


async def run_scheduler(target: Target, argv: list[str], limit_s: float,
                        env: dict[str, str] | None = None) -> CommandResult:
    """One scheduler command, ended (with what it started) after `limit_s` on the login host.
    `env`: variables it gets on its stdin (run/launch/environment.py), never on its command line.
    Raises CommandTimeout when it did not answer in time."""
    if env:
        res = await target.run(bounded_argv(with_env_from_stdin(argv), limit_s), input=env_input(env),
                               timeout=limit_s + _MARGIN_S)
    else:
        res = await target.run(bounded_argv(argv, limit_s), timeout=limit_s + _MARGIN_S)
    if res.exit_status in _TIMED_OUT and not res.stdout.strip():
        raise CommandTimeout(f"{argv[0]} did not answer within {limit_s:.0f} s",
                             "the Slurm controller may be overloaded or restarting")
    return res


class SchedulerMissing(Exception):
    """The login host has no sbatch/squeue (not a Slurm login host, or PATH lacks them)."""


@dataclass
class Submitted:
    job_id: str | None          # None: sbatch refused the job
    cluster: str
    result: CommandResult

    def refusal(self) -> str:
        """sbatch's own words, one line (inert)."""
        text = inert_text(" ".join((self.result.stderr or self.result.stdout).split()))
        return text[:300] or f"sbatch exit status {self.result.exit_status}, no output"


def _pattern_safe(path: str) -> str:
    # sbatch expands %j, %N, ... in --output/--error: a run dir with '%' must stay as written.
    return path.replace("%", "%%")


def sbatch_argv(spec: SlurmSpec, run_dir: str, job_name: str, placement: Placement = Placement()) -> list[str]:
    """sbatch for launch.sh in the run dir: parsable output, the job's name, its working
    directory and its own stdout/stderr in the run dir, no requeue (a requeued job would run
    the wrapper again into the same run files; a profile may ask for it in sbatch_args);
    `placement.exclude`: nodes the job must not get (a recovery's: the node that failed the last
    job), merged with the profile's own --exclude into one option (spec.merge_exclude)."""
    out = _pattern_safe(posixpath.join(run_dir, SLURM_OUT))
    requeue = [] if any(a.split("=")[0] in ("--requeue", "--no-requeue") for a in spec.sbatch_args) else ["--no-requeue"]
    return ["sbatch", "--parsable", f"--job-name={job_name}", f"--chdir={run_dir}", f"--output={out}",
            f"--error={out}", *requeue, *merge_exclude(sbatch_options(spec), placement.exclude), posixpath.join(run_dir, LAUNCH_SH)]


async def submit(target: Target, spec: SlurmSpec, run_dir: str, job_name: str, placement: Placement,
                 env: dict[str, str] | None = None) -> Submitted:
    """sbatch; `env`: the program's variables, in sbatch's environment, which a job gets
    (sbatch's default --export=ALL; a profile's own --export in sbatch_args decides otherwise)."""
    res = await run_scheduler(target, sbatch_argv(spec, run_dir, job_name, placement), 60, env)
    line = res.stdout.strip().splitlines()[-1] if res.ok and res.stdout.strip() else ""
    job_id, _, cluster = line.partition(";")
    if not res.ok or not valid_job_id(job_id.strip()):
        return Submitted(None, "", res)
    return Submitted(job_id.strip(), inert_text(cluster.strip())[:100], res)


def _split_answers(stdout: str) -> list[tuple[str, int]]:
    out, chunk = [], []
    for line in stdout.splitlines():
        if line.startswith("@@rc="):
            try:
                rc = int(line[5:])
            except ValueError:
                rc = -1
            out.append(("\n".join(chunk), rc))
            chunk = []
        else:
            chunk.append(line)
    return out


async def query(target: Target, job_id: str, *, timeout: float = _TIMEOUT_S) -> SlurmJob:
    """The job as the scheduler describes it now (see the module's docstring for the order).
    Each command is ended after half of `timeout` on the login host (one that hangs is "not
    answered", never an end); raises CommandTimeout when the round trip itself overruns."""
    each = max(1.0, (timeout - _MARGIN_S) / 2)
    res = await target.run(["sh", "-c", _QUERY, "dflash-slurm-query", job_id, SQUEUE_FORMAT, f"{each:.0f}"],
                           timeout=2 * each + _MARGIN_S)
    answers = _split_answers(res.stdout)
    if len(answers) < 2:
        return unanswered(job_id, res.stderr or res.stdout or f"the query printed nothing (exit {res.exit_status})")
    (sq_text, sq_rc), (sc_text, sc_rc) = answers[:2]
    hung = [name for name, rc in (("squeue", sq_rc), ("scontrol", sc_rc)) if rc in _TIMED_OUT]
    listed = parse_squeue(job_id, sq_text, sq_rc)
    detail = parse_scontrol(job_id, sc_text, sc_rc)
    if detail is not None:
        # scontrol has every field; squeue's state is as fresh (both ask the controller).
        if listed is not None and listed.state in KNOWN_STATES and listed.state != detail.state and not detail.ended:
            detail.state = listed.state
        return detail
    if listed is not None:
        return listed
    if hung:
        return unanswered(job_id, f"{' and '.join(hung)} did not answer within {each:.0f} s")
    if controller_silent(sq_text) or controller_silent(sc_text):
        return unanswered(job_id, sc_text or sq_text)
    if _missing(sq_text, sq_rc) and _missing(sc_text, sc_rc):
        raise SchedulerMissing("the login host has no squeue/scontrol on PATH")
    if not invalid_id(sc_text):
        # scontrol said something else: not a proof that the job is gone.
        return unanswered(job_id, sc_text or sq_text)
    return await _ask_accounting(target, job_id, timeout)


def _missing(text: str, rc: int) -> bool:
    # sh says "not found", timeout "failed to run command": both exit 127.
    return rc == 127 or "command not found" in text or ": not found" in text


async def _ask_accounting(target: Target, job_id: str, timeout: float) -> SlurmJob:
    res = await run_scheduler(target, ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", SACCT_FIELDS], timeout)
    job = parse_sacct(job_id, res.stdout, res.exit_status or 0)
    if job is not None:
        return job
    return unknown_job(job_id, ["squeue", "scontrol", "sacct" if res.ok else "sacct (no accounting)"])


async def failed_nodes(target: Target, node_list: str, *, timeout: float = _TIMEOUT_S) -> tuple[str, ...]:
    """Which of `node_list` (a job's) Slurm holds out of service now (down, drained, failing,
    not responding); () when none is, or sinfo does not answer."""
    try:
        res = await run_scheduler(target, ["sinfo", "-h", "-N", "-n", node_list, "-o", "%N %t"], timeout)
    except CommandTimeout:
        return ()
    return parse_failed_nodes(res.stdout, res.exit_status or 0)


async def cancel(target: Target, job_id: str, *, wait_s: float = 30.0, steps_first_s: float = 0.0,
                 timeout: float = _TIMEOUT_S) -> tuple[CommandResult, SlurmJob]:
    """`scancel JOB_ID` (that job only), then wait until it is no longer pending or running.
    Returns scancel's result and the job as last seen. Raises CommandTimeout when scancel
    itself does not answer within `timeout`.

    `steps_first_s`: first SIGTERM to the job's steps only (`scancel --signal=TERM`: not the
    batch script, so not the srun in it), and up to that long for the job to end by itself.
    srun answers a SIGTERM of its own by killing its tasks at once, before a program stopping
    on SIGTERM (the bundled trainer's checkpoint) is done; the ranks, signalled themselves,
    finish, srun returns, and the job ends."""
    if steps_first_s > 0:
        res = await run_scheduler(target, ["scancel", "--signal=TERM", job_id], timeout)
        job = await _settled(target, job_id, steps_first_s, timeout)
        if job.answered and (not job.known or job.ended):
            return res, job
    res = await run_scheduler(target, ["scancel", job_id], timeout)
    return res, await _settled(target, job_id, wait_s, timeout)


async def _settled(target: Target, job_id: str, wait_s: float, timeout: float) -> SlurmJob:
    """The job once no longer pending or running, or as last seen after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            job = await query(target, job_id, timeout=timeout)
        except CommandTimeout:
            job = SlurmJob(job_id, answered=False, error="squeue/scontrol did not answer")
        except SchedulerMissing as exc:
            job = SlurmJob(job_id, answered=False, error=str(exc))
        settled = job.answered and (not job.known or job.ended)
        if settled or time.monotonic() >= deadline:
            return job
        await asyncio.sleep(0.3)
