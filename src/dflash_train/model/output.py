"""What every frozen target gives the trainer (the built-in one in target.py, a transformers
checkpoint in hf_target.py): its output type, the batch checks, and freezing."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import ModelConfig


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [B, T, V]
    taps: torch.Tensor    # [B, T, len(target_layer_ids) * hidden]


def check_token_batch(input_ids: torch.Tensor, cfg: ModelConfig, what: str = "input_ids") -> None:
    """Shape checks with messages that name the fix (a bad batch must not surface as a CUDA
    index assert deep inside an embedding)."""
    if input_ids.dim() != 2:
        raise ValueError(f"{what} must be [batch, seq] (got shape {tuple(input_ids.shape)})")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{what} must hold integer token ids (got {input_ids.dtype})")
    if input_ids.shape[1] > cfg.max_seq_len:
        raise ValueError(f"{what} has {input_ids.shape[1]} positions, more than max_seq_len "
                         f"{cfg.max_seq_len}: use a shorter sequence bucket or a larger preset")
    if input_ids.device.type == "cpu" and input_ids.numel() and not torch.compiler.is_compiling():
        # Value check only where it costs no device sync (on CUDA it would be an opaque assert),
        # and not while dynamo traces (it would specialise the graph on the ids' values).
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= cfg.vocab_size:
            raise ValueError(f"{what} holds token ids {lo}..{hi} outside the vocab of "
                             f"{cfg.vocab_size}: the data's tokenizer does not match the target")


def freeze(model: nn.Module) -> nn.Module:
    model.eval()
    model.requires_grad_(False)
    return model
