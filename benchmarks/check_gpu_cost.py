"""What the "gpus" check adds to `dflash-tui --check`: wall time of one headless check on a
fresh Session (what one CLI invocation does) without and with the GPU sample, side by side.

    .venv/bin/python benchmarks/check_gpu_cost.py [--runs 15] [--append]

Runs a stand-in trainer locally (tests/support/run_standins.py), so it needs no GPU. Three ways, the
first two interleaved run by run: (a) no GPU sample; (b) the sample on this machine's real
path (here: no NVML library, then no nvidia-smi: the library-missing path; on a GPU host the
real NVML); (c) 8 fake H200s (DFLASH_TUI_NVML=dflash_tui.gpu.fake_nvml:from_env); and last
(d) a fake NVML whose every power reading hangs 60 s, which the check must cut short.
--append writes the section into benchmarks/RESULTS.md (replacing an earlier one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dflash_tui.config import Profile  # noqa: E402
from dflash_tui.watch.session import Session  # noqa: E402
from benchmarks.harness import replace_section  # noqa: E402
from tests.support.run_standins import PROGRAM  # noqa: E402

HEADING = "## cli: what the GPU check adds to `--check` (benchmarks/check_gpu_cost.py)"
FAKE = {"DFLASH_TUI_NVML": "dflash_tui.gpu.fake_nvml:from_env", "DFLASH_FAKE_NVML_GPUS": "8"}


def set_env(extra: dict) -> None:
    for k in [k for k in os.environ if k == "DFLASH_TUI_NVML" or k.startswith("DFLASH_FAKE_NVML")]:
        del os.environ[k]
    os.environ.update(extra)


async def one(profile: Profile, gpus: bool) -> tuple[float, str]:
    t0 = time.perf_counter()
    async with Session(profile) as s:
        _, cl = await s.check(gpus=gpus)
    dt = time.perf_counter() - t0          # close included: the CLI waits for it too
    g = next((c for c in cl.checks if c.id == "gpus"), None)
    return dt, (f"{g.state.value}: {g.cause[:90]}" if g else "-")


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f})"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--append", action="store_true", help="write into benchmarks/RESULTS.md")
    args = ap.parse_args()
    set_env({})
    ways = {"(a) without the GPU sample": ({}, False), "(b) with it, this machine's NVML": ({}, True),
            "(c) with it, 8 fake H200s": (FAKE, True),
            "(d) with it, NVML hung 60 s": ({**FAKE, "DFLASH_FAKE_NVML_HANG_S": "60"}, True)}
    times: dict[str, list[float]] = {k: [] for k in ways}
    causes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = tmp
        profile = Profile(name="bench", run_dir=f"{tmp}/run", command=(sys.executable, PROGRAM, "beat"),
                          train_args=("--device=cuda:0",), stall_after_s=5, min_free_gb=0)
        async with Session(profile) as s:
            out = await s.launch()
            assert out.run_id, out.checklist.summary
        await asyncio.sleep(1.0)
        try:
            for i in range(args.runs):        # interleaved, so load drifts hit every way alike
                for name, (env, gpus) in ways.items():
                    if name.startswith("(d)") and i >= 3:
                        continue              # 3 s each by design; 3 runs say it
                    set_env(env)
                    dt, causes[name] = await one(profile, gpus)
                    times[name].append(dt)
        finally:
            set_env({})
            async with Session(profile) as s:
                await s.stop()
    base = statistics.median(times["(a) without the GPU sample"])
    rows = [f"| {name} | {len(xs)} | {ms(xs)} | {(statistics.median(xs) - base) * 1000:+.0f} ms | "
            f"{statistics.median(xs) / base:.2f}x | {causes[name]} |" for name, xs in times.items()]
    load = os.getloadavg()[0]
    section = "\n".join([
        HEADING, "",
        "Command: `.venv/bin/python benchmarks/check_gpu_cost.py --append`", "",
        f"Machine: this one (2 shared CPU cores, no GPU, CPython {sys.version.split()[0]}, load "
        f"average {load:.1f} at the end). One check = a fresh Session on a local stand-in run "
        "(threads on `cuda:0`): gather the evidence, evaluate, and for (b)-(d) take one GPU sample "
        "of the host through `open_gpu_source(isolate=True)` (an agent process), then close "
        "everything, as one `dflash-tui --check` does after its imports.", "",
        "| way | checks | wall time: median (min, max) | added vs (a) | ratio | the gpus check said |",
        "| --- | ---: | --- | ---: | ---: | --- |", *rows, ""])
    print(section)
    if args.append:
        replace_section(HEADING, section + "\n")


if __name__ == "__main__":
    asyncio.run(main())
