"""Runs on a Slurm cluster: the profile's scheduler settings (spec), the job body (script), the
scheduler's commands over a Target (commands) and its answers parsed (job). The backend that
submits, watches and cancels a run's job is backends/slurm.py; the verdict rules for the job's
states are run/verdict/slurm_job.py's."""
