"""Per-poll cost of the verdict's evidence: today's poll beside the poll with the new evidence.

    .venv/bin/python benchmarks/verdict_poll_cost.py [--polls 300] [--append]

Launches a real run through launch.sh (tests/programs/print_loop.py, printing a step every
0.1 s, so train.log grows between polls), then, alternating in one loop on one agent:

  (old) the poll before this change, op for op: now, stat of 7 run files, reads of launch.sh's
        marker line and launch.json, pid_info of the wrapper;
  (new) `observe.gather(..., tracker=...)`: now, stat of 8 run files (events.jsonl too), the
        same record reads, proc_tree of the wrapper (CPU, states, threads of the whole tree)
        instead of pid_info, and the log's new bytes (parsed for steps), plus free disk space
        every 10 s.

Measured per poll: wall time at the client, and the agent's own CPU time (utime+stime of the
agent process from /proc, before and after each way's polls). The target is this machine
(LocalTarget: the agent is a local python3 process), so the numbers are the agent's work, not
the network's. Prints medians and ratios; --append writes the section into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import posixpath
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.harness import proc_cpu_s, replace_section  # noqa: E402

from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.contract.rundir import (EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, STATUS_JSON,  # noqa: E402
                                        STOP_JSON, TRAIN_LOG)
from dflash_tui.remote.local import LocalTarget  # noqa: E402
from dflash_tui.run.evidence.activity import ProgressTracker  # noqa: E402
from dflash_tui.run.evidence.observe import gather  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402

HEADING = "## run: per-poll cost of the verdict's evidence (benchmarks/verdict_poll_cost.py)"
OLD_FILES = (LAUNCH_SH, LAUNCH_JSON, LAUNCH_OUT, TRAIN_LOG, STATUS_JSON, EXIT_JSON, STOP_JSON)


async def old_poll(ops, run_dir: str, pid: int) -> None:
    """The poll as observe.gather made it before: records and pid_info, no tree, no log read."""
    paths = [posixpath.join(run_dir, n) for n in OLD_FILES]
    await asyncio.gather(ops.now(), ops.stat(paths))
    await asyncio.gather(ops.read(paths[0], 0, 512), ops.read(paths[1], 0, 256 << 10))
    await ops.pid_info([pid])


async def measure(polls: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dflash-verdictcost-"))
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    profile = Profile(name="bench", run_dir=str(work / "run"), python=sys.executable,
                      command=(sys.executable, str(ROOT / "tests" / "programs" / "print_loop.py"), "1000000", "0.1"),
                      min_free_gb=0.0)
    session = Session(profile, targets=(LocalTarget(), LocalTarget()))
    try:
        await session.launch(preflight=False)
        ops = await session.ops()
        ev = await gather(ops, profile.run_dir)
        pid, agent_pid = ev.launch.pid, ops.info["pid"]
        tracker = ProgressTracker(second_sample=False)
        await gather(ops, profile.run_dir, tracker=tracker)
        res = {"old": [], "new": [], "old_cpu": 0.0, "new_cpu": 0.0, "load0": os.getloadavg()[0]}
        for i in range(polls):
            # Alternate which goes first, so neither always meets a cold or a warm cache.
            for way in (("old", "new") if i % 2 == 0 else ("new", "old")):
                c0, t0 = proc_cpu_s(agent_pid), time.perf_counter()
                if way == "old":
                    await old_poll(ops, profile.run_dir, pid)
                else:
                    ev = await gather(ops, profile.run_dir, tracker=tracker)
                res[way].append(time.perf_counter() - t0)
                res[f"{way}_cpu"] += proc_cpu_s(agent_pid) - c0
            await asyncio.sleep(0.02)
        res["load1"] = os.getloadavg()[0]
        res["step"] = ev.activity.step if ev.activity else None
        res["procs"] = ev.tree.procs if ev.tree else None
        return res
    finally:
        await session.stop(grace_s=1.0)
        await session.close()


def report(res: dict, command: str, polls: int) -> str:
    ms = lambda s: f"{s * 1e3:.2f} ms"   # noqa: E731
    o, n = statistics.median(res["old"]), statistics.median(res["new"])
    oc, nc = res["old_cpu"] / polls, res["new_cpu"] / polls
    return "\n".join([
        HEADING, "",
        f"Command: `{command}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores shared with other jobs (load "
        f"{res['load0']:.1f} before, {res['load1']:.1f} after), {platform.python_implementation()} "
        f"{platform.python_version()}; agent on this machine (LocalTarget). The run: "
        f"tests/programs/print_loop.py through launch.sh, a step line every 0.1 s ({res['procs']} "
        f"processes in its tree; the last poll read step {res['step']}). {polls} polls of each way, "
        "alternating in one loop.", "",
        "| way | median wall / poll | agent CPU / poll |",
        "| --- | ---: | ---: |",
        f"| old: now + stat (7 files) + 2 record reads + pid_info | {ms(o)} | {ms(oc)} |",
        f"| new: gather with the tracker (stat of 8 files, proc_tree, the log's new bytes parsed, free disk every 10 s) | {ms(n)} | {ms(nc)} |",
        f"| ratio new / old | {n / o:.2f}x | {nc / oc if oc else float('nan'):.2f}x |", "",
        f"Budget: at most 2x. Wall: {'met' if n / o <= 2 else 'NOT met'}; agent CPU: "
        f"{'met' if oc and nc / oc <= 2 else 'NOT met'}. Agent CPU is counted in clock ticks "
        f"(1/{os.sysconf('SC_CLK_TCK')} s) summed over all polls, so per-poll values are averages.", "",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--polls", type=int, default=300)
    ap.add_argument("--append", action="store_true", help="write into benchmarks/RESULTS.md")
    args = ap.parse_args()
    res = asyncio.run(measure(args.polls))
    command = ".venv/bin/python benchmarks/verdict_poll_cost.py " + " ".join(sys.argv[1:])
    section = report(res, command.strip(), args.polls)
    print(section)
    if args.append:
        replace_section(HEADING, section)


if __name__ == "__main__":
    main()
