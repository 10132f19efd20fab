"""What checkpoints and disk runway add to a look (issues 45 and 46): a look's CPU with and
without them, side by side, on a run dir holding many checkpoints.

The run dir holds --hf Hugging Face `checkpoint-N/` folders (trainer_state.json, a real
safetensors file, an optimizer zip) and --files torch.save-style zips in ckpt/, 1,000 other
files beside them, and a live program printing a line every 50 ms, launched detached through a
Session as the dashboard would. Three ways of looking alternate, --rounds times, --looks looks
each, --gap seconds apart:

- without: the look with its checkpoint step removed (observe.py `_observe_checkpoints` a no-op);
- before, no gate: the search every 5 s of the target's clock whatever the folders say (the
  cadence before run/evidence/checkpoint_gate.py: `safety_s` 0);
- with: the look as shipped (past the 5 s cadence, a stat of the checkpoints' folders in the
  look's first request; a search only when one moved, or every 60 s);
- with, searching every look: the worst case (the search and runway asked at every look, no gate:
  every folder listed, every file stat'd and answered);
- with, the run dir moved before every look: the search a moved folder starts, at every look
  (the run dir's mtime set 10 s back to a new value: its listing is trusted, as one that moved
  more than 2 s earlier; the other 301 folders unmoved);
- with, the safety search every look: the safety search as shipped (every folder listed and
  every file stat'd again; through the agent the answer holds only what changed since the last
  one), at every look (`FolderGate.share` 0: not spaced by its own cost).

A way's looks span a few seconds, so "with" holds no 60 s safety search: its share is printed
apart, a safety search's cost (its way minus without) times the looks' spacing over 60 s.

Each look is timed as the CPU of this process's thread (`time.thread_time` around
`Session.check`, gather and judgement) plus the CPU its agent used meanwhile (/proc of the
child processes, in 10 ms ticks: only the mean over many looks says much). Printed: per way,
the mean and median milliseconds per look, and the extra of each "with" over "without" in %.

`.venv/bin/python benchmarks/checkpoint_look_cost.py [--hf 300] [--files 300] [--looks 40] [--gap 0.25] [--rounds 3]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import children_cpu_s  # noqa: E402
from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402
from dflash_tui.run.evidence import observe  # noqa: E402
from dflash_tui.run.evidence.checkpoint_gate import SAFETY_S, SAFETY_SHARE  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402

PRINTER = "import time\nwhile True:\n    print('step', flush=True)\n    time.sleep(0.05)\n"


def make_run_dir(root: Path, hf: int, files: int) -> Path:
    run = root / "run"
    (run / "ckpt").mkdir(parents=True)
    header = b'{"w":{"dtype":"F32","shape":[256],"data_offsets":[0,1024]}}'
    then = time.time() - 3600
    for i in range(hf):
        d = run / f"checkpoint-{(i + 1) * 10}"
        d.mkdir()
        (d / "trainer_state.json").write_text(json.dumps({"global_step": (i + 1) * 10, "log_history": []}))
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(1024))
        with zipfile.ZipFile(d / "optimizer.pt", "w") as z:
            z.writestr("optimizer/data.pkl", b"x" * 4096)
        for p in d.iterdir():
            os.utime(p, (then + i * 10, then + i * 10))
    for i in range(files):
        p = run / "ckpt" / f"step-{i}.pt"
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("step/data.pkl", b"y" * 4096)
        os.utime(p, (then + i * 10, then + i * 10))
    for i in range(1000):
        (run / "ckpt" / f"notes-{i}.txt").write_text("n")
    return run


async def looks(s: Session, n: int, gap: float, searched: list[str], move: Path | None = None) -> list[float]:
    out = []
    ckpt = s.progress.checkpoints
    for _ in range(n):
        if move is not None:
            t = time.time() - 10
            os.utime(move, (t, t))
        c0, t0 = children_cpu_s(), time.thread_time()
        ckpt.why_searched = ""
        await s.check()
        t1 = time.thread_time()
        if ckpt.why_searched:
            searched.append(ckpt.why_searched)
        await asyncio.sleep(0.02)     # the agent's share of the look is counted after its answer
        out.append((t1 - t0 + children_cpu_s() - c0) * 1000)
        await asyncio.sleep(gap)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", type=int, default=300)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--looks", type=int, default=40)
    ap.add_argument("--gap", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        run = make_run_dir(Path(tmp), args.hf, args.files)
        prof = Profile(name="bench", run_dir=str(run), python=sys.executable,
                       command=(sys.executable, "-c", PRINTER), train_args=(), min_free_gb=0.0)
        s = Session(prof, targets=(LocalTarget(), LocalTarget()))
        await s.launch()
        shipped = observe._observe_checkpoints

        async def without(ops, ev, tracker):
            return None

        try:
            s.progress.checkpoints.every_s = 0.0
            for _ in range(200):                # warm: the agent started, every file judged once
                ev, _ = await s.check()
                if ev.checkpoints is not None and ev.checkpoints.found and not ev.checkpoints.unjudged:
                    break
            view = ev.checkpoints
            print(f"run dir: {len(view.found)} checkpoints found ({len(view.complete)} complete), "
                  f"notes {list(view.notes)}; runway {ev.runway.to_json() if ev.runway else None}")
            got: dict[str, list[float]] = {"without": [], "before, no gate": [], "with": [],
                                           "with, searching every look": [],
                                           "with, the run dir moved before every look": [],
                                           "with, the safety search every look": []}
            ckpt, gate, spent = s.progress.checkpoints, s.progress.checkpoints.gate, {}
            searches: dict[str, list[str]] = {name: [] for name in got}

            async def way(name: str, every_s: float, safety_s: float, move: Path | None = None,
                          share: float = SAFETY_SHARE) -> None:
                ckpt.every_s = s.progress.runway.every_s = every_s
                gate.safety_s, gate.share = safety_s, share
                t0 = time.monotonic()
                got[name] += await looks(s, args.looks, args.gap, searches[name], move)
                spent[name] = spent.get(name, 0.0) + time.monotonic() - t0

            for _ in range(args.rounds):
                observe._observe_checkpoints = without
                await way("without", 5.0, SAFETY_S)
                observe._observe_checkpoints = shipped
                await way("before, no gate", 5.0, 0.0)
                await way("with", 5.0, SAFETY_S)
                await way("with, searching every look", 0.0, 0.0)
                await way("with, the run dir moved before every look", 0.0, SAFETY_S, run)
                await way("with, the safety search every look", 0.0, 1e-9, share=0.0)
            base = statistics.mean(got["without"])
            for name, ms in got.items():
                extra = "" if name == "without" else f"  extra {100 * (statistics.mean(ms) - base) / base:+.1f} %"
                why = sorted(set(searches[name]))[:3]
                print(f"{name:42s} mean {statistics.mean(ms):6.2f} ms  median {statistics.median(ms):6.2f} ms "
                      f"per look ({len(ms)} looks, {len(searches[name])} searched{': ' if why else ''}"
                      f"{'; '.join(why)}){extra}")
            search_ms = statistics.mean(got["with, searching every look"]) - base
            moved_ms = statistics.mean(got["with, the run dir moved before every look"]) - base
            safety_search_ms = statistics.mean(got["with, the safety search every look"]) - base
            per_look_s = spent["with"] / len(got["with"])
            safety_ms = safety_search_ms * per_look_s / SAFETY_S
            with_ms = statistics.mean(got["with"]) - base + safety_ms
            print(f"a search answered in full: {search_ms:.2f} ms; one after the run dir moved: {moved_ms:.2f} ms; "
                  f"a safety search: {safety_search_ms:.2f} ms; "
                  f"one every {SAFETY_S:g} s at a look every {per_look_s:.2f} s: {safety_ms:.3f} ms per look; "
                  f"with it, 'with' adds {with_ms:+.2f} ms ({100 * with_ms / base:+.1f} % of a look)")
        finally:
            observe._observe_checkpoints = shipped
            await s.stop(grace_s=1)
            await s.close()


if __name__ == "__main__":
    asyncio.run(main())
