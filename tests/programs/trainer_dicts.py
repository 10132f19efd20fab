"""Log lines as transformers' Trainer prints them: metric dicts (str(dict)), and its save line.

`trainer_dicts.py [INTERVAL]`. Every 4th log it "saves" a checkpoint the way Trainer says it.
"""

import os
import sys
import time

interval = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
out = os.path.join(os.environ.get("DFLASH_RUN_DIR", "."), "out")
for i in range(1, 100000):
    time.sleep(interval)
    logs = {"loss": round(2.5 / i, 4), "grad_norm": 1.25, "learning_rate": 5e-05 * (1 - i / 1e5),
            "epoch": round(i / 40, 2)}
    print(str(logs))
    if i % 4 == 0:
        print(f"Saving model checkpoint to {out}/checkpoint-{i * 10}")
