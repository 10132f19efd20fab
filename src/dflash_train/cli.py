"""`dflash-train` / `python -m dflash_train`: argument parsing, signals, exit codes.

Exit codes: 0 finished or stopped cleanly by SIGTERM/SIGINT (checkpoint saved); 1 the run
failed (traceback in train.log, an "error" event, phase "failed"); 2 bad arguments or inputs
(one line naming the problem and the fix, before anything is built or compiled).

Under torchrun (see distributed.py) every rank runs this same program. A rank that fails tells
the others (its beat in the rendezvous store); a rank whose peer is gone ends with exit 1 and
an error naming that rank, from whichever notices first: a failed collective in the main path,
or the peer watch thread.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from typing import Callable, Sequence

import torch

from dflash_train.distributed import Collectives, PeerWatch, World, WorldError, is_collective_error
from dflash_train.pool import drafter_thread_name, target_thread_name
from dflash_train.step_compiler import COMPILER_THREAD, keep_compile_cache_in
from dflash_train.telemetry import Telemetry, new_run_id
from dflash_train.train import (COMPILE_CHOICES, ConfigError, StopRequested, StopSwitch, Trainer, TrainArgs,
                                WorkerFailed, prepare)
from dflash_tui.contract.rundir import EventKind, Phase

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
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
                   help="torch.compile backend for the drafter's whole step (forward, attention, "
                        "loss); auto: inductor on CUDA, 'eager' (dynamo tracing only) on CPU; off: "
                        "eager step (the flex kernel is still compiled)")
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
                   help="extra sequence lengths trained on but NOT warmed up: each one is compiled "
                        "in the background when first met, its steps eager until then (for testing)")
    p.add_argument("--wait-for-compile", action=argparse.BooleanOptionalAction, default=d.wait_for_compile,
                   help="compile every bucket before the first step instead of training with the "
                        "eager step meanwhile (the default, --no-wait-for-compile): a first step "
                        "minutes later on CUDA, but every step compiled, so a relaunch repeats the "
                        "run bit for bit")
    p.add_argument("--peak-tflops", type=float, default=d.peak_tflops,
                   help="per-device peak TFLOP/s that MFU divides by (default 0: 789 on an H200, the "
                        "measured bf16 matmul rate; no MFU on other devices)")
    p.add_argument("--nonfinite-patience", type=int, default=d.nonfinite_patience,
                   help="steps in a row whose loss or gradients are NaN/Inf (each one's update is "
                        f"skipped, its loss logged) before the run stops (default {d.nonfinite_patience})")
    p.add_argument("--inject-nan-at", type=int, default=d.inject_nan_at, metavar="STEP",
                   help="tests: the batch of step STEP gives a NaN loss (a poisoned batch: a rollback "
                        "that passes over it never meets it again); 0: none")
    p.add_argument("--target-checkpoint", default=None, help="local transformers checkpoint dir for the target")
    p.add_argument("--dist-timeout", type=float, default=d.dist_timeout,
                   help="under torchrun: seconds a collective waits for the other ranks (rank 0's eval "
                        f"and checkpoint included) before it fails (default {d.dist_timeout:g})")
    p.add_argument("--peer-timeout", type=float, default=d.peer_timeout,
                   help="under torchrun: seconds without a heartbeat from another rank before this one "
                        f"gives it up and exits (default {d.peer_timeout:g})")
    return p


def _to_args(ns: argparse.Namespace) -> TrainArgs:
    return TrainArgs(**{k: v for k, v in vars(ns).items()})


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    run_dir = os.path.abspath(ns.run_dir)
    try:
        os.makedirs(run_dir, exist_ok=True)
        probe = os.path.join(run_dir, f".write-probe-{os.getpid()}")   # ranks may share the directory
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as exc:
        print(f"dflash-train: error: cannot write to --run-dir {run_dir} ({exc.strerror}): "
              "choose a writable directory", file=sys.stderr)
        return EXIT_USAGE
    ns.run_dir = run_dir
    args = _to_args(ns)
    try:
        world = World.from_env()
    except WorldError as exc:
        print(f"dflash-train: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    run_id = os.environ.get("DFLASH_RUN_ID") or new_run_id()
    tel = Telemetry(run_dir, run_id, args.steps, rank=world.rank, world_size=world.world_size, node=world.node)
    tel.register_thread("main", "main", "-")
    tel.start_heartbeat()
    ranks = f" rank {world.rank}/{world.world_size} on {world.node}" if world.launched else ""
    tel.log(f"dflash-train run {run_id} pid {os.getpid()}{ranks} in {run_dir}")
    tel.log("args: " + " ".join(sys.argv[1:] if argv is None else list(argv)))
    # argv None: this is the process's entry point (dflash-train, python -m dflash_train), not an
    # in-process caller (a test) that may compile again after this returns
    process_entry = argv is None
    try:
        rc = _run(args, tel, world, wait_for_compiles=not process_entry)
    finally:
        tel.close()
    if process_entry and any(t.name == COMPILER_THREAD and t.is_alive() for t in threading.enumerate()):
        # The step compiler is inside a compile that cannot be interrupted (up to ~30 s) and the
        # run has ended, checkpoint and files written: leave now instead of outliving the stop's
        # grace and being killed for it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    if world.launched and rc != EXIT_OK:
        # A process group with a dead peer aborts in its destructors at interpreter exit
        # (SIGABRT, "terminate called without an active exception"): leave before them, so
        # the exit code stays the one the files above record.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _run(args: TrainArgs, tel: Telemetry, world: World, wait_for_compiles: bool = True) -> int:
    stop = StopSwitch()
    trainer: Trainer | None = None
    ending = threading.Lock()   # held by whichever path ends a failing run: main thread or peer watch

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        stop.request(name)      # raises StopRequested while building or warming up
        tel.log(f"{name} received: finishing the current step, then saving a checkpoint")

    def on_peer_lost(message: str) -> None:
        # The watch thread: the main thread may be blocked in a collective that will not
        # return (NCCL waits for its timeout), so this thread ends the process itself.
        if not ending.acquire(blocking=False):
            return
        tel.log(f"error: {message}; exiting")
        _fail(tel, message)
        tel.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_FAILED)

    watch = PeerWatch(world, on_peer_lost, timeout_s=args.peer_timeout)
    comm = Collectives(world)

    def failed(message: str, usage: bool = False, gate: dict | None = None) -> int:
        ending.acquire()    # blocks for good if the peer watch is already ending the process
        watch.report_failed(message)
        return _fail_usage(tel, message) if usage else _fail(tel, message, gate=gate)

    def naming_the_lost_peer(message: str, exc: BaseException) -> str:
        lost = watch.diagnose() if world.launched and is_collective_error(exc) else None
        return f"{lost} (here: {message[:240]})" if lost else message

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if world.launched:
            comm = Collectives.join(world, args.dist_timeout)
            watch.start()
            tel.log(f"torch.distributed: rank {world.rank} of {world.world_size} joined "
                    f"(store {world.store_addr}:{world.store_port})")
        try:
            prep = prepare(args)
        except ConfigError as exc:
            return failed(str(exc), usage=True)
        if prep.plan.uses_cuda:
            # before anything imports torch._dynamo, which fixes inductor's cache directory
            mine = keep_compile_cache_in(args.run_dir)
            tel.log(f"compile: inductor's caches in {mine or os.environ['TORCHINDUCTOR_CACHE_DIR']}")
            _in_background("cuda init", torch.cuda.init)
        comm.use_devices(prep.plan.drafter[0], args.dist_timeout)
        for j, dev in enumerate(prep.plan.target):
            tel.register_thread(target_thread_name(j), "target", dev)
        for r, dev in enumerate(prep.plan.drafter):
            tel.register_thread(drafter_thread_name(r), "drafter", dev)
        tel.publish(force=True)
        trainer = Trainer(args, prep, tel, stop, comm)
        t0 = time.monotonic()
        trainer.build()
        tel.log(f"build: models ready in {time.monotonic() - t0:.1f}s")
        try:
            done = trainer.train()
        except ConfigError as exc:
            return failed(str(exc), usage=True)
        watch.stop("done")
        stopped = stop.requested.is_set()
        tel.update(step=done)
        extra = {"weights_sha256": trainer.digest, "all_reduce_s": round(trainer.all_reduce_seconds, 4),
                 "train_s": round(trainer.train_seconds, 4)} if world.launched else {}
        tel.event(EventKind.EXIT, code=EXIT_OK, step=done, reason="stopped" if stopped else "finished",
                  gate=asdict(trainer.gate.stats), **extra)
        tel.log(("stopped" if stopped else "finished") + f" at step {done}")
        tel.set_phase(Phase.FINISHED)
        comm.close()
        return EXIT_OK
    except StopRequested as exc:
        watch.stop("stopped", f"stopped by {exc} before training began")
        tel.log(f"stopped by {exc} before training began; nothing to save")
        tel.event(EventKind.EXIT, code=EXIT_OK, step=tel.status.step, reason="stopped before training")
        tel.set_phase(Phase.FINISHED)
        return EXIT_OK
    except WorkerFailed as exc:
        tel.log_exception(f"thread {exc.thread}", exc.exc)
        return failed(naming_the_lost_peer(str(exc), exc.exc),
                      gate=asdict(trainer.gate.stats) if trainer is not None else None)
    except Exception as exc:  # noqa: BLE001 - every failure ends as a logged, typed exit
        tel.log_exception("main", exc)
        return failed(naming_the_lost_peer(f"{type(exc).__name__}: {exc}", exc))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if wait_for_compiles and trainer is not None and trainer.compiler is not None:
            trainer.compiler.stop(wait=True)


def _in_background(name: str, fn: Callable[..., object], *args: object) -> None:
    """Start-up work begun in a thread of its own, so it overlaps the rest of the start-up: the
    CUDA start (seconds), before the models are built on the device. Whoever needs it meanwhile
    waits on its lock (CUDA's lazy init), as without this thread; a failure here shows again,
    with its message, where it is needed.

    torch._dynamo's import (seconds of Python, holding the GIL) is NOT begun here: nothing
    before the first step needs it (the step is eager; the optimizer, the target's pre-fit's
    too, is adamw.py's), so the step compiler's thread imports it after the first step instead
    of slowing everything before."""
    def run() -> None:
        with contextlib.suppress(Exception):
            fn(*args)

    threading.Thread(target=run, name=name, daemon=True).start()


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
