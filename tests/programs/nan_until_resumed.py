"""A trainer of one's own whose loss turns NaN at a step and keeps stepping, saving a Hugging
Face-like checkpoint-N folder (model.safetensors, then trainer_state.json last) every few steps.

    nan_until_resumed.py TOTAL NAN_AT SAVE_EVERY TORN_AT MODE

Steps up to TORN_AT go fast, the rest slowly (0.8 s each), so the checkpoints up to TORN_AT are
on disk well before the NaN; checkpoint-TORN_AT is written torn (its weight file cut). None is
saved in the slow steps before NAN_AT (which of them a look finds first would be a race); those
saved after it hold the diverged weights. MODE "once": a run started with DFLASH_RESUME_FROM
set passes over the diverged window and finishes; "always": the NaN comes back at NAN_AT
whatever it resumed from; "crash": the run raises at NAN_AT instead (a resumed one goes on).
It prints what the recovery handed it (DFLASH_RESUME_FROM,
DFLASH_RESUME_STEP, DFLASH_DIVERGED_AT, its argv).
"""

import json
import math
import os
import struct
import sys
import time

total, nan_at, every, torn_at, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]


def save(step: int, torn: bool) -> None:
    d = f"checkpoint-{step}"
    os.makedirs(d, exist_ok=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    body = struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1.0, 2.0, 3.0, float(step))
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(body[:-7] if torn else body)
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "log_history": []}, f)


resume_from, resume_step = os.environ.get("DFLASH_RESUME_FROM", ""), os.environ.get("DFLASH_RESUME_STEP", "")
start = 0
if resume_from:
    with open(os.path.join(resume_from, "trainer_state.json")) as f:
        start = json.load(f)["global_step"]
    assert str(start) == resume_step, (start, resume_step)
    print(f"resumed from {resume_from} at step {start}, diverged at {os.environ.get('DFLASH_DIVERGED_AT')}",
          flush=True)
print(f"argv: {sys.argv[1:]}", flush=True)
for step in range(start + 1, total + 1):
    poisoned = step >= nan_at and (mode == "always" or not resume_from)
    if poisoned and mode == "crash":
        raise RuntimeError(f"injected crash at step {step}")
    loss = float("nan") if poisoned else 2.0 / math.sqrt(step)
    print(f"step {step}/{total} loss {loss:.4f}", flush=True)
    if step % every == 0 and (step <= torn_at or poisoned or resume_from):
        save(step, torn=step == torn_at)
    time.sleep(0.05 if step <= torn_at or resume_from and mode != "always" else 0.8)
print(f"finished {total} steps", flush=True)
