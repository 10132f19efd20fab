"""Parse and validate the --target-devices / --drafter-devices lists, before anything is built.

Every check here runs before a model is built or a kernel compiled, so a typo costs the user
a one-line message instead of a minute of warm-up followed by a traceback.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

_DEVICE_RE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class DeviceError(ValueError):
    """A device list that cannot be used; the message names the problem and the fix."""


@dataclass(frozen=True)
class DevicePlan:
    """Where each worker thread runs. One drafter thread per entry of `drafter`."""

    target: tuple[str, ...]
    drafter: tuple[str, ...]

    @property
    def uses_cuda(self) -> bool:
        return any(d.startswith("cuda") for d in self.target + self.drafter)


def parse_device(text: str) -> str:
    """'cuda' -> 'cuda:0', 'cpu:0' -> 'cpu'; anything else is a DeviceError."""
    raw = text.strip().lower()
    m = _DEVICE_RE.match(raw)
    if not m:
        raise DeviceError(
            f"unknown device {text!r}: use cpu or cuda:N (for example cuda:0), separated by commas"
        )
    kind, index = m.group(1), m.group(2)
    if kind == "cpu":
        return "cpu"
    return f"cuda:{int(index or 0)}"


def parse_device_list(text: str, option: str) -> tuple[str, ...]:
    items = [p for p in (s.strip() for s in text.split(",")) if p]
    if not items:
        raise DeviceError(f"{option} is empty: give at least one device, e.g. {option} cpu")
    try:
        return tuple(parse_device(p) for p in items)
    except DeviceError as exc:
        raise DeviceError(f"{option}: {exc}") from None


def _cuda_device_count() -> int:
    # Imported here so that parsing the list alone never needs torch.
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_devices(
    target_devices: str,
    drafter_devices: str,
    *,
    cuda_count: Callable[[], int] = _cuda_device_count,
    cpu_count: int | None = None,
    threads_per_gpu: int = 1,
) -> DevicePlan:
    if threads_per_gpu < 1:
        raise DeviceError(f"--threads-per-gpu must be >= 1 (got {threads_per_gpu})")
    """Validate both lists against this machine and return the plan.

    Rules (each violation is a DeviceError with the fix in the message):
    - every cuda:N must exist on this machine;
    - a CUDA device carries at most `threads_per_gpu` drafter threads and as many target
      threads (default 1: two replicas on one GPU fight over its memory and gain little; more
      is allowed on purpose, e.g. to stress the compile gate with 8 threads on one GPU);
    - CPU may be repeated (that is how the pool is exercised without GPUs), but not beyond the
      number of CPU cores, where the threads only time-slice each other.
    """
    target = parse_device_list(target_devices, "--target-devices")
    drafter = parse_device_list(drafter_devices, "--drafter-devices")

    cuda_used = sorted({d for d in target + drafter if d.startswith("cuda")}, key=lambda d: int(d[5:]))
    if cuda_used:
        count = cuda_count()
        if count == 0:
            raise DeviceError(
                f"{', '.join(cuda_used)} requested but this machine has no usable CUDA device "
                "(torch.cuda.is_available() is False): use cpu, or run on a GPU host"
            )
        for d in cuda_used:
            if int(d[5:]) >= count:
                raise DeviceError(
                    f"{d} does not exist: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}"
                )

    for option, devices, role in (("--drafter-devices", drafter, "drafter"), ("--target-devices", target, "target")):
        for d in dict.fromkeys(devices):
            n = devices.count(d)
            if d.startswith("cuda") and n > threads_per_gpu:
                raise DeviceError(
                    f"{option} lists {d} {n} times but --threads-per-gpu is {threads_per_gpu}: list each "
                    f"GPU once, or pass --threads-per-gpu {n} to run {n} {role} threads on it"
                )

    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    for option, devices in (("--drafter-devices", drafter), ("--target-devices", target)):
        n_cpu = sum(1 for d in devices if d == "cpu")
        if n_cpu > cores:
            raise DeviceError(
                f"{option} asks for {n_cpu} cpu threads but this machine has {cores} core(s): "
                f"list cpu at most {cores} time(s)"
            )
    return DevicePlan(target=target, drafter=drafter)
