"""Xid events from the host's kernel log, read over the host's transport (never the container's:
a job inside one usually cannot read `dmesg`). NVML's events reach only a listener that was
registered when they happened; the kernel log keeps the ones before, with the GPU's PCI address.

`XID_SCRIPT` prints the host's clock, then the NVRM Xid lines of `dmesg --time-format iso`,
or the one line dmesg refused with (kernel.dmesg_restrict, no util-linux); `parse_kernel_xids`
reads that answer. A line that is not an Xid line is ignored, never an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

XID_SCRIPT = ('echo "dflash-now $(date +%s)"; '
              'if out=$(dmesg --time-format iso 2>&1); then '
              'printf "%s\\n" "$out" | grep -F "NVRM: Xid" | tail -n 50; '
              'else echo "dflash-dmesg-refused $(printf "%s" "$out" | head -n 1 | cut -c1-200)"; fi; '
              'echo dflash-dmesg-end')

_XID = re.compile(r"^(\S+)\s+NVRM: Xid \(PCI:([0-9A-Fa-f:.]{4,20})\): (\d{1,4})\b(.*)$")


@dataclass(frozen=True)
class KernelXid:
    time: float          # epoch seconds, the host's clock
    pci: str             # "0000:3b:00"
    xid: int
    text: str            # the rest of the kernel's line, shortened


@dataclass(frozen=True)
class KernelLog:
    now: float | None                 # the host's clock when read
    xids: tuple[KernelXid, ...] = ()
    refused: str = ""                 # why it could not be read ("" when it was)


def parse_kernel_xids(stdout: str) -> KernelLog:
    now = None
    xids = []
    refused = ""
    ended = False
    for line in stdout.splitlines():
        if line.startswith("dflash-now "):
            value = line[len("dflash-now "):].strip()
            now = float(value) if value.isdigit() else None
        elif line.startswith("dflash-dmesg-refused"):
            refused = line[len("dflash-dmesg-refused"):].strip() or "dmesg failed"
        elif line == "dflash-dmesg-end":
            ended = True
        else:
            m = _XID.match(line.strip())
            if m is None:
                continue
            try:
                stamp = datetime.fromisoformat(m.group(1).replace(",", ".")).timestamp()
            except ValueError:
                continue
            xids.append(KernelXid(stamp, m.group(2).lower(), int(m.group(3)), " ".join(m.group(4).split())[:160]))
    if not ended and not refused:
        refused = "the kernel log could not be read through this transport"
    return KernelLog(now, tuple(xids), refused)
