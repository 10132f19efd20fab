"""The watcher's recovery under Slurm, against the real daemons (tests/support/slurm.py): a job
on two nodes that loses one (NODE FAIL) is requeued as a new job that excludes that node only
(sbatch --exclude, shown by scontrol as ExcNodeList), says so in the recovery's record, and
finishes; a preempted job (PREEMPTED) is requeued and finishes; a profile's own --exclude and
the recovery's reach sbatch as one option. And, pure: which nodes a failure names (NODE FAIL:
the job's nodes Slurm holds out of service; a hung collective: the node of the rank that was
not in it)."""

from __future__ import annotations

import json
import re
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dflash_tui.backends.slurm.commands import sbatch_argv
from dflash_tui.backends.slurm.job import parse_failed_nodes
from dflash_tui.backends.slurm.spec import merge_exclude
from dflash_tui.config_file import parse_config
from dflash_tui.config import ConfigError
from dflash_tui.contract.rundir import SLURM_JSON, LaunchRecord
from dflash_tui.recording.store.change import VerdictChange
from dflash_tui.recording.recovery.recovery import SCHEDULER_SETTLE_S, failed_nodes, job_still_ending
from dflash_tui.run.launch.request import Placement
from dflash_tui.run.verdict.checklist import Checklist, SchedulerFacts, ThreadHealth, ThreadState, Verdict
from dflash_tui.run.verdict.rank_groups import group_ranks, nodes_outside_collective
from dflash_tui.run.verdict.report import RunReport
from tests.recording.test_daemon import start_watcher, wait_title
from tests.recording.recovery.test_recovery import states, wait_until
from tests.backends.slurm.test_runs import cancel_jobs_on_the_two_nodes, slurm_env  # noqa: F401  (fixture)
from tests.support.receivers import HttpReceiver
from tests.support.slurm import WIDE, SlurmCluster, slurm_cluster  # noqa: F401  (fixture)
from tests.support.watch_store import recorded_actions
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(120)


def steps_then_fewer(first: int, again: int) -> list[str]:
    """`first` steps of 0.5 s on the first launch, `again` on a relaunch (DFLASH_RESTART)."""
    return ["sh", "-c", f'n={first}; [ "${{DFLASH_RESTART:-0}}" -gt 0 ] && n={again}; i=1; '
            'while [ $i -le $n ]; do echo "step $i/$n"; i=$((i+1)); sleep 0.5; done']


# The default verdicts' failing ends: a job that ends under its program (the program killed by
# Slurm's SIGTERM) must be judged by the job's end, never CRASHED first (a restart without the
# exclusion).
DEFAULT_ON = ("CRASHED", "KILLED", "NODE FAIL", "PREEMPTED")


def write_config(tmp_path: Path, *, backoff_s: float = 3, on: tuple[str, ...] = DEFAULT_ON,
                 notify_port: int | None = None, **keys) -> Path:
    cfg = tmp_path / "config.toml"
    keys = {"command": steps_then_fewer(40, 4), "launch_deadline_s": 5, "stall_after_s": 60, "min_free_gb": 0, **keys}
    cfg.write_text(
        f'[profile.p]\nscheduler = "slurm"\nrun_dir = "{tmp_path / "p"}"\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
        + f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        # Only the recovery's own notifications: each restart and each give-up.
        + (f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{notify_port}/hook"]\n' if notify_port else "")
        + f'[recover]\non = {json.dumps(list(on))}\nmax_restarts = 2\nbackoff_s = {backoff_s}\n')
    return cfg


def recovery(tmp_path: Path) -> list:
    return recorded_actions(tmp_path / "watch.sqlite3", "p")


def job_id(tmp_path: Path) -> str:
    return json.loads((tmp_path / "p" / SLURM_JSON).read_text())["job_id"]


def check_json(tmp_path: Path, cfg: Path) -> dict:
    return json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)


def finished_again(tmp_path: Path, first: str) -> bool:
    last = states(tmp_path)[-1]
    return last[0] == "FINISHED" and last[1] != first


def hostnames(cluster: SlurmCluster, node_list: str) -> list[str]:
    return cluster.run("scontrol", "show", "hostnames", node_list).stdout.split()


def stop_watcher(w, cluster: SlurmCluster) -> str:
    w.send_signal(signal.SIGTERM)
    _, err = w.communicate(timeout=15)
    cancel_jobs_on_the_two_nodes(cluster)
    cluster.run("scancel", "--user", str(__import__("os").getuid()), f"--partition={WIDE}", check=False)
    return err


def test_a_job_on_two_nodes_that_loses_one_is_requeued_excluding_only_that_node_and_finishes(tmp_path, slurm_cluster):
    cfg = write_config(tmp_path, nodes=2, partition=WIDE)
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        first_job = job_id(tmp_path)
        given = wait_until(lambda: check_json(tmp_path, cfg).get("slurm", {}).get("node_list"), 40,
                           lambda: states(tmp_path))
        nodes = hostnames(slurm_cluster, given)
        assert len(nodes) == 2, given
        lost = nodes[-1]
        try:
            # Drained, then down: the job ends NODE_FAIL and the node stays out of service, as a
            # failed node does (a down node whose slurmd answers is back at once here:
            # ReturnToService=2).
            slurm_cluster.run("scontrol", "update", f"nodename={lost}", "state=drain", "reason=test")
            slurm_cluster.run("scontrol", "update", f"nodename={lost}", "state=down", "reason=test")
            wait_until(lambda: any(a.action == "planned" for a in recovery(tmp_path)), 40, lambda: states(tmp_path))
        finally:
            # The node is back before the relaunch (the backoff): only the exclusion keeps the new job off it.
            slurm_cluster.resume_nodes()
        wait_until(lambda: finished_again(tmp_path, first), 60, lambda: (states(tmp_path), recovery(tmp_path)))
        second_job = job_id(tmp_path)
        shown = slurm_cluster.run("scontrol", "show", "job", second_job, check=False).stdout
    finally:
        err = stop_watcher(w, slurm_cluster)
    assert [st for st, run in states(tmp_path) if run == first][-1] == "NODE FAIL", states(tmp_path)
    acts = recovery(tmp_path)
    assert [a.action for a in acts] == ["planned", "launching", "launched"], (acts, err)
    assert acts[0].failure.state == "NODE FAIL", acts   # not the program's end (CRASHED) seen before it
    # Only the node that failed, not both of the job's.
    assert all(a.detail.get("exclude") == [lost] for a in acts), acts
    assert acts[-1].detail["exclude_why"] == "it failed the run before"
    assert second_job != first_job
    if shown:   # Slurm may have forgotten the finished job already (MinJobAge)
        assert f"ExcNodeList={lost}" in shown, shown
        ran_on = hostnames(slurm_cluster, re.search(r"^\s+NodeList=(\S+)", shown, re.M).group(1))
        assert lost not in ran_on and len(ran_on) == 2, shown


def test_a_preempted_job_is_requeued_as_a_new_job_and_finishes(tmp_path, slurm_cluster):
    cfg = write_config(tmp_path, backoff_s=1)
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        first_job = job_id(tmp_path)
        wait_until(lambda: (tmp_path / "p" / "launch.json").exists() and slurm_cluster.run(
            "squeue", "-h", "-j", first_job, "-o", "%T").stdout.strip() == "RUNNING", 40, lambda: states(tmp_path))
        # What a job of a higher-priority partition does to it on a busy cluster (PreemptMode=CANCEL).
        slurm_cluster.run("sbatch", "--parsable", "-p", "urgent", "-N2", "--exclusive", "-o", "/dev/null",
                          "--wrap", "sleep 1")
        wait_until(lambda: finished_again(tmp_path, first), 60, lambda: (states(tmp_path), recovery(tmp_path)))
        second_job = job_id(tmp_path)
    finally:
        err = stop_watcher(w, slurm_cluster)
    assert [st for st, run in states(tmp_path) if run == first][-1] == "PREEMPTED", states(tmp_path)
    acts = recovery(tmp_path)
    assert [a.action for a in acts] == ["planned", "launching", "launched"], (acts, err)
    assert acts[0].failure.state == "PREEMPTED", acts
    assert not any(a.detail.get("exclude") for a in acts), acts   # a preemption names no node
    assert second_job != first_job


ODD_RANK_PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "ranks_one_odd.py"


def test_a_hang_whose_odd_rank_names_a_node_is_requeued_excluding_that_node(tmp_path, slurm_cluster):
    """Two gloo ranks, one per node: after 6 steps rank 1 waits on a queue while rank 0 waits
    for it in all_reduce. STALLED (stall_after_s long enough for torch's import on a loaded
    machine; the learned limit takes over once the steps show their pace); the recovery stops
    the job and submits a new one without rank 1's node, and says why. The relaunch
    (DFLASH_RESTART=1) runs a few steps of sh."""
    again = 'i=1; while [ $i -le 4 ]; do echo "step $i/4"; i=$((i+1)); sleep 0.5; done'
    command = ["sh", "-c", f'if [ "${{DFLASH_RESTART:-0}}" -gt 0 ]; then {again}; '
               f'else OMP_NUM_THREADS=1 exec {sys.executable} {ODD_RANK_PROGRAM} 6 0.3 1; fi']
    http = HttpReceiver()
    cfg = write_config(tmp_path, backoff_s=1, on=("STALLED",), notify_port=http.port, command=command, nodes=2,
                       partition=WIDE, stall_after_s=10, stop_grace_s=2)
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        given = hostnames(slurm_cluster, wait_until(lambda: check_json(tmp_path, cfg).get("slurm", {}).get("node_list"),
                                                    40, lambda: states(tmp_path)))
        wait_until(lambda: finished_again(tmp_path, first), 90, lambda: (states(tmp_path), recovery(tmp_path)))
        shown = slurm_cluster.run("scontrol", "show", "job", job_id(tmp_path), check=False).stdout
        wait_title(http, "dflash-tui: p restarted (1/2)", 15)
    finally:
        err = stop_watcher(w, slurm_cluster)
        http.close()
    assert ("STALLED", first) in states(tmp_path)
    acts = recovery(tmp_path)
    assert [a.action for a in acts] == ["planned", "stopped", "launching", "launched"], (acts, err)
    odd = given[1]   # srun's task 1 (rank 1) runs on the job's second node
    assert all(a.detail.get("exclude") == [odd] for a in acts), acts
    assert acts[-1].detail["exclude_why"] == "rank 1 was not in the collective the others waited in"
    if shown:
        assert f"ExcNodeList={odd}" in shown, shown
    (message,) = [json.loads(r.body)["message"] for r in http.requests if r.path == "/hook"]
    assert f"excluding node {odd}: rank 1 was not in the collective the others waited in" in message, message


def test_the_profiles_exclude_and_the_recoverys_reach_sbatch_as_one_option(slurm_cluster, tmp_path):
    """sbatch keeps the last of two --exclude: the profile's and the recovery's are one, their
    union, whatever spelling the profile wrote."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text("#!/bin/sh\ntrue\n")
    for arg, kept in (("--exclude=n3", []), ("--exclud=n3", []), ("-xn3", []), ("-vxn3", ["-v"])):
        spec = parse_config(f'[profile.p]\nscheduler = "slurm"\nrun_dir = "{run_dir}"\npartition = "{WIDE}"\n'
                            f'sbatch_args = ["--exclusive", {json.dumps(arg)}]\n', "c.toml").profiles["p"].scheduler
        argv = sbatch_argv(spec, str(run_dir), "dflash-probe", Placement(exclude=("n2",)))
        excl = [a for a in argv if a.startswith(("--exclu", "-x")) and a != "--exclusive"]
        assert excl == ["--exclude=n3,n2"], (arg, argv)
        assert all(k in argv for k in kept) and "--exclusive" in argv, (arg, argv)
        res = slurm_cluster.run(argv[0], "--hold", *argv[1:])
        line = slurm_cluster.run("scontrol", "show", "job", "-o", res.stdout.strip()).stdout
        slurm_cluster.run("scancel", res.stdout.strip(), check=False)
        assert " ExcNodeList=n[2-3] " in line, (arg, line)


def test_every_exclude_is_merged_into_one_option_the_union_the_profiles_first():
    assert merge_exclude(["--exclusive", "-vxn[1,3],n5"], ["n2", "n5"]) == ["--exclusive", "-v", "--exclude=n[1,3],n5,n2"]
    assert merge_exclude(["--exclude=n1", "-xn2"], ["n1"]) == ["--exclude=n1,n2"]
    assert merge_exclude(["--exclud=n3"], []) == ["--exclude=n3"]
    assert merge_exclude(["--exclusive", "--export=ALL"], ["n1"]) == ["--exclusive", "--export=ALL", "--exclude=n1"]


def test_an_exclude_without_nodes_in_sbatch_args_is_one_line():
    for arg in ("--exclude", "-x", "--exclud=", "-vx"):
        with pytest.raises(ConfigError) as err:
            parse_config(f'[profile.p]\nscheduler = "slurm"\nrun_dir = "/r"\nsbatch_args = [{json.dumps(arg)}, "-v"]\n',
                         "c.toml")
        assert "names no nodes" in str(err.value) and "\n" not in str(err.value), (arg, err.value)


def report(cl: Checklist) -> RunReport:
    return RunReport(0.0, "p", "local", "/r", cl)


def hung(nodes_of: list[str], odd: tuple[int, ...]) -> Checklist:
    """A STALLED run of one rank per node: the ranks in `odd` wait on a queue, the others in
    all_reduce, as the engine groups them (group_ranks with each thread's node)."""
    threads = [ThreadHealth("MainThread", ThreadState.STUCK, pid=100 + r, rank=r,
                            **({"cls": "lock", "where": "next_batch (data.py:40)", "doing": "Queue.get"} if r in odd
                               else {"cls": "collective", "where": "step (train.py:88)", "doing": "all_reduce"}))
               for r in range(len(nodes_of))]
    return Checklist(Verdict.STALLED, threads=threads, rank_groups=group_ranks(threads, nodes_of))


def test_a_hang_names_the_node_of_the_rank_not_in_the_collective_the_others_waited_in():
    nodes, why = failed_nodes(Verdict.STALLED, report(hung(["n1", "n2"], odd=(1,))))
    assert (nodes, why) == (("n2",), "rank 1 was not in the collective the others waited in")
    odd = nodes_outside_collective(hung(["n1", "n2", "n3", "n4"], odd=(1, 3)).rank_groups)
    assert odd is not None and odd.nodes == ("n2", "n4") and odd.why().startswith("ranks 1, 3 were not")
    # No node named: one node only (no node per rank), most ranks outside the collective, or
    # every rank in it.
    assert failed_nodes(Verdict.STALLED, report(hung(["n1", "n1"], odd=(1,)))) == ((), "")
    assert nodes_outside_collective(hung(["n1", "n2", "n3", "n4"], odd=(1, 2, 3)).rank_groups) is None
    assert nodes_outside_collective(hung(["n1", "n2", "n3"], odd=()).rank_groups) is None
    assert failed_nodes(Verdict.STALLED, report(Checklist(Verdict.STALLED))) == ((), "")
    # A hang that is no failure of the policy's kind names nothing (CRASHED with rank groups).
    assert failed_nodes(Verdict.CRASHED, report(hung(["n1", "n2"], odd=(1,)))) == ((), "")


def test_a_node_failure_names_the_nodes_slurm_holds_out_of_service_else_every_node_of_the_job():
    def node_fail(**facts) -> RunReport:
        scheduler = SchedulerFacts("slurm", {"node_list": "n[1-2]", **facts}, nodes=("n[1-2]",),
                                   failed_nodes=tuple(facts["failed_nodes"] or ()))
        return report(Checklist(Verdict.NODE_FAIL, scheduler=scheduler))
    assert failed_nodes(Verdict.NODE_FAIL, node_fail(failed_nodes=["n2"])) == (("n2",), "it failed the run before")
    assert failed_nodes(Verdict.NODE_FAIL, node_fail(failed_nodes=None)) == (("n[1-2]",), "it failed the run before")
    assert failed_nodes(Verdict.PREEMPTED, node_fail(failed_nodes=["n2"])) == ((), "")
    # sinfo -N lists a node once per partition; "*" is a node that does not respond.
    out = "n1 idle\nn1 idle\nn2 down\nn2 down\nn3 idle*\nn4 drng\nn5 mix\nn6 alloc\n"
    assert parse_failed_nodes(out, 0) == ("n2", "n3", "n4")
    assert parse_failed_nodes(out, 1) == ()


def test_a_programs_end_waits_for_the_schedulers_word_on_how_the_job_ended():
    """CRASHED (the program killed by Slurm's SIGTERM) while Slurm still says the job runs: not
    acted on until Slurm says how the job ended (NODE FAIL names the node to exclude), or
    SCHEDULER_SETTLE_S passed."""
    launch = LaunchRecord("r1", pid=5, pgid=5, start_ticks=None, start_time=0.0, argv=["x"])

    def seen(active: bool) -> RunReport:
        cl = Checklist(Verdict.CRASHED, scheduler=SchedulerFacts("slurm", {"node_list": "n[1-2]", "active": active},
                                                                 active=active, nodes=("n[1-2]",)))
        return RunReport(0.0, "p", "local", "/r", cl, launch=launch)
    crashed = VerdictChange("p", "r1", 100.0, "CRASHED", "RUNNING", "killed by SIGTERM")
    assert job_still_ending(seen(True), crashed, 101.0)
    assert not job_still_ending(seen(False), crashed, 101.0)
    assert not job_still_ending(seen(True), crashed, 100.0 + SCHEDULER_SETTLE_S)
    assert not job_still_ending(seen(True), replace(crashed, state="NODE FAIL"), 101.0)
    assert not job_still_ending(seen(True), replace(crashed, run_id="r0"), 101.0)   # another run's report
    assert not job_still_ending(report(Checklist(Verdict.CRASHED)), crashed, 101.0)   # no scheduler
