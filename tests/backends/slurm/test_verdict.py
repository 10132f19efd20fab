"""The pure half of the Slurm support: the scheduler's answers parsed, the job's states as
verdicts (backends/slurm/verdict.py through the Slurm launcher's `judge`), and the profile keys. The daemons'
half is tests/backends/slurm/test_runs.py; sacct's text here is its documented `-P` format, the one
answer the test cluster (no accounting) cannot give."""

from __future__ import annotations

import pytest

from dflash_tui.config_file import parse_config
from dflash_tui.backends.slurm.commands import sbatch_argv
from dflash_tui.backends.slurm.evidence import SlurmEvidence, slurm_of
from dflash_tui.backends.slurm.job import SlurmJob, parse_sacct, parse_scontrol, parse_squeue
from dflash_tui.backends.slurm.launcher import SlurmLauncher
from dflash_tui.backends.slurm.spec import SlurmSpec
from dflash_tui.backends.slurm.verdict import judge_job, pending_words, stepd_end
from dflash_tui.config import ConfigError
from dflash_tui.contract.rundir import ExitRecord, LaunchRecord, SchemaError, SlurmJobRecord, StopRecord, parse_slurm_job
from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.ops import FileStat, PidInfo
from dflash_tui.run.verdict.health import Limits
from dflash_tui.run.evidence.observe import Evidence
from dflash_tui.run.verdict.report import report_from
from dflash_tui.run.verdict.checklist import Checklist, RankGroup, Verdict

SCONTROL = ("JobId=42 JobName=dflash-run UserId=me(1000) GroupId=me(1000) JobState=PENDING "
            "Reason=Resources Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 ExitCode=0:0 "
            "RunTime=00:00:00 TimeLimit=01:00:00 Partition=gpu NodeList=(null) BatchHost=(null) "
            "Command=/srv/runs/a b/launch.sh WorkDir=/srv/runs/a b StdErr=/srv/runs/a b/slurm.out")


def test_scontrol_line_is_parsed_with_spaces_in_values():
    job = parse_scontrol("42", SCONTROL, 0)
    assert (job.state, job.reason, job.partition, job.node_list, job.time_limit) == \
        ("PENDING", "Resources", "gpu", "", "01:00:00")
    assert parse_scontrol("43", SCONTROL, 0) is None
    assert parse_scontrol("42", "slurm_load_jobs error: Invalid job id specified", 1) is None


def test_a_path_that_holds_key_value_text_neither_changes_the_state_nor_proves_a_copy():
    # A running job whose run dir's path holds " JobState=COMPLETED": scontrol's own field,
    # which comes first, is the state; the path is matched whole for the job's identity.
    run = "/srv/runs/a JobState=COMPLETED b"
    line = (f"JobId=42 JobName=dflash-a UserId=me(1000) JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0 "
            f"Partition=gpu NodeList=n1 Command={run}/launch.sh WorkDir={run} StdErr={run}/slurm.out StdIn=/dev/null "
            f"StdOut={run}/slurm.out Power=")
    job = parse_scontrol("42", line, 0)
    assert (job.state, job.node_list) == ("RUNNING", "n1") and job.active
    assert job.runs_in(run, f"{run}/launch.sh") and job.runs_in(run + "/", f"{run}/launch.sh")
    copy = "/srv/runs/a JobState=COMPLETED b.copy"
    assert job.runs_in(copy, f"{copy}/launch.sh") is False and job.runs_in("/srv/runs/a", "/srv/runs/a/launch.sh") is False
    assert job.work_dir_words() == run
    assert parse_squeue("42", "42|RUNNING|None|n1|gpu|x|1:00|0:01", 0).runs_in(run, f"{run}/launch.sh") is None


def test_escapes_in_the_schedulers_answers_are_inert():
    esc = "\x1b]2;pwned\x07"
    job = parse_squeue("7", f"7|RUN{esc}NING|{esc}Res|n{esc}1|gp\x9bu|x|1:00|0:05", 0)
    detail = parse_scontrol("7", f"JobId=7 JobState=RUNNING{esc} Reason={esc} Partition=p{esc} NodeList=n{esc}", 0)
    for value in (*job.to_dict().values(), *detail.to_dict().values()):
        assert not isinstance(value, str) or value.isprintable(), value
    assert "\\x1b" in job.partition + job.node_list + detail.partition


def test_a_job_id_must_be_ascii_digits():
    with pytest.raises(SchemaError, match="expected a Slurm job id"):
        parse_slurm_job('{"v": 1, "run_id": "r1", "job_id": "\u00b2", "submit_time": 1}')
    assert parse_slurm_job('{"v": 1, "run_id": "r1", "job_id": "42", "submit_time": 1}').job_id == "42"


def test_squeue_empty_is_not_an_answer_and_sacct_names_the_canceller():
    assert parse_squeue("7", "", 0) is None            # one empty answer proves nothing
    job = parse_squeue("7", "7|RUNNING|None|n[1-2]|debug|2026-12-01T15:00:00|1:00:00|0:05", 0)
    assert (job.state, job.node_list, job.reason) == ("RUNNING", "n[1-2]", "")
    acct = parse_sacct("7", "7|CANCELLED by 1000|None|0:15|n1|debug|2026-12-01T15:00:00|"
                            "2026-12-01T15:01:00|01:00:00\n", 0)
    assert (acct.state, acct.cancelled_by, acct.source) == ("CANCELLED", "1000", "sacct")


def test_pending_reasons_in_words():
    assert pending_words("Resources") == ("waiting for resources: the nodes it asks for are busy", False)
    assert pending_words("QOSMaxJobsPerUserLimit")[0].startswith("held back by its QOS's limits")
    assert pending_words("DependencyNeverSatisfied")[1] and pending_words("JobHeldUser")[1]
    assert not pending_words("Priority")[1]


def test_slurmstepd_lines_tell_how_a_forgotten_job_ended():
    out = "slurmstepd-n1: error: *** JOB 9 ON n1 CANCELLED AT 2026-12-01T15:06:14 DUE TO TIME LIMIT ***\n"
    assert stepd_end(out, "9") == ("TIMEOUT", "2026-12-01T15:06:14")
    assert stepd_end(out, "8") is None
    assert stepd_end("slurmstepd-n1: error: Exceeded job memory limit\n", "9") == ("OUT_OF_MEMORY", "")
    node = "*** JOB 9 ON n1 CANCELLED AT 2026-12-01T15:07:10 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
    assert stepd_end(node, "9")[0] == "NODE_FAIL"


def _ev(job: SlurmJob, *, exit_code: int | None = 0, stop: bool = False, alive: bool = False) -> Evidence:
    launch = LaunchRecord(run_id="r1", pid=100, pgid=100, start_ticks=5, start_time=1000.0, argv=["x"], host="n1")
    log = FileStat("/srv/r/train.log", True, size=100, mtime=1099.0, kind="file")
    ev = Evidence(now=1100.0, run_dir="/srv/r", launch=launch, wrapper_run_id="r1", files={"train.log": log},
                  scheduler=SlurmEvidence(SlurmJobRecord(run_id="r1", job_id=job.job_id, submit_time=990.0), job=job),
                  proc=PidInfo(pid=100, alive=alive, start_ticks=5 if alive else None))
    if exit_code is not None and not alive:
        ev.exit = ExitRecord(run_id="r1", exit_code=exit_code, signal=None, end_time=1090.0)
    if stop:
        ev.stop = StopRecord(run_id="r1", pid=100, requested_time=1080.0, requested_by="me@laptop",
                             signal_sent="scancel", job_id=job.job_id)
    return ev


def _launcher() -> SlurmLauncher:
    return SlurmLauncher(_profile(scheduler='"slurm"', run_dir='"/srv/r"'), LocalTarget(), LocalTarget())


def evaluate(ev: Evidence):
    """The Slurm launcher's verdict (`judge`): the job's states beside the evidence's."""
    return _launcher().judge(ev, Limits())


def test_the_schedulers_end_outranks_the_programs_exit_code_but_not_a_stop():
    timeout = SlurmJob("5", state="TIMEOUT", time_limit="00:01:00", node_list="n1")
    cl = evaluate(_ev(timeout, exit_code=0))     # the trainer saved and exited 0 on the SIGTERM
    assert cl.verdict is Verdict.TIMEOUT and cl.verdict.failing and "hit its time limit (00:01:00)" in cl.summary
    assert evaluate(_ev(SlurmJob("5", state="CANCELLED"), stop=True)).verdict is Verdict.STOPPED
    cancelled = evaluate(_ev(SlurmJob("5", state="CANCELLED", cancelled_by="1000")))
    assert cancelled.verdict is Verdict.CANCELLED and "by uid 1000" in cancelled.summary
    assert evaluate(_ev(SlurmJob("5", state="COMPLETED"))).verdict is Verdict.FINISHED
    crashed = evaluate(_ev(SlurmJob("5", state="FAILED", exit_code="1:0"), exit_code=1))
    assert crashed.verdict is Verdict.CRASHED
    assert crashed.checks[0].id == "slurm_job" and crashed.checks[0].state.value == "fail"   # a failed job is no ok
    finished = evaluate(_ev(SlurmJob("5", state="COMPLETED")))
    assert finished.checks[0].id == "slurm_job" and finished.checks[0].state.value == "ok"


def test_a_node_failure_names_the_nodes_out_of_service_and_the_facts_say_whether_the_job_runs():
    lost = SlurmJob("5", state="NODE_FAIL", node_list="n[1-2]", failed_nodes=("n2",))
    cl = evaluate(_ev(lost, exit_code=None))
    assert cl.verdict is Verdict.NODE_FAIL and "lost a node of n[1-2] (n2 out of service)" in cl.summary, cl.summary
    assert cl.scheduler.facts["failed_nodes"] == ["n2"] and cl.scheduler.facts["active"] is False
    running = evaluate(_ev(SlurmJob("5", state="RUNNING", node_list="n1"), exit_code=None))
    assert running.scheduler.facts["active"] is True and running.scheduler.facts["failed_nodes"] is None


def test_the_facts_the_core_acts_on_are_fields_the_json_says_the_same():
    """The recovery reads `active`, `nodes` and `failed_nodes` as fields; `--check --json` keeps
    the scheduler's own object under its name."""
    lost = evaluate(_ev(SlurmJob("5", state="NODE_FAIL", node_list="n[1-2]", failed_nodes=("n2",)), exit_code=None))
    s = lost.scheduler
    assert (s.name, s.active, s.nodes, s.failed_nodes) == ("slurm", False, ("n[1-2]",), ("n2",))
    assert lost.to_dict()["slurm"] is s.facts and s.facts["node_list"] == "n[1-2]"
    pending = evaluate(_ev(SlurmJob("5", state="PENDING", reason="Priority"), exit_code=None))
    assert (pending.scheduler.active, pending.scheduler.nodes, pending.scheduler.failed_nodes) == (True, (), ())
    silent = evaluate(_ev(SlurmJob("5", answered=False, error="Socket timed out"), exit_code=None))
    assert silent.scheduler.active is False and silent.scheduler.facts["active"] is False


def test_the_jobs_check_has_the_schedulers_id_and_slurms_words():
    # The id is the one published ("slurm_job"); the label is the backend's, not the core's.
    cl = evaluate(_ev(SlurmJob("5", state="RUNNING", node_list="n1"), exit_code=None))
    job = cl.checks[0]
    assert (job.id, job.label) == ("slurm_job", "Slurm job") and job.to_dict()["id"] == "slurm_job"


def test_a_jobs_checklist_keeps_the_evidences_rank_groups():
    """The job's check goes first; the evidence's own parts (its rank groups, which name the
    node of a rank outside a hung collective) stay."""
    group = RankGroup(ranks=(1,), cls="lock", where="f (a.py:3)", doing="", threads=1, nodes=("n2",))
    for job in (SlurmJob("5", state="RUNNING", node_list="n[1-2]"), SlurmJob("5", state="PREEMPTED", node_list="n1")):
        cl = judge_job(_ev(job, exit_code=None),
                       lambda ev: Checklist(Verdict.STALLED, [], "hung", rank_groups=[group], stall_limit_s=9.0))
        assert cl.checks[0].id == "slurm_job" and cl.rank_groups == [group], (job.state, cl)


def test_a_running_job_vouches_for_a_wrapper_on_another_host_and_silence_is_no_end():
    # The login host cannot see the batch host's pid: the job's RUNNING stands for it.
    running = evaluate(_ev(SlurmJob("5", state="RUNNING", node_list="n1"), exit_code=None))
    assert running.verdict in (Verdict.STARTING, Verdict.RUNNING, Verdict.STALLED), running
    assert running.verdict is not Verdict.KILLED
    silent = evaluate(_ev(SlurmJob("5", answered=False, error="Socket timed out"), exit_code=None, alive=True))
    assert silent.verdict is not Verdict.KILLED and silent.checks[0].state.value == "warn"
    assert silent.scheduler.name == "slurm" and silent.scheduler.facts["job_id"] == "5"
    unseen = evaluate(_ev(SlurmJob("5", answered=False, error="Socket timed out"), exit_code=None))
    assert unseen.verdict is not Verdict.KILLED, unseen   # a wrapper on another host, Slurm silent
    # The header's pid: not "gone" while the job runs it on a host this one does not see.
    ev = _ev(SlurmJob("5", state="RUNNING", node_list="n1"), exit_code=None)
    assert report_from(ev, evaluate(ev), profile="s", target_label="login",
                       vouched=_launcher().vouches(ev)).pid_alive is None
    ended = _ev(SlurmJob("5", state="COMPLETED"))
    assert report_from(ended, evaluate(ended), profile="s", target_label="login",
                       vouched=_launcher().vouches(ended)).pid_alive is False


def test_pending_is_queued_with_exit_4_and_held_is_blocked():
    ev = _ev(SlurmJob("5", state="PENDING", reason="Priority", partition="gpu"), exit_code=None)
    ev.launch = None
    cl = evaluate(ev)
    assert cl.verdict is Verdict.QUEUED and not cl.verdict.failing and not cl.verdict.healthy
    assert cl.scheduler.facts["pending_reason"] == "Priority" and "jobs of higher priority" in cl.summary
    ev.scheduler.job = SlurmJob("5", state="PENDING", reason="JobHeldAdmin")
    assert evaluate(ev).verdict is Verdict.BLOCKED


def _profile(**keys):
    toml = "[profile.s]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
    return parse_config(toml, "c.toml").profiles["s"]


def test_profile_keys_and_their_one_line_errors():
    p = _profile(scheduler='"slurm"', run_dir='"/srv/r"', nodes=2, partition='"gpu"', account='"ml"', qos='"hi"',
                 gpus_per_node=8, time_limit='"1-00:00:00"', sbatch_args='["--exclusive"]')
    assert p.scheduler == SlurmSpec("gpu", "ml", "hi", 2, 8, "1-00:00:00", ("--exclusive",)) and not p.is_multinode
    for bad, words in ((dict(nodes='["a"]'), "is not a number of nodes"), (dict(partition='"a;b"'), "not a Slurm name"),
                       (dict(partition='"gpu\\n"'), "not a Slurm name"), (dict(account='"ml\\n"'), "not a Slurm name"),
                       (dict(qos='"hi\\n"'), "not a Slurm name"), (dict(time_limit='"60\\n"'), "not a Slurm time"),
                       (dict(time_limit='"\u0666\u0660"'), "not a Slurm time"), (dict(time_limit='"\uff16\uff10"'), "not a Slurm time"),
                       (dict(time_limit='"soon"'), "not a Slurm time limit"), (dict(sbatch_args='["-pgpu"]'), "sets what"),
                       (dict(sbatch_args='["--output=x"]'), "sets what"), (dict(container='"pct:1"'), "does not apply"),
                       (dict(scheduler='"pbs"'), "not a known scheduler")):
        with pytest.raises(ConfigError, match=words):
            _profile(**{"scheduler": '"slurm"', "run_dir": '"/srv/r"', **bad})
    with pytest.raises(ConfigError, match='add scheduler = "slurm"'):
        _profile(run_dir='"/srv/r"', partition='"gpu"')


@pytest.mark.parametrize("arg", ["--out=/tmp/x", "--chd=/tmp", "--wra=id", "--job=x", "--part=urgent", "--ntasks-per=2",
                                 "--gpus-per=1", "--ho", "--pars", "-vo", "-vH", "-QvD/tmp", "-Hv", "-sJx", "--", "-",
                                 "--ntasks=2", "-vn2", "-sQ", "--qui", "--wai", "-vW"])
def test_sbatch_args_refuse_what_sbatch_reads_as_the_launchs_own_options(arg):
    # getopt_long takes any unambiguous prefix of a long option; short options cluster.
    with pytest.raises(ConfigError, match="sbatch_args item"):
        _profile(scheduler='"slurm"', run_dir='"/srv/r"', sbatch_args=f'["{arg}"]')


@pytest.mark.parametrize("arg", ["--gpus=2", "--time-min=10", "--exclusive", "--mem=0", "-c4", "-vc4",
                                 "--constraint=h100", "-wn1", "--requeue", "--comment=-o"])
def test_sbatch_args_keep_the_options_that_are_their_own(arg):
    assert _profile(scheduler='"slurm"', run_dir='"/srv/r"', sbatch_args=f'["{arg}"]').scheduler.sbatch_args == (arg,)


def test_sbatch_argv_keeps_a_percent_in_the_run_dir_literal():
    argv = sbatch_argv(SlurmSpec(partition="gpu", nodes=2), "/srv/runs/50%", "dflash-50_")
    assert "--output=/srv/runs/50%%/slurm.out" in argv and "--chdir=/srv/runs/50%" in argv
    assert argv[-1] == "/srv/runs/50%/launch.sh" and "--no-requeue" in argv and "--nodes=2" in argv


async def test_a_corrupt_slurm_json_is_one_line_not_a_crash(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "launch.sh").write_text("#!/bin/sh\n# dflash-run-id: r1\n")
    (run / "slurm.json").write_text('{"v": 1, "run_id": "r1", "job_id": "$(rm -rf /)", "submit_time": 1}')
    profile = _profile(scheduler='"slurm"', run_dir=f'"{run}"')
    target = LocalTarget()
    launcher = SlurmLauncher(profile, target, target)
    ops = await open_ops(target, prefer="shell")
    try:
        ev = await launcher.observe(ops, str(run))
    finally:
        await ops.close()
    cl = evaluate(ev)
    assert slurm_of(ev).job is None and cl.verdict is Verdict.NEVER_STARTED
    assert "expected a Slurm job id" in cl.summary and "cannot be identified" in cl.summary
