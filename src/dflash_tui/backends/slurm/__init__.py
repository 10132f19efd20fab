"""The Slurm backend, whole: a run is a job on a Slurm cluster.

- launcher.py: `SlurmLauncher`, which submits, observes, finds alive, judges and cancels a run's job;
- spec.py: the profile's Slurm keys (`KEYS`, handed to config's loader) and their checks;
- script.py: the job body (srun, one task per node); commands.py: the scheduler's commands over a
  Target; job.py: their answers parsed;
- evidence.py: what it observes beside the run dir (`Evidence.scheduler`);
- verdict.py: the job's states beside the evidence-based verdicts.

Nothing outside backends/ imports this package (tests/test_boundaries.py)."""
