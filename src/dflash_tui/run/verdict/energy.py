"""What a run's GPUs drew since its launch, and what the run costs.

The energy is NVML's total-energy counter (mJ since the driver loaded, Volta+) of each GPU now,
less its reading at the launch (the preflight's sample, kept with the launch attempt:
run/attempts.py). A GPU without a counter, or without a launch reading, is named, never
counted as 0: the total then covers the other GPUs only and says so. Pure: `--check` and the
header render `RunEnergy.to_json`/`words`.

Cost: `cost_per_gpu_hour` times the run's GPUs times the hours since the launch, plus
`cost_per_kwh` times the kWh drawn; `to_finish` prices the ETA at the same GPU count and the
average power so far; `badput` prices the goodput's lost seconds by cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class RunEnergy:
    joules: float | None                  # None: no GPU of the run gave a counter at both ends
    gpus: tuple[int, ...]                 # the GPUs counted
    missing: tuple[tuple[int, str], ...] = ()   # (GPU, why it is not counted)
    j_per_step: float | None = None
    j_per_token: float | None = None

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
        parts = []
        if self.joules is not None:
            n = len(self.gpus)
            head = f"energy {self.kwh:.3f} kWh ({self.joules:,.0f} J) on {n} GPU{'s' if n != 1 else ''}"
            if self.j_per_step is not None:
                head += f", {self.j_per_step:,.1f} J per step"
            parts.append(head)
        parts += [f"{why} on GPU {g}" for g, why in self.missing]
        return "; ".join(parts)


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
            missing.append((gpu, "no energy counter"))
        elif baseline_mj is None:
            missing.append((gpu, "no reading at the launch (launched without the preflight)"))
        elif start is None:
            missing.append((gpu, "no energy counter at the launch"))
        elif mj < start:
            missing.append((gpu, "the counter restarted since the launch (driver reloaded)"))
        else:
            counted.append(gpu)
            total += (mj - start) / 1000.0
    joules = total if counted else None
    per_step = joules / step if joules is not None and step else None
    per_token = power_w / tokens_per_s if power_w is not None and tokens_per_s else None
    return RunEnergy(joules, tuple(counted), tuple(missing), per_step, per_token)


@dataclass(frozen=True)
class RunCost:
    so_far: float
    to_finish: float | None                                   # None: no ETA
    badput: float | None                                      # None: no goodput recorded
    badput_by_cause: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"so_far": round(self.so_far, 2),
                "to_finish": None if self.to_finish is None else round(self.to_finish, 2),
                "badput": None if self.badput is None else round(self.badput, 2),
                "badput_by_cause": {k: round(v, 2) for k, v in self.badput_by_cause.items()}}

    def words(self) -> str:
        text = f"cost so far {self.so_far:,.2f}"
        if self.to_finish is not None:
            text += f", {self.to_finish:,.2f} more to finish"
        if self.badput:
            causes = " and ".join(k.replace("_", " ") for k, v in self.badput_by_cause.items() if v > 0)
            text += f"; {self.badput:,.2f} of {self.so_far:,.2f} lost to {causes}"
        return text


def run_cost(*, seconds: float, gpus: int, energy: RunEnergy | None, per_gpu_hour: float | None,
             per_kwh: float | None, eta_s: float | None = None,
             lost_s_by_cause: Mapping[str, float] | None = None) -> RunCost | None:
    """The cost of `seconds` on `gpus` GPUs. None: the profile sets no price, or the
    price is per kWh and no GPU gave its energy."""
    if per_gpu_hour is None and per_kwh is None:
        return None
    if per_gpu_hour is None and (energy is None or energy.joules is None):
        return None

    def of(span_s: float) -> float:
        cost = (per_gpu_hour or 0.0) * gpus * span_s / 3600.0
        if per_kwh is not None and energy is not None and energy.kwh is not None and seconds > 0:
            cost += per_kwh * energy.kwh * span_s / seconds    # at the average power so far
        return cost

    so_far = of(seconds)
    to_finish = of(eta_s) if eta_s is not None else None
    by_cause = {k: of(v) for k, v in (lost_s_by_cause or {}).items() if v > 0}
    badput = sum(by_cause.values()) if lost_s_by_cause is not None else None
    return RunCost(so_far, to_finish, badput, by_cause)


def run_gpus(indices_with_run: Sequence[int], all_indices: Sequence[int]) -> list[int]:
    """The run's GPUs: those holding its processes, else (none seen) every GPU of the host."""
    return list(indices_with_run) or list(all_indices)
