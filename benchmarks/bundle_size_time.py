"""Time and size of an evidence bundle at 1, 64 and 1,024 ranks' probe reports, beside a plain
`tar czf` of the run dir (what a person would send by hand, secrets and all), in one run.

    .venv/bin/python benchmarks/bundle_size_time.py [--ranks 1 64 1024] [--append]

For each rank count a real local run (launched through a Session and the wrapper, like any
run) writes that many probe reports (each a real ProbeReport of 3 threads with 12 frames, for
ranks 0..N-1) into its probe directory, prints 20,000 log lines, and exits 1 (CRASHED): the
bundle then reads every report through the verdict's own look. Measured per rank count: the
wall time of `take_bundle` (bundle/take.py) and of `tar czf RUN_DIR`, and the two files' sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from dflash_tui.bundle import take_bundle  # noqa: E402
from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402
from dflash_tui.watch.host import HostWatch  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402

from benchmarks.harness import replace_section  # noqa: E402

HEADING = "## bundle: time and size of an evidence bundle at 1, 64 and 1,024 ranks (benchmarks/bundle_size_time.py; issue 47)"

WRITER = r"""
import json, os, sys, time
n = int(sys.argv[1])
run_id, run_dir = os.environ["DFLASH_RUN_ID"], os.environ["DFLASH_RUN_DIR"]
probe = os.path.join(run_dir, "probe")
os.makedirs(probe, exist_ok=True)
now = time.time()
frames = ["/opt/train/train.py:%d step_%d" % (100 + i, i) for i in range(12)]
for rank in range(n):
    pid = 100000 + rank
    report = {"v": 1, "run_id": run_id, "pid": pid, "time": now, "ppid": 1, "start_time": now - 60, "seq": 60,
              "node": "gpu%d" % (rank // 8), "rank": rank, "local_rank": rank % 8, "world_size": n,
              "argv": ["train.py", "--lr", "3e-4"], "executable": sys.executable, "python": "3.11",
              "cpu_s": 12.5, "probe_cpu_s": 0.1,
              "threads": [{"name": name, "ident": i + 1, "native_id": pid + i, "daemon": i > 0,
                           "frames": frames} for i, name in enumerate(("MainThread", "loader", "pin_memory"))]}
    with open(os.path.join(probe, "%d.json" % pid), "w") as f:
        json.dump(report, f)
for i in range(20000):
    print("step %d loss %.4f lr 3e-4 tokens/s 12000" % (i, 2.5 - i * 1e-5))
sys.exit(1)
"""


async def one(ranks: int, base: Path) -> dict:
    run_dir = base / f"r{ranks}"
    program = base / "writer.py"
    program.write_text(WRITER)
    profile = Profile(name=f"b{ranks}", run_dir=str(run_dir), python=sys.executable,
                      command=(sys.executable, str(program), str(ranks)), min_free_gb=0.0, probe=False)
    async with HostWatch(Session(profile, targets=(LocalTarget(), LocalTarget()))) as watch:
        await watch.launch(preflight=False)
        for _ in range(100):
            if (run_dir / "exit.json").exists():
                break
            await asyncio.sleep(0.2)
        out = base / f"b{ranks}.tar.gz"
        t0 = time.perf_counter()
        result = await take_bundle(watch, str(out), profile=profile)
        bundle_s = time.perf_counter() - t0
    plain = base / f"plain{ranks}.tar.gz"
    t0 = time.perf_counter()
    subprocess.run(["tar", "czf", str(plain), "-C", str(base), run_dir.name], check=True)
    tar_s = time.perf_counter() - t0
    probes = sum(1 for m in result.members if m.startswith("probe/"))
    return {"ranks": ranks, "bundle_s": bundle_s, "bundle_bytes": out.stat().st_size, "tar_s": tar_s,
            "tar_bytes": plain.stat().st_size, "members": len(result.members), "probe_members": probes,
            "missing": len(result.missing)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 64, 1024])
    ap.add_argument("--append", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = ap.parse_args()
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="bundle-bench-state-"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bundle-bench-") as tmp:
        for n in args.ranks:
            rows.append(asyncio.run(one(n, Path(tmp))))
            r = rows[-1]
            print(f"{n:>5} ranks: bundle {r['bundle_s']:.2f} s {r['bundle_bytes'] / 1024:.0f} KiB "
                  f"({r['members']} members, {r['probe_members']} probe reports, {r['missing']} not taken); "
                  f"tar czf {r['tar_s']:.2f} s {r['tar_bytes'] / 1024:.0f} KiB", flush=True)
    table = ["| ranks | bundle s | bundle KiB | members (probe reports) | not taken | tar czf s | tar czf KiB | time ratio | size ratio |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        table.append(f"| {r['ranks']} | {r['bundle_s']:.2f} | {r['bundle_bytes'] / 1024:.0f} | {r['members']} "
                     f"({r['probe_members']}) | {r['missing']} | {r['tar_s']:.2f} | {r['tar_bytes'] / 1024:.0f} | "
                     f"{r['bundle_s'] / r['tar_s']:.1f}x | {r['bundle_bytes'] / r['tar_bytes']:.2f}x |")
    text = "\n".join(table)
    print(text)
    if args.append:
        section = (f"{HEADING}\n\n`flock /tmp/dflash-cpu.lock .venv/bin/python benchmarks/bundle_size_time.py --append` "
                   f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores shared, "
                   f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')})\n\n{text}\n\n"
                   "The bundle's time is mostly fixed: a look at the run (its verdict), `python -c` for the "
                   "versions and `pip freeze` of the run's interpreter, the host's kernel log. The plain tar "
                   "ships the run dir as it is, secrets included; the bundle masks them and stays within "
                   "20 MiB and 30 s.\n")
        replace_section(HEADING, section)


if __name__ == "__main__":
    main()
