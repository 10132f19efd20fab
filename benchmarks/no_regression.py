"""Time to verdict and the poll costs of this tree beside the trees that recorded RESULTS.md's
figures, in one run: each benchmark script runs from its old tree and from this one, in the
order old, new, new, old, and the table gives the medians of each side and their ratio.

    .venv/bin/python benchmarks/no_regression.py \\
        --tree time_to_verdict=/path/to/old --tree verdict_poll_cost=/path/to/old \\
        --tree poll_cost=/path/to/old [--append]

Each old tree is a `git worktree` of the revision whose figures RESULTS.md holds; its own copy of
the script runs (a script measures the code beside it: it puts its tree's src/ first on
sys.path). The figures read from each run are the rows the scripts print:
- time_to_verdict.py: the median ms of NEVER STARTED, LOG MISSING and CRASHED (launch through
  SSH + pct exec, verdict through the agent);
- verdict_poll_cost.py: wall and agent CPU per poll of `gather` (the verdict's evidence);
- poll_cost.py: median and client CPU per poll of (c), the persistent agent in the container,
  and the median of (d), ShellOps.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness import replace_section  # noqa: E402

HEADING = "## run + remote: no regression in time to verdict and poll cost, old trees beside this one (benchmarks/no_regression.py)"

# script -> (its arguments, [(figure name, row prefix, column index)]); columns split on "|"
BENCHES: dict[str, tuple[list[str], list[tuple[str, str, int]]]] = {
    "time_to_verdict": (["--reps", "7", "--incident-sleep", "0.5"], [
        ("NEVER STARTED, median ms", "| NEVER STARTED |", 3),
        ("LOG MISSING, median ms", "| LOG MISSING |", 3),
        ("CRASHED, median ms", "| CRASHED |", 3)]),
    "verdict_poll_cost": (["--polls", "1500"], [
        ("gather: wall ms / poll", "| new: gather", 2),
        ("gather: agent CPU ms / poll", "| new: gather", 3)]),
    "poll_cost": (["--polls-a", "2", "--polls-b", "2", "--polls-c", "1000", "--polls-d", "12"], [
        ("(c) agent: median ms / poll", "| (c) ", 3),
        ("(c) agent: client CPU ms / poll", "| (c) ", 6),
        ("(d) ShellOps: median ms / poll", "| (d) ", 3)]),
}
NUMBER = re.compile(r"([0-9][0-9,]*\.?[0-9]*)\s*ms")


def run_once(tree: Path, script: str, args: list[str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / f"{script}.py"), *args], cwd=tree,
                         capture_output=True, text=True, timeout=900)
    figures = {}
    for name, prefix, col in BENCHES[script][1]:
        row = next((line for line in out.stdout.splitlines() if line.startswith(prefix)), None)
        if row is None:
            sys.exit(f"no_regression: {tree}/benchmarks/{script}.py printed no row {prefix!r} "
                     f"(exit {out.returncode}): {(out.stderr or out.stdout)[-800:]}")
        m = NUMBER.search(row.split("|")[col])
        figures[name] = float(m.group(1).replace(",", ""))
    return figures


def measure(trees: dict[str, Path]) -> list[tuple[str, str, list[float], list[float]]]:
    rows = []
    for script, old in trees.items():
        args = BENCHES[script][0]
        sides = {"old": [], "new": []}
        for side in ("old", "new", "new", "old"):
            got = run_once(old if side == "old" else ROOT, script, args)
            sides[side].append(got)
            print(f"{script} {side}: {got}", flush=True)
        for name, _, _ in BENCHES[script][1]:
            rows.append((script, name, [g[name] for g in sides["old"]], [g[name] for g in sides["new"]]))
    return rows


def report(rows, trees: dict[str, Path], command: str, load: tuple[float, float]) -> str:
    revs = {s: subprocess.run(["git", "-C", str(t), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or str(t) for s, t in trees.items()}
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    lines = [HEADING, "", f"Command: `{command}`", "",
             f"Machine: {os.cpu_count()} shared CPU cores, load average {load[0]:.1f} before and {load[1]:.1f} "
             f"after. This tree: {head}. Each script ran from its old tree and from this one, old, new, new, "
             "old; the figure of a side is the mean of its two runs (each run's own median).", "",
             "| script (old tree) | figure | old runs | new runs | new / old |",
             "| --- | --- | ---: | ---: | ---: |"]
    for script, name, old, new in rows:
        o, n = statistics.fmean(old), statistics.fmean(new)
        lines.append(f"| {script} ({revs[script]}) | {name} | {' / '.join(f'{x:g}' for x in old)} | "
                     f"{' / '.join(f'{x:g}' for x in new)} | {n / o:.2f} |" if o else
                     f"| {script} ({revs[script]}) | {name} | {old} | {new} | - |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], metavar="SCRIPT=DIR",
                    help=f"the old tree for one of {', '.join(BENCHES)}")
    ap.add_argument("--append", action="store_true", help="write the section into benchmarks/RESULTS.md")
    args = ap.parse_args()
    trees = {}
    for item in args.tree:
        script, _, path = item.partition("=")
        if script not in BENCHES or not (Path(path) / "benchmarks" / f"{script}.py").is_file():
            sys.exit(f"no_regression: --tree {item!r}: expected SCRIPT=DIR with SCRIPT one of "
                     f"{', '.join(BENCHES)} and DIR a tree holding benchmarks/SCRIPT.py")
        trees[script] = Path(path).resolve()
    if not trees:
        sys.exit("no_regression: give at least one --tree SCRIPT=DIR")
    load0 = os.getloadavg()[0]
    rows = measure(trees)
    section = report(rows, trees, "python benchmarks/no_regression.py " + " ".join(sys.argv[1:]),
                     (load0, os.getloadavg()[0]))
    print(section)
    if args.append:
        replace_section(HEADING, section)


if __name__ == "__main__":
    main()
