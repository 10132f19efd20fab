"""The DFlash attention mask and the two attention paths (flex_attention, dense-mask SDPA)."""

from .backends import (AttentionBackend, FlexAttention, SdpaAttention, choose_backend,
                       compiled_flex_attention)
from .masks import dense_mask, dflash_block_mask, dflash_mask_mod

__all__ = ["AttentionBackend", "FlexAttention", "SdpaAttention", "choose_backend",
           "compiled_flex_attention", "dense_mask", "dflash_block_mask", "dflash_mask_mod"]
