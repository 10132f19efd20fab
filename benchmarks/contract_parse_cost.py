"""What validating events.jsonl costs per line: `parse_events` beside a bare `json.loads`.

The Metrics pane and the verdict's progress tracker parse every new event line through the
contract (field-by-field validation); this is that cost, with the unvalidated floor measured in
the same run.

    .venv/bin/python benchmarks/contract_parse_cost.py [--lines 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from dflash_tui.contract.rundir import make_event, parse_events, to_json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    lines = [to_json(make_event("step", 1.0 + i, step=i, loss=2.0, accuracy=0.4, tokens_per_s=1000.0,
                                step_time_s=0.14, mfu=0.6, acc_per_pos=[0.1] * 15, rank=0, node="gpu1"))
             for i in range(args.lines)]
    ours, floor = [], []
    for _ in range(args.rounds):          # alternated, so load on the machine hits both alike
        t = time.perf_counter()
        batch = parse_events(lines)
        ours.append((time.perf_counter() - t) / len(lines))
        assert batch.skipped == 0 and len(batch.events) == len(lines)
        t = time.perf_counter()
        for line in lines:
            json.loads(line)
        floor.append((time.perf_counter() - t) / len(lines))
    o, f = statistics.median(ours) * 1e6, statistics.median(floor) * 1e6
    print(f"parse_events {o:.1f} us/line, json.loads {f:.1f} us/line, ratio {o / f:.1f}x "
          f"({args.lines} lines x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
