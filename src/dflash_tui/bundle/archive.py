"""The bundle's file: a tar.gz whose first member is manifest.json, within a size bound.

Members are kept in the order they were taken (the most telling first) while the archive
stays under `max_bytes`: a tar member costs its bytes plus at most 1,024 of header and padding,
the archive's end and gzip's worst case are reserved, so the file never passes the bound
whatever the contents compress to. A member that does not fit is named in the manifest.
The file is written beside its final name and renamed into place, mode 0600 (it is evidence
about someone's machine, even masked).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from dataclasses import dataclass
from typing import Any, Callable

from .member import Member, Missing

MANIFEST = "manifest.json"
_PER_MEMBER = 1024            # a tar header (512) and the padding of the last block (< 512)
_RESERVED = 10240 + 2048      # the tar's end blocks and record padding; gzip's header and worst case


@dataclass
class Written:
    path: str
    size: int
    members: list[Member]
    missing: list[Missing]
    manifest: dict[str, Any]


def fit(members: list[Member], max_bytes: int, manifest_of: Callable[[list[Member], list[Missing]], bytes]
        ) -> tuple[list[Member], list[Missing], bytes]:
    """The members that fit under `max_bytes` with their manifest, in order; the rest, named."""
    kept, over = list(members), []
    while True:
        manifest = manifest_of(kept, over)
        need = _RESERVED + len(manifest) + _PER_MEMBER + sum(len(m.data) + _PER_MEMBER for m in kept)
        need += need // 500   # deflate's stored blocks: at most 5 bytes per 16 KiB, rounded up well
        if need <= max_bytes or not kept:
            return kept, over, manifest
        # Drop the biggest of the later half first: the first members say the most.
        tail = kept[len(kept) // 2:] or kept
        drop = max(tail, key=lambda m: len(m.data))
        kept.remove(drop)
        over.insert(0, Missing(drop.name, drop.what, f"{len(drop.data)} bytes: over the bundle's size bound "
                                                     f"({max_bytes} bytes; --bundle-max-mb)"))


def write(path: str, manifest: bytes, members: list[Member], mtime: float) -> int:
    """The archive at `path` (replaced atomically, mode 0600); its size in bytes."""
    part = f"{path}.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=int(mtime)) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in [(MANIFEST, manifest), *((m.name, m.data) for m in members)]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(part, path)
    except BaseException:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise
    return os.path.getsize(path)


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, indent=1, ensure_ascii=True).encode("ascii")
