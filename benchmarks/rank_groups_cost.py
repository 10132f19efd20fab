"""What "many ranks as one picture" costs per poll at 1,024 ranks x 20 threads (issue 37).

Generated evidence, the shape of a large data-parallel run: every rank's main thread in
all_reduce but rank 777's (on a queue), and 19 helper threads per rank (a pin-memory thread, a
loader's workers' queues, tqdm's monitor, NCCL/gloo watchdogs), each at a place of its own
kind. Timed, each the median CPU time of --repeat runs on this machine:

- `group_ranks` over the 20,480 judged threads (the bar: at most 50 ms);
- `stragglers(paces(...))` over the 1,024 ranks' reports and wait shares;
- `rank_rows` of the report (the Ranks view's rows, built only while its tab is shown);
- the whole `evaluate` of the 1,024 probe reports: as it is (RUNNING: rank 777's wait is young),
  and 120 s later with every report still beating and no step since (STALLED: the hang
  diagnosis too).

With `--before DIR` (a checkout's root, e.g. `git archive <commit> src | tar -x -C DIR`) each
figure is also taken, in a child process right before, with DIR/src's code: the table shows
both side by side.

`.venv/bin/python benchmarks/rank_groups_cost.py [--repeat 15] [--before DIR] [--append]`
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `--src DIR` (the child of `--before`): time DIR/src's code instead of this tree's.
_SRC = Path(sys.argv[sys.argv.index("--src") + 1]) if "--src" in sys.argv else ROOT
sys.path.insert(0, str(_SRC / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks.harness import replace_section  # noqa: E402
from dflash_tui.contract.rundir import ProbeThread  # noqa: E402
from dflash_tui.run.evidence.activity import WaitShare  # noqa: E402
from dflash_tui.run.verdict.health import evaluate  # noqa: E402
from dflash_tui.run.verdict.rank_groups import group_ranks  # noqa: E402
from dflash_tui.run.verdict.rank_rows import rank_rows  # noqa: E402
from dflash_tui.run.verdict.stragglers import paces, stragglers  # noqa: E402
from tests.support import scenarios as R  # noqa: E402

N, THREADS, ODD = 1024, 20, 777
HEADING = "## verdict: rank groups, stragglers and the Ranks rows at 1,024 ranks x 20 threads (benchmarks/rank_groups_cost.py; issue 37)"


def helpers() -> list[ProbeThread]:
    kinds = [["/usr/lib/python3.11/threading.py:331 wait", "/usr/lib/python3.11/queue.py:171 get",
              "/venv/torch/utils/data/_utils/pin_memory.py:52 do_one_step"],
             ["/usr/lib/python3.11/threading.py:331 wait", "/venv/tqdm/_monitor.py:60 run"],
             ["/usr/lib/python3.11/selectors.py:415 select", "/venv/torch/distributed/elastic/agent.py:30 watch"]]
    return [ProbeThread(name=f"helper-{i}", ident=100 + i, daemon=True, frames=list(kinds[i % 3]),
                        stack_since=R.T0 - 600, frames_since=R.T0 - 600) for i in range(THREADS - 1)]


def median_ms(fn, repeat: int) -> float:
    """The median CPU time of one call (this process's: on a shared 2-core machine, wall time
    also counts the waits for a core, which is the other tenants' load, not this code)."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def measure(repeat: int) -> dict[str, float]:
    """Each figure's median in ms, by row name."""
    probes = [dataclasses.replace(p, threads=[p.threads[0], *helpers()]) for p in R.rank_probes(N, stuck=ODD)]
    waits = {p.pid: WaitShare(60, 40, "all_reduce") for p in probes}
    ev = dataclasses.replace(R._running_evidence(), status=None, probes=probes,
                             activity=dataclasses.replace(R.ranks(2).activity, waits=waits))
    checklist = evaluate(ev)
    threads = [t for t in checklist.threads if t.pid is not None]
    assert len(threads) == N * THREADS, len(threads)
    groups = group_ranks(threads)
    assert groups[0].ranks == (ODD,), groups[0]
    report = R.report_of(ev)
    # The same run 120 s on: every rank's probe still beats, no step since: STALLED, diagnosed.
    later = dataclasses.replace(ev, now=ev.now + 120, probes=[dataclasses.replace(p, time=p.time + 120) for p in probes])
    stalled = evaluate(later)
    assert stalled.verdict.value == "STALLED" and "rank 777" in stalled.summary, stalled.summary
    return {
        f"`group_ranks`, {len(threads):,} threads of {N:,} ranks": median_ms(lambda: group_ranks(threads), repeat),
        f"`stragglers(paces(...))`, {N:,} ranks": median_ms(
            lambda: stragglers(paces([("", p) for p in probes], {("", k): w for k, w in waits.items()})), repeat),
        f"`rank_rows` (the Ranks view), {N:,} rows": median_ms(lambda: rank_rows(report), repeat),
        f"whole `evaluate` of {N:,} probe reports, RUNNING": median_ms(lambda: evaluate(ev), repeat),
        f"whole `evaluate` of {N:,} probe reports, STALLED (with the hang diagnosis)":
            median_ms(lambda: evaluate(later), repeat),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--before", metavar="DIR", help="also time DIR/src's code (a checkout of the code before)")
    ap.add_argument("--src", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--append", action="store_true", help="write the section into benchmarks/RESULTS.md")
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure(args.repeat)))
        return
    before: dict[str, float] = {}
    if args.before:
        child = subprocess.run([sys.executable, __file__, "--src", args.before, "--json", "--repeat", str(args.repeat)],
                               check=True, capture_output=True, text=True)
        before = json.loads(child.stdout)
    rows = measure(args.repeat)
    cpu = os.cpu_count()
    load = os.getloadavg()[0]
    command = "`.venv/bin/python benchmarks/rank_groups_cost.py --repeat {}{} --append`".format(
        args.repeat, f" --before {args.before}" if args.before else "")
    lines = [HEADING, "", f"{command} on this machine ({cpu} cores, load average {load:.1f} when it ran); "
             "median CPU time of one call" + (f"; before: the code under {args.before}, timed just before in a "
                                                "child process" if before else "") + ".", ""]
    if before:
        lines += ["| what | before | now |", "|---|---|---|"]
        lines += [f"| {k} | {before[k]:.1f} ms | {v:.1f} ms |" if k in before else f"| {k} | - | {v:.1f} ms |"
                  for k, v in rows.items()]
    else:
        lines += ["| what | median |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} ms |" for k, v in rows.items()]
    bar = rows[next(iter(rows))]
    lines += ["", f"Grouping: {bar:.1f} ms against the bar of 50 ms ({'met' if bar <= 50 else 'NOT met'}).", ""]
    text = "\n".join(lines)
    print(text)
    if args.append:
        replace_section(HEADING, text)


if __name__ == "__main__":
    main()
