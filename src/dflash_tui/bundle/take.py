"""Take an evidence bundle of one run: collect, clean, fit, write; bounded in time and size.

`take_bundle(watch, path)` reads through the watch's own look (bundle/collect.py), masks every
member (bundle/clean.py), keeps what fits under `max_bytes` (bundle/archive.py) and writes the
archive with manifest.json first. It works when the run is dead, the target unreachable (the
manifest says why, and holds what this machine knows: the last report seen, the config, the
caller's timeline) or the scheduler gone; it never signals a process.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from .. import __version__
from ..config import Profile
from ..contract.rundir import inert_text
from ..redaction import Redactor
from ..watch.base import RunWatch
from ..watch.host import HostWatch
from .archive import MANIFEST, fit, manifest_bytes, write
from .clean import cleaned
from .collect import Collector, collect_host
from .member import Member, Missing, json_bytes, safe_name

FORMAT = "dflash-tui-bundle"
FORMAT_VERSION = 1
DEFAULT_MAX_BYTES = 20 << 20
DEFAULT_TIME_S = 30.0
_WRITE_RESERVE_S = 3.0      # of the time bound, kept for cleaning and writing


@dataclass
class BundleResult:
    path: str
    size: int
    members: list[str]
    missing: list[Missing]
    seconds: float
    unreachable: str | None = None      # why the run's target could not be looked at
    verdict: str | None = None
    manifest: dict = field(default_factory=dict)

    def words(self) -> str:
        """One line for a person: where the bundle is, what it holds, what it lacks."""
        text = (f"bundle {self.path}: {len(self.members)} members, {self.size / 1024:.0f} KiB in {self.seconds:.1f} s"
                + (f", verdict {self.verdict}" if self.verdict else ""))
        if self.missing:
            text += f"; {len(self.missing)} not in it (manifest.json says why)"
        if self.unreachable:
            text += f"; the target could not be looked at: {self.unreachable}"
        return inert_text(text)


def default_bundle_path(profile: str, now: float | None = None) -> str:
    """dflash-bundle-PROFILE-YYYYmmdd-HHMMSS.tar.gz in the current directory (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"dflash-bundle-{safe_name(profile).replace('/', '_')}-{stamp}.tar.gz"


def config_member(profile: Profile, config_path: str | None) -> Member:
    return Member("config.json", "the profile as dflash-tui read it", json_bytes(
        {"config_file": config_path, "profile": profile}), time.time(), "this machine")


async def take_bundle(watch: RunWatch, path: str, *, profile: Profile, config_path: str | None = None,
                      notify_urls: tuple[str, ...] = (), extra: tuple[Member, ...] = (),
                      max_bytes: int = DEFAULT_MAX_BYTES, time_s: float = DEFAULT_TIME_S) -> BundleResult:
    """The bundle of `watch`'s run at `path` (an existing file is replaced). `notify_urls`: masked
    wherever they appear (with every other secret: redaction.py). `extra`: members the caller
    holds (the watcher's timeline and goodput). Raises OSError when `path` cannot be written."""
    t0, started = time.monotonic(), time.time()
    collector = Collector(t0 + max(1.0, time_s - _WRITE_RESERVE_S))
    for node, hw in watch.host_watches():
        if isinstance(hw, HostWatch):
            await collect_host(collector, hw, f"nodes/{node}/" if node else "")
    got = collector.out
    redactor = Redactor(notify_urls)
    members: list[Member] = []
    missing = list(got.missing)
    redactions = 0
    for m in [*got.members, config_member(profile, config_path), *extra]:
        out = cleaned(m, redactor)
        if isinstance(out, Missing):
            missing.append(out)
        else:
            members.append(out[0])
            redactions += out[1]
    taken = time.time()

    def manifest_of(kept: list[Member], over: list[Missing]) -> bytes:
        return manifest_bytes(redactor.value(_manifest(profile, watch.label, started, taken, t0, max_bytes, got,
                                                       kept, [*missing, *over], redactions)))

    kept, over, manifest = fit(members, max_bytes, manifest_of)
    size = write(path, manifest, kept, taken)
    return BundleResult(path=path, size=size, members=[MANIFEST, *(m.name for m in kept)], missing=[*missing, *over],
                        seconds=time.monotonic() - t0, unreachable=got.unreachable, verdict=got.verdict)


def _manifest(profile: Profile, label: str, started: float, taken: float, t0: float, max_bytes: int, got,
              kept: list[Member], missing: list[Missing], redactions: int) -> dict:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "product": "dflash-tui", "version": __version__,
        "profile": profile.name, "target": label, "run_dir": profile.run_dir,
        "taken_by": socket.gethostname(), "started_at": started, "taken_at": taken,
        "seconds": round(time.monotonic() - t0, 3), "max_bytes": max_bytes,
        "verdict": got.verdict, "unreachable": got.unreachable,
        "members": [{"name": m.name, "what": m.what, "bytes": len(m.data), "taken_at": m.taken_at, "where": m.where}
                    for m in kept],
        "not_taken": [{"name": m.name, "what": m.what, "reason": m.reason} for m in missing],
        "redaction": {"masks": redactions, "mask": "…",
                      "rules": "values of secret-looking names (TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, AUTH, "
                               "...); tokens of known shapes (hf_, AKIA, ghp_, W&B 40-hex, sk-, xox, Bearer, "
                               "Authorization, URL passwords, private keys); the notify URLs. A member that "
                               "cannot be scanned or still holds a shape after masking is not shipped."},
    }
