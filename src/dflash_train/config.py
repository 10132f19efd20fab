"""Model shapes for the target and the DFlash drafter, with named presets.

Torch-free on purpose: the CLI validates a preset and its arguments before torch (and any
compile) is touched, and the checkpoint stores the config as plain JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

# Byte-level token ids shared by the synthetic corpus and the byte tokenizer (data.py):
# 0..255 are bytes, then four specials. A preset's vocab must hold them.
PAD_ID = 256
BOS_ID = 257
EOS_ID = 258
MASK_ID = 259
BYTE_VOCAB_SIZE = 260


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_target_layers: int
    num_drafter_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    block_size: int = 16
    mask_token_id: int = MASK_ID
    # Target layers whose outputs are concatenated and injected into the drafter (0-based).
    target_layer_ids: tuple[int, ...] = (1, 3)
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    # Loss weight of block position k (k >= 1) is exp(-(k-1)/loss_gamma).
    loss_gamma: float = 7.0
    anchors_per_seq: int = 4
    rms_eps: float = 1e-6
    tie_embeddings: bool = True
    # Qwen3 normalises q and k per head before RoPE; Llama does not.
    qk_norm: bool = True
    # Steps of a deterministic pre-fit of the default target on the synthetic corpus, so that
    # its greedy tokens follow learnable structure (a random LM's greedy output is noise, and
    # acceptance length against noise means nothing). 0 = keep the random init.
    target_pretrain_steps: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        problems = list(self._problems())
        if problems:
            raise ValueError("invalid model config: " + "; ".join(problems))

    def _problems(self):
        for name in ("vocab_size", "hidden_size", "num_target_layers", "num_drafter_layers",
                     "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
                     "max_seq_len", "anchors_per_seq"):
            if getattr(self, name) < 1:
                yield f"{name} must be >= 1 (got {getattr(self, name)})"
        if self.num_kv_heads >= 1 and self.num_heads % self.num_kv_heads:
            yield (f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                   f"({self.num_kv_heads}) for grouped-query attention")
        if self.head_dim % 2:
            yield f"head_dim must be even for RoPE (got {self.head_dim})"
        if self.block_size < 2:
            yield f"block_size must be >= 2: a block is the anchor plus predicted tokens (got {self.block_size})"
        if not 0 <= self.mask_token_id < self.vocab_size:
            yield f"mask_token_id {self.mask_token_id} is outside the vocab (size {self.vocab_size})"
        if not self.target_layer_ids:
            yield "target_layer_ids is empty: the drafter needs at least one tapped target layer"
        bad = [i for i in self.target_layer_ids if not 0 <= i < self.num_target_layers]
        if bad:
            yield (f"target_layer_ids {bad} are outside the target's layers "
                   f"0..{self.num_target_layers - 1}")
        if len(set(self.target_layer_ids)) != len(self.target_layer_ids):
            yield f"target_layer_ids has duplicates: {self.target_layer_ids}"
        if self.max_seq_len < self.block_size + 1:
            yield (f"max_seq_len ({self.max_seq_len}) must exceed block_size ({self.block_size}): "
                   "a block needs an anchor and room for its targets")
        if self.loss_gamma <= 0:
            yield f"loss_gamma must be > 0 (got {self.loss_gamma})"
        if self.target_pretrain_steps < 0:
            yield f"target_pretrain_steps must be >= 0 (got {self.target_pretrain_steps})"

    @property
    def tap_size(self) -> int:
        """Width of the concatenated target hidden states fed to the drafter."""
        return len(self.target_layer_ids) * self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target_layer_ids"] = list(self.target_layer_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"model config has unknown keys {unknown}; known: {sorted(known)}")
        return cls(**d)

    def with_(self, **changes: Any) -> "ModelConfig":
        return replace(self, **changes)

    @classmethod
    def preset(cls, name: str) -> "ModelConfig":
        try:
            return PRESETS[name]
        except KeyError:
            raise ValueError(
                f"unknown model preset {name!r}; choose one of: {', '.join(PRESETS)}") from None

    @staticmethod
    def preset_names() -> tuple[str, ...]:
        return tuple(PRESETS)


PRESETS: dict[str, ModelConfig] = {
    # CPU tests and the local demo: trains in seconds on two shared cores.
    "tiny": ModelConfig(
        vocab_size=BYTE_VOCAB_SIZE, hidden_size=64, num_target_layers=4, num_drafter_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=192,
        target_layer_ids=(1, 3), max_seq_len=256, anchors_per_seq=8,
        target_pretrain_steps=150,
    ),
    # GPU smoke runs (compile race, pool) with real sequence buckets of 1k-4k.
    "small": ModelConfig(
        vocab_size=BYTE_VOCAB_SIZE, hidden_size=256, num_target_layers=8, num_drafter_layers=2,
        num_heads=8, num_kv_heads=4, head_dim=32, intermediate_size=768,
        target_layer_ids=(1, 3, 5, 7), max_seq_len=4096, anchors_per_seq=64,
        target_pretrain_steps=300,
    ),
    # Qwen3-8B shapes (the incident's target) for the attention / drafter-step benchmarks.
    "dflash-8b-like": ModelConfig(
        vocab_size=151936, hidden_size=4096, num_target_layers=36, num_drafter_layers=5,
        num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=12288,
        target_layer_ids=(1, 9, 17, 25, 33), max_seq_len=8192,
        rope_theta=1_000_000.0, anchors_per_seq=256, tie_embeddings=False,
    ),
}
