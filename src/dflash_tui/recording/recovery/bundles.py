"""The watcher's evidence bundles: one taken at each failing verdict before the recovery acts on
it (the stop waits for it, within the bundle's own 30 s), kept beside the store, the last
KEEP of each profile within CAP_BYTES; `--timeline` lists them.

They live in `bundles/PROFILE/` next to the watch store (the watcher's state folder), each
named `YYYYmmdd-HHMMSS-RUN_ID.tar.gz` (UTC): sorted by name is sorted by time.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ...bundle import take_bundle
from ...config import Config, Profile
from ...watch.base import RunWatch
from .outside import bundle_extras
from ..store.store import store_path
from ..store.settings import WATCH_SECTION

log = logging.getLogger("dflash_tui.recording")

KEEP = 5                    # per profile: the newest this many
CAP_BYTES = 100 << 20       # per profile: the newest that fit in this much (the newest always stays)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class KeptBundle:
    path: str
    time: float
    size: int


def bundles_dir(config: Config, profile: str) -> Path:
    return store_path(WATCH_SECTION.of(config)).parent / "bundles" / _UNSAFE.sub("_", profile)


def kept_bundles(config: Config, profile: str) -> list[KeptBundle]:
    """The profile's bundles, oldest first."""
    folder = bundles_dir(config, profile)
    try:
        entries = sorted(p for p in folder.iterdir() if p.name.endswith(".tar.gz") and p.is_file())
    except OSError:
        return []
    out = []
    for p in entries:
        try:
            st = p.stat()
        except OSError:
            continue
        out.append(KeptBundle(str(p), st.st_mtime, st.st_size))
    return out


def prune(config: Config, profile: str) -> None:
    """Keep the newest KEEP bundles within CAP_BYTES (the newest one whatever its size)."""
    kept, total = 0, 0
    for b in reversed(kept_bundles(config, profile)):
        kept, total = kept + 1, total + b.size
        if kept > 1 and (kept > KEEP or total > CAP_BYTES):
            try:
                os.unlink(b.path)
            except OSError as exc:
                log.warning("%s: cannot remove the old bundle %s: %s", profile, b.path, exc)


async def take_before_recovery(config: Config, profile: Profile, watch: RunWatch, run_id: str) -> str | None:
    """A bundle of the failing run, before the recovery stops or relaunches it; its path, or
    None when it could not be written (logged: the recovery goes on without it)."""
    folder = bundles_dir(config, profile.name)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = folder / f"{stamp}-{_UNSAFE.sub('_', run_id or 'no-run')}.tar.gz"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        urls, extra = bundle_extras(config, profile)
        result = await take_bundle(watch, str(path), profile=profile, notify_urls=urls, extra=extra)
    except OSError as exc:
        log.warning("%s: no evidence bundle before the recovery: %s", profile.name, exc)
        return None
    log.info("%s: %s", profile.name, result.words())
    prune(config, profile.name)
    return str(path)
