"""A healthy training loop that prints nothing: its progress shows only in its stack.

`quiet_loop.py`: loads a batch, steps, evaluates, again and again, each phase a different
function of its own taking a different time (so no sampling period lines up with the loop's),
and never writes a line. Knows nothing of dflash-tui.
"""

import time


def load_batch() -> None:
    time.sleep(0.3)


def train_step() -> None:
    time.sleep(0.45)


def evaluate() -> None:
    time.sleep(0.7)


while True:
    load_batch()
    train_step()
    evaluate()
