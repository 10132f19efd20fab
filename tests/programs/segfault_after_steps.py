"""A few steps, then a segfault in native code (ctypes reads address 0), as a crash inside a
C extension kills a training script: no Python traceback, only the signal and, with
PYTHONFAULTHANDLER set, the Python stacks faulthandler writes to stderr."""

import ctypes
import sys
import threading
import time


def crash_in_native_code() -> None:
    ctypes.string_at(0)


def train(steps: int) -> None:
    for step in range(1, steps + 1):
        print(f"step {step} loss {1.0 / step:.3f}", flush=True)
        time.sleep(0.2)
    crash_in_native_code()


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
worker = threading.Thread(target=train, args=(steps,), name="trainer")
worker.start()
worker.join()
