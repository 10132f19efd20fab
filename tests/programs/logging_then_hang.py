"""A loop that reports through Python's logging, each line with its own time ("2026-12-05
04:31:00,123 INFO step 3 loss 0.6667"), then hangs for good in the same function (a wait on a
dead peer, as `time.sleep`). Writes no events and no status: its log is all it says.

`logging_then_hang.py [STEPS] [INTERVAL]`. Knows nothing of dflash-tui.
"""

import logging
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 14
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3
logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO, stream=sys.stdout)
log = logging.getLogger("train")


def train() -> None:
    log.info("loading data")
    for step in range(1, steps + 1):
        time.sleep(interval)
        log.info("step %d loss %.4f", step, 2.0 / step)
    time.sleep(1e9)


train()
