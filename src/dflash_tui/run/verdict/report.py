"""One observation of a run, as handed to `--check` output and to the dashboard.

A RunWatch (watch/) produces these once per poll; the UI renders them and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...contract.rundir import ExitRecord, LaunchRecord, ProbeReport, StopRecord, TrainStatus

from ..evidence.activity import Activity
from ..evidence.checkpoints import CheckpointsView
from ..evidence.metric_files.reader import MetricsView
from ..evidence.observe import Evidence, process_matches
from ..evidence.memory_runway import MemoryRunway
from ..evidence.runway import DiskRunway
from ..evidence.step_clock import eta_s
from .checklist import Checklist
from .energy import RunCost, RunEnergy


@dataclass(frozen=True)
class RunProgress:
    """How far the run is, from its richest source: status.json, else events.jsonl or the log.

    For the header's summary and the Metrics tab; the verdict does not read it."""

    source: str                       # "status.json" | "events" | "log" | "trainer_state.json DIR"
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    rate: float | None = None         # in rate_unit
    rate_unit: str = ""               # "it/s", "s/it", "tok/s", "samples/s"
    time: float | None = None         # when this step was reached (target clock), if known
    eta_s: float | None = None        # seconds to `total` at the recent rate, where both are known

    @classmethod
    def of(cls, ev: Evidence) -> "RunProgress | None":
        st, act = ev.status, ev.activity
        pace = act.steps_per_s if act is not None else None
        if st is not None and (st.step > 0 or st.loss is not None):
            last = max((t.last_step_time for t in st.threads if t.last_step_time is not None), default=None)
            total = st.total_steps or None
            if pace is None and st.step_time_s:
                pace = 1.0 / st.step_time_s      # a one-shot look: the trainer's own step time
            return cls("status.json", st.step, total, st.loss, st.tokens_per_s,
                       "tok/s" if st.tokens_per_s is not None else "", last or st.time,
                       eta_s(st.step, total, pace or _launch_pace(ev, st.step, last or st.time)))
        mp = ev.metrics.progress if ev.metrics is not None else None
        if mp is not None and mp.total and (act is None or act.total != mp.total):
            # The HF Trainer's global_step of max_steps: exact, where the log gives no total of
            # the same count (its own bar's N/M is as exact and fresher).
            loss = act.loss if act is not None else None
            return cls(mp.source, mp.step, mp.total, loss, None, "", mp.at, eta_s(mp.step, mp.total, pace))
        if act is not None and (act.step is not None or act.loss is not None or act.rate is not None):
            # A step that counts within an epoch (Lightning's bar: "Epoch 2: ... 51/64") of a
            # run whose number of epochs is unknown: its total is the epoch's, no run's ETA.
            eta = None if act.step_epoch is not None else eta_s(
                act.step, act.total, pace or _launch_pace(ev, act.step, act.step_at), act.rate, act.rate_unit)
            return cls(act.step_source or "log", act.step, act.total, act.loss, act.rate, act.rate_unit,
                       act.step_at, eta)
        if mp is not None:
            # Steps only a metric file tells (a program that logs only to TensorBoard).
            return cls(mp.source, mp.step, mp.total, ev.metrics.newest_loss(), None, "", mp.at)
        return None


def _launch_pace(ev: Evidence, step: int | None, at: float | None) -> float | None:
    """Steps a second since the launch: a one-shot look's pace (one look sees no rate of its
    own), its start-up counted in, so the ETA errs long."""
    if ev.launch is None or step is None or at is None or step <= 0:
        return None
    span = at - ev.launch.start_time
    return step / span if span > 0 else None


@dataclass
class RunReport:
    time: float                       # target clock when observed (epoch seconds)
    profile: str
    target_label: str                 # e.g. "local", "root@gpu1 · pct:200"
    run_dir: str
    checklist: Checklist              # verdict + checks (+ summary line)
    launch: LaunchRecord | None = None
    exit: ExitRecord | None = None
    stop: StopRecord | None = None
    status: TrainStatus | None = None  # latest status.json, if any parsed
    pid_alive: bool | None = None
    uptime_s: float | None = None
    connected: bool = True            # False: the transport is down, fields are the last known
    stale_since: float | None = None  # local epoch seconds when the data stopped being fresh
    error: str | None = None          # transport/read error of this poll, one line
    last_traceback: str | None = None  # last Python traceback found in train.log, if any
    progress: RunProgress | None = None  # step / loss / rate from status.json, events or the log
    activity: Activity | None = None     # CPU of the process tree, log growth, disk (run/evidence/activity.py)
    probes: list[ProbeReport] = field(default_factory=list)  # the run probe's, one per Python process
    # A run on several nodes: run/verdict/combine.py's NodeReport per node, in rank order (each with that
    # node's own report); empty for a run on one host.
    nodes: tuple = ()
    metrics: MetricsView | None = None   # metric lines and files: sources, newest points (run/evidence/metric_files/)
    checkpoints: CheckpointsView | None = None  # the run's checkpoints, judged (run/evidence/checkpoints.py)
    runway: DiskRunway | None = None            # whether the next checkpoints fit (run/evidence/runway.py)
    # What the run's GPUs drew since its launch and what it costs at the profile's prices
    # (run/verdict/energy.py; the watch adds them where it sampled the GPUs); the cost here
    # is without the watcher's goodput (recording/recovery/outside.py adds it).
    energy: RunEnergy | None = None
    cost: RunCost | None = None
    memory: MemoryRunway | None = None          # host and GPU memory trends (run/evidence/memory_runway.py)


def report_from(ev: Evidence, checklist: Checklist, *, profile: str, target_label: str,
                vouched: bool = False) -> RunReport:
    """The report of one fresh observation: what `--check` prints and a pane renders.
    `vouched`: a scheduler stands for the wrapper's pid (`Launcher.vouches`), which this host
    may not see (a Slurm job's wrapper on a compute node): its pid is then not called gone."""
    alive = process_matches(ev.launch, ev.proc) if ev.launch is not None else None
    if alive is False and vouched:
        alive = None
    return RunReport(
        time=ev.now, profile=profile, target_label=target_label, run_dir=ev.run_dir,
        checklist=checklist, launch=ev.launch, exit=ev.exit, stop=ev.stop, status=ev.status,
        pid_alive=alive,
        uptime_s=(ev.now - ev.launch.start_time) if ev.launch is not None and alive else None,
        connected=True, stale_since=None, error=None, last_traceback=ev.last_traceback,
        progress=RunProgress.of(ev), activity=ev.activity, probes=list(ev.probes), metrics=ev.metrics,
        checkpoints=ev.checkpoints, runway=ev.runway, memory=ev.memory)
