"""A free TCP port on 127.0.0.1 for a server a test starts (sshd, torchrun's store, --serve).

Ports come from below the kernel's ephemeral range (32768-60999 on Linux): a port the kernel
hands out for bind(0) is also the pool every outgoing connection draws from, so between the
check and the server's own bind another process's connection could take it (torchrun's store
then fails to start). Each xdist worker draws from its own slice, and a port is handed out once
per process.
"""

from __future__ import annotations

import os
import random
import re
import socket

_LOW, _HIGH = 20000, 32000
_given: set[int] = set()


def _slice() -> range:
    m = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    k = int(m.group(1)) if m else 0
    size = (_HIGH - _LOW) // max(workers, 1)
    return range(_LOW + k * size, _LOW + (k + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    ports = _slice()
    for _ in range(200):
        port = random.choice(ports)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:   # the slice is full: any port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
