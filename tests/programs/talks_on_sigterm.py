"""A run that hangs, then talks when it is stopped, as Lightning does: a few steps, then idle
silence (no output, no CPU) until SIGTERM; on SIGTERM it prints "Received SIGTERM: 15", saves a
checkpoint for SAVE_S seconds (argv[1], default 3) with a line every 0.2 s, says where it saved
it, and exits 0.

`talks_on_sigterm.py [SAVE_S]`
"""

import os
import signal
import sys
import time

save_s = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)
for step in range(1, 4):
    print(f"step {step} loss {1.0 / step:.3f}", flush=True)
    time.sleep(0.2)
while not stopping:            # a dead data loader: no output, no CPU
    signal.pause()
print(f"Received SIGTERM: {signal.SIGTERM.value}", flush=True)
path = os.path.join(os.getcwd(), "checkpoints", "step-3.ckpt")
deadline = time.monotonic() + save_s
while time.monotonic() < deadline:
    print(f"saving checkpoint: {time.monotonic() - deadline + save_s:.1f} s", flush=True)
    time.sleep(0.2)
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as fh:
    fh.write("step 3\n")
print(f"checkpoint: step 3 saved to {path}", flush=True)
sys.exit(0)
