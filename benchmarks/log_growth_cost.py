"""What the wrapper's log_growth sampler costs the target, side by side in one run.

Runs the real wrapper (run/wrapper.py render_wrapper) around a program that prints a step
line every 0.1 s for SECONDS, and the same wrapper with the sampler's block taken out, and
compares the CPU seconds of each run's processes (the wrapper, the program, the sampler and its
ls/sleep children: this process is their subreaper, so the double-forked sampler is counted
too; getrusage of the reaped children). Also the size log_growth reached (at most
LOG_GROWTH_KEEP lines).

`.venv/bin/python benchmarks/log_growth_cost.py [SECONDS]` (default 20)
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from dflash_tui.contract.rundir import LOG_GROWTH, LOG_GROWTH_KEEP
from dflash_tui.run.wrapper import render_wrapper

PROGRAM = ("import sys, time\nfor i in range(int(float(sys.argv[1]) * 10)):\n"
           "    time.sleep(0.1); print(f'step {i} loss 0.5', flush=True)\n")
PR_SET_CHILD_SUBREAPER = 36


def reap_all() -> None:
    """Wait for every child, the orphans this subreaper adopted included (the sampler)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def one_run(tmp: Path, name: str, seconds: float, sampler: bool) -> tuple[float, int]:
    run = tmp / name
    run.mkdir()
    prog = tmp / "prog.py"
    prog.write_text(PROGRAM)
    text = render_wrapper(str(run), name, [sys.executable, str(prog), str(seconds)])
    if not sampler:
        text = re.sub(r"\nGROWTH=.*?\nfi\n", "\n", text, count=1, flags=re.S)
        assert LOG_GROWTH not in text.split("# 3. the trainer")[1]
    (run / "launch.sh").write_text(text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.Popen(["sh", str(run / "launch.sh"), name])
    reap_all()          # the wrapper, then the sampler within one sample of it
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    growth = run / LOG_GROWTH
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, growth.stat().st_size if growth.exists() else 0


def main() -> None:
    # Orphans (the double-forked sampler) become this process's children: their CPU is counted.
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed: Linux only")
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        without, _ = one_run(tmp, "without", seconds, sampler=False)
        with_, size = one_run(tmp, "with", seconds, sampler=True)
    print(f"| run of {seconds:g} s, a step line every 0.1 s | CPU s | CPU s per minute of run |")
    print("| --- | ---: | ---: |")
    print(f"| wrapper + program, no sampler | {without:.2f} | {without / seconds * 60:.2f} |")
    print(f"| wrapper + program + log_growth sampler | {with_:.2f} | {with_ / seconds * 60:.2f} |")
    print(f"\nsampler: {with_ - without:+.2f} CPU s over {seconds:g} s "
          f"({(with_ - without) / seconds * 100:.2f} % of one core); log_growth {size} bytes "
          f"(at most {LOG_GROWTH_KEEP} lines)")


if __name__ == "__main__":
    main()
