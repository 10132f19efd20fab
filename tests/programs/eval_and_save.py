"""A training loop with known pauses: a step every STEP_S seconds, an evaluation of EVAL_X steps'
time every EVAL_EVERY steps, and a checkpoint saved with torch.save at step SAVE_AT that takes
SAVE_X steps' time (written through a file object as slow as a busy network disk).

`eval_and_save.py [STEPS] [STEP_S] [EVAL_EVERY] [EVAL_X] [SAVE_AT] [SAVE_X]`
(defaults 24, 2.0, 8, 5, 14, 10); exits 0 after STEPS steps.
"""

import os
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 24
step_s = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
eval_every = int(sys.argv[3]) if len(sys.argv) > 3 else 8
eval_x = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
save_at = int(sys.argv[5]) if len(sys.argv) > 5 else 14
save_x = float(sys.argv[6]) if len(sys.argv) > 6 else 10.0


class SlowDisk:
    """A file that takes `seconds` to write `size` bytes, at an even rate."""

    def __init__(self, path: str, size: int, seconds: float) -> None:
        self.f = open(path, "wb")
        self.per_byte = seconds / size

    def write(self, data) -> int:
        n = len(memoryview(data).cast("B"))
        time.sleep(n * self.per_byte)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def evaluate(weights: torch.Tensor) -> float:
    end = time.monotonic() + eval_x * step_s
    acc = 0.0
    while time.monotonic() < end:
        acc += float(weights.sum())
        time.sleep(0.05)
    return acc


def save_checkpoint(weights: torch.Tensor, step: int) -> None:
    path = os.path.join(os.environ.get("DFLASH_RUN_DIR", "."), f"ckpt-{step}.pt")
    size = weights.numel() * weights.element_size()
    disk = SlowDisk(path, size, save_x * step_s)
    torch.save({"step": step, "weights": weights}, disk)
    disk.f.close()
    print(f"checkpoint saved: {path}", flush=True)


def main() -> None:
    weights = torch.zeros(1 << 20)
    for step in range(1, steps + 1):
        time.sleep(step_s)
        weights += 1.0
        print(f"step {step}/{steps} loss {1.0 / step:.4f}", flush=True)
        if step % eval_every == 0:
            print(f"eval: step {step} score {evaluate(weights):.1f}", flush=True)
        if step == save_at:
            save_checkpoint(weights, step)


if __name__ == "__main__":
    main()
