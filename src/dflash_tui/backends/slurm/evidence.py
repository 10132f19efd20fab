"""What the Slurm backend observes beside the run dir: its slot in `Evidence.scheduler`."""

from __future__ import annotations

from dataclasses import dataclass

from ...contract.rundir import SlurmJobRecord
from ...run.evidence.observe import Evidence
from .job import SlurmJob


@dataclass
class SlurmEvidence:
    record: SlurmJobRecord | None = None   # slurm.json: the job the launch submitted
    problem: str | None = None             # why slurm.json names no job of this run dir
    job: SlurmJob | None = None            # the job as the scheduler describes it now
    out: str = ""                          # the tail of the job's own stdout/stderr (slurm.out)


def slurm_of(ev: Evidence) -> SlurmEvidence:
    """The Slurm part of `ev` (empty where the Slurm backend did not observe it)."""
    return ev.scheduler if isinstance(ev.scheduler, SlurmEvidence) else SlurmEvidence()
