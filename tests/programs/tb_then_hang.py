"""A training loop that logs only to TensorBoard, then hangs while a monitoring thread keeps
its event file fresh, the way a real program's helper does.

`tb_then_hang.py MODE [STEPS]`: torch's SummaryWriter writes train/loss for STEPS (default 10)
steps, 0.2 s apart, into runs/exp1; then the loop blocks forever (an Event nobody sets) and a
monitoring thread, every 0.3 s:
  touch      sets the event file's mtime (os.utime), writing nothing;
  garbage    appends bytes that are no TFRecord to it;
  same_step  logs gpu/util at the last global step (what a GPU monitor logging at the
             trainer's step does while the loop is hung).
stdout and stderr stay empty. Knows nothing of dflash-tui.
"""

import glob
import os
import sys
import threading
import time

from torch.utils.tensorboard import SummaryWriter

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
writer = SummaryWriter("runs/exp1", flush_secs=1)
lock = threading.Lock()
step = 0
for step in range(1, steps + 1):
    with lock:
        writer.add_scalar("train/loss", 5.0 / step, step)
        writer.flush()
    time.sleep(0.2)
(event_file,) = glob.glob("runs/exp1/events.out.tfevents.*")


def monitor():
    n = 0
    while True:
        n += 1
        if mode == "touch":
            os.utime(event_file)
        elif mode == "garbage":
            with open(event_file, "ab") as f:
                f.write(b"\x00garbage %d\n" % n)
        else:
            with lock:
                writer.add_scalar("gpu/util", 90.0 + n % 7, step)
                writer.flush()
        time.sleep(0.3)


threading.Thread(target=monitor, name="gpu-monitor", daemon=True).start()
threading.Event().wait()       # the loop is hung: nothing sets it
