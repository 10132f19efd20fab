"""A fast trainer of one's own that saves a Hugging Face-like checkpoint-N folder
(model.safetensors, then trainer_state.json last) at every step, whose loss turns NaN at a step
and which goes on saving past it: by the time its NaN is read, BURST checkpoints of diverged
weights are newer than the last good one, more than one look of the watcher judges.

    nan_saves_past_it.py TOTAL NAN_AT BURST

Its checkpoints go to RUN_DIR/out/, all of them at once: they are saved in a folder beside the
run dir, which is renamed into place after step NAN_AT + BURST, before any NaN line is printed
(so no look can find the good ones before the diverged ones, whatever its timing). Then it
steps on slowly (0.5 s a step, NaN, no more saves). A run started with DFLASH_RESUME_FROM set
loads that checkpoint's step, passes over the diverged window and finishes quickly. It prints
what the recovery handed it.
"""

import json
import math
import os
import shutil
import struct
import sys
import time

total, nan_at, burst = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = os.path.abspath("out")
staging = os.path.abspath(os.path.join("..", f"staging-{os.path.basename(os.getcwd())}"))


def save(step: int, loss: float) -> None:
    d = os.path.join(staging, f"checkpoint-{step}")
    os.makedirs(d)
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack("<f", loss))
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "log_history": []}, f)


def loss_at(step: int) -> float:
    return 2.0 / math.sqrt(step)


resume_from = os.environ.get("DFLASH_RESUME_FROM", "")
if resume_from:
    with open(os.path.join(resume_from, "trainer_state.json")) as f:
        start = json.load(f)["global_step"]
    print(f"resumed from {resume_from} at step {start}, diverged at {os.environ.get('DFLASH_DIVERGED_AT')}",
          flush=True)
    for step in range(start + 1, total + 1):
        print(f"step {step}/{total} loss {loss_at(step):.4f}", flush=True)
        time.sleep(0.01)
    print(f"finished {total} steps", flush=True)
    sys.exit(0)

print(f"argv: {sys.argv[1:]}", flush=True)
os.makedirs(staging)
for step in range(1, nan_at):
    save(step, loss_at(step))
    print(f"step {step}/{total} loss {loss_at(step):.4f}", flush=True)
    time.sleep(0.02)
for step in range(nan_at, nan_at + burst + 1):
    save(step, float("nan"))
shutil.rmtree(out, ignore_errors=True)   # a run from scratch writes its output dir anew
os.rename(staging, out)
for step in range(nan_at, nan_at + burst + 1):
    print(f"step {step}/{total} loss nan", flush=True)
for step in range(nan_at + burst + 1, total + 1):
    time.sleep(0.5)
    print(f"step {step}/{total} loss nan", flush=True)
print(f"finished {total} steps", flush=True)
