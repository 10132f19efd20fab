"""A short deterministic pre-fit of the default target on the synthetic corpus.

Why: a randomly initialised LM's greedy continuation is close to noise (often one token
repeated), so a drafter trained to imitate it has nothing to learn and acceptance length says
nothing. A few hundred steps on the synthetic language give the target real structure.

The result is cached on disk, keyed by everything that determines it, so every run and every
resume with the same setup loads bit-identical target weights instead of re-deriving them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from ..adamw import FusedAdamW
from ..config import ModelConfig
from ..data import BatchSource, SyntheticCorpus

# 3: the pre-fit's optimizer is the trainer's FusedAdamW (torch.optim imports torch._dynamo,
# seconds of a cold start's critical path), so its weights differ from format 2's by rounding.
CACHE_FORMAT = 3
PRETRAIN_BATCH = 8
PRETRAIN_LR = 3e-3


def default_cache_dir() -> Path:
    env = os.environ.get("DFLASH_TRAIN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dflash_train"


# Fields that shape the target's weights; drafter-only settings (taps, block, anchors, loss)
# must not invalidate the cached target.
TARGET_FIELDS = ("vocab_size", "hidden_size", "num_target_layers", "num_heads", "num_kv_heads",
                 "head_dim", "intermediate_size", "max_seq_len", "rope_theta", "rms_eps",
                 "tie_embeddings", "qk_norm", "target_pretrain_steps")


def cache_key(cfg: ModelConfig, seed: int, device: torch.device) -> str:
    shape = {k: v for k, v in cfg.to_dict().items() if k in TARGET_FIELDS}
    ident = {"format": CACHE_FORMAT, "cfg": shape, "seed": seed, "device": device.type,
             "batch": PRETRAIN_BATCH, "lr": PRETRAIN_LR,
             "torch": ".".join(torch.__version__.split(".")[:2])}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def pretrain(model: torch.nn.Module, cfg: ModelConfig, seed: int, device: torch.device) -> None:
    if device.type == "cpu":
        # One intra-op thread: the result no longer depends on the machine's core count, and on
        # a shared box it avoids oversubscription stalls (measured 5-10x on 2 busy cores).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _pretrain(model, cfg, seed, device)
        finally:
            torch.set_num_threads(threads)
    else:
        _pretrain(model, cfg, seed, device)


def _pretrain(model: torch.nn.Module, cfg: ModelConfig, seed: int, device: torch.device) -> None:
    model.to(device=device, dtype=torch.float32).train()
    seq = min(64, cfg.max_seq_len)
    source = BatchSource(SyntheticCorpus().stream(200_000, seed=10_000 + seed),
                         PRETRAIN_BATCH, (seq,), seed=seed)
    params = list(model.parameters())
    opt = FusedAdamW(params, lr=PRETRAIN_LR, weight_decay=0.0)
    steps = cfg.target_pretrain_steps
    warmup = max(1, steps // 10)
    for step in range(steps):
        opt.param_groups[0]["lr"] = PRETRAIN_LR * min(1.0, (step + 1) / warmup)  # linear warm-up
        ids = next(source).input_ids.to(device)
        logits = model(ids).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        for p in params:
            p.grad = None
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    model.eval()


def load_or_pretrain(model: torch.nn.Module, cfg: ModelConfig, seed: int, device: torch.device,
                     cache_dir: str | Path | None = None) -> None:
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    path = cache_dir / f"target-{cache_key(cfg, seed, device)}.pt"
    if path.exists():
        try:
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            return
        except Exception as e:  # a torn or foreign file: rebuild rather than fail the run
            print(f"dflash_train: ignoring unreadable target cache {path} ({e}); rebuilding",
                  file=sys.stderr)
    print(f"dflash_train: pre-fitting the target on the synthetic corpus "
          f"({cfg.target_pretrain_steps} steps, once; cached at {path})", file=sys.stderr)
    pretrain(model, cfg, seed, device)
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".target-", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # atomic: concurrent builders race harmlessly, readers never see half
    except OSError as e:
        print(f"dflash_train: could not cache the target at {path} ({e}); continuing uncached",
              file=sys.stderr)
