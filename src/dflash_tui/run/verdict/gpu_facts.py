"""What each GPU of a run's host is doing, from one GpuSnapshot: busy, drawing how much power,
at what SM clock, and whether its busy time is arithmetic or a kernel that spins.

NVML's utilisation is the share of time a kernel was running, whatever the kernel does: a kernel
that spins on a flag (NCCL's, waiting for a peer that never comes; `torch.cuda._sleep`) reads
100 % busy while the GPU draws little more than idle power. Power against the board's limit
tells the two apart; the SM clock against its top says whether a power or heat cap slows the
arithmetic. Pure: the checks (`gpus`, the STALLED summary) and `--check --json` read these
facts, words.py phrases them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...gpu.sample import GpuSample, GpuSnapshot

# A GPU busy at least this share of the time ...
SPIN_UTIL_PCT = 90.0
# ... while drawing at most this share of its power limit runs a kernel that spins, not
# arithmetic. Measured on an H200 (700 W limit; benchmarks/device/power_run.sh, RESULTS.md):
# idle 82 W; a spinning kernel 100 % busy at 127 W (18 %); a bf16 matmul loop 100 % busy at
# 692 W; the bundled trainer's small preset 34 % busy at 214 W (31 %).
SPIN_POWER_SHARE = 0.25


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    util_sm_pct: float | None          # the whole device's (NVML utilisation.gpu)
    run_sm_util_pct: float | None      # the run's own processes' share, where NVML gives it
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    run_pids: tuple[int, ...]          # the run's processes on this GPU (host pids)
    spinning: bool                     # the run's processes busy, drawing too little power for arithmetic
    # Another program's processes are on it too: its device-wide use and power are not the run's.
    shared: bool = False

    @property
    def power_share(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w / self.power_limit_w

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["run_pids"] = list(self.run_pids)
        share = self.power_share
        d["power_pct"] = None if share is None else round(share * 100, 1)
        return d


def spinning(util_sm_pct: float | None, power_w: float | None, power_limit_w: float | None) -> bool:
    """Busy (SPIN_UTIL_PCT) while drawing at most SPIN_POWER_SHARE of the limit. Unknown power or
    limit (a driver that gives neither, "[N/A]") is never called spinning."""
    if util_sm_pct is None or power_w is None or not power_limit_w:
        return False
    return util_sm_pct >= SPIN_UTIL_PCT and power_w <= SPIN_POWER_SHARE * power_limit_w


def facts_of(g: GpuSample) -> GpuFacts:
    mine = [p for p in g.processes if p.is_run_process]
    shares = [p.sm_util_pct for p in mine if p.sm_util_pct is not None]
    return GpuFacts(
        index=g.index, name=g.name, util_sm_pct=g.util_sm_pct,
        run_sm_util_pct=sum(shares) if shares else None,
        mem_used_bytes=g.mem_used_bytes, mem_total_bytes=g.mem_total_bytes,
        power_w=g.power_w, power_limit_w=g.power_limit_w,
        sm_clock_mhz=g.sm_clock_mhz, sm_clock_max_mhz=g.sm_clock_max_mhz,
        run_pids=tuple(p.pid for p in mine),
        spinning=_run_spins(g, mine, shares), shared=len(mine) < len(g.processes))


def _run_spins(g: GpuSample, mine: list, shares: list[float]) -> bool:
    """Whether the run's own kernels spin: the device's use where the run is alone on it; on a
    GPU another program shares, only the run's processes' share of the SMs says it (no share
    known: not the run's to be called)."""
    if not spinning(g.util_sm_pct, g.power_w, g.power_limit_w):
        return False
    if len(mine) == len(g.processes):
        return True
    return bool(shares) and spinning(sum(shares), g.power_w, g.power_limit_w)


def gpu_facts(snap: GpuSnapshot | None) -> list[GpuFacts]:
    """Every readable GPU of the sample, in index order; none for a sample with an error or a
    GPU that fell off the bus (the `gpus` check says those)."""
    if snap is None or snap.error is not None:
        return []
    return [facts_of(g) for g in sorted(snap.gpus, key=lambda g: g.index) if not g.lost]


def run_gpu(snap: GpuSnapshot) -> tuple[GpuFacts, float, str] | None:
    """(the GPU, its SM use in %, whose) that says most about the run: a GPU of the run's that
    spins first, else its busiest. The use is the run's own processes' share where NVML gives
    it per process, else the whole device's ("the whole device", which another user may share)."""
    used = [f for f in gpu_facts(snap) if f.run_pids]
    if not used:
        return None
    own = [f for f in used if f.run_sm_util_pct is not None]
    if own:
        pick = [f for f in own if f.spinning] or own
        best = max(pick, key=lambda f: f.run_sm_util_pct or 0.0)
        return best, best.run_sm_util_pct or 0.0, "the run's processes"
    pick = [f for f in used if f.spinning] or used
    best = max(pick, key=lambda f: f.util_sm_pct or 0.0)
    return best, best.util_sm_pct or 0.0, "the whole device"
