"""Time from the start of a hang to the verdict that names it, for real programs that are not
ours (tests/programs/), watched through a RunWatch on this machine as the dashboard watches.

    .venv/bin/python benchmarks/hang_time_to_verdict.py [--stall 5] [--reps 2] [--poll 0.25] [--append]

Each program prints its progress, then hangs in one way. The hang starts at the program's last
output (train.log's modification time, the target's clock). The watch polls every --poll
seconds; the time to the named verdict is when a report first reads STALLED with the words of
that kind of hang, minus that last output, minus `stall_after_s` (the limit it is judged by).
Target: at most 2 s past the limit.

  deadlock    two threads in a lock-order deadlock (lock_deadlock.py)
  gil         the main thread holds the GIL in C, so the probe's report goes stale and the
              stacks come from the faulthandler dump the agent asks for (gil_hold.py)
  collective  torchrun, 2 gloo ranks: rank 1 never joins the next all_reduce (collective_skip.py)
  loader      a DataLoader worker stuck in a read of a FIFO nobody writes (loader_stuck.py)

--append writes the section into benchmarks/RESULTS.md (replacing an earlier one of this script).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.harness import replace_section  # noqa: E402

from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.run.verdict.checklist import Verdict  # noqa: E402
from dflash_tui.watch import open_watch  # noqa: E402

HEADING = "## run: time from a hang to the verdict that names it (benchmarks/hang_time_to_verdict.py)"
PROGRAMS = ROOT / "tests" / "programs"
PY = sys.executable
TORCHRUN = (PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
# The words each kind of hang's STALLED summary begins with (run/verdict/hang.py).
KINDS = {"deadlock": "deadlock: ", "gil": "busy in C: ", "collective": "hung in a collective: ",
         "loader": "waiting for DataLoader workers: "}


def command(kind: str, work: Path) -> tuple[str, ...]:
    if kind == "deadlock":
        return (PY, str(PROGRAMS / "lock_deadlock.py"))
    if kind == "gil":
        return (PY, str(PROGRAMS / "gil_hold.py"))
    if kind == "collective":
        return (*TORCHRUN, str(PROGRAMS / "collective_skip.py"))
    shard = work / "remote-shard"
    if not shard.exists():
        os.mkfifo(shard)
    return (PY, str(PROGRAMS / "loader_stuck.py"), str(shard))


async def one(kind: str, work: Path, rep: int, stall_s: float, poll_s: float) -> dict:
    run_dir = work / f"{kind}-{rep}"
    profile = Profile(name=f"{kind}{rep}", run_dir=str(run_dir), python=PY, command=command(kind, work),
                      train_args=(), stall_after_s=stall_s, compile_stall_after_s=300.0, stop_grace_s=2.0,
                      min_free_gb=0.0)
    watch = open_watch(profile, interval=poll_s)
    try:
        await watch.launch(preflight=False)
        deadline = time.monotonic() + stall_s + 120
        while time.monotonic() < deadline:
            report = await watch.poll()
            cl = report.checklist
            if cl.verdict is Verdict.STALLED and cl.summary.startswith(KINDS[kind]):
                last_output = (run_dir / "train.log").stat().st_mtime
                return {"kind": kind, "late_s": report.time - last_output - stall_s, "summary": cl.summary}
            if cl.verdict.failing and cl.verdict is not Verdict.STALLED:
                return {"kind": kind, "late_s": None, "summary": f"{cl.verdict.value}: {cl.summary}"}
            await asyncio.sleep(poll_s)
        return {"kind": kind, "late_s": None, "summary": f"not named in time: {cl.verdict.value}: {cl.summary}"}
    finally:
        await watch.stop()
        await watch.close()


async def main_async(args) -> list[dict]:
    os.environ.pop("PYTHONUNBUFFERED", None)   # as over SSH: only the wrapper makes Python unbuffered
    with tempfile.TemporaryDirectory(prefix="hang-ttv-") as tmp:
        work = Path(tmp)
        os.environ["XDG_STATE_HOME"] = str(work / "state")
        out = []
        for rep in range(args.reps):
            for kind in KINDS:
                r = await one(kind, work, rep, args.stall, args.poll)
                print(f"{kind:<10} rep {rep}: "
                      + (f"named {r['late_s']:+.2f} s after the limit" if r["late_s"] is not None else "NOT NAMED")
                      + f" | {r['summary'][:150]}", flush=True)
                out.append(r)
        return out


def section(args, results: list[dict]) -> str:
    lines = [HEADING, "",
             f"Machine: this one (2 shared CPU cores, no GPU, CPython {platform.python_version()}, load average "
             f"{os.getloadavg()[0]:.1f} at the end). Command: `.venv/bin/python benchmarks/hang_time_to_verdict.py "
             f"--stall {args.stall:g} --reps {args.reps} --poll {args.poll:g} --append`. A local profile per program, "
             f"`stall_after_s = {args.stall:g}`, the RunWatch polled every {args.poll:g} s; the time is from the "
             "program's last output (train.log's mtime) to the first report that reads STALLED with the words of "
             "that kind of hang, minus `stall_after_s`. Target: at most 2 s.", "",
             "| hang | named after the limit (each rep) | worst | the verdict's words (first rep) |",
             "| --- | --- | ---: | --- |"]
    for kind in KINDS:
        rs = [r for r in results if r["kind"] == kind]
        lates = [r["late_s"] for r in rs if r["late_s"] is not None]
        each = ", ".join(f"{r['late_s']:+.2f} s" if r["late_s"] is not None else "not named" for r in rs)
        worst = f"{max(lates):+.2f} s" if len(lates) == len(rs) else "not named"
        words = rs[0]["summary"].replace("|", "/")[:160]
        lines.append(f"| {kind} | {each} | {worst} | `{words}` |")
    named = [r["late_s"] for r in results if r["late_s"] is not None]
    if named:
        lines += ["", f"All {len(named)} of {len(results)} named; median {statistics.median(named):+.2f} s, worst "
                      f"{max(named):+.2f} s after `stall_after_s` (target: at most +2 s: "
                      f"{'met' if max(named) <= 2 and len(named) == len(results) else 'missed'})."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stall", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--poll", type=float, default=0.25)
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    results = asyncio.run(main_async(args))
    text = section(args, results)
    print(text)
    if args.append:
        replace_section(HEADING, text)
    return 0 if all(r["late_s"] is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
