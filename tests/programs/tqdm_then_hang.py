"""A training loop with the real tqdm bar, drawn as Lightning draws its own ("Epoch 2: 45%|...|
29/64 [...]"), whose monitor thread sits beside the program; after its steps the loop blocks
for good in a C call in the same function (`time.sleep`, as a wait on a dead peer would).

`tqdm_then_hang.py [STEPS] [INTERVAL]`: STEPS updates INTERVAL s apart, then the hang, with the
bar's monitor thread idle beside it. Knows nothing of dflash-tui.
"""

import sys
import time

import tqdm

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1


def train() -> None:
    bar = tqdm.tqdm(total=64, desc="Epoch 2", mininterval=0, miniters=1)
    for i in range(steps):
        time.sleep(interval)
        bar.update(1)
        bar.set_postfix(loss=f"{3.0 / (i + 1):.3f}")
    time.sleep(1e9)


train()
