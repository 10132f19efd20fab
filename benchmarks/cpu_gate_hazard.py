"""The compile gate against the injected hazard, many trials, side by side (CPU, no torch compile).

The hazard is the stand-in of tests/train/test_compile_gate.py: a compiled-function double whose
"tracing" raises a process-global flag, and any other thread entering it meanwhile fails with
the FX-tracing error, as torch 2.9-2.13 do. N threads x STEPS steps, each meeting new shapes.

    .venv/bin/python benchmarks/cpu_gate_hazard.py --trials 40
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from dflash_train.compile_gate import CompileGate  # noqa: E402
from test_compile_gate import N_THREADS, STEPS, WARM_BUCKETS, RacyCompiledFn, _run_workers  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=40)
    n = p.parse_args().trials
    rows = []
    for gated in (False, True):
        failed_trials = hazards = recompiles = 0
        t0 = time.monotonic()
        for _ in range(n):
            fn = RacyCompiledFn()
            gate = None
            if gated:
                for i in range(N_THREADS):
                    for b in WARM_BUCKETS:
                        fn((f"dev{i}", b))
                fn.stance = "fail_on_recompile"
                gate = CompileGate(allow_compile=fn.allow_compile)
            errors = _run_workers(fn, gate)
            failed_trials += bool(errors)
            hazards += fn.hazards
            recompiles += gate.stats.recompiles if gate else 0
        rows.append((gated, failed_trials, hazards, recompiles, (time.monotonic() - t0) / n))
    print(f"{N_THREADS} threads x {STEPS} steps per trial, {n} trials each\n")
    print("| pattern | trials failed | FX-tracing hazards fired | recompiles via gate | s / trial |")
    print("| --- | --- | --- | --- | --- |")
    for gated, failed, hz, rc, spt in rows:
        label = "warm-up + fail_on_recompile + CompileGate" if gated else "naive (no warm-up, no gate)"
        print(f"| {label} | {failed}/{n} | {hz} | {rc if gated else '-'} | {spt:.3f} |")
    return 0 if rows[1][1] == 0 and rows[1][2] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
