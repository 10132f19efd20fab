"""Useful FLOPs of one drafter training step, and the utilisation (MFU) they imply.

Torch-free: the trainer counts a step from its shapes and the host-side anchors (no device
sync), and a reader can recompute any figure it reports.

What counts (forward + backward of `objective.drafter_loss`, as torch's FlopCounterMode counts
the plain full-logits step, tests/train/test_perf.py):
- every linear layer: 2*m*n*k forward; backward 2x that (input and weight gradients), except
  the context projection `fc`, whose input (the target's taps) needs no gradient (1x), and the
  frozen LM head, which needs only the input gradient (1x);
- the LM head over every block position (A*block rows), position 0 included, although the
  step never scores it and the chunked step skips it: the FLOPs of the model, not of one
  implementation, so a faster formulation shows up as a higher MFU;
- attention only for the query-key pairs the DFlash mask allows (a query of a block anchored
  at a sees a context positions and its own block): 4*heads*head_dim per pair forward and
  2.5x that backward. A dense kernel computes more; that extra is waste, not work.
"""

from __future__ import annotations

from dataclasses import dataclass

# Peak bf16 matmul rates assumed for MFU, TFLOP/s, by a substring of the device's name. Measured,
# not datasheet: an 8192^3 bf16 matmul on random data on this workplace's H200 ran at 769-798
# (datasheet: 989 dense). The trainer's --peak-tflops overrides it; other devices report no MFU
# unless it is given.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (("H200", 789.0),)


def assumed_peak_tflops(device_name: str, override: float = 0.0) -> float | None:
    """The peak to divide by: `override` when > 0, else the table's entry for this device."""
    if override > 0:
        return float(override)
    for fragment, peak in PEAK_BF16_TFLOPS:
        if fragment in device_name:
            return peak
    return None


@dataclass(frozen=True)
class StepFlops:
    matmul: int      # linear layers, forward + backward
    attention: int   # allowed query-key pairs, forward + backward

    @property
    def total(self) -> int:
        return self.matmul + self.attention

    def __add__(self, other: "StepFlops") -> "StepFlops":
        return StepFlops(self.matmul + other.matmul, self.attention + other.attention)


def allowed_pairs(anchor_rows, block_size: int) -> int:
    """Query-key pairs the DFlash mask allows, for anchors given as rows of ints (host side)."""
    return sum((int(a) + block_size) * block_size for row in anchor_rows for a in row)


def drafter_step_flops(cfg, batch: int, ctx_len: int, num_anchors: int, pairs: int) -> StepFlops:
    """FLOPs of one training step of the drafter `cfg` (a ModelConfig) on [batch, ctx_len]
    with num_anchors blocks per row and `pairs` allowed attention pairs in all."""
    q = batch * num_anchors * cfg.block_size          # query (noise-block) rows
    kv = batch * ctx_len + q                          # key/value rows: context + blocks
    h, d = cfg.hidden_size, cfg.head_dim
    q_width, kv_width = cfg.num_heads * d, cfg.num_kv_heads * d
    per_layer_fwd = (2 * q * h * q_width              # q_proj
                     + 2 * 2 * kv * h * kv_width      # k_proj, v_proj
                     + 2 * q * q_width * h            # o_proj
                     + 3 * 2 * q * h * cfg.intermediate_size)  # gate, up, down
    fc_fwd = 2 * batch * ctx_len * cfg.tap_size * h
    head_fwd = 2 * q * h * cfg.vocab_size
    matmul = 3 * cfg.num_drafter_layers * per_layer_fwd + 2 * fc_fwd + 2 * head_fwd
    attention = cfg.num_drafter_layers * int(3.5 * 4 * cfg.num_heads * d * pairs)
    return StepFlops(matmul=matmul, attention=attention)


def mfu(flops: float, seconds: float, peak_tflops: float | None, devices: int = 1) -> float | None:
    """Fraction of `devices` x peak that `flops` in `seconds` used; None without a peak."""
    if not peak_tflops or seconds <= 0 or devices < 1:
        return None
    return flops / seconds / (peak_tflops * 1e12 * devices)
