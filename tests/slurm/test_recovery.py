"""The watcher's recovery under Slurm, against the real daemons (tests/support/slurm.py): a job
whose node is set down (NODE FAIL) is requeued as a new job that excludes that node (sbatch
--exclude, shown by scontrol as ExcNodeList), says so in the recovery's record, and finishes."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import SLURM_JSON
from dflash_tui.recording.recovery_log import RecoveryLog
from tests.recording.test_daemon import start_watcher
from tests.recording.test_recovery import states, wait_until
from tests.slurm.test_runs import cancel_jobs_on_the_two_nodes, sh_steps, slurm_env  # noqa: F401  (fixture)
from tests.support.slurm import SlurmCluster, slurm_cluster  # noqa: F401  (fixture)
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(120)


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[profile.p]\nscheduler = "slurm"\nrun_dir = "{tmp_path / "p"}"\ncommand = {json.dumps(sh_steps(16, 0.5))}\n'
        'launch_deadline_s = 5\nstall_after_s = 60\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        '[recover]\non = ["NODE FAIL", "PREEMPTED"]\nmax_restarts = 2\nbackoff_s = 3\n')
    return cfg


def recovery(tmp_path: Path) -> list:
    path = tmp_path / "watch.sqlite3"
    if not path.exists():
        return []
    with RecoveryLog(path, readonly=True) as rl:
        return rl.actions("p")


def job_id(tmp_path: Path) -> str:
    return json.loads((tmp_path / "p" / SLURM_JSON).read_text())["job_id"]


def test_a_job_on_a_node_set_down_is_requeued_excluding_that_node_and_finishes(tmp_path, slurm_cluster):
    cfg = write_config(tmp_path)
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        first_job = job_id(tmp_path)
        node = wait_until(lambda: json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)
                          .get("slurm", {}).get("node_list"), 40, lambda: states(tmp_path))
        try:
            slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=test")
            wait_until(lambda: any(a.action == "planned" for a in recovery(tmp_path)), 40, lambda: states(tmp_path))
        finally:
            # The node is back before the relaunch (the backoff): only the exclusion keeps the new job off it.
            slurm_cluster.resume_nodes()
        wait_until(lambda: ("FINISHED", states(tmp_path)[-1][1]) == states(tmp_path)[-1]
                   and states(tmp_path)[-1][1] != first, 60, lambda: (states(tmp_path), recovery(tmp_path)))
        second_job = job_id(tmp_path)
        shown = slurm_cluster.run("scontrol", "show", "job", second_job, check=False).stdout
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
        cancel_jobs_on_the_two_nodes(slurm_cluster)
    assert ("NODE FAIL", first) in states(tmp_path)
    acts = recovery(tmp_path)
    assert [a.action for a in acts] == ["planned", "launching", "launched"], (acts, err)
    assert all(a.detail.get("exclude") == [node] for a in acts), acts
    assert second_job != first_job
    if shown:   # Slurm may have forgotten the finished job already (MinJobAge)
        assert f"ExcNodeList={node}" in shown, shown
        assert re.search(r"^\s+NodeList=(\S+)", shown, re.M).group(1) != node, shown
