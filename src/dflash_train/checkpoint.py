"""Atomic checkpoints in RUN_DIR/checkpoints/.

Layout: checkpoints/step-00000120/{state.pt, meta.json}. A checkpoint is written into a hidden
temp directory, every file fsynced, then the directory is renamed into place and the parent
fsynced: the rename is the commit point, so a kill -9 at any moment leaves either the previous
set of checkpoints or the previous set plus one complete new one, never a torn one. Leftover
temp directories from a killed save are removed on the next save or load.

Retention is per run (the run-dir contract, dflash_tui/contract/rundir.py CHECKPOINTS_DIR): a
save prunes only the checkpoints of its own line (the run that started from step 0 and the runs
that resumed from it) beyond the `keep` highest steps; another run's in the same run dir are
never pruned by it. The newest checkpoint, the one --resume loads, is the one saved last.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from typing import Any

import torch

from dflash_tui.contract.rundir import (CHECKPOINT_META, CHECKPOINTS_DIR, SCHEMA_VERSION, checkpoint_line,
                                        checkpoint_recency)

_STEP_DIR = re.compile(r"^step-(\d{8})$")
STATE_FILE = "state.pt"
META_FILE = CHECKPOINT_META
_TMP_PREFIX = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message says which and what to do."""


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: str
    run_id: str = ""     # the run that saved it
    line: str = ""       # its line of runs (contract/rundir.py `checkpoint_line`)
    saved: tuple[float, int] = (float("-inf"), 0)   # `checkpoint_recency`: the newest sorts last


def _meta(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, META_FILE), encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    def __init__(self, run_dir: str, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.root = os.path.join(run_dir, CHECKPOINTS_DIR)
        self.keep = keep

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints, by step."""
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            m = _STEP_DIR.match(name)
            path = os.path.join(self.root, name)
            if m and os.path.isfile(os.path.join(path, META_FILE)):
                step, meta = int(m.group(1)), _meta(path)
                run_id = meta.get("run_id") if isinstance(meta.get("run_id"), str) else ""
                found.append(CheckpointInfo(step, path, run_id, checkpoint_line(meta), checkpoint_recency(meta, step)))
        return sorted(found, key=lambda c: c.step)

    def newest_first(self) -> list[CheckpointInfo]:
        """Complete checkpoints, the one saved last first."""
        return sorted(self.list(), key=lambda c: c.saved, reverse=True)

    def _remove_stale_temps(self) -> None:
        if not os.path.isdir(self.root):
            return
        for name in os.listdir(self.root):
            if name.startswith(_TMP_PREFIX):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any] | None = None) -> CheckpointInfo:
        os.makedirs(self.root, exist_ok=True)
        self._remove_stale_temps()
        final = os.path.join(self.root, f"step-{step:08d}")
        tmp = os.path.join(self.root, f"{_TMP_PREFIX}step-{step:08d}-{os.getpid()}")
        os.makedirs(tmp)
        try:
            with open(os.path.join(tmp, STATE_FILE), "wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
            record = {"v": SCHEMA_VERSION, "step": step, "time": time.time(), **(meta or {})}
            with open(os.path.join(tmp, META_FILE), "w", encoding="utf-8") as fh:
                json.dump(record, fh, sort_keys=True, default=str)
                fh.flush()
                os.fsync(fh.fileno())
            _fsync_dir(tmp)
            if os.path.exists(final):       # re-saving a step (e.g. SIGTERM right after a save)
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        line = checkpoint_line(record)
        mine = [c for c in self.list() if c.line == line]
        for old in mine[: -self.keep]:
            shutil.rmtree(old.path, ignore_errors=True)
        run_id = record.get("run_id") if isinstance(record.get("run_id"), str) else ""
        return CheckpointInfo(step, final, run_id, line, checkpoint_recency(record, step))

    def load(self, info: CheckpointInfo) -> dict[str, Any]:
        path = os.path.join(info.path, STATE_FILE)
        try:
            with open(path, "rb") as fh:
                # weights_only: a checkpoint holds tensors, numbers, strings and dicts only.
                return torch.load(fh, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise CheckpointError(f"{path} is missing: the checkpoint directory is incomplete; delete it") from None
        except Exception as exc:  # noqa: BLE001 - any unpickling failure means corrupt
            raise CheckpointError(f"{path} cannot be read ({type(exc).__name__}: {exc}); delete it to resume from an older one") from None

    def load_at(self, path: str) -> tuple[CheckpointInfo, dict[str, Any]]:
        """The complete checkpoint at `path` (its step-N folder, or the state.pt in it): the one a
        recovery chose (DFLASH_RESUME_FROM). Raises CheckpointError naming it when it is none."""
        want = os.path.realpath(path[: -len(STATE_FILE)] if path.endswith("/" + STATE_FILE) else path)
        for info in self.list():
            if os.path.realpath(info.path) == want:
                return info, self.load(info)
        raise CheckpointError(f"DFLASH_RESUME_FROM={path} is no complete checkpoint under {self.root}; "
                              "unset it to resume from the newest one")

    def load_latest(self, warn=lambda msg: None) -> tuple[CheckpointInfo, dict[str, Any]] | None:
        """The newest readable checkpoint (saved last); unreadable newer ones are reported and skipped."""
        self._remove_stale_temps()
        for info in self.newest_first():
            try:
                return info, self.load(info)
            except CheckpointError as exc:
                warn(f"skipping checkpoint at step {info.step}: {exc}")
        return None
