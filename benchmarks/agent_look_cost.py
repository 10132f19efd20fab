"""The agent's answer to a steady look at a 64-rank run: the code before beside this tree's, one run.

    .venv/bin/python benchmarks/agent_look_cost.py [--rounds 100] [--ranks 64] [--before main] [--append]

Launches the dashboard benchmark's load (benchmarks/dashboard_cost.py --writer --rate 1000
--threads 16 --ranks N, detached and verified by a Session, as the dashboard's own runs are): N
rank processes, each under the run probe rewriting its report every second, a writer growing
train.log and events.jsonl. A real HostWatch polls it until steady and the look it sends the
agent (paths to stat, the reads of status.json and of this look's probe reports, the new bytes
of train.log and events.jsonl, the listing of the probe directory, the process tree) is kept.
Then, each round, in alternating order, the agent's answer to that same look as a planned look
(`op_observe`, the plan's next look) and its encoding into the answer line, two ways:

  before   the module at --before (`git show REF:src/dflash_tui/remote/agent_server.py`, written
           to a temporary module): listdir and stat_one per entry, json.dumps of the whole line;
  after    this tree's module as its Server sends it: the probe directory by scandir, each
           entry's readability kept per stat identity, the reads' base64 data spliced into the
           line unscanned.

Measured: the thread CPU time (time.thread_time) of the answer and its line. The run's process
group is stopped (SIGSTOP) for each round's two answers and continued after, so both look at the
same files and processes: every round checks that the two lines decode to the same answer but
for its clock ("now"), and ends the run on the first that does not. Rounds are --interval apart
(the reports are rewritten between them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from dflash_tui.watch import STEADY_INTERVAL_S  # noqa: E402  (the pace a steady run is looked at)

from benchmarks.harness import load_module, replace_section, source_at  # noqa: E402

HEADING = "## remote: the agent's answer to a steady look at 64 ranks, before and after (benchmarks/agent_look_cost.py; issue 37)"
SOURCE = ROOT / "src" / "dflash_tui" / "remote" / "agent_server.py"


def line_of(mod, rid: int, result) -> bytes:
    """The answer line as mod's Server sends it."""
    encode = getattr(mod, "encode_line", None)
    if encode is None:
        return (json.dumps({"id": rid, "ok": True, "result": result}, separators=(",", ":")) + "\n").encode("utf-8")
    spliced: list[str] = []
    result = mod._lift_look_data(result, spliced)
    return encode({"id": rid, "ok": True, "result": result}, spliced)


def comparable(line: bytes) -> list:
    looks = json.loads(line)["result"]
    for look in looks:
        look["result"].pop("now", None)
    return looks


def all_stopped(root: int) -> None:
    """Wait until every process of the tree under `root` has stopped (a stop signal takes effect
    as each process next leaves the kernel, not when killpg returns)."""
    import psutil
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            procs = [psutil.Process(root)] + psutil.Process(root).children(recursive=True)
            if all(p.status() == psutil.STATUS_STOPPED for p in procs):
                return
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.005)
    raise SystemExit("the run's processes did not all stop within 2 s")


def first_difference(a, b, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{where}/{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{where}[{i}]")
    return f"{where}: before {str(a)[:300]} after {str(b)[:300]}"


async def steady_look(tmp: Path, ranks: int) -> tuple[dict, object]:
    """Launch the load, poll it until steady; the last look the watch sent, and the profile."""
    from dflash_tui.config import Profile
    from dflash_tui.remote import agent as agentmod
    from dflash_tui.watch import open_watch
    from dflash_tui.watch.session import Session

    profile = Profile(name="bench", run_dir=str(tmp / "run"), python=sys.executable,
                      command=(sys.executable, str(ROOT / "benchmarks" / "dashboard_cost.py"), "--writer",
                               "--rate", "1000", "--threads", "16", "--ranks", str(ranks)),
                      stop_grace_s=3.0, min_free_gb=0.0)
    async with Session(profile) as s:
        out = await s.launch()
        if not out.run_id:
            raise SystemExit(f"the load did not launch: {out.checklist.summary}")
    looks: list[dict] = []
    observe = agentmod.AgentOps.observe

    async def spy(self, paths, **kw):
        tree = kw.get("proc_tree")
        looks.append({"paths": list(paths), "reads": dict(kw.get("reads") or {}), "known": dict(kw.get("known") or {}),
                      "grown": {p: [int(o), int(n)] for p, (o, n) in (kw.get("grown") or {}).items()},
                      "list_dirs": list(kw.get("list_dirs") or ()),
                      "proc_tree": None if tree is None else {"pid": int(tree[0]), "run_dir": tree[1]}})
        return await observe(self, paths, **kw)

    agentmod.AgentOps.observe = spy
    try:
        await asyncio.sleep(8)
        watch = open_watch(profile, steady_interval=STEADY_INTERVAL_S)
        for _ in range(40):
            await watch.poll()
            if watch._steady and looks and looks[-1]["proc_tree"]:
                break
            await asyncio.sleep(2)
        else:
            raise SystemExit("the watch never became steady")
        await watch.poll()
    finally:
        agentmod.AgentOps.observe = observe
    return looks[-1], profile


async def stop(profile) -> None:
    from dflash_tui.watch.session import Session
    async with Session(profile) as s:
        await s.stop()


def measure(rounds: int, ranks: int, before: str, interval: float) -> dict:
    old_src = source_at(before, "src/dflash_tui/remote/agent_server.py")
    tmp = Path(tempfile.mkdtemp(prefix="dflash-lookcost-"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    (tmp / "look_before.py").write_text(old_src)
    ways = {"before": load_module(tmp / "look_before.py", "look_before"), "after": load_module(SOURCE, "look_after")}
    load0 = os.getloadavg()
    look, profile = asyncio.run(steady_look(tmp, ranks))
    group = os.getpgid(look["proc_tree"]["pid"])
    try:
        times: dict[str, list[float]] = {w: [] for w in ways}
        names = list(ways)
        sizes = {}
        for r in range(rounds):
            seq = r + 1
            entry = {"plan": 1, "seq": seq, "args": look} if seq == 1 else {"plan": 1, "seq": seq}
            if seq == 1:
                entry["reset"] = True
            lines = {}
            os.killpg(group, signal.SIGSTOP)
            try:
                all_stopped(look["proc_tree"]["pid"])
                for w in (names if r % 2 == 0 else names[::-1]):
                    t = time.thread_time()
                    lines[w] = line_of(ways[w], seq, ways[w].op_observe([entry]))
                    times[w].append(time.thread_time() - t)
            finally:
                os.killpg(group, signal.SIGCONT)
            a, b = comparable(lines["before"]), comparable(lines["after"])
            if a != b:
                raise SystemExit(f"round {r}: the answers differ: {first_difference(a, b)}")
            sizes = {w: len(v) for w, v in lines.items()}
            time.sleep(interval)
        full = json.loads(lines["after"])["result"][0]["result"]
        listing = next(iter(full["listings"].values()))["result"]
        return {"times": times, "load0": load0, "load1": os.getloadavg(), "bytes": sizes["after"],
                "entries": len(listing), "reads": len(full["reads"]), "procs": ranks}
    finally:
        asyncio.run(stop(profile))


def pct(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))]


def report(res: dict, args: argparse.Namespace, command: str) -> str:
    t = res["times"]
    med = {w: statistics.median(v) * 1e3 for w, v in t.items()}
    rows = "\n".join(f"| {w} | {med[w]:.2f} ms | {pct(v, 0.9) * 1e3:.2f} ms | {med[w] / med['before']:.2f}x |"
                     for w, v in t.items())
    return (f"{HEADING}\n\n    {command}\n\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores shared with other jobs (load average "
            f"{res['load0'][0]:.1f} / {res['load0'][1]:.1f} / {res['load0'][2]:.1f} before, "
            f"{res['load1'][0]:.1f} after), CPython {platform.python_version()}, Linux {platform.release()}. "
            f"The load: {args.ranks} ranks under the probe, the look a steady HostWatch sent: "
            f"{res['entries']} probe directory entries listed, {res['reads']} reads answered, an answer "
            f"line of {res['bytes']} bytes. {args.rounds} rounds, the two ways in alternating order, "
            f"{args.interval * 1e3:.0f} ms apart; the answers agreed on every round.\n\n"
            f"| way | thread CPU an answer and its line, median | p90 | of before (median) |\n"
            f"| --- | ---: | ---: | ---: |\n{rows}\n\n"
            f"At one look every {STEADY_INTERVAL_S:g} s (a steady run): after {med['after'] / (STEADY_INTERVAL_S * 1000) * 100:.3f} % of a core, "
            f"before {med['before'] / (STEADY_INTERVAL_S * 1000) * 100:.3f} %.\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--before", default="main", help="the git ref whose agent_server.py is 'before'")
    ap.add_argument("--interval", type=float, default=0.3, help="seconds between rounds")
    ap.add_argument("--append", action="store_true", help="write the section into benchmarks/RESULTS.md")
    args = ap.parse_args()
    res = measure(args.rounds, args.ranks, args.before, args.interval)
    text = report(res, args, "benchmarks/agent_look_cost.py " + " ".join(a for a in sys.argv[1:] if a != "--append"))
    print(text)
    if args.append:
        replace_section(HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
