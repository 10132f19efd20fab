"""What a run's GPUs drew since its launch, and what the run costs. Pure.

The energy is NVML's total-energy counter (mJ since the driver loaded, Volta+) of each of the
run's GPUs now, less its reading at the launch (the preflight's sample, kept with the launch
attempt: run/attempts.py). A GPU without a counter, without a launch reading, or whose counter
went back (the driver reloaded) is named, never counted as 0: the total then covers the other
GPUs only and says so, and with none left it is unknown, never 0 kWh.

Cost: the run's rate per hour is `cost_per_gpu_hour` times its GPUs plus `cost_per_kwh` times
its average power since the launch (its kWh over its hours). `so_far` prices the profile's
wall time since its first recorded launch (the watcher's goodput, restarts included) at that
rate, or, with nothing recorded, the run's time since its launch; `to_finish` prices the ETA;
`badput` prices the goodput's lost seconds, by cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...words import duration

J_PER_KWH = 3.6e6
NO_COUNTER = "no energy counter"
# The goodput causes (recording/goodput/goodput.py CAUSES) as the cost's words name them.
CAUSE_WORDS = {"queued": "queueing", "starting": "starts", "stalled": "stalls", "down": "restarts",
               "lost_progress": "lost progress", "rollback": "rollbacks", "checkpoint": "checkpoint saves",
               "unreachable": "unreachable time"}


@dataclass(frozen=True)
class RunEnergy:
    joules: float | None                  # None: no GPU of the run gave a counter at both ends
    # The GPUs counted: indices on one host; "NODE:INDEX" for a run on several nodes.
    gpus: tuple[int | str, ...]
    missing: tuple[tuple[int | str, str], ...] = ()   # (GPU, why it is not counted)
    j_per_step: float | None = None       # since the launch, over the run's steps
    j_per_token: float | None = None      # the run's power now over the trainer's tokens/s now

    @property
    def kwh(self) -> float | None:
        return None if self.joules is None else self.joules / J_PER_KWH

    def to_json(self) -> dict[str, Any]:
        return {"joules": None if self.joules is None else round(self.joules, 1),
                "kwh": None if self.kwh is None else round(self.kwh, 9),
                "j_per_step": None if self.j_per_step is None else round(self.j_per_step, 3),
                "j_per_token": None if self.j_per_token is None else round(self.j_per_token, 6),
                "gpus": list(self.gpus),
                "missing": [{"gpu": g, "why": why} for g, why in self.missing]}

    def words(self) -> str:
        """"energy 0.412 kWh (1,483,200 J) on 2 GPUs, 148.3 J per step; no energy counter on GPU 3"."""
        parts = []
        if self.joules is not None:
            n = len(self.gpus)
            head = f"energy {self.kwh:.3f} kWh ({self.joules:,.0f} J) on {n} GPU{'s' if n != 1 else ''}"
            if self.j_per_step is not None:
                head += f", {self.j_per_step:,.1f} J per step"
            if self.j_per_token is not None:
                head += f", {self.j_per_token:.4g} J per token"
            parts.append(head)
        parts += [f"{why} on GPU {g}" for g, why in self.missing]
        return "; ".join(parts)

    @property
    def note(self) -> str:
        """Why a GPU is not counted, in two words for a cell ("" when all are)."""
        if not self.missing:
            return ""
        if any(why.startswith(NO_COUNTER) for _, why in self.missing):
            return "no counter"
        return "no baseline" if any("launch" in why for _, why in self.missing) else "counter reset"

    def short(self) -> str:
        """"0.412 kWh" ("0.412 kWh*": not every GPU counted), or why there is no number."""
        if self.joules is not None:
            return f"{self.kwh:.3f} kWh" + ("*" if self.missing else "")
        return self.missing[0][1] if self.missing else ""


def run_energy(baseline_mj: Mapping[str, int | None] | None, now_mj: Mapping[int, int | None],
               *, step: int | None = None, power_w: float | None = None,
               tokens_per_s: float | None = None) -> RunEnergy | None:
    """The run's energy from the launch's counter readings (GPU index as text -> mJ, as stored
    in JSON; None: no launch reading) and the readings now (the run's GPUs). `power_w` (the
    run's GPUs' power now) over the trainer's `tokens_per_s` gives the J per token at the
    current rate. None: nothing to say (no GPU)."""
    if not now_mj:
        return None
    counted, missing, total = [], [], 0.0
    for gpu, mj in sorted(now_mj.items()):
        start = None if baseline_mj is None else baseline_mj.get(str(gpu))
        if mj is None:
            missing.append((gpu, NO_COUNTER))
        elif baseline_mj is None:
            missing.append((gpu, "no energy reading at the launch (launched without the preflight, or elsewhere)"))
        elif start is None:
            missing.append((gpu, f"{NO_COUNTER} at the launch"))
        elif mj < start:
            missing.append((gpu, "the energy counter went back since the launch (driver reloaded)"))
        else:
            counted.append(gpu)
            total += (mj - start) / 1000.0
    joules = total if counted else None
    per_step = joules / step if joules is not None and step else None
    per_token = power_w / tokens_per_s if power_w is not None and tokens_per_s else None
    return RunEnergy(joules, tuple(counted), tuple(missing), per_step, per_token)


def run_gpus(indices_with_run: Sequence[int], all_indices: Sequence[int]) -> list[int]:
    """The run's GPUs: those holding its processes, else (none seen) every GPU of the host."""
    return list(indices_with_run) or list(all_indices)


@dataclass(frozen=True)
class RunCost:
    per_hour: float                       # the run's rate: its GPUs, and its average power so far
    so_far: float
    seconds: float                        # the time `so_far` prices
    since: str                            # "first_launch" (the watcher's goodput wall) | "launch"
    to_finish: float | None = None        # None: no ETA
    badput: float | None = None           # None: no goodput recorded
    badput_by_cause: dict[str, float] = field(default_factory=dict)
    unpriced: str = ""                    # why part of the price is not counted ("" when all is)

    def to_json(self) -> dict[str, Any]:
        return {"so_far": round(self.so_far, 2),
                "to_finish": None if self.to_finish is None else round(self.to_finish, 2),
                "badput": None if self.badput is None else round(self.badput, 2),
                "badput_by_cause": {k: round(v, 2) for k, v in self.badput_by_cause.items()},
                "per_hour": round(self.per_hour, 4), "seconds": round(self.seconds, 1),
                "since": self.since, "unpriced": self.unpriced or None}

    def lost_words(self) -> str:
        """"41.00 of 310.00 lost to stalls and restarts" ("" when nothing is lost)."""
        causes = [CAUSE_WORDS.get(k, k) for k, v in self.badput_by_cause.items() if v >= 0.005]
        if not self.badput or not causes:
            return ""
        named = causes[0] if len(causes) == 1 else f"{', '.join(causes[:-1])} and {causes[-1]}"
        return f"{self.badput:,.2f} of {self.so_far:,.2f} lost to {named}"

    def words(self) -> str:
        """"cost 310.00 so far (2.50 an hour, 5 h since the first launch), 12.00 more to
        finish; 41.00 of 310.00 lost to stalls and restarts"."""
        since = "the first launch" if self.since == "first_launch" else "the launch"
        text = (f"cost {self.so_far:,.2f} so far ({self.per_hour:,.2f} an hour, "
                f"{duration(self.seconds)} since {since})")
        if self.to_finish is not None:
            text += f", {self.to_finish:,.2f} more to finish"
        lost = self.lost_words()
        if lost:
            text += f"; {lost}"
        if self.unpriced:
            text += f" ({self.unpriced})"
        return text


def run_cost(*, run_s: float, gpus: int, energy: RunEnergy | None, per_gpu_hour: float | None,
             per_kwh: float | None, eta_s: float | None = None, wall_s: float | None = None,
             lost_s_by_cause: Mapping[str, float] | None = None) -> RunCost | None:
    """The cost of the run, `run_s` seconds since its launch on `gpus` GPUs. `wall_s` and
    `lost_s_by_cause`: the watcher's goodput of the profile, where recorded. None: the profile
    sets no price, or only a price per kWh and no GPU gave its energy."""
    if per_gpu_hour is None and per_kwh is None:
        return None
    kwh = energy.kwh if energy is not None else None
    if per_gpu_hour is None and kwh is None:
        return None
    per_hour = (per_gpu_hour or 0.0) * gpus
    unpriced = ""
    if per_kwh is not None:
        if kwh is not None and run_s > 0:
            per_hour += per_kwh * kwh * 3600.0 / run_s      # at the average power so far
        elif kwh is None:
            unpriced = "the energy is not priced: " + (energy.short() if energy is not None else NO_COUNTER)
    if per_kwh is not None and energy is not None and energy.missing and kwh is not None:
        unpriced = "the energy of GPU " + ", ".join(str(g) for g, _ in energy.missing) + " is not priced"

    seconds, since = (wall_s, "first_launch") if wall_s is not None and wall_s > run_s else (run_s, "launch")
    return cost_at(per_hour, seconds, since, eta_s=eta_s, lost_s_by_cause=lost_s_by_cause, unpriced=unpriced)


def cost_at(per_hour: float, seconds: float, since: str, *, eta_s: float | None = None,
            lost_s_by_cause: Mapping[str, float] | None = None, unpriced: str = "") -> RunCost:
    """`seconds` (and the ETA, and each cause's lost seconds) priced at `per_hour`: a run's
    rate as the watcher recorded it, for the timeline and the notifications."""
    def of(span_s: float) -> float:
        return per_hour * span_s / 3600.0

    by_cause = {k: of(v) for k, v in (lost_s_by_cause or {}).items() if v > 0}
    badput = sum(by_cause.values()) if lost_s_by_cause is not None else None
    return RunCost(per_hour, of(seconds), seconds, since,
                   of(eta_s) if eta_s is not None else None, badput, by_cause, unpriced)


def nodes_energy(parts: Sequence[tuple[str, RunEnergy | None]]) -> RunEnergy | None:
    """A run's energy over its nodes (each node's own, in rank order): their joules summed,
    each GPU named "NODE:INDEX" (as the merged GPUs pane names it). J per step is the total
    over the steps (the ranks step together: each node's figure is over the same steps), so it
    is known only when every node that counted joules knows it. J per token is not summed: a
    node's figure is its own power over its own throughput. None: no node saw a GPU."""
    seen = [(node, e) for node, e in parts if e is not None]
    if not seen:
        return None
    counted = [f"{node}:{g}" for node, e in seen for g in e.gpus]
    missing = [(f"{node}:{g}", why) for node, e in seen for g, why in e.missing]
    with_joules = [e for _, e in seen if e.joules is not None]
    joules = sum(e.joules for e in with_joules) if with_joules else None
    per_step = [e.j_per_step for e in with_joules]
    j_per_step = sum(per_step) if per_step and None not in per_step else None
    if len(seen) == 1:
        return RunEnergy(joules, tuple(counted), tuple(missing), j_per_step, seen[0][1].j_per_token)
    return RunEnergy(joules, tuple(counted), tuple(missing), j_per_step, None)


def nodes_cost(parts: Sequence[tuple[str, RunCost | None]]) -> RunCost | None:
    """A run's cost over its nodes: their rates, costs so far and badput summed; the time is the
    longest node's; `to_finish` only when every priced node has an ETA; what is not priced is
    said per node. None: no node is priced."""
    priced = [(node, c) for node, c in parts if c is not None]
    if not priced:
        return None
    costs = [c for _, c in priced]
    to_finish = [c.to_finish for c in costs]
    badput = [c.badput for c in costs]
    by_cause: dict[str, float] = {}
    for c in costs:
        for cause, v in c.badput_by_cause.items():
            by_cause[cause] = by_cause.get(cause, 0.0) + v
    longest = max(costs, key=lambda c: c.seconds)
    unpriced = "; ".join(f"node {node}: {c.unpriced}" for node, c in priced if c.unpriced)
    return RunCost(sum(c.per_hour for c in costs), sum(c.so_far for c in costs), longest.seconds, longest.since,
                   sum(to_finish) if None not in to_finish else None,
                   sum(badput) if None not in badput else None, by_cause, unpriced)


def spent_words(kwh: float | None, cost: float | None) -> str:
    """"0.412 kWh, cost 3.10 so far" from a recorded change's evidence ("" when neither)."""
    parts = ([f"{kwh:.3f} kWh"] if kwh is not None else []) + ([f"cost {cost:,.2f} so far"] if cost is not None else [])
    return ", ".join(parts)


def priced_energy(*, facts: Sequence[Any], baseline_mj: Mapping[str, int | None] | None,
                  run_s: float, step: int | None, tokens_per_s: float | None, eta_s: float | None,
                  per_gpu_hour: float | None, per_kwh: float | None
                  ) -> tuple[RunEnergy | None, RunCost | None]:
    """(energy, cost without goodput) of a run from its checklist's GPU facts (run/verdict/
    gpu_facts.py `GpuFacts`: index, run_pids, power_w, energy_mj). (None, None): no GPU seen."""
    if not facts:
        return None, None
    mine = run_gpus([f.index for f in facts if f.run_pids], [f.index for f in facts])
    ours = [f for f in facts if f.index in mine]
    powers = [f.power_w for f in ours]
    energy = run_energy(baseline_mj, {f.index: f.energy_mj for f in ours}, step=step,
                        power_w=sum(powers) if powers and None not in powers else None,
                        tokens_per_s=tokens_per_s)
    cost = run_cost(run_s=run_s, gpus=len(mine), energy=energy, per_gpu_hour=per_gpu_hour,
                    per_kwh=per_kwh, eta_s=eta_s)
    return energy, cost
