"""A real trackio writer: `trackio_log.py PROJECT RUN FIRST COUNT` logs steps FIRST.. of RUN
(resumed when it exists) into trackio's local store ($TRACKIO_DIR/PROJECT.db): a loss, a grouped
value (`train/acc`) and a NaN each step, then finishes. Knows nothing of dflash-tui.
"""

import sys

import trackio

project, run, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
trackio.init(project=project, name=run, resume="allow")
for step in range(first, first + count):
    trackio.log({"loss": 1.0 / (step + 1), "train": {"acc": step / 10}, "gnorm": float("nan")}, step=step)
trackio.finish()
