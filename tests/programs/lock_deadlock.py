"""Two threads that take the same two locks in the opposite order: a lock-order deadlock.

`lock_deadlock.py`: prints two steps, then the checkpointer takes the model lock and wants the
metrics lock while the metrics writer holds the metrics lock and wants the model lock; the main
thread waits for both. Plain threading.Lock, as most programs use. Knows nothing of dflash-tui.
"""

import threading
import time

model_lock = threading.Lock()
metrics_lock = threading.Lock()
both_hold_one = threading.Barrier(2)


def save_checkpoint() -> None:
    with model_lock:
        both_hold_one.wait()
        with metrics_lock:
            print("checkpoint saved", flush=True)


def write_metrics() -> None:
    with metrics_lock:
        both_hold_one.wait()
        with model_lock:
            print("metrics written", flush=True)


print("step 1 loss 1.00", flush=True)
print("step 2 loss 0.90", flush=True)
time.sleep(0.5)
threads = [threading.Thread(target=save_checkpoint, name="checkpointer"),
           threading.Thread(target=write_metrics, name="metrics-writer")]
for t in threads:
    t.start()
for t in threads:
    t.join()
