"""One run, transport-agnostic, in rooms by job, bottom to top:

attempts, wrapper, eager   this machine's memory of what it sent; launch.sh; a gather helper
stacks/                    what a thread is doing, from its stack (pure)
evidence/                  what the run did, read through RemoteOps (Evidence)
verdict/                   Evidence -> Checklist (the ladder), the hang diagnosis, the report
launch/                    preflight, claim, launch, stop, canary; the Launcher seam
history.py                 the runs kept in history/, judged as they ended

tests/test_boundaries.py keeps each room importing only from the rooms below it.
"""
