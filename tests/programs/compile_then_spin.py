"""Real torch.compile work for longer than a short stall limit, then a busy silence that is no
compile.

`compile_then_spin.py [SECONDS]`: says it compiles, then compiles a function again and again
(dynamo and AOTAutograd, the aot_eager backend: a real compile without a C++ toolchain's
minutes; dynamo's caches reset each time, as a program that recompiles for new shapes would)
for SECONDS (default 12) of wall time, printing nothing; prints three steps of it; then
summarises forever in a loop of its own, burning CPU, printing nothing. Knows nothing of
dflash-tui.
"""

import sys
import time

import torch

UNROLL = 150
COMPILE_FOR_S = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0


def layer_stack(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for _ in range(UNROLL):
        x = torch.relu(x @ w).sin() + x
    return x.sum()


def spin_summaries() -> None:
    total = 0
    while True:
        total = (total + 1) % 1_000_003


if __name__ == "__main__":
    x, w = torch.randn(16, 16), torch.randn(16, 16) / 16
    print("compiling layer_stack", flush=True)
    t0 = time.monotonic()
    while True:
        torch._dynamo.reset()
        compiled = torch.compile(layer_stack, backend="aot_eager")
        loss = float(compiled(x, w))
        if time.monotonic() - t0 >= COMPILE_FOR_S:
            break
    for step in range(1, 4):
        print(f"step {step} loss {float(compiled(x, w)):.3f}", flush=True)
    spin_summaries()
