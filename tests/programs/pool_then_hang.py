"""A program with a large thread pool parked idle beside it, that then blocks for good in a C
call (`time.sleep` stands in for a wait on a dead peer).

`pool_then_hang.py [WORKERS]`: starts WORKERS ThreadPoolExecutor workers (each runs one short
task, then waits for work), prints two steps and hangs. Knows nothing of dflash-tui.
"""

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loader")
started = threading.Barrier(workers + 1)
for _ in range(workers):
    pool.submit(started.wait)
started.wait()       # every worker exists and is parked at its work queue
print("step 1 loss 1.00", flush=True)
print("step 2 loss 0.90", flush=True)


def wait_for_peer() -> None:
    time.sleep(1e9)


wait_for_peer()
