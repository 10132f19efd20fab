"""A local transformers checkpoint as the frozen target (optional: needs `transformers`).

Reading the shapes (config.json) needs nothing but the stdlib, so the CLI can validate a
checkpoint directory and derive a ModelConfig before torch or transformers load anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ..config import ModelConfig
from .target import TargetOutput, check_token_batch, freeze


class CheckpointError(ValueError):
    """A target checkpoint directory that cannot be used."""


def read_hf_config(checkpoint_dir: str | Path) -> dict:
    path = Path(checkpoint_dir)
    if not path.is_dir():
        raise CheckpointError(f"target checkpoint directory not found: {path}")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"{path} has no config.json: point at a transformers checkpoint directory")
    try:
        return json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg_file} is not valid JSON ({e.msg})") from None


def config_from_checkpoint(checkpoint_dir: str | Path, base: ModelConfig, num_taps: int = 5) -> ModelConfig:
    """Target shapes from the checkpoint; drafter settings (layers, block, loss) from `base`.
    Taps: `num_taps` layers spread from layer 1 to layer L-3, as DFlash does."""
    hf = read_hf_config(checkpoint_dir)
    try:
        hidden, layers = int(hf["hidden_size"]), int(hf["num_hidden_layers"])
        heads = int(hf["num_attention_heads"])
        vocab, inter = int(hf["vocab_size"]), int(hf["intermediate_size"])
    except KeyError as e:
        raise CheckpointError(f"{checkpoint_dir}/config.json lacks {e.args[0]!r}: "
                              "is this a decoder-only causal LM?") from None
    kv = int(hf.get("num_key_value_heads", heads))
    head_dim = int(hf.get("head_dim") or hidden // heads)
    lo, hi = 1, max(1, layers - 3)
    n = max(1, min(num_taps, hi - lo + 1))
    taps = tuple(sorted({lo + round(i * (hi - lo) / max(n - 1, 1)) for i in range(n)}))
    return base.with_(
        vocab_size=vocab, hidden_size=hidden, num_target_layers=layers, num_heads=heads,
        num_kv_heads=kv, head_dim=head_dim, intermediate_size=inter, target_layer_ids=taps,
        max_seq_len=min(int(hf.get("max_position_embeddings", base.max_seq_len)), 1 << 16),
        rope_theta=float(hf.get("rope_theta", base.rope_theta)),
        rms_eps=float(hf.get("rms_norm_eps", base.rms_eps)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qk_norm=str(hf.get("model_type", "")).startswith("qwen3"),
        mask_token_id=base.mask_token_id if base.mask_token_id < vocab else vocab - 1,
        target_pretrain_steps=0,
    )


class HFTargetModel(nn.Module):
    def __init__(self, model: nn.Module, cfg: ModelConfig) -> None:
        super().__init__()
        self.model = model
        self.cfg = cfg

    def input_embedding_weight(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    def output_head_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight

    def forward(self, input_ids: torch.Tensor) -> TargetOutput:
        check_token_batch(input_ids, self.cfg)
        out = self.model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
        # hidden_states[0] is the embedding output; layer i's output is hidden_states[i + 1].
        taps = torch.cat([out.hidden_states[i + 1] for i in self.cfg.target_layer_ids], dim=-1)
        return TargetOutput(logits=out.logits, taps=taps)


class HFTokenizer:
    """The checkpoint's own tokenizer, with the encode/decode/eos_id surface of ByteTokenizer,
    for --data files when the target is a checkpoint (byte ids would mean nothing to it)."""

    def __init__(self, checkpoint_dir: str | Path) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise CheckpointError("a target checkpoint needs the `transformers` package: "
                                  "pip install 'dflash-tui[hf]'") from None
        self.tok = AutoTokenizer.from_pretrained(str(checkpoint_dir))
        self.eos_id = self.tok.eos_token_id if self.tok.eos_token_id is not None else 0
        self.vocab_size = len(self.tok)

    def encode(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids])


def load_hf_target(checkpoint_dir: str | Path, cfg: ModelConfig, device, dtype) -> HFTargetModel:
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        raise CheckpointError("a target checkpoint needs the `transformers` package: "
                              "pip install 'dflash-tui[hf]' (or run without --target-checkpoint "
                              "to use the built-in target)") from None
    expected = config_from_checkpoint(checkpoint_dir, cfg)
    shape = ("vocab_size", "hidden_size", "num_target_layers", "num_heads", "num_kv_heads", "head_dim")
    wrong = [f"{k} {getattr(cfg, k)} (checkpoint: {getattr(expected, k)})" for k in shape
             if getattr(cfg, k) != getattr(expected, k)]
    if wrong or max(cfg.target_layer_ids) >= expected.num_target_layers:
        raise CheckpointError(f"model config does not match the checkpoint {checkpoint_dir}: "
                              f"{', '.join(wrong) or 'tapped layers out of range'}; derive it with "
                              "config_from_checkpoint(dir, preset)")
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir), torch_dtype=dtype)
    return freeze(HFTargetModel(model, cfg).to(device))
