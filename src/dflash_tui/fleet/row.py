"""FleetRow: what the fleet screen shows about one profile, made from one RunReport.

Nothing is decided here: the verdict and its cause are the report's checklist (run/verdict/health.py
`evaluate`, the same as `--check`); a target that does not answer is UNREACHABLE with the
reason and the next retry, and keeps the last numbers it really had (their age says so),
never NO RUN.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Profile
from ..gpu.sample import GpuSnapshot
from ..run.verdict.report import RunReport
from ..run.verdict.checklist import CheckId, CheckState, Verdict
from ..verdicts import State, TargetState

# A row's states when there is no verdict to show (dflash_tui/verdicts.py).
UNREACHABLE, CONNECTING, CONFIG_ERROR = TargetState.UNREACHABLE, TargetState.CONNECTING, TargetState.CONFIG_ERROR

# Severity, worst first: what the colour and the default sort follow.
FAIL, DOWN, WAIT, OK = "fail", "down", "wait", "ok"
SEVERITY_RANK = {FAIL: 0, DOWN: 1, WAIT: 2, OK: 3}


def host_label(profile: Profile) -> str:
    if profile.nodes:
        return f"nodes {','.join(profile.nodes)}"
    if profile.host is None:
        return "local"
    return f"{profile.user + '@' if profile.user else ''}{profile.host}" + (
        f":{profile.port}" if profile.port else "")


@dataclass(frozen=True)
class RunGpus:
    """The run's share of its host's GPUs in one snapshot."""

    count: int = 0                   # GPUs with a process of the run
    util_pct: float | None = None    # mean SM utilisation of those GPUs
    mem_bytes: int | None = None     # memory the run's processes use on them
    note: str = ""                   # why there is nothing to show (no NVML, not sampled yet)


def run_gpus(snap: GpuSnapshot | None) -> RunGpus:
    if snap is None:
        return RunGpus(note="not sampled yet")
    if snap.error is not None and not snap.gpus:
        return RunGpus(note=snap.error.message)
    mine = [g for g in snap.gpus if any(p.is_run_process for p in g.processes)]
    if not mine:
        return RunGpus(note="the run has no process on a GPU")
    utils = [g.util_sm_pct for g in mine if g.util_sm_pct is not None]
    mems = [p.used_memory_bytes for g in mine for p in g.processes
            if p.is_run_process and p.used_memory_bytes is not None]
    return RunGpus(len(mine), sum(utils) / len(utils) if utils else None,
                   sum(mems) if mems else None)


@dataclass(frozen=True)
class FleetRow:
    profile: str
    host: str
    container: str
    state: State                     # the verdict, or UNREACHABLE / CONNECTING / CONFIG ERROR
    verdict: Verdict | None          # None unless the target answered
    cause: str                       # one line: the checklist's summary, or why it is unreachable
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    tau: float | None = None
    rate: float | None = None        # in rate_unit: the trainer's tokens/s, a log's it/s, ...
    rate_unit: str = ""
    gpus: RunGpus = RunGpus()
    uptime_s: float | None = None
    fresh_at: float | None = None    # local epoch of the newest data it shows (None: never had any)
    polled_at: float | None = None   # local epoch when the last poll ended
    poll_s: float | None = None      # how long that poll took
    retry_in_s: float | None = None  # while unreachable: seconds to the next attempt
    busy: str = ""                   # the action in flight on it ("" when none)
    polled_every_s: float = 1.0      # its target's pause between polls now (fleet/cadence.py)
    # The run's energy since its launch and its cost so far (run/verdict/energy.py); the
    # note says why a GPU is not counted ("no counter": never shown as 0 kWh).
    kwh: float | None = None
    energy_note: str = ""
    cost: float | None = None

    @property
    def severity(self) -> str:
        if self.state is UNREACHABLE:
            return DOWN
        if self.state is CONFIG_ERROR or (self.verdict is not None and self.verdict.failing):
            return FAIL
        if self.verdict is not None and self.verdict.healthy:
            return OK
        return WAIT

    @property
    def healthy(self) -> bool:
        return self.severity == OK

    def age_s(self, now: float) -> float | None:
        return None if self.fresh_at is None else max(0.0, now - self.fresh_at)


def row_from_report(profile: Profile, report: RunReport | None, *, gpu: GpuSnapshot | None = None,
                    polled_at: float | None = None, poll_s: float | None = None,
                    fresh_at: float | None = None, retry_in_s: float | None = None,
                    busy: str = "", polled_every_s: float = 1.0) -> FleetRow:
    base = dict(profile=profile.name, host=host_label(profile), container=profile.container or "",
                polled_at=polled_at, poll_s=poll_s, busy=busy, polled_every_s=polled_every_s)
    if report is None:
        return FleetRow(**base, state=CONNECTING, verdict=None, cause="first poll in flight")
    numbers = dict(_numbers(report), fresh_at=fresh_at)
    if not report.connected:
        had_data = fresh_at is not None
        retry = f"; next retry in {retry_in_s:.0f} s" if retry_in_s is not None else ""
        reason = report.error or "no answer"
        # "(retrying in N s)" from the monitor is said once, by the retry countdown.
        reason = reason.split(" (retrying in ")[0]
        return FleetRow(**base, state=UNREACHABLE, verdict=None, cause=f"{reason}{retry}",
                        retry_in_s=retry_in_s, **(numbers if had_data else {}))
    return FleetRow(**base, state=report.checklist.verdict, verdict=report.checklist.verdict,
                    cause=cause_line(report), gpus=run_gpus(gpu) if report.pid_alive else RunGpus(),
                    uptime_s=report.uptime_s, **numbers)


def _numbers(report: RunReport) -> dict:
    """Step, loss and rate from the run's richest source of progress (run/verdict/report.py
    `RunProgress`: status.json, else events.jsonl or the log, as the detail line says them), τ
    from status.json, the energy and cost the watch computed. An ended run keeps the last ones its files hold."""
    st, p, e = report.status, report.progress, report.energy
    spend = dict(kwh=e.kwh if e is not None else None, energy_note=e.note if e is not None else "",
                 cost=report.cost.so_far if report.cost is not None else None)
    if p is None:
        return dict(tau=st.tau if st else None, **spend)
    return dict(step=p.step, total_steps=p.total or None, loss=p.loss, tau=st.tau if st else None,
                rate=p.rate, rate_unit=p.rate_unit if p.rate is not None else "", **spend)


def cause_line(report: RunReport) -> str:
    """The row's one line: the engine's summary, led by the kind of hang when its stacks named
    one (the failing "stacks" check: "hung in a collective: rank 0 waits in ..."), so a row
    among twenty says what kind of trouble before it runs out of width."""
    cl = report.checklist
    stacks = next((c for c in cl.checks if c.id == CheckId.STACKS and c.state is CheckState.FAIL), None)
    words = stacks.cause.rstrip("…") if stacks is not None else ""
    if not words or cl.summary.startswith(words):
        return cl.summary
    rest = cl.summary.replace(f"; {words}", "").replace(words, "").strip("; ")
    return f"{words}; {rest}" if rest else words


def config_error_row(profile: Profile, message: str) -> FleetRow:
    return FleetRow(profile=profile.name, host=host_label(profile), container=profile.container or "",
                    state=CONFIG_ERROR, verdict=None, cause=message)
