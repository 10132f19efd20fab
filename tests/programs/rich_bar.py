"""A rich progress bar (the real rich, as Lightning's RichProgressBar draws it): drawn only on
a terminal, redrawn in place ten times a second by rich's own refresh thread.

`rich_bar.py [TOTAL] [INTERVAL] [HANG_AFTER]`: after HANG_AFTER steps the loop hangs (sleeps)
while the bar's refresh thread keeps redrawing the same step."""

import sys
import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

total = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
hang_after = int(sys.argv[3]) if len(sys.argv) > 3 else None
columns = (TextColumn("Epoch 0/9"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
           TextColumn("train_loss: {task.fields[loss]:.3f}"))
with Progress(*columns, refresh_per_second=10) as progress:
    task = progress.add_task("train", total=total, loss=3.0)
    for i in range(total):
        if i == hang_after:
            time.sleep(1e9)
        time.sleep(interval)
        progress.update(task, advance=1, loss=3.0 / (i + 1))
