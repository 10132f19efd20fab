"""The test cluster itself (tests/support/slurm.py): both nodes take a task, and it leaves nothing."""

from __future__ import annotations

from tests.support.slurm import NODES, slurm_cluster  # noqa: F401  (the fixture)


def test_two_nodes_run_one_task_each(slurm_cluster):
    out = slurm_cluster.run("srun", "-N2", "--ntasks-per-node=1", "sh", "-c",
                            'echo "$SLURM_PROCID $SLURMD_NODENAME"', timeout=60).stdout.split("\n")
    assert sorted(line for line in out if line) == ["0 n1", "1 n2"]
    assert slurm_cluster.run("sacct", check=False).returncode != 0   # no accounting here
