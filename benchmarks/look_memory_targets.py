"""The judgement's CPU per look when two watched targets run ranks with the same pids (two
containers, two hosts: pid namespaces make pids repeat), with one memory of the looks per
target against one memory both share (what a memo keyed by pid alone amounts to).

Each target holds --ranks rank processes' probe reports (tests/support/scenarios.py's ranks:
a main thread in all_reduce, a pin_memory thread), as a steady watch reads them: unchanged
between looks, so a look's work is what its memory cannot answer. The looks alternate between
the two targets, as a fleet's poller does; each look is `evaluate` with the target's memory,
timed in thread CPU. Both layouts run in one process, interleaved by round, so a busy moment of
a shared machine falls on both; printed: median microseconds per look each, and the ratio.

`.venv/bin/python benchmarks/look_memory_targets.py [--ranks 64] [--looks 200] [--rounds 5]`
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dflash_tui.run.evidence.memory import LookMemory  # noqa: E402
from dflash_tui.run.evidence.probe_files import ProbeReports  # noqa: E402
from dflash_tui.run.verdict.health import evaluate  # noqa: E402
from tests.support import scenarios as R  # noqa: E402


def _target(ranks: int):
    base = dataclasses.replace(R._running_evidence(), status=None)
    return dataclasses.replace(base, probes=ProbeReports(R.rank_probes(ranks)))


def _looks(evs, memories, looks: int) -> list[float]:
    """Thread-CPU microseconds of each of `looks` looks, alternating between the targets."""
    out = []
    for i in range(looks):
        k = i % len(evs)
        t0 = time.thread_time()
        evaluate(evs[k], memory=memories[k])
        out.append((time.thread_time() - t0) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--looks", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    evs = [_target(args.ranks), _target(args.ranks)]
    assert [p.pid for p in evs[0].probes] == [p.pid for p in evs[1].probes]   # the pids coincide
    own: list[float] = []
    shared: list[float] = []
    for _ in range(args.rounds):
        mine = [LookMemory(), LookMemory()]
        _looks(evs, mine, 2)                       # each memory's first look works everything out
        own += _looks(evs, mine, args.looks)
        one = LookMemory()
        _looks(evs, [one, one], 2)
        shared += _looks(evs, [one, one], args.looks)
    a, b = statistics.median(own), statistics.median(shared)
    print(f"two targets x {args.ranks} ranks, pids coinciding; {args.rounds} rounds x {args.looks} looks each")
    print(f"  one memory per target (the watch's):   median {a:9.0f} us per look")
    print(f"  one memory for both (a pid-keyed memo): median {b:9.0f} us per look")
    print(f"  ratio shared / own: {b / a:.2f}x")


if __name__ == "__main__":
    main()
