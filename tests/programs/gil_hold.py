"""A program whose main thread holds the GIL in C for good: a catastrophic regular expression
(re's matcher never releases the GIL), so no other thread of it runs Python again.

`gil_hold.py [SECONDS]`: a named side thread runs, then after SECONDS (default 1) the main
thread enters parse_metadata and never returns."""

import re
import sys
import threading
import time


def poll_queue():
    while True:
        time.sleep(0.05)


def parse_metadata(text):
    return re.match(r"(a+)+$", text)


threading.Thread(target=poll_queue, name="queue-poller", daemon=True).start()
print("parsing metadata", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
parse_metadata("a" * 64 + "b")
