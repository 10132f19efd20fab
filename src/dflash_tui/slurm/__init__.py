"""Runs on a Slurm cluster: the profile's scheduler settings (spec), the job body (script), the
scheduler's commands over a Target (commands), its answers parsed (job), and the launcher that
submits, watches and cancels one run's job (launcher). The verdict rules for the job's states
are run/slurm_verdict.py's."""
