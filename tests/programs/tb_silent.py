"""A training loop that prints nothing and logs its metrics only to TensorBoard.

`tb_silent.py [LOGDIR]`: torch's SummaryWriter writes train/loss and train/lr every 0.2 s
into LOGDIR (default runs/exp1 under the working directory), flushed at once; stdout and
stderr stay empty. Knows nothing of dflash-tui.
"""

import sys
import time

from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter(sys.argv[1] if len(sys.argv) > 1 else "runs/exp1", flush_secs=1)
step = 0
while True:
    step += 1
    writer.add_scalar("train/loss", 5.0 / step, step)
    writer.add_scalar("train/lr", 1e-3, step)
    writer.flush()
    time.sleep(0.2)
