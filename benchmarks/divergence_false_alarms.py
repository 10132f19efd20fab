"""The divergence rules (run/evidence/divergence.py) on clean and broken loss curves.

False alarms are the failure that matters most. Clean curves must give no divergence: synthetic
ones (power-law decays at scales 1e-3 to 1e4, +-35 % multiplicative noise, warm-up bumps of up
to 2.5x, lone 2x blips, loss-scaled starts of 10x to 1000x for the first steps, plateaus) and,
when given, real ones recorded here (`--recorded DIR`: every events.jsonl, trainer_state.json,
metrics.csv under DIR, its watched series). Broken curves: the same clean ones with a NaN, or a
sustained 5x/15x spike, injected at a random step; the detection delay is counted in logged
values from the first bad one (1: found at the first). The bounds: a series of 10 million
points fed as polls give it (MAX_BATCH at a time) and in one batch, against recomputing the
band (statistics.median of the window) at every value; a log window of NaN lines through the
log parser.

    .venv/bin/python benchmarks/divergence_false_alarms.py [--recorded DIR] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

from dflash_tui.run.evidence.divergence import MAX_BATCH, WINDOW, DivergenceRules, DivergenceWatch
from dflash_tui.run.evidence.progress import ProgressParser

RULES = DivergenceRules()


def clean_curves(seed: int = 1) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}

    def decay(n: int, start: float, end: float, k: float = 0.5) -> list[float]:
        return [end + (start - end) / (1 + i / 20) ** k for i in range(n)]

    for scale in (1e-3, 1.0, 7.0, 1e4):
        out[f"decay x{scale:g}, +-35% noise"] = [v * scale * rng.uniform(0.65, 1.35) for v in decay(3000, 10, 2)]
    for peak in (1.5, 2.0, 2.5):
        base = decay(2000, 4, 1.5)
        bump = [b * (1 + (peak - 1) * math.exp(-((i - 60) / 25) ** 2)) for i, b in enumerate(base)]
        out[f"warm-up bump {peak}x, +-10% noise"] = [v * rng.uniform(0.9, 1.1) for v in bump]
    for every in (37, 101):
        c = [v * rng.uniform(0.85, 1.15) for v in decay(3000, 6, 2.5)]
        for i in range(every, len(c), every):
            c[i] *= 2.0
        out[f"lone 2x blips every {every}"] = c
    for first, scale in ((5, 1000.0), (20, 10.0), (50, 100.0)):
        c = [v * rng.uniform(0.9, 1.1) for v in decay(2000, 3, 1.2)]
        out[f"loss-scaled start: {first} values at {scale:g}x"] = [v * scale if i < first else v
                                                                    for i, v in enumerate(c)]
    c = [v * rng.uniform(0.9, 1.1) for v in decay(3000, 5, 2)]
    for i in range(150, len(c), 200):
        c[i] *= 8.0
    out["lone 8x spikes every 200 (warns)"] = c
    c = [v * rng.uniform(0.9, 1.1) for v in decay(3000, 5, 2)]
    for i in range(150, len(c), 300):
        c[i] *= 6.0
        c[i + 1] *= 6.0
    out["two 6x values in a row every 300 (warns)"] = c
    out["SGDR restarts: 1.6x bumps every 500"] = [
        (1.0 + 0.6 * (1 - (i % 500) / 500) ** 3) * (2 / (1 + i / 400) ** 0.3 + 0.5) * rng.uniform(0.9, 1.1)
        for i in range(3000)]
    out["plateau then drop, +-20% noise"] = [(3.0 if i < 800 else 1.0) * rng.uniform(0.8, 1.2) for i in range(2000)]
    out["slow rise 1.8x over 2000 (overfitting)"] = [(1 + 0.8 * i / 2000) * rng.uniform(0.9, 1.1) for i in range(2000)]
    out["negative log-likelihood around -2, +-0.3"] = [-2 + rng.uniform(-0.3, 0.3) for _ in range(2000)]
    out["heavy-tailed noise (lognormal sigma 0.3)"] = [2.0 * rng.lognormvariate(0, 0.3) for _ in range(3000)]
    out["tiny loss near 0 (1e-6 +- 35%)"] = [1e-6 * rng.uniform(0.65, 1.35) for _ in range(2000)]
    return out


def recorded_curves(root: Path) -> dict[str, list[tuple[int, float]]]:
    """The watched series of every events.jsonl, trainer_state.json and metrics.csv under root."""
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(root.rglob("events.jsonl")):
        pts = []
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("kind") == "step" and isinstance(e.get("loss"), (int, float)):
                pts.append((e["step"], float(e["loss"])))
        if pts:
            out[f"recorded {path.relative_to(root)} loss"] = pts
    states = sorted(root.rglob("trainer_state.json"), key=lambda p: p.stat().st_mtime)
    if states:
        hist = json.loads(states[-1].read_text()).get("log_history", [])
        pts = [(h["step"], float(h["loss"])) for h in hist if "loss" in h and "step" in h]
        if pts:
            out[f"recorded {states[-1].relative_to(root)} loss"] = pts
    for path in sorted(root.rglob("metrics.csv")):
        with path.open() as f:
            rows = list(csv.DictReader(f))
        for col in (rows[0].keys() if rows else ()):
            if not RULES.watches(col):
                continue
            pts = [(int(r["step"]), float(r[col])) for r in rows if r.get(col) not in ("", None)]
            if pts:
                out[f"recorded {path.relative_to(root)} {col}"] = pts
    return out


def judge(points: list[tuple[int, float]], poll: int = 7):
    """Feed in polls of `poll` values; (divergence, index of the value that found it)."""
    w = DivergenceWatch(RULES)
    for i in range(0, len(points), poll):
        w.feed("loss", "bench", points[i:i + poll])
        f = w.finding()
        if f.divergence is not None:
            # the value at which it was found: the first bad one's index + count - 1
            first = next(j for j, (s, _) in enumerate(points) if s == f.divergence.step)
            return f, first + f.divergence.count - 1
    return w.finding(), None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recorded", type=Path)
    ap.add_argument("--quick", action="store_true", help="the 10M-point bound on 1M points")
    args = ap.parse_args()

    curves = {k: list(enumerate(v, 1)) for k, v in clean_curves().items()}
    if args.recorded:
        curves.update(recorded_curves(args.recorded))
    print(f"clean curves: {len(curves)}")
    alarms, warns = 0, 0
    for name, pts in curves.items():
        f, at = judge(pts)
        alarms += f.divergence is not None
        warns += len(f.spikes) > 0
        flag = f"DIVERGED: {f.divergence.words()}" if f.divergence else (
            f"warn: {f.spikes[-1].words()}" if f.spikes else "ok")
        print(f"  {name:48s} {len(pts):6d} values  {flag}")
    print(f"false alarms (DIVERGED on a clean curve): {alarms} of {len(curves)}; curves with a lone-spike warn: {warns}")

    rng = random.Random(5)
    delays: dict[str, list[int]] = {"NaN": [], "Inf": [], "spike 15x": [], "spike 5x": []}
    missed = {k: 0 for k in delays}
    for name, pts in curves.items():
        for kind in delays:
            n = len(pts)
            at = rng.randrange(min(WINDOW, n // 2), n - 5) if n < 3 * WINDOW else rng.randrange(n // 3, n - 20)
            bad = list(pts)
            for j in range(at, len(bad)):
                s, v = bad[j]
                if kind == "NaN":
                    bad[j] = (s, float("nan"))
                elif kind == "Inf":
                    bad[j] = (s, float("inf"))
                else:
                    factor = 15.0 if kind == "spike 15x" else 5.0
                    # relative to the curve's level there (a negative loss moves up by as much)
                    bad[j] = (s, v + (factor - 1) * abs(statistics.median(x for _, x in pts[max(0, at - 50):at])))
            f, found = judge(bad)
            if found is None or f.divergence.step < pts[at][0]:
                missed[kind] += 1
                print(f"  {kind} at value {at + 1} of {name}: "
                      f"{'missed' if found is None else 'found early: ' + f.divergence.words()}")
            else:
                delays[kind].append(found - at + 1)
    for kind, d in delays.items():
        if d:
            print(f"injected {kind:9s}: found {len(d)} of {len(curves)}, delay in logged values "
                  f"min {min(d)} median {statistics.median(d):g} max {max(d)}; missed or early {missed[kind]}")
        else:
            print(f"injected {kind:9s}: found 0 of {len(curves)}")

    n = 1_000_000 if args.quick else 10_000_000
    rng = random.Random(9)
    series = [(i, 2.0 + rng.uniform(-0.7, 0.7)) for i in range(1, n + 1)]
    w = DivergenceWatch(RULES)
    t0 = time.perf_counter()
    worst = 0.0
    for i in range(0, n, MAX_BATCH):
        t = time.perf_counter()
        w.feed("loss", "bench", series[i:i + MAX_BATCH])
        worst = max(worst, time.perf_counter() - t)
    polled = time.perf_counter() - t0
    print(f"{n:,} points in polls of {MAX_BATCH:,}: {polled:.2f} s in all, "
          f"{polled / n * 1e6:.2f} us a value, the slowest poll {worst * 1000:.0f} ms; "
          f"divergence {w.finding().divergence}")
    w = DivergenceWatch(RULES)
    series[n // 2] = (series[n // 2][0], float("nan"))
    t = time.perf_counter()
    w.feed("loss", "bench", series)
    one = time.perf_counter() - t
    f = w.finding()
    print(f"{n:,} points in one batch (a NaN at the middle): {one * 1000:.0f} ms; judged "
          f"{f.values:,}, scanned for NaN only {f.skipped:,}; found: {f.divergence.words() if f.divergence else None}")
    naive_n = 20_000
    vals = [v for _, v in series[:naive_n]]
    t = time.perf_counter()
    win: list[float] = []
    for v in vals:       # the alternative: median and MAD of the window recomputed at every value
        if len(win) >= 10:
            med = statistics.median(win)
            mad = statistics.median(abs(x - med) for x in win)
            _ = v > med + max(10 * 1.4826 * mad, 2 * abs(med))
        win.append(v)
        del win[:-WINDOW]
    naive = (time.perf_counter() - t) / naive_n
    w = DivergenceWatch(RULES)
    t = time.perf_counter()
    w.feed("loss", "bench", series[:naive_n])
    ours = (time.perf_counter() - t) / naive_n
    print(f"a value's cost: {ours * 1e6:.2f} us (sorted window, spread refreshed every 8) vs "
          f"{naive * 1e6:.2f} us (recomputed at every value): {naive / ours:.1f}x")

    window = "".join(f"step {i}/1000000 loss nan\n" for i in range(1, 100_000))
    chunk = window.encode()[-(64 << 10):]
    p, w = ProgressParser(), DivergenceWatch(RULES)
    t = time.perf_counter()
    p.feed(chunk)
    w.feed("loss", "train.log", p.take_losses())
    look = time.perf_counter() - t
    p2, w2 = ProgressParser(), DivergenceWatch(RULES)
    t = time.perf_counter()
    p2.feed(window.encode())
    w2.feed("loss", "train.log", p2.take_losses())
    whole = time.perf_counter() - t
    print(f"a log of NaN lines: a look's 64 KiB window {look * 1000:.1f} ms "
          f"({w.finding().divergence.words()}); all {len(window) >> 20} MiB at once {whole * 1000:.0f} ms "
          f"({w2.finding().divergence.words()})")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
