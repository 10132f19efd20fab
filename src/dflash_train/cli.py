"""`dflash-train` / `python -m dflash_train`: argument parsing, signals, exit codes.

Exit codes: 0 finished or stopped cleanly by SIGTERM/SIGINT (checkpoint saved); 1 the run
failed (traceback in train.log, an "error" event, phase "failed"); 2 bad arguments or inputs
(one line naming the problem and the fix, before anything is built or compiled).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import asdict
from typing import Sequence

from dflash_tui.contract.rundir import EventKind, Phase

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    from dflash_train.train import COMPILE_CHOICES, TrainArgs

    d = TrainArgs(run_dir="")
    p = argparse.ArgumentParser(
        prog="dflash-train",
        description="Train a DFlash block-diffusion drafter against a frozen target, with a thread "
                    "pool (target threads feed drafter threads, one per device) that compiles safely.",
    )
    p.add_argument("--run-dir", required=True, help="run directory (created if missing): train.log, "
                   "events.jsonl, status.json, checkpoints/")
    p.add_argument("--target-devices", default=d.target_devices, help="comma list: cpu, cuda:N (default cpu)")
    p.add_argument("--drafter-devices", default=d.drafter_devices,
                   help="comma list, one drafter thread each; cpu may repeat (e.g. cpu,cpu)")
    p.add_argument("--steps", type=int, default=d.steps, help=f"optimizer steps in total (default {d.steps})")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--preset", default=d.preset, help="model preset: tiny, small, dflash-8b-like")
    p.add_argument("--data", default=d.data, help="'synthetic' (default), a .jsonl file or a text file")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="sequences per drafter thread per step")
    p.add_argument("--buckets", default=d.buckets,
                   help="sequence lengths, e.g. 64,128 (default: 64,128 on CPU, 1024,2048,4096 on CUDA)")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="linear learning-rate warm-up")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm, help="0 disables clipping")
    p.add_argument("--attention", default=d.attention, help="auto (flex on CUDA, sdpa elsewhere), flex, sdpa")
    p.add_argument("--compile", default=d.compile, choices=COMPILE_CHOICES,
                   help="torch.compile backend for the drafter; auto: off on CUDA (the flex kernel is "
                        "compiled anyway), 'eager' (dynamo tracing only) on CPU")
    p.add_argument("--dtype", default=d.dtype, help="auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    p.add_argument("--keep-checkpoints", type=int, default=d.keep_checkpoints)
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --run-dir")
    p.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="measure acceptance length tau every N steps (0: never)")
    p.add_argument("--eval-prompts", type=int, default=d.eval_prompts)
    p.add_argument("--eval-prompt-len", type=int, default=d.eval_prompt_len)
    p.add_argument("--eval-new-tokens", type=int, default=d.eval_new_tokens)
    p.add_argument("--log-every", type=int, default=d.log_every)
    p.add_argument("--queue-depth", type=int, default=d.queue_depth, help="target batches buffered per drafter")
    p.add_argument("--threads-per-gpu", type=int, default=d.threads_per_gpu,
                   help="allow this many drafter (or target) threads on one GPU (default 1)")
    p.add_argument("--cpu-threads", type=int, default=d.cpu_threads,
                   help="torch intra-op threads (default 0: cores divided by the cpu worker threads)")
    p.add_argument("--cold-buckets", default=d.cold_buckets,
                   help="extra sequence lengths trained on but NOT warmed up: each one recompiles "
                        "mid-run through the compile gate (for testing the gate)")
    p.add_argument("--target-checkpoint", default=None, help="local transformers checkpoint dir for the target")
    return p


def _to_args(ns: argparse.Namespace):
    from dflash_train.train import TrainArgs

    return TrainArgs(**{k: v for k, v in vars(ns).items()})


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    run_dir = os.path.abspath(ns.run_dir)
    try:
        os.makedirs(run_dir, exist_ok=True)
        probe = os.path.join(run_dir, ".write-probe")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as exc:
        print(f"dflash-train: error: cannot write to --run-dir {run_dir} ({exc.strerror}): "
              "choose a writable directory", file=sys.stderr)
        return EXIT_USAGE
    ns.run_dir = run_dir
    args = _to_args(ns)

    from dflash_train.telemetry import Telemetry, new_run_id

    run_id = os.environ.get("DFLASH_RUN_ID") or new_run_id()
    tel = Telemetry(run_dir, run_id, args.steps)
    tel.register_thread("main", "main", "-")
    tel.start_heartbeat()
    tel.log(f"dflash-train run {run_id} pid {os.getpid()} in {run_dir}")
    tel.log("args: " + " ".join(sys.argv[1:] if argv is None else list(argv)))
    try:
        return _run(args, tel)
    finally:
        tel.close()


def _run(args, tel) -> int:
    from dflash_train.train import ConfigError, StopRequested, Trainer, WorkerFailed, prepare

    trainer: Trainer | None = None
    phase_box = {"stoppable": False}

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        if trainer is not None:
            trainer.stop_requested.set()
        if not phase_box["stoppable"]:
            # Still building or warming up: nothing trained since the last checkpoint, so
            # interrupt right here instead of finishing a minutes-long compile first.
            raise StopRequested(name)
        tel.log(f"{name} received: finishing the current step, then saving a checkpoint")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            prep = prepare(args)
        except ConfigError as exc:
            return _fail_usage(tel, str(exc))
        from dflash_train.pool import drafter_thread_name, target_thread_name

        for j, dev in enumerate(prep.plan.target):
            tel.register_thread(target_thread_name(j), "target", dev)
        for r, dev in enumerate(prep.plan.drafter):
            tel.register_thread(drafter_thread_name(r), "drafter", dev)
        tel.publish(force=True)
        trainer = Trainer(args, prep, tel)
        tel.install_compile_callbacks()
        t0 = time.monotonic()
        trainer.build()
        tel.log(f"build: models ready in {time.monotonic() - t0:.1f}s")
        # From here a signal means "stop at the next step end"; train() arms it after warm-up.
        orig_warm = trainer.warm_up

        def warm_then_arm():
            orig_warm()
            phase_box["stoppable"] = True
            if trainer.stop_requested.is_set():
                raise StopRequested("signal during warm-up")

        trainer.warm_up = warm_then_arm
        try:
            done = trainer.train()
        except ConfigError as exc:
            return _fail_usage(tel, str(exc))
        stopped = trainer.stop_requested.is_set()
        tel.update(step=done)
        tel.event(EventKind.EXIT, code=EXIT_OK, step=done, reason="stopped" if stopped else "finished",
                  gate=asdict(trainer.gate.stats))
        tel.log(("stopped" if stopped else "finished") + f" at step {done}")
        tel.set_phase(Phase.FINISHED)
        return EXIT_OK
    except StopRequested as exc:
        tel.log(f"stopped by {exc} before training began; nothing to save")
        tel.event(EventKind.EXIT, code=EXIT_OK, step=tel.status.step, reason="stopped before training")
        tel.set_phase(Phase.FINISHED)
        return EXIT_OK
    except WorkerFailed as exc:
        tel.log_exception(f"thread {exc.thread}", exc.exc)
        return _fail(tel, str(exc), gate=asdict(trainer.gate.stats) if trainer is not None else None)
    except Exception as exc:  # noqa: BLE001 - every failure ends as a logged, typed exit
        tel.log_exception("main", exc)
        return _fail(tel, f"{type(exc).__name__}: {exc}")
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _fail_usage(tel, msg: str) -> int:
    print(f"dflash-train: error: {msg}", file=sys.stderr, flush=True)
    tel.log(f"error: {msg}")
    tel.update(last_error=msg)
    tel.event(EventKind.ERROR, message=msg, fatal=True, usage=True)
    tel.event(EventKind.EXIT, code=EXIT_USAGE)
    tel.set_phase(Phase.FAILED)
    return EXIT_USAGE


def _fail(tel, msg: str, gate: dict | None = None) -> int:
    tel.update(last_error=msg)
    tel.event(EventKind.ERROR, message=msg, fatal=True)
    tel.event(EventKind.EXIT, code=EXIT_FAILED, gate=gate)
    tel.set_phase(Phase.FAILED)
    return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
