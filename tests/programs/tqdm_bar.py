"""A tqdm progress bar (the real tqdm), updated with carriage returns on one line of stderr.

`tqdm_bar.py [TOTAL] [INTERVAL]`: no newline until the bar ends.
"""

import sys
import time

import tqdm

total = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
bar = tqdm.tqdm(total=total, mininterval=0, miniters=1)
for i in range(total):
    time.sleep(interval)
    bar.update(1)
    bar.set_postfix(loss=f"{3.0 / (i + 1):.3f}")
bar.close()
