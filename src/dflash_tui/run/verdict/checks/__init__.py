"""The checklist's checks, one builder each (by what they look at), and the words they share;
run/verdict/health.py's ladder decides the verdict from them.

Each builder reads Evidence (or a part of it) and returns a Check, or the words of one; none
decides a verdict. A check's id and label are its CheckId (checklist.py). The words (ages,
durations, CPU use) are dflash_tui/words.py's.

- launch.py     the launch command, launch.json, the log, the process; why a launch never ran
- progress.py   any program's progress and silence, the silence limit
- trainer.py    the bundled trainer's status.json: heartbeat, threads, steps, errors
- ended.py      exit, traceback, stop, checkpoint, the first failure
- machine.py    CPU, disk, the probe's heartbeats and files, the stacks
- gpus.py       the "gpus" check
- loss.py       the "loss" check: the divergence watch's finding
"""
