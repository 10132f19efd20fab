"""One look at a profile's run as the dashboard takes it, as JSON: the engine's checklist, the
probe reports' threads, the hang evidence (stack dumps, collectives, root cause) and the GPU
sample with each process's own utilisation. `evidence.py CONFIG PROFILE`"""

import asyncio
import dataclasses
import json
import sys

from dflash_tui.config import load_config
from dflash_tui.watch.session import Session


async def main(config: str, name: str) -> dict:
    session = Session(load_config(config).profile(name))
    try:
        ev, cl = await session.check(gpus=True)
        snap = await session.gpu_snapshot(ev)
    finally:
        await session.close()
    return {
        "profile": name, "target_time": ev.now, "checklist": cl.to_dict(),
        "probes": [{"pid": p.pid, "rank": p.rank, "age_s": round(ev.now - p.time, 1), "ended": p.ended,
                    "stack_signal": p.stack_signal, "probe_cpu_s": p.probe_cpu_s, "cpu_s": p.cpu_s,
                    "threads": [{"name": t.name, "compile_state": t.compile_state, "frames": t.frames[:4]}
                                for t in p.threads]} for p in ev.probes],
        "hang": dataclasses.asdict(ev.hang),
        "gpu": None if snap is None else {
            "source": snap.source, "error": None if snap.error is None else snap.error.message,
            "gpus": [{"index": g.index, "util_sm_pct": g.util_sm_pct,
                      "processes": [dataclasses.asdict(p) for p in g.processes]} for g in snap.gpus]},
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2])), indent=1, default=str))
