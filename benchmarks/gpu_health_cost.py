"""The extra CPU of GPU node health and energy per look (issue 46): one GPU sample of 8 GPUs
through the real reader (the NVML stand-in, gpu/fake_nvml.py), decoded, and the "gpus" check
(plus "gpu_health" where the tree has it) added to a RUNNING checklist, as a look of the run
view does once a second, timed in thread CPU.

Each tree runs in a child process with PYTHONPATH=TREE/src; the trees alternate, `--rounds`
times each, so a busy moment of the shared machine falls on both. Printed: each tree's median
microseconds per sample+check, and the difference. A tree is a checkout's root (`git archive
<commit> src | tar -x -C DIR` makes one of an older commit).

`.venv/bin/python benchmarks/gpu_health_cost.py --trees OLD_ROOT,NEW_ROOT [--samples 400] [--rounds 3] [--real]`
(--real: the host's own GPUs through pynvml, on the GPU machine: benchmarks/device/see_it_coming.sh)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness import tree_env  # noqa: E402

CHILD = r'''
import json, sys, time
from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.codec import snapshot_from_dict
from dflash_tui.gpu.nvml_reader import NvmlReader
from dflash_tui.run.verdict.checklist import Checklist, Verdict
from dflash_tui.run.verdict.health import with_gpu_check
from dflash_tui.run.evidence.observe import Evidence

samples = int(sys.argv[1])
if sys.argv[2] == "real":
    import pynvml
    reader = NvmlReader(lambda: pynvml)
else:
    fake = fake_nvml.FakeNvml(8)
    for i in range(8):
        fake.set_processes(i, [(4242, 20 << 30)])
    reader = NvmlReader(fake_nvml.loader(fake))
ev = Evidence(run_dir="/tmp/none", now=time.time())
checklist = Checklist(Verdict.RUNNING, [], "running")
for _ in range(20):    # warm: the first sample opens the devices
    with_gpu_check(checklist, ev, snapshot_from_dict(reader.sample()))
out, gpus = [], 0
for _ in range(samples):
    t0 = time.thread_time()
    snap = snapshot_from_dict(reader.sample())
    with_gpu_check(checklist, ev, snap)
    out.append((time.thread_time() - t0) * 1e6)
    gpus = len(snap.gpus)
print(json.dumps({"us": out, "gpus": gpus}))
'''


def run_tree(tree: Path, samples: int, nvml: str) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, str(samples), nvml], capture_output=True, text=True,
                         env=tree_env(tree), timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"{tree}: {res.stderr.strip().splitlines()[-1]}")
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", default=f"{ROOT},{ROOT}")
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--real", action="store_true", help="the host's own GPUs through pynvml, not the stand-in's 8")
    args = ap.parse_args()
    trees = [Path(t) for t in args.trees.split(",")]
    times: dict[Path, list[float]] = {t: [] for t in trees}
    gpus = 0
    for _ in range(args.rounds):
        for t in trees:
            got = run_tree(t, args.samples, "real" if args.real else "fake")
            times[t] += got["us"]
            gpus = got["gpus"]
    medians = {t: statistics.median(v) for t, v in times.items()}
    for t in trees:
        print(f"{t}: median {medians[t]:.0f} us, mean {statistics.fmean(times[t]):.0f} us per sample+check "
              f"({gpus} GPUs{'' if args.real else ' of the stand-in'}, {len(times[t])} samples)")
    if len(trees) == 2:
        a, b = trees
        print(f"extra per look: {medians[b] - medians[a]:.0f} us ({medians[b] / medians[a]:.2f}x)")


if __name__ == "__main__":
    main()
