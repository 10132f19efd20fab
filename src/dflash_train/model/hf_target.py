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
from .output import TargetOutput, check_token_batch, freeze


class CheckpointError(ValueError):
    """A target checkpoint directory that cannot be used."""


INSTALL_HINT = "pip install 'dflash-tui[hf]'"
# Files a transformers tokenizer is loaded from; a checkpoint without any of them has none.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def require_transformers():
    """The `transformers` module, or a one-line CheckpointError naming the install command."""
    try:
        import transformers
    except ImportError:
        raise CheckpointError(f"a target checkpoint needs the `transformers` package: {INSTALL_HINT} "
                              "(or run without --target-checkpoint to use the built-in target)") from None
    return transformers


def has_tokenizer(checkpoint_dir: str | Path) -> bool:
    return any((Path(checkpoint_dir) / name).is_file() for name in TOKENIZER_FILES)


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
    _check_causal_lm(checkpoint_dir, hf)
    try:
        hidden, layers = int(hf["hidden_size"]), int(hf["num_hidden_layers"])
        heads = int(hf["num_attention_heads"])
        vocab, inter = int(hf["vocab_size"]), int(hf["intermediate_size"])
        kv = int(hf.get("num_key_value_heads") or heads)
        head_dim = int(hf.get("head_dim") or hidden // heads)
        theta = float(hf.get("rope_theta", base.rope_theta))
        eps = float(hf.get("rms_norm_eps", base.rms_eps))
        positions = int(hf.get("max_position_embeddings", base.max_seq_len))
    except KeyError as e:
        raise CheckpointError(f"{checkpoint_dir}/config.json lacks {e.args[0]!r}: "
                              "is this a decoder-only causal LM?") from None
    except (TypeError, ValueError, ZeroDivisionError) as e:
        raise CheckpointError(f"{checkpoint_dir}/config.json has a malformed shape field ({e}): "
                              "fix the file or re-save the checkpoint with transformers") from None
    lo, hi = 1, max(1, layers - 3)
    n = max(1, min(num_taps, hi - lo + 1))
    taps = tuple(sorted({lo + round(i * (hi - lo) / max(n - 1, 1)) for i in range(n)}))
    return base.with_(
        vocab_size=vocab, hidden_size=hidden, num_target_layers=layers, num_heads=heads,
        num_kv_heads=kv, head_dim=head_dim, intermediate_size=inter, target_layer_ids=taps,
        max_seq_len=min(positions, 1 << 16), rope_theta=theta, rms_eps=eps,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qk_norm=str(hf.get("model_type", "")).startswith("qwen3"),
        # The mask must be a token the data never holds. A checkpoint's embedding matrix is
        # padded past its tokenizer (Qwen3: 151,936 rows for 151,669 tokens; Llama 3 ends in
        # reserved specials), so its last row is such a token; the preset's id is not.
        mask_token_id=vocab - 1,
        target_pretrain_steps=0,
    )


def _check_causal_lm(checkpoint_dir: str | Path, hf: dict) -> None:
    """The drafter needs a decoder-only LM's per-layer hidden states and its LM head; an
    encoder, an encoder-decoder or a bare backbone (no head) cannot be a target."""
    archs = hf.get("architectures") or []
    kind = hf.get("model_type", "?")
    if hf.get("is_encoder_decoder") or (archs and not any(str(a).endswith("ForCausalLM") for a in archs)):
        raise CheckpointError(f"{checkpoint_dir}: unsupported architecture {', '.join(map(str, archs)) or kind} "
                              f"(model_type {kind!r}): the target must be a decoder-only *ForCausalLM "
                              "checkpoint such as Qwen3 or Llama")


def check_loadable(checkpoint_dir: str | Path) -> None:
    """Fail before any weights load if the installed transformers cannot build this checkpoint
    as a causal LM (unknown model_type, or a model_type with no causal-LM class)."""
    transformers = require_transformers()
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = read_hf_config(checkpoint_dir).get("model_type")
    try:
        AutoConfig.from_pretrained(str(checkpoint_dir))
    except Exception as e:  # noqa: BLE001 - config classes validate with their own exception types
        # the first sentence: transformers' messages run on with advice about its own install
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]
        raise CheckpointError(f"{checkpoint_dir}: transformers {transformers.__version__} cannot read "
                              f"its config (model_type {kind!r}): {first[:200]}; upgrade transformers "
                              "or use a Qwen3/Llama checkpoint") from None
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise CheckpointError(f"{checkpoint_dir}: unsupported architecture: model_type {kind!r} has no "
                              f"causal-LM class in transformers {transformers.__version__}; the target "
                              "must be a decoder-only causal LM such as Qwen3 or Llama")


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
        require_transformers()
        from transformers import AutoTokenizer

        if not has_tokenizer(checkpoint_dir):
            raise CheckpointError(f"{checkpoint_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): "
                                  "copy the model's tokenizer into it (--data files are tokenized with it)")
        try:
            self.tok = AutoTokenizer.from_pretrained(str(checkpoint_dir))
        except Exception as e:  # noqa: BLE001 - tokenizer backends raise anything; the message says which
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckpointError(f"cannot load the tokenizer of {checkpoint_dir} "
                                  f"({type(e).__name__}: {first[:200]}): fix or replace its tokenizer files") from None
        self.eos_id = self.tok.eos_token_id if self.tok.eos_token_id is not None else 0
        self.vocab_size = len(self.tok)
        # Part of the token stream's name, which a resume checks: same checkpoint, same tokens.
        self.name = f"tokenizer of {Path(checkpoint_dir).resolve()}"

    def encode(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids])


def load_hf_target(checkpoint_dir: str | Path, cfg: ModelConfig, device, dtype) -> HFTargetModel:
    transformers = require_transformers()
    from transformers import AutoModelForCausalLM

    expected = config_from_checkpoint(checkpoint_dir, cfg)
    shape = ("vocab_size", "hidden_size", "num_target_layers", "num_heads", "num_kv_heads", "head_dim")
    wrong = [f"{k} {getattr(cfg, k)} (checkpoint: {getattr(expected, k)})" for k in shape
             if getattr(cfg, k) != getattr(expected, k)]
    if wrong or max(cfg.target_layer_ids) >= expected.num_target_layers:
        raise CheckpointError(f"model config does not match the checkpoint {checkpoint_dir}: "
                              f"{', '.join(wrong) or 'tapped layers out of range'}; derive it with "
                              "config_from_checkpoint(dir, preset)")
    # transformers 4.56 renamed torch_dtype to dtype (the old name still works, with a warning).
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir), **{dtype_kw: dtype})
    return freeze(HFTargetModel(model, cfg).to(device))
