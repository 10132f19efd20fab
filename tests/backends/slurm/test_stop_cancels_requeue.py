"""A person's stop under Slurm is never undone by the recovery, against the real daemons: a job
whose program crashes is planned for a requeue; a `--stop` while the requeue waits out its
backoff cancels it (recorded, said in the stop's JSON), and no new job is submitted; a `--stop`
of the requeued job while Slurm still holds it queued cancels that job and disarms the run, so
the watcher does not submit another."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import SLURM_JSON
from tests.recording.test_daemon import start_watcher
from tests.recording.recovery.test_recovery import states, wait_until
from tests.backends.slurm.test_recovery import job_id, recovery, stop_watcher, write_config
from tests.backends.slurm.test_runs import slurm_env  # noqa: F401  (fixture)
from tests.support.slurm import WIDE, slurm_cluster  # noqa: F401  (fixture)
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(150)

# Two steps, then the program fails (exit 3): CRASHED, which the policy restarts.
CRASH = ["sh", "-c", 'echo "step 1/9"; sleep 0.5; echo "step 2/9"; sleep 0.5; echo "boom" >&2; exit 3']


def squeue_state(cluster, job: str) -> str:
    return cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()


def test_a_stop_while_the_requeue_waits_cancels_it_and_no_job_is_submitted(tmp_path, slurm_cluster):
    cfg = write_config(tmp_path, command=CRASH, backoff_s=12, on=("CRASHED",))
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        first_job = job_id(tmp_path)
        wait_until(lambda: any(a.action == "planned" for a in recovery(tmp_path)), 60,
                   lambda: (states(tmp_path), recovery(tmp_path)))
        res = cli(tmp_path, "--config", str(cfg), "--stop", "--json")
        doc = json.loads(res.stdout)
        assert res.returncode == 0, (res.returncode, res.stderr)
        assert doc["recovery"]["state"] == "cancelled", doc["recovery"]
        assert doc["recovery"]["reason"].startswith("restart cancelled by "), doc["recovery"]
        time.sleep(12 + 4)   # past the backoff and a few of the watcher's ticks
    finally:
        err = stop_watcher(w, slurm_cluster)
    assert job_id(tmp_path) == first_job, "a job was submitted after the stop"
    acts = recovery(tmp_path)
    assert [(a.action, a.run_id) for a in acts] == [("planned", first), ("cancelled", first)], (acts, err)
    assert acts[-1].detail["was"] == "planned"


def test_a_stop_of_the_requeued_job_while_slurm_holds_it_queued_disarms_the_run(tmp_path, slurm_cluster):
    """The relaunch is submitted on a partition whose nodes are all held by another job, so the
    new job waits in the queue (PENDING) when the person stops it."""
    cfg = write_config(tmp_path, command=CRASH, backoff_s=0, on=("CRASHED",), partition=WIDE, nodes=2)
    w = start_watcher(tmp_path, cfg)
    blocker = ""
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        first_job = job_id(tmp_path)
        wait_until(lambda: squeue_state(slurm_cluster, first_job) == "RUNNING", 40, lambda: states(tmp_path))
        # Queued behind the first job: it takes both nodes as soon as the first one ends.
        blocker = slurm_cluster.run("sbatch", "--parsable", "-p", WIDE, "-N2", "--exclusive", "-o", "/dev/null",
                                    "--wrap", "sleep 60").stdout.strip().split(";")[0]
        wait_until(lambda: any(a.action == "launched" for a in recovery(tmp_path)), 60,
                   lambda: (states(tmp_path), recovery(tmp_path)))
        second_job = job_id(tmp_path)
        assert second_job != first_job
        wait_until(lambda: squeue_state(slurm_cluster, second_job) == "PENDING", 20,
                   lambda: squeue_state(slurm_cluster, second_job))
        res = cli(tmp_path, "--config", str(cfg), "--stop", "--json", timeout=60)
        assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
        wait_until(lambda: squeue_state(slurm_cluster, second_job) == "", 20,
                   lambda: squeue_state(slurm_cluster, second_job))
        slurm_cluster.run("scancel", blocker, check=False)
        time.sleep(6)       # the nodes free again, a few of the watcher's ticks: no further job
        third = json.loads((tmp_path / "p" / SLURM_JSON).read_text())["job_id"]
    finally:
        if blocker:
            slurm_cluster.run("scancel", blocker, check=False)
        err = stop_watcher(w, slurm_cluster)
    assert third == second_job, "the watcher submitted another job after the person's stop"
    acts = recovery(tmp_path)
    assert [a.action for a in acts] == ["planned", "launching", "launched", "cancelled"], (acts, err)
    assert acts[-1].run_id != first and acts[-1].detail["by"] in acts[-1].detail["reason"], acts
    assert all(a.action != "planned" or a.run_id == first for a in acts), acts
