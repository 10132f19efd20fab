"""The trainer, top to bottom: validate, build, resume, warm up, train in the pool, finish.

Order matters and is the point of this file:
1. every argument is validated (devices, data, preset, buckets) before a model is built or a
   kernel compiled, so a typo fails in a second with a one-line message;
2. the heartbeat thread starts first, so the dashboard sees the trainer alive through model
   building and compile warm-up;
3. the step compiler (step_compiler.py) starts building the compiled step for every (drafter
   device, shape bucket) in its own thread, under the compile gate, with torch switched to
   fail_on_recompile;
4. the worker threads start at once (unless --wait-for-compile) and run the eager step until
   the compiled one is built, then switch together at a step boundary (the compiler thread
   starts compiling at the first step's end, so that step has the interpreter to itself);
   the compile gate
   handles any recompile that still happens, and every step end is a consistent point for
   eval, checkpoint and SIGTERM.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import threading
import time
import dataclasses
from dataclasses import asdict, dataclass
from typing import Any

import torch

from dflash_train import objective, perf, rollback
from dflash_train.attention.backends import FlexAttention, choose_backend
from dflash_train.checkpoint import CheckpointError as UnusableCheckpoint, CheckpointStore
from dflash_train.compile_gate import CompileGate, TorchCompileControl
from dflash_train.config import ModelConfig
from dflash_train.data import Batch, BatchSource, DataError, default_buckets, open_stream
from dflash_train.devices import DeviceError, DevicePlan, plan_devices
from dflash_train.distributed import Collectives, World, weights_digest
from dflash_train.model.drafter import build_drafter
from dflash_train.model.hf_target import (CheckpointError, HFTokenizer, check_loadable, config_from_checkpoint,
                                          has_tokenizer)
from dflash_train.model.target import build_target
from dflash_train.pool import (PoolSpec, StepMetrics, ThreadPool, drafter_thread_name, replica_optimizer,
                              target_thread_name)
from dflash_train.step_compiler import COMPILER_THREAD, StepCompiler
from dflash_train.telemetry import Telemetry, process_start_time
from dflash_train.verify import acceptance_length, eval_context_len
from dflash_tui.contract.rundir import CompileState, EventKind, Phase

COMPILE_CHOICES = ("auto", "off", "eager", "aot_eager", "inductor")


class ConfigError(ValueError):
    """A bad argument or input; the message names the problem and the fix."""


class StopRequested(BaseException):
    """SIGTERM/SIGINT during start-up or warm-up: there is nothing to save yet."""


class StopSwitch:
    """What SIGTERM/SIGINT does: until training begins, interrupt at once (nothing trained since
    the last checkpoint, so there is nothing to save and no reason to finish a minutes-long
    compile first); once armed, finish the current step and save a checkpoint."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.armed = False

    def request(self, why: str) -> None:
        """Called from the signal handler (main thread)."""
        self.requested.set()
        if not self.armed:
            raise StopRequested(why)

    def arm(self) -> None:
        """Training begins: from here a stop request ends the run at a step end."""
        self.armed = True
        if self.requested.is_set():
            raise StopRequested("signal during warm-up")


def warmup_then_constant_lr(step: int, *, lr: float, warmup_steps: int) -> float:
    """Linear warm-up over the first `warmup_steps` steps, then `lr`: a pure function of the
    step, so --resume needs no scheduler state."""
    if not warmup_steps:
        return lr
    return lr * min(1.0, (step + 1) / warmup_steps)


@dataclass
class TrainArgs:
    run_dir: str
    target_devices: str = "cpu"
    drafter_devices: str = "cpu"
    steps: int = 300
    seed: int = 0
    preset: str = "tiny"
    data: str = "synthetic"
    batch_size: int = 4
    buckets: str = ""              # "" = the data module's defaults for the device type
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    attention: str = "auto"
    compile: str = "auto"
    dtype: str = "auto"
    checkpoint_every: int = 100
    keep_checkpoints: int = 3
    resume: bool = False
    eval_every: int = 100
    eval_prompts: int = 8
    eval_prompt_len: int = 32
    eval_new_tokens: int = 32
    log_every: int = 10
    queue_depth: int = 2
    target_checkpoint: str | None = None
    threads_per_gpu: int = 1
    cpu_threads: int = 0           # intra-op threads; 0 = split the cores between cpu workers
    cold_buckets: str = ""         # lengths trained on but deliberately not warmed (compiled when met)
    wait_for_compile: bool = False # compile every bucket before the first step (no eager steps)
    dist_timeout: float = 600.0    # torch.distributed: seconds a collective may wait for the other ranks
    peer_timeout: float = 60.0     # torch.distributed: seconds of silence after which a rank is given up
    peak_tflops: float = 0.0       # per-device peak for MFU; 0 = perf.PEAK_BF16_TFLOPS by device name
    # Steps in a row whose loss or gradients are not finite (their updates skipped) before the
    # run stops with FloatingPointError.
    nonfinite_patience: int = 3
    inject_nan_at: int = 0         # tests: step whose batch (by its data index) gives a NaN loss; 0 = none

    def fingerprint(self, n_replicas: int) -> dict[str, Any]:
        """What must not change across --resume for the result to be the same run."""
        return {"seed": self.seed, "preset": self.preset, "data": self.data, "batch_size": self.batch_size,
                "buckets": self.buckets, "cold_buckets": self.cold_buckets, "lr": self.lr, "warmup_steps": self.warmup_steps, "weight_decay": self.weight_decay,
                "max_grad_norm": self.max_grad_norm, "replicas": n_replicas,
                "target_checkpoint": self.target_checkpoint}


@dataclass
class Prepared:
    """Validated inputs: nothing here has touched a device yet."""

    plan: DevicePlan
    cfg: Any
    stream: Any
    buckets: tuple[int, ...]          # warmed up in the main thread
    compile_backend: str | None
    cold_buckets: tuple[int, ...] = ()  # also trained on, never warmed
    source: Any = None                  # BatchSource over buckets + cold_buckets
    prompts: Any = None                 # held-out eval prompts [n, len], None without eval


def prepare(args: TrainArgs) -> Prepared:
    """All validation that can fail on user input, before any model is built."""
    for name in ("dist_timeout", "peer_timeout"):
        if not (getattr(args, name) > 0 and math.isfinite(getattr(args, name))):
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive number of seconds (got {getattr(args, name)})")
    for name in ("steps", "batch_size", "checkpoint_every", "keep_checkpoints", "log_every", "queue_depth",
                 "eval_prompts", "eval_prompt_len", "eval_new_tokens", "nonfinite_patience"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    if args.cpu_threads < 0:
        raise ConfigError(f"--cpu-threads must be >= 0 (0 = automatic; got {args.cpu_threads})")
    if not (args.peak_tflops >= 0 and math.isfinite(args.peak_tflops)):
        raise ConfigError(f"--peak-tflops must be a number >= 0 (0 = by device name; got {args.peak_tflops})")
    if args.warmup_steps < 0:
        raise ConfigError(f"--warmup-steps must be >= 0 (got {args.warmup_steps})")
    if args.eval_every < 0:
        raise ConfigError(f"--eval-every must be >= 0 (0 = never; got {args.eval_every})")
    if args.inject_nan_at < 0:
        raise ConfigError(f"--inject-nan-at must be a step >= 1, or 0 for none (got {args.inject_nan_at})")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        raise ConfigError(f"--lr must be a positive number (got {args.lr})")
    if args.compile not in COMPILE_CHOICES:
        raise ConfigError(f"--compile {args.compile!r}: choose one of {', '.join(COMPILE_CHOICES)}")
    if args.attention not in ("auto", "flex", "sdpa"):
        raise ConfigError(f"--attention {args.attention!r}: choose auto, flex or sdpa")
    if args.dtype not in ("auto", "float32", "bfloat16"):
        raise ConfigError(f"--dtype {args.dtype!r}: choose auto, float32 or bfloat16")
    try:
        plan = plan_devices(args.target_devices, args.drafter_devices, threads_per_gpu=args.threads_per_gpu)
    except DeviceError as exc:
        raise ConfigError(str(exc)) from None
    if args.attention == "flex" and "cpu" in plan.drafter:
        raise ConfigError("--attention flex cannot train on cpu drafter devices (flex_attention has no "
                          "CPU backward in this torch): use --attention auto or sdpa there")
    try:
        cfg = ModelConfig.preset(args.preset)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.data not in ("", "synthetic") and not os.path.isfile(args.data):
        raise ConfigError(f"--data {args.data}: no such file (give a .jsonl or text file, or 'synthetic')")
    tokenizer = None
    if args.target_checkpoint is not None:
        cfg, tokenizer = _checkpoint_target(args, cfg)
    device_type = "cuda" if plan.uses_cuda else "cpu"
    buckets = _parse_lengths(args.buckets, "--buckets") if args.buckets else default_buckets(device_type, cfg.max_seq_len)
    cold = _parse_lengths(args.cold_buckets, "--cold-buckets") if args.cold_buckets else ()
    for option, lengths in (("--buckets", buckets), ("--cold-buckets", cold)):
        if lengths and (lengths[0] <= cfg.block_size + cfg.anchors_per_seq - 1 or lengths[-1] > cfg.max_seq_len):
            raise ConfigError(
                f"{option} {list(lengths)}: each length must be >= block size + anchors per sequence "
                f"({cfg.block_size + cfg.anchors_per_seq}) and <= the model's max_seq_len {cfg.max_seq_len}")
    if not buckets:
        raise ConfigError("--buckets is empty: give sequence lengths like 64,128")
    try:
        stream = open_stream(args.data, seed=args.seed, tokenizer=tokenizer)
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    top = int(stream.tokens.max())
    if top >= cfg.vocab_size:
        # Only a checkpoint can get here: the presets' vocab holds every byte id.
        if tokenizer is None:
            raise ConfigError(f"--data {args.data or 'synthetic'}: the target checkpoint has no tokenizer, so the data "
                              f"are byte ids, up to {top}, outside its vocab of {cfg.vocab_size}: copy the "
                              "model's tokenizer files into the checkpoint directory")
        raise ConfigError(f"--data {args.data or 'synthetic'}: the checkpoint's tokenizer gives token id {top}, "
                          f"outside the model's vocab of {cfg.vocab_size} (config.json vocab_size): the "
                          "tokenizer files do not belong to this model")
    if bool((stream.tokens == cfg.mask_token_id).any()):
        # The noise blocks are [anchor, MASK x 15]: a data token equal to MASK would be
        # indistinguishable from "to be predicted".
        raise ConfigError(f"--data {args.data or 'synthetic'}: the text holds token id {cfg.mask_token_id}, which the "
                          "drafter uses as its mask token (the embedding's last row): this checkpoint's "
                          "tokenizer fills its whole vocab, so there is no free id for the mask")
    cold_only = tuple(b for b in cold if b not in buckets)
    try:
        source = BatchSource(stream, args.batch_size, buckets + cold_only, seed=args.seed)
        prompts = source.heldout_prompts(args.eval_prompts, args.eval_prompt_len) if args.eval_every else None
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    if args.eval_every:
        try:
            eval_context_len(args.eval_prompt_len, args.eval_new_tokens, cfg.block_size, cfg.max_seq_len)
        except ValueError as exc:
            raise ConfigError(f"--eval-prompt-len/--eval-new-tokens: {exc}") from None
    compile_backend = args.compile
    if compile_backend == "auto":
        # CUDA: inductor compiles the whole step (drafter forward, flex attention, chunked
        # loss) as one graph per (device, bucket), and its backward.
        # CPU: trace the same step with dynamo (cheap 'eager' backend) so the compile machinery,
        # the gate and the dashboard's compile view are exercised without a GPU.
        compile_backend = "inductor" if plan.uses_cuda else "eager"
    return Prepared(plan=plan, cfg=cfg, stream=stream, buckets=buckets, cold_buckets=cold_only,
                    compile_backend=None if compile_backend == "off" else compile_backend,
                    source=source, prompts=prompts)


def _checkpoint_target(args: TrainArgs, preset_cfg):
    """(ModelConfig, tokenizer or None) for --target-checkpoint, from its config.json and
    tokenizer alone: no weights load here. The target's shapes come from the checkpoint; the
    drafter's settings (layers, block size, anchors, loss) stay the preset's."""
    ckpt = args.target_checkpoint
    try:
        cfg = config_from_checkpoint(ckpt, preset_cfg)
        check_loadable(ckpt)
        if has_tokenizer(ckpt):
            return cfg, HFTokenizer(ckpt)
    except CheckpointError as exc:
        raise ConfigError(f"--target-checkpoint: {exc}") from None
    except ValueError as exc:  # the derived ModelConfig itself is invalid (e.g. odd head_dim)
        raise ConfigError(f"--target-checkpoint {ckpt}: {exc}") from None
    if args.data not in ("", "synthetic"):
        raise ConfigError(f"--target-checkpoint {ckpt} has no tokenizer files, so --data {args.data} cannot be "
                          "tokenized for it: copy the model's tokenizer into the directory, or use --data synthetic")
    # Synthetic data without a tokenizer stays byte ids; prepare() checks they fit the vocab.
    return cfg, None


def _parse_lengths(text: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(b) for b in text.split(",") if b.strip()}))
    except ValueError:
        raise ConfigError(f"{option} {text!r}: give sequence lengths like 64,128") from None


class Trainer:
    def __init__(self, args: TrainArgs, prep: Prepared, tel: Telemetry, stop: StopSwitch | None = None,
                 comm: Collectives | None = None) -> None:
        self.args = args
        self.prep = prep
        self.tel = tel
        self.comm = comm or Collectives(World())
        self.world = self.comm.world
        # every process holds as many replicas as this one (checked in train())
        self.global_replicas = len(prep.plan.drafter) * self.world.world_size
        self.stop = stop or StopSwitch()
        self.stop_requested = self.stop.requested
        self.store = CheckpointStore(args.run_dir, keep=args.keep_checkpoints)
        self.compile_control = TorchCompileControl(
            recompile_limit=max(64, 4 * len(prep.buckets) * (len(prep.plan.drafter) + 1)))
        self.gate = CompileGate(
            allow_compile=self.compile_control.allow_compile,
            on_state=self._on_gate_state,
            on_recompile=self._on_recompile,
            parked=tel.parked,
        )
        self.last_saved_step = -1
        # The line of runs this run's checkpoints belong to (contract/rundir.py CHECKPOINTS_DIR):
        # its own id from step 0, the loaded checkpoint's line once resumed.
        self.line = self.tel.run_id
        self.digest: str | None = None      # sha256 of replica 0's weights, when launched
        self.train_seconds = 0.0            # wall time of the pool
        self.all_reduce_seconds = 0.0       # of it, in the cross-process all_reduce
        self._tok_window: list[tuple[float, int]] = []
        self._t_last_log = time.monotonic()
        self.compiler: StepCompiler | None = None
        self._pool: ThreadPool | None = None
        self._warm_reported = False
        self._first_step_seen = False
        self._nonfinite_in_row = 0      # steps in a row whose update was skipped (not finite)
        self._baseline: list[torch.Tensor] | None = None   # weights of the step-0 eval, until it runs
        self._compiles_prepared = False
        self._thread = threading.local()    # per drafter thread: its dynamo config applied

    # -- gate callbacks ------------------------------------------------------------------------

    def _on_gate_state(self, worker: str, state: CompileState) -> None:
        self.tel.set_compile_state(worker, state)

    def _on_recompile(self, worker: str, exc: BaseException) -> None:
        first = str(exc).strip().splitlines()
        reason = " ".join(line.strip() for line in first[1:3]) or first[0]
        self.tel.count_recompile(worker)
        self.tel.log(f"compile: {worker} met an unwarmed shape, recompiling under the exclusive gate ({reason[:200]})")
        self.tel.event(EventKind.COMPILE, thread=worker, state="recompile", reason=reason[:500])

    # -- build --------------------------------------------------------------------------------

    def build(self) -> None:
        args, prep, plan = self.args, self.prep, self.prep.plan
        any_cuda = plan.uses_cuda
        if args.dtype == "auto":
            self.dtype = torch.bfloat16 if any_cuda else torch.float32
        else:
            self.dtype = getattr(torch, args.dtype)
        torch.manual_seed(args.seed)
        self._set_cpu_threads()

        self.source = prep.source
        cold = f" + cold {list(prep.cold_buckets)} (not warmed)" if prep.cold_buckets else ""
        self.tel.log(f"data: {prep.stream.name}, {len(prep.stream)} tokens, buckets {list(prep.buckets)}{cold}, "
                     f"batch {args.batch_size} per drafter thread")

        if args.target_checkpoint is not None:
            cfg = prep.cfg
            self.tel.log(f"target: checkpoint {os.path.abspath(args.target_checkpoint)}, "
                         f"{cfg.num_target_layers} layers, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, "
                         f"tapped layers {list(cfg.target_layer_ids)}")
        self.targets: dict[str, Any] = {}
        for dev in dict.fromkeys(plan.target + plan.drafter[:1]):
            # one frozen target per device that needs one: the target threads' devices, and the
            # first drafter's device, where eval verifies drafts against the target
            t0 = time.monotonic()
            self.targets[dev] = build_target(prep.cfg, args.seed, dev, self.dtype, args.target_checkpoint)
            self.tel.log(f"target on {dev} ready in {time.monotonic() - t0:.1f}s")
        self.replicas = []
        self.attn = []
        for r, dev in enumerate(plan.drafter):
            # the drafter copies the target's embedding and head onto its own device
            source = self.targets.get(dev) or self.targets[plan.target[0]]
            model = build_drafter(prep.cfg, source, args.seed, dev, self.dtype)
            model.train()
            self.replicas.append(model)
            self.attn.append(choose_backend(args.attention, torch.device(dev)))
        # the step while the compiled one is built: nothing in it is compiled
        self.eager_attn = [choose_backend("sdpa", torch.device(dev)) for dev in plan.drafter]
        self._check_replicas_identical()
        trainable = sum(p.numel() for p in self.replicas[0].parameters() if p.requires_grad)
        self.tel.log(f"drafter: {len(self.replicas)} replica(s) on {', '.join(plan.drafter)}, "
                     f"{trainable / 1e6:.2f}M trainable parameters, attention {type(self.attn[0]).__name__}, "
                     f"compile {prep.compile_backend or 'off'}")
        self.optimizers = [replica_optimizer([p for p in m.parameters() if p.requires_grad], args.lr,
                                             args.weight_decay) for m in self.replicas]
        first = torch.device(plan.drafter[0])
        self.peak_tflops = perf.assumed_peak_tflops(
            torch.cuda.get_device_name(first) if first.type == "cuda" else "cpu", args.peak_tflops)
        self._step_flops: dict[int, Any] = {}
        self._t_last_step_end: float | None = None
        self.eval_attention = choose_backend("sdpa", torch.device(plan.drafter[0]))
        self.prompts = prep.prompts
        self.step_fn = None     # the compiled step, made by the compiler thread (_prepare_compiles)

    def _set_cpu_threads(self) -> None:
        """Intra-op threads per worker on CPU.

        Several worker threads each run small ops; letting every one of them spin up an OpenMP
        team over all cores oversubscribes the machine (measured: verification 18x slower on a
        loaded 2-core box). Split the cores between the CPU worker threads instead.
        """
        plan = self.prep.plan
        n_cpu_workers = sum(1 for d in plan.target + plan.drafter if d == "cpu")
        if self.args.cpu_threads:
            n = self.args.cpu_threads
        elif n_cpu_workers:
            n = max(1, (os.cpu_count() or 1) // n_cpu_workers)
        else:
            return
        torch.set_num_threads(n)
        self.tel.log(f"cpu: {n} intra-op thread(s) per worker ({n_cpu_workers} cpu worker thread(s))")

    def _check_replicas_identical(self) -> None:
        ref = list(self.replicas[0].parameters())
        for r, m in enumerate(self.replicas[1:], 1):
            for (name, b), a in zip(m.named_parameters(), ref):
                if not torch.equal(a.detach(), b.detach().to(a.device)):
                    raise RuntimeError(f"drafter replica {r} differs from replica 0 in {name}: the replicas "
                                       "must stay bit-identical (gradient averaging is broken)")

    # -- resume / checkpoint -----------------------------------------------------------------

    def resume(self) -> int:
        """--resume: every rank continues from rank 0's newest checkpoint (only rank 0 writes
        checkpoints, so on several nodes only its run directory holds them)."""
        if not self.args.resume:
            return 0
        offer = self.comm.broadcast_from_leader(self._checkpoint_offer() if self.world.is_leader else None)
        if offer["error"] is not None:
            raise ConfigError(offer["error"] if self.world.is_leader else f"rank 0: {offer['error']}")
        if offer["step"] is None:
            self.tel.log(f"resume: no checkpoint in {self.store.root}; starting at step 0")
            return 0
        step, path, state = offer["step"], offer["path"], offer["state"]
        self.line = offer["line"] or self.line
        for m, opt in zip(self.replicas, self.optimizers):
            m.load_state_dict(state["drafter"])
            opt.load_state_dict(state["optimizer"])     # copies: no replica shares Adam state
        self._check_replicas_identical()
        self.last_saved_step = step
        self.source.skip = offer["skip"]
        if offer["window"]:
            self.tel.log(f"resume: passing over the batches of steps {step + 1}..{step + offer['window']} "
                         f"(the diverged window; {offer['skip']} batches skipped in all)")
        sender = "" if self.world.is_leader else ", sent by rank 0"
        of_run = f" of run {offer['run_id']}" if offer["run_id"] else ""
        self.tel.log(f"resume: loaded checkpoint at step {step}{of_run} from {path}{sender}")
        self.tel.event(EventKind.CHECKPOINT, step=step, path=path, action="resumed")
        return step

    def _checkpoint_offer(self) -> dict[str, Any]:
        """Rank 0's newest usable checkpoint, or why there is none to resume from."""
        none = {"error": None, "step": None, "path": None, "state": None, "run_id": "", "line": "", "skip": 0,
                "window": 0}
        # A recovery's rollback names the checkpoint (rollback.py): the newest one may hold the
        # diverged run's weights.
        try:
            chosen = rollback.from_env()
            loaded = self.store.load_at(chosen.path) if chosen.path else self.store.load_latest(warn=self.tel.log)
        except UnusableCheckpoint as exc:
            return {**none, "error": str(exc)}
        if loaded is None:
            return none
        info, state = loaded
        want = self.args.fingerprint(self.global_replicas)
        got = state.get("fingerprint", {})
        diff = [f"--{k.replace('_', '-')} {got.get(k)!r} (now {v!r})" for k, v in want.items() if got.get(k) != v]
        if diff:
            return {**none, "error": f"checkpoint {info.path} was made with {', '.join(diff)}: resume with the "
                                     "same arguments, or use a new --run-dir"}
        try:
            BatchSource.from_state(self.prep.stream, state["data"])
        except DataError as exc:
            return {**none, "error": str(exc)}
        # The diverged window's batches are passed over, on top of any an earlier rollback skipped.
        window = chosen.window(info.step) if chosen.path else 0
        skip = int(state["data"].get("skip", 0)) + window * self.global_replicas
        return {"error": None, "step": info.step, "path": info.path, "state": state, "run_id": info.run_id,
                "line": info.line, "skip": skip, "window": window}

    def save_checkpoint(self, step: int) -> None:
        if step == self.last_saved_step:
            return
        t0 = time.monotonic()
        # Only replica 0 is saved, so prove here that it stands for all of them.
        self._check_replicas_identical()
        state = {
            "step": step,
            "drafter": self.replicas[0].state_dict(),
            "optimizer": self.optimizers[0].state_dict(),
            "data": self.source.state(),
            "fingerprint": self.args.fingerprint(self.global_replicas),
            "config": self.prep.cfg.to_dict(),
        }
        info = self.store.save(step, state, {"run_id": self.tel.run_id, "line": self.line, "args": asdict(self.args)})
        self.last_saved_step = step
        secs = time.monotonic() - t0
        self.tel.log(f"checkpoint: step {step} saved to {info.path} in {secs:.2f}s")
        self.tel.event(EventKind.CHECKPOINT, step=step, path=info.path, seconds=round(secs, 3), action="saved")

    # -- warm-up ----------------------------------------------------------------------------

    def _warm_batch(self, length: int):
        n = self.args.batch_size * length
        toks = self.prep.stream.tokens[:n].view(self.args.batch_size, length)
        mask = self.prep.stream.loss_mask[:n].view(self.args.batch_size, length)
        return Batch(toks.clone(), mask.clone())

    def compiles(self) -> bool:
        """Does the step run compiled code (the whole step, or the flex kernel on its own)?"""
        return self.prep.compile_backend is not None or any(
            isinstance(a, FlexAttention) and a.compiled for a in self.attn)

    def start_compiler(self, hold: bool = False) -> None:
        """Build the compiled step's graphs, every (drafter device, bucket), in the background
        (step_compiler.py): the drafter threads train with the eager step meanwhile. `hold`:
        the first compile starts at the first step's end (on_step_end releases it)."""
        plan = self.prep.plan
        self.tel.set_phase(Phase.WARMING)
        self.tel.set_compile_state("main", CompileState.COMPILED)
        if not self.compiles():
            for r in range(len(plan.drafter)):
                self.tel.set_compile_state(drafter_thread_name(r), CompileState.COMPILED)
            return
        for r in range(len(plan.drafter)):
            self.tel.set_compile_state(drafter_thread_name(r), CompileState.WARMING)
        # A private copy of each device's drafter to compile with: its backward must not
        # accumulate into a replica that a drafter thread is training. Frozen weights are shared.
        self._compile_models = {}
        for r, dev in enumerate(plan.drafter):
            if dev not in self._compile_models:
                model = self.replicas[r]
                memo = {id(p): p for p in model.parameters() if not p.requires_grad}
                self._compile_models[dev] = (r, copy.deepcopy(model, memo))
        self._warm_shapes = {(dev, length) for dev in self._compile_models for length in self.prep.buckets}
        self._t_compile = time.monotonic()
        self.compiler = StepCompiler(self.gate, self._compile_shape, on_compiled=self._on_shape_compiled,
                                     on_error=self._on_compile_failed)
        self.compiler.start(sorted(self._warm_shapes, key=lambda k: (k[0], k[1])), hold=hold)
        self.tel.log(f"compile: building the compiled step for buckets {list(self.prep.buckets)} on "
                     f"{', '.join(self._compile_models)} in the background; the steps run eager until it is ready")

    def _wait_for_compiler(self) -> None:
        """--wait-for-compile: the first step waits until every warm-up graph is built."""
        while self.compiler is not None and not self.compiler.idle and self.compiler.failed is None:
            if self.stop_requested.is_set():
                raise StopRequested()
            time.sleep(0.05)

    def _prepare_compiles(self) -> None:
        """What compiling needs, done once by the compiler thread before its first compile: each
        part imports torch._dynamo (seconds of Python: the process's first import of it, after
        the first step), which the main thread and the eager steps need not wait for."""
        self.tel.install_compile_callbacks()
        self.compile_control.apply_thread_compile_config()
        self.compile_control.fail_on_recompile()   # the compiler flips it while it holds the gate
        if self.prep.compile_backend:
            # ONE compiled step for every replica: the gate governs its compiles, and replicas
            # on one device share its graphs.
            self.step_fn = objective.compiled_objective(self.prep.compile_backend)
        self._compiles_prepared = True

    def _compile_shape(self, shape: tuple[str, int]) -> None:
        """One forward and backward of the compiled step on `shape`, on the device's private copy
        (runs in the compiler thread under the gate's exclusive hold)."""
        dev, length = shape
        r, model = self._compile_models[dev]
        if not self._compiles_prepared:
            self._prepare_compiles()
        name = drafter_thread_name(r)
        target = self.targets[self.prep.plan.target[r % len(self.prep.plan.target)]]
        with self.tel.attribute_compiles_to(name), self.compile_control.allow_compile():
            tb = objective.target_forward(target, self._warm_batch(length))
            loss, _ = objective.drafter_loss(model, tb.to(torch.device(dev)), torch.Generator().manual_seed(0),
                                             self.attn[r], step=self.step_fn)
            loss.backward()
            model.zero_grad(set_to_none=True)
            if dev.startswith("cuda"):
                torch.cuda.synchronize(dev)

    def _on_shape_compiled(self, shape: tuple[str, int], seconds: float) -> None:
        dev, length = shape
        r, _ = self._compile_models[dev]
        ts = self.tel.thread(drafter_thread_name(r))
        self.tel.log(f"compile: built the step for length {length} on {dev} in {seconds:.1f}s "
                     f"({ts.graphs} graph(s) so far)")
        self._warm_shapes.discard(shape)
        if not self._warm_shapes and not self._warm_reported:
            self._warm_reported = True
            secs = time.monotonic() - self._t_compile
            graphs = sum(self.tel.thread(drafter_thread_name(r)).graphs for r in range(len(self.prep.plan.drafter)))
            self.tel.event(EventKind.COMPILE, thread="main", state="warmup_done", seconds=round(secs, 3),
                           graphs=graphs, buckets=list(self.prep.buckets), drafter_devices=list(self.prep.plan.drafter))
            self.tel.log(f"compile: warm-up done in {secs:.1f}s (in the background); the steps switch to the "
                         "compiled step at the next step boundary")

    def _on_compile_failed(self, exc: BaseException) -> None:
        self.tel.log_exception("the step compiler", exc)
        pool = self._pool
        if pool is not None:
            pool.fail(COMPILER_THREAD, exc)

    def _on_step_mode(self, step: int, compiled: bool) -> None:
        """Every local replica switches at the same step (decided between steps)."""
        state = CompileState.COMPILED if compiled else CompileState.WARMING
        for r in range(len(self.prep.plan.drafter)):
            self.tel.set_compile_state(drafter_thread_name(r), state)
        mode = "compiled" if compiled else "eager"
        self.tel.event(EventKind.COMPILE, thread="main", state="step_mode", mode=mode, step=step)
        self.tel.log(f"compile: steps from {step + 1} run the {mode} step")

    # -- the per-step pieces the pool calls --------------------------------------------------------

    def produce(self, batch_index: int, j: int):
        dev = self.prep.plan.target[j]
        tb = objective.target_forward(self.targets[dev], self.source.batch_at(batch_index))
        if self.args.inject_nan_at and (batch_index + self.source.skip) // self.global_replicas == self.args.inject_nan_at - 1:
            # A poisoned batch, found by its index in the data: a rollback that passes over the
            # diverged window never meets it again.
            tb = dataclasses.replace(tb, taps=torch.full_like(tb.taps, float("nan")))
        return tb

    def compute_loss(self, r: int, tb, gen):
        """The compiled step (every shape it meets has a graph, or the gate compiles one)."""
        if not getattr(self._thread, "compile_config", False):
            # this thread's dynamo config, at its first compiled step: applying it imports
            # torch._dynamo, which an eager step need not wait for
            self.compile_control.apply_thread_compile_config()
            self._thread.compile_config = True
        loss, metrics = objective.drafter_loss(self.replicas[r], tb, gen, self.attn[r], step=self.step_fn)
        self._step_flops[r] = metrics.flops  # host-side count, for MFU at the step's end
        return loss, metrics

    def eager_loss(self, r: int, tb, gen):
        """The step with no compiled code (SDPA attention), while the compiled one is built."""
        loss, metrics = objective.drafter_loss(self.replicas[r], tb, gen, self.eager_attn[r])
        self._step_flops[r] = metrics.flops
        return loss, metrics

    def on_step_end(self, step: int, metrics: list[StepMetrics], stopping: bool) -> bool:
        """Bookkeeping of a finished step, while every drafter thread waits, in named steps:
        metrics, telemetry, eval, the log line, checkpoint, publish. `stopping`: a stop was
        agreed, so this step is the last."""
        done = step + 1
        loss, acc, tps, now = self._step_metrics(metrics, done)
        self._record_step(done, metrics, loss, acc, tps, now)
        if self.compiler is not None:
            self.compiler.release()     # held until the first step ended (start_compiler)
        tau = self._eval_step(step, done)
        self._log_step(done, loss, acc, tps, tau)
        self._nonfinite_step(done, loss)
        if stopping:
            self.stop_requested.set()   # agreed: another process may have been the one asked
        self._checkpoint_step(done, stopping)
        self.tel.publish()
        if stopping:
            saved = f"checkpoint at step {done} saved" if self.world.is_leader else f"rank 0 saves step {done}"
            self.tel.log(f"stop requested: {saved}, exiting")
        self._t_last_step_end = time.monotonic()
        return stopping

    def _nonfinite_step(self, done: int, loss: float) -> None:
        """A step whose loss or gradients were not finite had its update skipped (pool.py);
        its step line and event show the value, so a watcher names the divergence where it
        began. --nonfinite-patience such steps in a row end the run with the fix."""
        if math.isfinite(loss) and self._pool is not None and self._pool.grads_finite:
            self._nonfinite_in_row = 0
            return
        self._nonfinite_in_row += 1
        what = f"loss {loss}" if not math.isfinite(loss) else "gradients not finite"
        self.tel.log(f"step {done}: {what}, update skipped ({self._nonfinite_in_row} in a row of "
                     f"--nonfinite-patience {self.args.nonfinite_patience})")
        if self._nonfinite_in_row >= self.args.nonfinite_patience:
            raise FloatingPointError(f"{what} for {self._nonfinite_in_row} steps in a row, to step {done}: "
                                     "lower --lr, check the data or resume from an earlier checkpoint")

    def _step_metrics(self, metrics: list[StepMetrics], done: int) -> tuple[float, float, float | None, float]:
        """The replicas' mean loss and accuracy, tokens/s over the last 10 s, and now
        (monotonic)."""
        loss = sum(m.loss for m in metrics) / len(metrics)
        acc = sum(m.acc for m in metrics) / len(metrics)
        now = time.monotonic()
        self._tok_window.append((now, sum(m.tokens for m in metrics)))
        self._tok_window = [(t, n) for t, n in self._tok_window if now - t <= 10.0]
        span = now - self._tok_window[0][0] if len(self._tok_window) > 1 else 0.0
        tps = sum(n for _, n in self._tok_window[1:]) / span if span > 0 else None
        return loss, acc, tps, now

    def _record_step(self, done: int, metrics: list[StepMetrics], loss: float, acc: float,
                     tps: float | None, now: float) -> None:
        """The step into status.json (at the next publish) and events.jsonl."""
        step_s, mfu = self._step_time_and_mfu(now)
        first_step_s = self._first_step_s()
        # JSON has no NaN: a non-finite loss is null in status.json and events.jsonl (the step
        # line in train.log writes it as it is).
        loss_or_none = loss if math.isfinite(loss) else None
        acc = acc if math.isfinite(acc) else None
        self.tel.update(step=done, loss=loss_or_none, accuracy=acc, tokens_per_s=tps, step_time_s=step_s, mfu=mfu,
                        peak_tflops=self.peak_tflops)
        per_pos = [round(sum(m.acc_per_pos[k] for m in metrics) / len(metrics), 4)
                   for k in range(min(len(m.acc_per_pos) for m in metrics))] if metrics else []
        per_pos = [a if math.isfinite(a) else None for a in per_pos]
        self.tel.event(EventKind.STEP, step=done, loss=loss_or_none and round(loss_or_none, 5),
                       accuracy=acc and round(acc, 5),
                       acc_per_pos=per_pos, tokens_per_s=tps and round(tps, 1),
                       step_time_s=step_s and round(step_s, 5), mfu=mfu and round(mfu, 4),
                       peak_tflops=self.peak_tflops,
                       **({"first_step_s": first_step_s} if first_step_s is not None else {}))

    def _first_step_s(self) -> float | None:
        """Seconds from the process start to the end of its first step, on that step only."""
        if self._first_step_seen:
            return None
        self._first_step_seen = True
        first_step_s = round(time.time() - process_start_time(), 3)
        mode = "compiled" if self._pool is not None and self._pool.compiled_steps else "eager"
        self.tel.log(f"first step: {first_step_s:.1f}s after the process started ({mode} step)")
        self.tel.update(first_step_s=first_step_s)
        return first_step_s

    def _eval_step(self, step: int, done: int) -> float | None:
        """The baseline eval of the weights the run started from (once), then tau every
        --eval-every steps and at the last one, on the leader; the tau measured now, if any."""
        if self._baseline is not None:
            weights, self._baseline = self._baseline, None
            tau0 = self._evaluate_in_phase(step, weights)
            self.tel.log(f"eval: step {step} tau {tau0:.2f} (the weights the run started from)")
        args = self.args
        if self.world.is_leader and args.eval_every and (done % args.eval_every == 0 or done == args.steps):
            return self._evaluate_in_phase(done)
        return None

    def _evaluate_in_phase(self, step: int, weights: list[torch.Tensor] | None = None) -> float:
        """`evaluate` in the EVALUATING phase: a known pause, so the watcher's silence limit
        learned from the steps' pace does not apply while it lasts."""
        self.tel.set_phase(Phase.EVALUATING)
        try:
            return self.evaluate(step, weights)
        finally:
            self.tel.set_phase(Phase.TRAINING)

    def _log_step(self, done: int, loss: float, acc: float, tps: float | None, tau: float | None) -> None:
        """train.log's step line: every --log-every steps, at the last one and with each eval."""
        args = self.args
        if done % args.log_every == 0 or done == args.steps or tau is not None or not math.isfinite(loss):
            tau_s = f" tau {tau:.2f}" if tau is not None else ""
            tps_s = f" tok/s {tps:,.0f}" if tps else ""
            self.tel.log(f"step {done}/{args.steps} loss {loss:.4f} acc {acc:.3f}{tau_s}{tps_s}")

    def _checkpoint_step(self, done: int, stopping: bool) -> None:
        """The leader saves every --checkpoint-every steps, at the last one and on a stop."""
        args = self.args
        if self.world.is_leader and (done % args.checkpoint_every == 0 or done == args.steps or stopping):
            self.tel.set_phase(Phase.CHECKPOINTING)
            self.save_checkpoint(done)
            self.tel.set_phase(Phase.TRAINING)

    def _step_time_and_mfu(self, now: float) -> tuple[float | None, float | None]:
        """Wall seconds since the previous step's bookkeeping ended (so an eval or checkpoint
        there is not billed to this step), and the drafter devices' MFU over them."""
        if self._t_last_step_end is None:
            return None, None
        seconds = now - self._t_last_step_end
        flops = sum(f.total for f in self._step_flops.values())
        return seconds, perf.mfu(flops, seconds, self.peak_tflops, devices=len(set(self.prep.plan.drafter)))

    def evaluate(self, step: int, weights: list[torch.Tensor] | None = None) -> float:
        """tau of replica 0, or of `weights` (its trainable parameters in order) put in its place
        for the evaluation and then taken out again, bit for bit (every drafter thread waits)."""
        dev = self.prep.plan.drafter[0]
        t0 = time.monotonic()
        model = self.replicas[0]
        params = [p for p in model.parameters() if p.requires_grad]
        current = None
        if weights is not None:
            with torch.no_grad():
                current = [p.detach().clone() for p in params]
                for p, w in zip(params, weights):
                    p.copy_(w)
        model.eval()
        try:
            tau = float(acceptance_length(self.targets[dev], model, self.prompts, self.eval_attention,
                                          self.args.eval_new_tokens))
        finally:
            model.train()
            if current is not None:
                with torch.no_grad():
                    for p, c in zip(params, current):
                        p.copy_(c)
        secs = time.monotonic() - t0
        self.tel.update(tau=tau)
        self.tel.event(EventKind.EVAL, step=step, tau=round(tau, 4), seconds=round(secs, 3),
                       prompts=int(self.prompts.shape[0]), new_tokens=self.args.eval_new_tokens)
        return tau

    # -- run ------------------------------------------------------------------------------

    def train(self) -> int:
        """Returns the number of completed steps; raises the first worker error."""
        args, plan, world = self.args, self.prep.plan, self.world
        start = self.resume()
        self.check_ranks_agree("at the start")
        if start >= args.steps:
            self.tel.log(f"nothing to do: checkpoint is at step {start}, --steps is {args.steps}")
            return start
        self.tel.update(step=start)
        try:
            self.start_compiler(hold=not args.wait_for_compile)
            if args.wait_for_compile:
                self._wait_for_compiler()
            self.stop.arm()
            n_local = len(plan.drafter)
            spec = PoolSpec(
                seed=args.seed, start_step=start, total_steps=args.steps,
                target_devices=plan.target, drafter_devices=plan.drafter,
                queue_depth=args.queue_depth, max_grad_norm=args.max_grad_norm,
                produce=self.produce, compute_loss=self.compute_loss,
                replicas=self.replicas, optimizers=self.optimizers, on_step_end=self.on_step_end,
                lr_at=functools.partial(warmup_then_constant_lr, lr=args.lr, warmup_steps=args.warmup_steps),
                stop_requested=self.stop_requested.is_set,
                all_reduce=self.comm.all_reduce, first_replica=world.rank * n_local,
                global_replicas=self.global_replicas,
                on_thread_beat=self.tel.thread_beat, parked=self.tel.parked,
                compiler=self.compiler, eager_loss=self.eager_loss, on_step_mode=self._on_step_mode,
            )
            pool = self._pool = ThreadPool(spec, self.gate)
            if args.eval_every and world.is_leader:
                # the baseline, tau of the drafter as it starts (untrained, or as resumed), is
                # measured at the first step's end from these weights: the first step does not
                # wait for an evaluation
                self._baseline = [p.detach().to("cpu", copy=True)
                                  for p in self.replicas[0].parameters() if p.requires_grad]
            self.tel.set_phase(Phase.TRAINING)
            ranks = f" on each of {world.world_size} ranks ({self.comm.backend})" if world.launched else ""
            self.tel.log(f"training: steps {start}..{args.steps}, {len(plan.target)} target thread(s) on "
                         f"{', '.join(plan.target)}, {n_local} drafter thread(s) on {', '.join(plan.drafter)}{ranks}")
            if self.compiler is not None and self.compiler.failed is not None:
                raise WorkerFailed(COMPILER_THREAD, self.compiler.failed)
            t0 = time.monotonic()
            self._t_last_step_end = time.monotonic()
            pool.start()
            pool.join(poll=self.tel.publish)
            if pool.error is not None:
                name, exc = pool.error
                self.tel.thread_failed(name, exc)
                raise WorkerFailed(name, exc)
            self.train_seconds = time.monotonic() - t0
            self.all_reduce_seconds = pool.all_reduce_seconds
            if world.launched:
                steps = max(1, pool.last_completed_step - start)
                self.tel.log(f"all_reduce: {1000 * pool.all_reduce_seconds / steps:.2f} ms a step, "
                             f"{100 * pool.all_reduce_seconds / max(self.train_seconds, 1e-9):.1f}% of the "
                             "training time (waiting for the slowest rank included)")
                self.check_ranks_agree("at the end")
            return pool.last_completed_step
        finally:
            if self.compiler is not None:
                self.gate.abort("the run is stopping")   # a compile waiting for its turn gives up
                self.compiler.stop(wait=False)           # the caller decides whether to wait
            # The stance is process-global: give it back, so an in-process caller (a test, a
            # notebook) does not inherit fail_on_recompile.
            self.compile_control.default_stance()

    def check_ranks_agree(self, when: str) -> None:
        """Every rank holds as many replicas as this one, and bit-identical weights."""
        self.digest = weights_digest(self.replicas[0]) if self.world.launched else None
        mine = (len(self.prep.plan.drafter), self.digest)
        everyone = self.comm.gather(mine)
        counts = [n for n, _ in everyone]
        if len(set(counts)) > 1:
            raise ConfigError(f"the ranks hold {counts} drafter replicas (rank order): give every node the same "
                              "number of --drafter-devices")
        differ = [r for r, (_, d) in enumerate(everyone) if d != everyone[0][1]]
        if differ:
            raise RuntimeError(f"{when}, the drafter weights of rank(s) {differ} differ from rank 0's: "
                               "every rank must start from the same seed and checkpoint")
        if self.world.launched:
            self.tel.log(f"ranks agree {when}: {self.world.world_size} x {counts[0]} replica(s), "
                         f"weights sha256 {self.digest[:16]}")


class WorkerFailed(RuntimeError):
    def __init__(self, thread: str, exc: BaseException) -> None:
        super().__init__(f"{thread}: {type(exc).__name__}: {exc}")
        self.thread = thread
        self.exc = exc
