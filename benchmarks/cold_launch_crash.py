"""Cold first launches of the bundled trainer, as `make run` does on a fresh clone: how many end
clean?

Each launch gets fresh caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, DFLASH_TRAIN_CACHE, so
the target is pre-fitted again and every graph is built from nothing), the run probe as the wrapper installs it, the embedded profile's
devices (one target thread, two drafter threads on CPU), Python's faulthandler on, and `--load`
busy processes beside it (a shared 2-core box). A launch is clean when it exits 0; a launch
killed by a signal is reported with the step it reached and the first lines faulthandler wrote.
Also counted: launches whose log shows a drafter thread tripping over another's first compiled
call ("Unexpected recompilation": the symptom of two threads entering a cold compiled frame at
once).

    flock /tmp/dflash-cpu.lock .venv/bin/python benchmarks/cold_launch_crash.py --launches 12 --steps 40
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from dflash_tui.contract.rundir import PROBE_DIR
from dflash_tui.run.launch.probe_install import write_probe_dir


def _burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def one_launch(steps: int, workdir: str, extra: list[str], switch_interval: float | None, probe: bool) -> dict:
    env = dict(os.environ)
    if switch_interval is not None:
        # a stress amplifier: the interpreter hands the GIL between threads this often (Python's
        # default is 5 ms), so a race between threads shows in a few launches instead of hundreds
        site = os.path.join(workdir, "site")
        os.makedirs(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(f"import sys\nsys.setswitchinterval({switch_interval!r})\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p)
    env.update({
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(workdir, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(workdir, "triton"),
        "DFLASH_TRAIN_CACHE": os.path.join(workdir, "dflash_train"),
        "PYTHONFAULTHANDLER": "1",
    })
    run_dir = os.path.join(workdir, "run")
    if probe:
        # as the wrapper launches it: the run probe's sitecustomize in every Python of the run
        write_probe_dir(os.path.join(run_dir, PROBE_DIR))
        env.update({"DFLASH_RUN_DIR": run_dir, "DFLASH_RUN_ID": "cold-launch"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(run_dir, PROBE_DIR), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", run_dir, "--target-devices", "cpu",
           "--drafter-devices", "cpu,cpu", "--steps", str(steps), *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    steps_seen = [int(m) for m in re.findall(r"step (\d+)/", out)]
    switch = re.search(r"steps from (\d+) run the compiled step", out)
    return {
        "rc": proc.returncode,
        "seconds": time.monotonic() - t0,
        "last_step": max(steps_seen, default=0),
        "compiled_from": int(switch.group(1)) if switch else None,
        "unexpected_recompile": "Unexpected recompilation" in out,
        "fault": "\n".join(line for line in out.splitlines() if "Fatal Python error" in line or "File " in line)[:1500],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=12)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--load", type=int, default=1, help="busy processes beside each launch")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="seconds between GIL hand-offs in the trainer (default: Python's 0.005)")
    ap.add_argument("--no-probe", action="store_true", help="launch without the run probe (the wrapper installs it)")
    ap.add_argument("extra", nargs="*", help="more trainer arguments (after --)")
    args = ap.parse_args()
    clean = bad_recompiles = 0
    for i in range(args.launches):
        with tempfile.TemporaryDirectory(prefix="cold-launch-") as workdir:
            stop_at = time.time() + 600
            burners = [multiprocessing.Process(target=_burn, args=(stop_at,), daemon=True) for _ in range(args.load)]
            for b in burners:
                b.start()
            try:
                r = one_launch(args.steps, workdir, args.extra, args.switch_interval, not args.no_probe)
            finally:
                for b in burners:
                    b.terminate()
                    b.join()
        clean += r["rc"] == 0
        bad_recompiles += r["unexpected_recompile"]
        how = "clean" if r["rc"] == 0 else (
            f"killed by {signal.Signals(-r['rc']).name}" if r["rc"] < 0 else f"exit {r['rc']}")
        print(f"launch {i + 1}: {how} in {r['seconds']:.1f}s, last step {r['last_step']}, compiled from step "
              f"{r['compiled_from']}, unexpected recompile: {r['unexpected_recompile']}", flush=True)
        if r["rc"] != 0 and r["fault"]:
            print("  " + r["fault"].replace("\n", "\n  "), flush=True)
    print(f"{clean} clean of {args.launches} cold launches; {bad_recompiles} with an 'Unexpected recompilation'")


if __name__ == "__main__":
    main()
