"""The agent's walk of a 64-rank process tree: the code before beside this tree's, one run.

    .venv/bin/python benchmarks/agent_walk_cost.py [--rounds 300] [--ranks 64] [--before main] [--append]

Starts a tree like the dashboard benchmark's (benchmarks/dashboard_cost.py --ranks 64): a
launcher with --ranks child processes, each with 3 extra threads sleeping in loops, plus one
process whose worker thread (not its main thread) forks a `sleep`, so a walk that reads only
the main threads' children files would miss it. Then, each round, in alternating order, walks
it four ways:

  before   the function at --before (`git show REF:src/dflash_tui/remote/agent_server.py`,
           written to a temporary module): every file opened by path each walk, the task
           directory listed for every process of more than one thread;
  by path  this tree's module with its descriptor budget at 0: the same walk by path, but one
           read a file and stat parsed from bytes (what the one-read idea is worth alone);
  tids by path  the brief's first idea, in this file (TidsByPath): by path, one read a file,
           the thread ids kept per (pid, start time) and the task directory listed again only
           when the count changed or a kept thread's children file would not open;
  held     this tree's module as the agent runs it: the files held open from one walk to the
           next, the task directory listed again only when the threads changed.

Measured: the thread CPU time (time.thread_time) of each walk; prints median and p90 per way
and the ratios. Every round checks that the four records agree (procs, threads, states,
main_pid, main_argv, the root, truncated; states with R and S counted together and CPU
seconds within 0.1 s, the walks being moments apart) and that the worker thread's child is in them; a disagreement ends the run with its
round and both records.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dflash_tui.watch import STEADY_INTERVAL_S  # noqa: E402  (the pace a steady run is looked at)

from benchmarks.harness import load_module, replace_section, source_at  # noqa: E402

HEADING = "## remote: the agent's walk of a 64-rank process tree, before and after holding its files (benchmarks/agent_walk_cost.py; issue 37)"
SOURCE = ROOT / "src" / "dflash_tui" / "remote" / "agent_server.py"

RANK = ("import threading, time\n"
        "def helper():\n"
        "    while True:\n"
        "        time.sleep(0.5)\n"
        "for _ in range(3):\n"
        "    threading.Thread(target=helper, daemon=True).start()\n"
        "while True:\n"
        "    time.sleep(0.5)\n")
FORKER = ("import subprocess, threading, time\n"
          "def worker():\n"
          "    subprocess.Popen(['sleep', '3600'])\n"
          "    time.sleep(3600)\n"
          "threading.Thread(target=worker, daemon=True).start()\n"
          "time.sleep(3600)\n")
LAUNCHER = ("import subprocess, sys, time\n"
            "n, rank, forker = int(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
            "kids = [subprocess.Popen([sys.executable, '-S', '-c', rank]) for _ in range(n)]\n"
            "kids.append(subprocess.Popen([sys.executable, '-S', '-c', forker]))\n"
            "time.sleep(3600)\n")


class TidsByPath:
    """The idea held files won over, for the record: keep each process's thread ids (keyed by
    pid and start time) and, while stat's thread count is unchanged and every kept thread's
    children file opens, read those by path without listing the task directory."""

    def __init__(self, mod):
        self.mod, self.tids = mod, {}

    def op_proc_tree(self, pid: int) -> dict:
        m, kept = self.mod, {}
        walked, queue, seen = [], [pid], set()
        while queue and len(walked) < m.MAX_TREE:
            p = queue.pop(0)
            if p in seen:
                continue
            seen.add(p)
            stat_raw = m._proc_bytes("/proc/%d/stat" % p)
            if stat_raw is None:
                if p == pid:
                    break
                continue
            rest = stat_raw[stat_raw.rindex(b")") + 2:].split()
            threads, key = int(rest[17]), (p, int(rest[19]))
            kids = self._kids(p, threads, self.tids.get(key)) if threads > 1 else m._children_of(p, 1)
            if threads > 1:
                kept[key] = self._last
            walked.append((p, stat_raw, kids))
            queue.extend(kids)
        self.tids = kept
        base = "/proc/%d/" % pid
        main = walked[0][2][0] if walked and walked[0][2] else None
        return m.proc_tree_record(pid, walked, m._proc_bytes(base + "cmdline"), m._proc_bytes(base + "status"),
                                  m._proc_bytes("/proc/%d/cmdline" % main) if main else None,
                                  m._CLK_TCK, bool(queue), None)

    def _kids(self, p: int, threads: int, tids: list[str] | None) -> list[int]:
        for attempt in range(2):
            if tids is None or len(tids) != threads or attempt:
                try:
                    tids = os.listdir("/proc/%d/task" % p)
                except OSError:
                    return []
            kids, whole = [], True
            for tid in tids:
                raw = self.mod._proc_bytes("/proc/%d/task/%s/children" % (p, tid))
                if raw is None:
                    whole = False
                elif raw:
                    kids.extend(self.mod.parse_children(raw))
            if whole:
                break
        self._last = tids
        return kids


def comparable(rec: dict) -> dict:
    """What two walks moments apart must agree on: a sleeper that is running at one moment and
    asleep at the next counts as one either way (R and S together)."""
    states = dict(rec["states"])
    awake = states.pop("R", 0) + states.pop("S", 0)
    return {**{k: rec[k] for k in ("procs", "threads", "main_pid", "main_argv", "root", "truncated")},
            "states": states, "R+S": awake}


def forker_child(pid: int) -> int:
    """The `sleep` forked by the forker's worker thread, found from /proc (each thread's file)."""
    todo, found = [pid], None
    while todo:
        p = todo.pop()
        for tid in os.listdir(f"/proc/{p}/task"):
            kids = [int(x) for x in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            for k in kids:
                if Path(f"/proc/{k}/comm").read_text().strip() == "sleep":
                    assert tid != str(p), "the sleep should hang under the worker thread, not the main one"
                    found = k
            todo += kids
    return found


def start_tree(ranks: int) -> subprocess.Popen:
    tree = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(ranks), RANK, FORKER], start_new_session=True)
    want_procs, want_threads = 1 + ranks + 2, 1 + 4 * ranks + 2 + 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mod = sys.modules["walk_held"]
        rec = mod.op_proc_tree(tree.pid)
        if rec["procs"] == want_procs and rec["threads"] == want_threads:
            return tree
        time.sleep(0.2)
    raise SystemExit(f"the tree did not come up: {rec['procs']} processes, {rec['threads']} threads")


def measure(rounds: int, ranks: int, before: str, interval: float) -> dict:
    old_src = source_at(before, "src/dflash_tui/remote/agent_server.py")
    tmp = Path(tempfile.mkdtemp(prefix="dflash-walkcost-"))
    (tmp / "walk_before.py").write_text(old_src)
    ways = {"before": load_module(tmp / "walk_before.py", "walk_before"),
            "by path": load_module(SOURCE, "walk_path"),
            "tids by path": TidsByPath(load_module(SOURCE, "walk_tids")),
            "held": load_module(SOURCE, "walk_held")}
    sys.modules["walk_held"] = ways["held"]
    ways["by path"].FD_BUDGET = 0
    ways["tids by path"].mod.FD_BUDGET = 0
    load0 = os.getloadavg()
    tree = start_tree(ranks)
    try:
        sleeper = forker_child(tree.pid)
        assert sleeper, "no sleep under the forker's worker thread"
        times = {w: [] for w in ways}
        names = list(ways)
        for r in range(rounds):
            recs = {}
            for w in (names if r % 2 == 0 else names[::-1]):
                t = time.thread_time()
                recs[w] = ways[w].op_proc_tree(tree.pid)
                times[w].append(time.thread_time() - t)
            base = recs["before"]
            for w, rec in recs.items():
                if comparable(rec) != comparable(base) or abs(rec["cpu_s"] - base["cpu_s"]) > 0.1:
                    raise SystemExit(f"round {r}: '{w}' differs from 'before':\n{rec}\n{base}")
            if base["procs"] != 1 + ranks + 2:
                raise SystemExit(f"round {r}: {base['procs']} processes, the worker thread's child missed?")
            time.sleep(interval)
        held = ways["held"]
        return {"times": times, "load0": load0, "load1": os.getloadavg(), "procs": base["procs"],
                "threads": base["threads"], "fds": held._held_fds[0], "budget": held.FD_BUDGET}
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()


def pct(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))]


def report(res: dict, args: argparse.Namespace, command: str) -> str:
    t = res["times"]
    med = {w: statistics.median(v) * 1e3 for w, v in t.items()}
    p90 = {w: pct(v, 0.9) * 1e3 for w, v in t.items()}
    rows = "\n".join(f"| {w} | {med[w]:.2f} ms | {p90[w]:.2f} ms | {med[w] / med['before']:.2f}x |" for w in t)
    at_look = med["held"] / (STEADY_INTERVAL_S * 1000) * 100
    return (f"{HEADING}\n\n    {command}\n\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores shared with other jobs (load average "
            f"{res['load0'][0]:.1f} / {res['load0'][1]:.1f} / {res['load0'][2]:.1f} before, "
            f"{res['load1'][0]:.1f} after), CPython {platform.python_version()}, Linux {platform.release()}. "
            f"The tree: a launcher, {args.ranks} ranks of 4 threads, one process whose worker thread "
            f"forked a `sleep`: {res['procs']} processes, {res['threads']} threads. {args.rounds} rounds, "
            f"the four ways in alternating order, {args.interval * 1e3:.0f} ms between rounds; the "
            f"records agreed on every round. The held walk kept {res['fds']} descriptors open "
            f"(budget {res['budget']}).\n\n"
            f"| way | thread CPU a walk, median | p90 | of before (median) |\n| --- | ---: | ---: | ---: |\n"
            f"{rows}\n\n"
            f"At one look every {STEADY_INTERVAL_S:g} s (a steady run) the held walk is {at_look:.3f} % of a core, before "
            f"{med['before'] / (STEADY_INTERVAL_S * 1000) * 100:.3f} %.\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--before", default="main", help="the git ref whose agent_server.py is 'before'")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between rounds")
    ap.add_argument("--append", action="store_true", help="write the section into benchmarks/RESULTS.md")
    args = ap.parse_args()
    res = measure(args.rounds, args.ranks, args.before, args.interval)
    text = report(res, args, "benchmarks/agent_walk_cost.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.append:
        replace_section(HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
