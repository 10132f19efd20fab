"""What the job runs: launch.sh (run/wrapper.py) is the batch script itself, and its argv is
the program, or, on several nodes, `srun` starting one task per node with the environment
torchrun would give each worker, taken from Slurm's.

The wrapper runs on the job's first node (the batch host), writes launch.json, train.log and
exit.json into the shared run dir as on one host; srun's tasks are rank 0..N-1, each appending
its output to its own log in the shared run dir (rank 0 train.log, rank R train.rankR.log: the
contract's per-rank names), so a trainer that writes its log itself finds it is its stdout.
"""

from __future__ import annotations

from typing import Sequence

from ...contract.rundir import TRAIN_LOG, rank_file

# One srun task: the torch.distributed environment from Slurm's, then the program. The
# rendezvous is the first node of the job's node list, at its NodeAddr (the address the nodes
# reach each other at; Slurm's default is the node name), on a port derived from the job id so
# two jobs sharing a node do not collide; a profile's environment may set MASTER_PORT itself.
TASK_SCRIPT = r"""first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node -o "$first" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1)
MASTER_ADDR=${addr:-$first}
MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
RANK=$SLURM_PROCID
WORLD_SIZE=$SLURM_NTASKS
LOCAL_RANK=${SLURM_LOCALID:-0}
LOCAL_WORLD_SIZE=1
GROUP_RANK=$SLURM_NODEID
PET_NNODES=$SLURM_NNODES
PET_NODE_RANK=$SLURM_NODEID
PET_NPROC_PER_NODE=1
PET_MASTER_ADDR=$MASTER_ADDR
PET_MASTER_PORT=$MASTER_PORT
DFLASH_NODE=${SLURMD_NODENAME:-$(hostname)}
DFLASH_NODE_RANK=$SLURM_NODEID
DFLASH_NNODES=$SLURM_NNODES
export MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK PET_NNODES \
  PET_NODE_RANK PET_NPROC_PER_NODE PET_MASTER_ADDR PET_MASTER_PORT DFLASH_NODE DFLASH_NODE_RANK DFLASH_NNODES
if [ "$RANK" -gt 0 ]; then log=""" + rank_file(TRAIN_LOG, 1).replace("1", "$RANK", 1) + r"""; else log=""" + TRAIN_LOG + r"""; fi
exec >>"$DFLASH_RUN_DIR/$log" 2>&1
exec "$@"
"""
TASK_NAME = "dflash-slurm-task"


def job_argv(program: Sequence[str], nodes: int) -> list[str]:
    """The argv launch.sh runs in the job: the program itself on one node; on several, srun
    with one task per node (a rank that fails ends the step: --kill-on-bad-exit)."""
    if nodes <= 1:
        return list(program)
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "sh", "-c", TASK_SCRIPT, TASK_NAME, *program]
