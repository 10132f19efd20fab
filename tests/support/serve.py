"""A real `dflash-tui --serve` process for the web tests."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.support.ports import free_port


@contextmanager
def served_dashboard(tmp: Path) -> Iterator[tuple[int, str, Path]]:
    """(port, token, the server's output file) of `dflash-tui --serve` on one profile whose run
    dir is TMP/run, once it printed its URL; terminated (then killed) on the way out."""
    cfg = tmp / "config.toml"
    cfg.write_text(f'[profile.web]\nrun_dir = "{tmp / "run"}"\n')
    port = free_port()
    log_path = tmp / "serve.out"
    with open(log_path, "w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dflash_tui", "--serve", "--port", str(port),
                                 "--config", str(cfg), "--profile", "web"],
                                stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            token = None
            while token is None:
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the server printed no URL"
                m = re.search(r"\?token=([A-Za-z0-9_-]+)", log_path.read_text())
                token = m.group(1) if m else None
                time.sleep(0.1)
            yield port, token, log_path
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
