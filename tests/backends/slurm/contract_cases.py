"""The Slurm backend's part of the launcher contract (tests/run/launch/test_launcher_contract.py):
Slurm's own commands (sbatch, squeue, scontrol) against a controller nobody answers for, on this
machine as the login host; a Slurm cluster's runs are this folder's other modules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dflash_tui.backends import launcher_for
from dflash_tui.backends.slurm.commands import sbatch_argv
from dflash_tui.backends.slurm.launcher import SlurmLauncher
from dflash_tui.contract.rundir import SLURM_JSON, SlurmJobRecord, to_json
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.launch.launch import launch_run
from tests.support.launcher_contract import ContractCase, own_profile
from tests.support.ports import free_port


def unanswered_slurm(tmp_path: Path, monkeypatch) -> None:
    """Slurm's client commands, pointed at a controller on a port nobody listens on: each of them
    fails in a second or two with its own words ("Unable to contact slurm controller")."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort={free_port()}\n"
                    "AuthType=auth/none\nMessageTimeout=2\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
                    "PartitionName=debug Nodes=n1 Default=YES State=UP\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))


def _slurm(profile, request, tmp_path, monkeypatch):
    """This machine as a Slurm login host whose controller does not answer."""
    unanswered_slurm(tmp_path, monkeypatch)
    return launcher_for(replace(profile, scheduler=own_profile(SLURM).scheduler),
                        targets=(LocalTarget(), LocalTarget()))


def _local_process(profile, request, tmp_path, monkeypatch):
    """No job runs here: the live run is a local process whose run dir names a job."""
    return launcher_for(profile, targets=(LocalTarget(), LocalTarget()))


def _names_a_job(run_dir: Path, run_id: str) -> None:
    (run_dir / SLURM_JSON).write_text(to_json(SlurmJobRecord(run_id=run_id, job_id="4242", submit_time=0.0)) + "\n")


async def _sbatch_is_asked_to_exclude(launcher, ops, run_dir, placed):
    argv = sbatch_argv(launcher.spec, str(run_dir), "dflash-run", placed.placement)
    assert f"--exclude={','.join(placed.placement.exclude)}" in argv, argv
    out = await launch_run(launcher.profile, launcher, ops, placed)
    assert out.attempt.error.startswith("sbatch refused the job: "), out.attempt


SLURM = ContractCase(SlurmLauncher, config='scheduler = "slurm"\nhost = "login1"\nrun_dir = "/shared/p"',
                     bad_field=("port", 0), real=_slurm, live=_local_process, names_its_job=_names_a_job,
                     carries_out=_sbatch_is_asked_to_exclude)
CASES = (SLURM,)
