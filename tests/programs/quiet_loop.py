"""A healthy training loop that prints nothing: its progress shows only in its stack.

`quiet_loop.py`: loads a batch, steps, evaluates, again and again, each phase a different
function of its own taking 0.2 s, and never writes a line. (Any two looks about a second apart
find it in different functions: one second is two phases on.) Knows nothing of dflash-tui.
"""

import time


def load_batch() -> None:
    time.sleep(0.2)


def train_step() -> None:
    time.sleep(0.2)


def evaluate() -> None:
    time.sleep(0.2)


while True:
    load_batch()
    train_step()
    evaluate()
