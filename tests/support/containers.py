"""Driving the pct/docker stand-ins from tests (the same state the sshd sessions see)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .sshd import BIN_DIR


class Standins:
    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir)
        self.env = {**os.environ, "PATH": f"{BIN_DIR}:{os.environ.get('PATH', '')}",
                    "PCT_STANDIN_DIR": str(self.dir), "DOCKER_STANDIN_DIR": str(self.dir)}

    def tool(self, kind: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN_DIR / kind), *args], env=self.env, capture_output=True,
                              text=True, timeout=30, check=check)

    def container(self, spec: str = "pct:200", *, mode: str = "ok", running: bool = True) -> str:
        """Create (and start) a container; returns the spec for ContainerTarget."""
        kind, name = spec.split(":", 1)
        self.tool(kind, "create", name)
        if running:
            self.tool(kind, "start", name, check=False)   # already running is fine
        self.set_mode(spec, mode)
        return spec

    def set_mode(self, spec: str, mode: str) -> None:
        kind, name = spec.split(":", 1)
        self.tool(kind, "standin-mode", name, mode)

    def stop(self, spec: str) -> None:
        kind, name = spec.split(":", 1)
        self.tool(kind, "stop", name)

    def init_pid(self, spec: str) -> int | None:
        kind, name = spec.split(":", 1)
        try:
            return int((self.dir / kind / name / "init").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop_all(self) -> None:
        for kind in ("pct", "docker"):
            for ct in sorted((self.dir / kind).glob("*")) if (self.dir / kind).is_dir() else []:
                self.tool(kind, "stop", ct.name, check=False)
