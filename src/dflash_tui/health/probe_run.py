"""Run the collective bandwidth probe (allreduce_probe.py) on one target with the profile's python.

The probe's text goes on stdin to `python -c BOOTSTRAP` (the route remote/agent.py takes), so
nothing is installed or left on the target. The answer is its one JSON line; anything else
(no such python, a crash, a hang past the limit) is a ProbeFailed with one line saying why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..remote.base import Target
from . import allreduce_probe

PROBE_BYTES = 64 << 20
PROBE_TIMEOUT_S = 60.0          # the probe's own limit for its workers
_SLACK_S = 30.0                 # python and torch start-up on a busy target, on top of it
_SOURCE = Path(allreduce_probe.__file__).read_text(encoding="utf-8")


class ProbeFailed(Exception):
    """The target answered, but no measurement: the one-line reason is the message."""


@dataclass(frozen=True)
class ProbeResult:
    backend: str
    world_size: int
    bytes: int
    seconds: float
    algbw_gbps: float
    busbw_gbps: float
    devices: tuple[str, ...]

    @property
    def compared_gbps(self) -> float:
        """What a node's results are compared by: the bus bandwidth, except for a world of one
        process (one GPU), whose bus bandwidth is 0 by its formula: its algorithm bandwidth."""
        return self.busbw_gbps if self.world_size > 1 else self.algbw_gbps

    def to_json(self) -> dict:
        return {"backend": self.backend, "world_size": self.world_size, "bytes": self.bytes,
                "seconds": self.seconds, "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps,
                "devices": list(self.devices)}


def result_from(answer: dict) -> ProbeResult:
    """The probe's JSON answer as a ProbeResult; ProbeFailed for an error or a malformed one."""
    if "error" in answer:
        raise ProbeFailed(str(answer["error"])[:400])
    try:
        r = ProbeResult(str(answer["backend"]), int(answer["world_size"]), int(answer["bytes"]),
                        float(answer["seconds"]), float(answer["algbw_gbps"]), float(answer["busbw_gbps"]),
                        tuple(str(d) for d in answer.get("devices", ())))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProbeFailed(f"the health probe's answer is malformed ({exc!r})") from None
    if not (r.seconds > 0 and math.isfinite(r.busbw_gbps) and r.world_size > 0):
        raise ProbeFailed(f"the health probe's answer is out of range: {answer}")
    return r


async def run_probe(target: Target, python: str, *, nbytes: int = PROBE_BYTES,
                    timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """One measurement on `target`. Raises ProbeFailed, or TargetError when it cannot be reached."""
    argv = [python, "-c", allreduce_probe.BOOTSTRAP, "--bytes", str(nbytes), "--timeout", str(timeout_s)]
    res = await target.run(argv, input=_SOURCE.encode("utf-8"), timeout=timeout_s + _SLACK_S)
    lines = [line for line in res.stdout.splitlines() if line.strip().startswith("{")]
    if not lines:
        if res.exit_status == 127:
            raise ProbeFailed(f"no python {python} on {target.label}: set the profile's python to the "
                              "training environment's interpreter")
        err = [line for line in res.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        raise ProbeFailed(f"the health probe on {target.label} exited with {res.exit_status}: {err[0][:300]}")
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        raise ProbeFailed(f"the health probe on {target.label} printed no JSON: {lines[-1][:200]}") from None
    if not isinstance(answer, dict):
        raise ProbeFailed(f"the health probe on {target.label} printed no JSON object")
    return result_from(answer)
