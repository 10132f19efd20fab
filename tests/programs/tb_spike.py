"""A training loop that logs only to TensorBoard, whose loss jumps at one step.

`tb_spike.py MODE [AT] [LOGDIR]`: train/loss is about 1.0 (+-10 % noise) every 0.05 s; MODE
"sustained" makes it 15x from step AT (default 60) on, for good; "lone" makes step AT alone
8x, then back. eval/loss is written too, and in "lone" mode it jumps 20x for good (an
evaluation's series never makes a divergence). Prints nothing; knows nothing of dflash-tui.
"""

import random
import sys
import time

from torch.utils.tensorboard import SummaryWriter

mode = sys.argv[1]
at = int(sys.argv[2]) if len(sys.argv) > 2 else 60
writer = SummaryWriter(sys.argv[3] if len(sys.argv) > 3 else "runs/exp1", flush_secs=1)
rng = random.Random(7)
step = 0
while True:
    step += 1
    loss = 1.0 + rng.uniform(-0.1, 0.1)
    if mode == "sustained" and step >= at:
        loss *= 15.0
    elif mode == "lone" and step == at:
        loss *= 8.0
    writer.add_scalar("train/loss", loss, step)
    if step % 10 == 0:
        writer.add_scalar("eval/loss", 1.2 * (20.0 if mode == "lone" and step > at else 1.0), step)
    writer.flush()
    time.sleep(0.05)
