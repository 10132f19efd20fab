"""Tokens/s of the trainer as 1 process vs 2 torchrun processes (gloo) at the same global batch,
and the all_reduce's share of a step, on CPU, side by side in alternating rounds.

(a) one process, --drafter-devices cpu,cpu: 2 replicas, one thread pool;
(b) torchrun --standalone --nproc_per_node 2, --drafter-devices cpu in each: 2 processes x 1
    replica, gradients summed by one gloo all_reduce per step.
Both train the same global batch (2 x --batch-size sequences a step) and end with bit-identical
weights (tests/train/test_distributed.py); what differs is the cost. Tokens/s counts every
replica's tokens from step SKIP to the last step, over the wall time between those step events.

    .venv/bin/python benchmarks/cpu_distributed.py --steps 60 --rounds 2 --append
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dflash_train.train import TrainArgs, prepare  # noqa: E402
from dflash_tui.contract import rundir  # noqa: E402

SKIP = 5   # steps left out of the rate: queue fill, first-touch allocations


def _events(run_dir: Path, rank: int) -> list[dict]:
    with open(run_dir / rundir.rank_file(rundir.EVENTS_JSONL, rank)) as fh:
        return rundir.parse_events(fh).events


def _run(way: str, run_dir: Path, train_args: list[str]) -> None:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "DFLASH_RUN_ID": f"bench-{way}"}
    if way == "1 process":
        cmd = [sys.executable, "-m", "dflash_train", "--drafter-devices", "cpu,cpu"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "dflash_train", "--drafter-devices", "cpu"]
    proc = subprocess.run([*cmd, "--run-dir", str(run_dir), *train_args], env=env, capture_output=True,
                          text=True, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"{way} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _measure(way: str, run_dir: Path, steps: int, tokens_of_step: list[int]) -> dict:
    ev = _events(run_dir, 0)
    t = {e["step"]: e["time"] for e in ev if e["kind"] == "step"}
    seconds = t[steps] - t[SKIP]
    tokens = sum(tokens_of_step[s] for s in range(SKIP, steps))   # steps SKIP+1 .. steps (0-based)
    out = {"tok_s": tokens / seconds, "step_ms": 1000 * seconds / (steps - SKIP), "share": None, "ar_ms": None}
    if way != "1 process":
        shares, per_step = [], []
        for rank in (0, 1):
            end = [e for e in _events(run_dir, rank) if e["kind"] == "exit"][-1]
            shares.append(end["all_reduce_s"] / end["train_s"])
            per_step.append(1000 * end["all_reduce_s"] / steps)
        out["share"], out["ar_ms"] = sum(shares) / 2, sum(per_step) / 2
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    a = p.parse_args()
    train_args = ["--steps", str(a.steps), "--batch-size", str(a.batch_size), "--eval-every", "0",
                  "--log-every", "1000", "--checkpoint-every", "100000", "--cpu-threads", "1", "--compile", "off"]
    # the global batch of step s: replicas 0 and 1 take batch indices 2s and 2s+1 (pool.py)
    source = prepare(TrainArgs(run_dir="", batch_size=a.batch_size, eval_every=0)).source
    tokens_of_step = [source.batch_at(2 * s).input_ids.numel() + source.batch_at(2 * s + 1).input_ids.numel()
                      for s in range(a.steps)]
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict]] = {"1 process": [], "2 processes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for way in results:
                run_dir = Path(tmp) / f"{way.replace(' ', '-')}-{r}"
                _run(way, run_dir, train_args)
                results[way].append(_measure(way, run_dir, a.steps, tokens_of_step))
    load_after = os.getloadavg()[0]

    def mean(way, key):
        vals = [m[key] for m in results[way]]
        return sum(vals) / len(vals) if vals[0] is not None else None

    base = mean("1 process", "tok_s")
    rows = ["| way | tokens/s (mean of rounds) | per round | step | vs 1 process | all_reduce a step | all_reduce share |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for way in results:
        tok = mean(way, "tok_s")
        share, ar = mean(way, "share"), mean(way, "ar_ms")
        rounds = ", ".join(f"{m['tok_s']:,.0f}" for m in results[way])
        rows.append(f"| {way} | {tok:,.0f} | {rounds} | "
                    f"{mean(way, 'step_ms'):.1f} ms | {tok / base:.2f}x | "
                    f"{'-' if ar is None else f'{ar:.2f} ms'} | {'-' if share is None else f'{100 * share:.1f}%'} |")
    text = "\n".join([
        "## trainer: 1 vs 2 CPU processes under torchrun, same global batch (benchmarks/cpu_distributed.py)",
        "",
        f"Command: `.venv/bin/python benchmarks/cpu_distributed.py --steps {a.steps} --rounds {a.rounds} "
        f"--batch-size {a.batch_size}{' --append' if a.append else ''}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared), CPython {platform.python_version()}, "
        f"torch {__import__('torch').__version__}; preset tiny, buckets 64,128, batch {a.batch_size} per replica, "
        f"2 replicas in all, --compile off, --cpu-threads 1, {a.steps} steps (rate over steps {SKIP + 1}..{a.steps}), "
        f"rounds alternate (a), (b). Load average {load_before:.1f} before, {load_after:.1f} after.",
        "",
        *rows,
        "",
        "all_reduce a step is the wall time of the one gloo all_reduce (gradients + stop flag) per step, "
        "waiting for the slower rank included, mean of both ranks; its share is that time over the training "
        "wall time.",
        "",
    ])
    print(text)
    if a.append:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
