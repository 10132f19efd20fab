"""A timeline as Chrome trace JSON (the Trace Event Format), which Perfetto and chrome://tracing open.

One process per profile (pid 1, 2, ... in the order given), one thread per run id. Each band is a complete event ("ph": "X",
its state as the name, `ts`/`dur` in microseconds from the first change exported), each change
an instant event ("ph": "i", thread scope) named "PREVIOUS -> STATE"; causes, checks and the
evidence are in `args`. `displayTimeUnit` is "ms"; the epoch of ts 0 is in `otherData`.
"""

from __future__ import annotations

from typing import Any, Sequence

from .timeline import Band, band_json, runs

def trace(timelines: Sequence[tuple[str, Sequence[Band]]]) -> dict[str, Any]:
    """`timelines`: (profile, its bands) each; ts 0 is the first change of any of them."""
    t0 = min((b[0].start for _, b in timelines if b), default=0.0)

    def us(t: float) -> int:
        return int(round((t - t0) * 1_000_000))

    events: list[dict[str, Any]] = []
    for pid, (profile, all_bands) in enumerate(timelines, start=1):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"dflash-tui {profile}"}})
        for tid, (run_id, group) in enumerate(runs(all_bands), start=1):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": f"run {run_id}" if run_id else "no launch.json"}})
            for b in group:
                args = band_json(b)
                events.append({"name": b.state, "cat": "verdict", "ph": "X", "ts": us(b.start),
                               "dur": max(1, us(b.end) - us(b.start)), "pid": pid, "tid": tid, "args": args})
                events.append({"name": f"{b.change.previous or 'first seen'} -> {b.state}", "cat": "change",
                               "ph": "i", "s": "t", "ts": us(b.start), "pid": pid, "tid": tid,
                               "args": {"cause": b.change.cause, "check": b.change.check}})
    names = [profile for profile, _ in timelines]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"profile": names[0] if len(names) == 1 else names, "epoch_of_ts0": t0}}
