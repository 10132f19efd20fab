"""Where GPU snapshots come from. Every source answers `await sample(run)` with a GpuSnapshot,
and `await sample_runs(runs)` with one per run of a host's several runs (each with its own
processes marked), and never raises: a failure is the snapshot's `error`.

- `LocalNvmlSource`: pynvml in this process, on a worker thread (NVML calls can block for
  seconds on a sick GPU; the event loop must not).
- `AgentNvmlSource`: the `gpu.sample` op of the persistent agent on the GPU host.
- `SmiStreamSource`: a streaming `nvidia-smi ... -lms` on the host, for hosts whose python has
  no pynvml (or that have no python at all).
- `FallbackSource`: NVML first; nvidia-smi once NVML says its library is missing.
`open_gpu_source(host_target)` picks the right combination for a target.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, Sequence

from ..contract.rundir import LaunchRecord
from ..remote.agent import AgentOps, open_ops
from ..remote.base import Target, TargetError
from ..remote.local import LocalTarget
from ..remote.ops import RemoteOps
from .agent_probe import OP_NAME, gpu_agent_sources
from .codec import ProbeAnswerError, snapshot_from_dict, snapshots_for_runs
from .nspid import RunPidMapper
from .nvml_reader import NvmlReader, nvidia_gpu_present
from .sample import GpuError, GpuErrorKind, GpuSnapshot
from .smi import (GPU_FIELDS, AppsTracker, GpuLineGrouper, SmiLineError, apps_query_argv, classify_message,
                  gpu_query_argv, parse_app_line, parse_gpu_line, refused_field, snapshot_dict, without_field)


@dataclass(frozen=True)
class RunRef:
    """The watched run, as launch.json names it: the wrapper's pid where it runs (inside the
    container, if any) and its start time in clock ticks (guards against pid reuse)."""

    pid: int
    start_ticks: int | None = None


def run_ref_from_launch(launch: LaunchRecord | None) -> "RunRef | None":
    """The RunRef of a run from its launch.json record (its fields checked when it was read)."""
    return RunRef(launch.pid, launch.start_ticks) if launch is not None else None


class GpuSource(Protocol):
    name: str

    async def sample(self, run: RunRef | None = None) -> GpuSnapshot: ...

    async def sample_runs(self, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        """One snapshot per run of `runs`, in order, each with that run's processes marked (a
        None run: none marked)."""
        ...

    async def close(self) -> None: ...


def error_snapshot(kind: GpuErrorKind, message: str, source: str) -> GpuSnapshot:
    return GpuSnapshot(time=time.time(), source=source, error=GpuError(kind, message))


def distinct_runs(runs: Sequence[RunRef | None]) -> list[RunRef]:
    """The runs to ask about: each named once, None left out."""
    return list(dict.fromkeys(r for r in runs if r is not None))


def in_order(runs: Sequence[RunRef | None], asked: list[RunRef], base: GpuSnapshot,
             marked: list[GpuSnapshot]) -> list[GpuSnapshot]:
    """Each run's snapshot, in the order of `runs`: its own from `marked` (one per run of
    `asked`), `base` (no process marked) for a None run."""
    by_run = dict(zip(asked, marked))
    return [base if r is None else by_run[r] for r in runs]


async def listed(snapshot: Awaitable[GpuSnapshot]) -> list[GpuSnapshot]:
    """One snapshot, as `sample_runs` answers: a list."""
    return [await snapshot]


async def sample_each(source: GpuSource, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
    """`sample_runs` for a source whose samples cost little apart from the marking: one
    `sample` per run."""
    return [await source.sample(r) for r in runs]


def _import_pynvml():
    import pynvml  # nvidia-ml-py: imported only when a local sample is first taken

    return pynvml


class LocalNvmlSource:
    name = "nvml"

    def __init__(self, load: Callable[[], Any] = _import_pynvml, *, proc_root: str = "/proc",
                 timeout: float = 5.0, gpu_present: Callable[[], bool | None] | None = None) -> None:
        """`gpu_present`: see NvmlReader (`nvidia_gpu_present` for this machine's real NVML)."""
        self._reader = NvmlReader(load, proc_root=proc_root, gpu_present=gpu_present)
        self._mapper = RunPidMapper(proc_root)
        self._timeout = timeout
        # The sample in flight on the worker thread. NVML calls on a failing GPU can hang for
        # many seconds; the stream then gets a "not answering" state each second instead of
        # stalling, and no second NVML call is started on the same reader meanwhile.
        self._pending: asyncio.Future | None = None
        self._pending_since = 0.0

    async def _read(self) -> dict | GpuSnapshot:
        """The reader's dict of one NVML read on the worker thread, or the snapshot saying why
        there is none."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(asyncio.to_thread(self._reader.sample))
            self._pending_since = time.monotonic()
        try:
            answer = await asyncio.wait_for(asyncio.shield(self._pending), self._timeout)
        except asyncio.TimeoutError:
            waited = time.monotonic() - self._pending_since
            return error_snapshot(GpuErrorKind.PROBE_FAILED,
                                  f"NVML has not answered for {waited:.0f} s: a GPU may be failing "
                                  "(check dmesg for Xid errors)", self.name)
        except Exception as exc:  # a reader bug must not take the dashboard down
            self._pending = None
            return error_snapshot(GpuErrorKind.PROBE_FAILED,
                                  f"local GPU probe failed: {type(exc).__name__}: {exc}", self.name)
        self._pending = None
        return answer

    async def sample(self, run: RunRef | None = None) -> GpuSnapshot:
        return (await self.sample_runs([run]))[0]

    async def sample_runs(self, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        answer = await self._read()
        if isinstance(answer, GpuSnapshot):
            return [answer] * len(runs)
        asked = distinct_runs(runs)
        procs = [p for g in answer["gpus"] for p in g["processes"]]
        try:
            answer["run_processes"] = await asyncio.to_thread(
                self._mapper.mark_runs, procs, [(r.pid, r.start_ticks) for r in asked])
            base, marked = snapshots_for_runs(answer, len(asked))
        except ProbeAnswerError as exc:
            return [error_snapshot(GpuErrorKind.PROBE_FAILED, f"local GPU probe: {exc}", self.name)] * len(runs)
        except Exception as exc:  # a mapper bug must not take the dashboard down
            return [error_snapshot(GpuErrorKind.PROBE_FAILED,
                                   f"local GPU probe failed: {type(exc).__name__}: {exc}", self.name)] * len(runs)
        return in_order(runs, asked, base, marked)

    async def close(self) -> None:
        if self._pending is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._pending), self._timeout)
            except (asyncio.TimeoutError, Exception):
                return  # still hung: leave the reader to its thread rather than race it
        await asyncio.to_thread(self._reader.close)


class AgentNvmlSource:
    name = "nvml"

    def __init__(self, ops: AgentOps, *, nvml_spec: str | None = None, timeout: float = 5.0,
                 owns_ops: bool = False) -> None:
        self._ops = ops
        self._spec = nvml_spec
        self._timeout = timeout
        self._owns = owns_ops

    async def _ask(self, **args: Any) -> Any:
        """The probe's answer, or the snapshot saying why there is none."""
        if self._spec:
            args["nvml"] = self._spec
        try:
            return await self._ops.call(OP_NAME, timeout=self._timeout, **args)
        except TargetError as exc:
            return error_snapshot(GpuErrorKind.PROBE_FAILED, f"GPU probe on {self._label}: {exc}", self.name)

    @property
    def _label(self) -> str:
        return self._ops.label

    def _garbage(self, exc: ProbeAnswerError) -> GpuSnapshot:
        return error_snapshot(GpuErrorKind.PROBE_FAILED,
                              f"GPU probe on {self._label} answered garbage ({exc}): restart the dashboard",
                              self.name)

    async def sample(self, run: RunRef | None = None) -> GpuSnapshot:
        args: dict[str, Any] = {}
        if run is not None:
            args.update(run_pid=run.pid, run_start_ticks=run.start_ticks)
        answer = await self._ask(**args)
        if isinstance(answer, GpuSnapshot):
            return answer
        try:
            return snapshot_from_dict(answer, source="nvml")
        except ProbeAnswerError as exc:
            return self._garbage(exc)

    async def sample_runs(self, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        """One request for all of `runs`; one per run where the agent's op takes no `runs`."""
        if "runs" not in self._ops.info.get("args", {}).get(OP_NAME, ()):
            return await sample_each(self, runs)
        asked = distinct_runs(runs)
        answer = await self._ask(runs=[[r.pid, r.start_ticks] for r in asked])
        if isinstance(answer, GpuSnapshot):
            return [answer] * len(runs)
        try:
            base, marked = snapshots_for_runs(answer, len(asked), source="nvml")
        except ProbeAnswerError as exc:
            return [self._garbage(exc)] * len(runs)
        return in_order(runs, asked, base, marked)

    async def close(self) -> None:
        if self._owns:
            await self._ops.close()


Annotator = Callable[[list[dict], "RunRef | None"], Awaitable[None]]


def local_annotator(proc_root: str = "/proc") -> Annotator:
    mapper = RunPidMapper(proc_root)

    async def annotate(procs: list[dict], run: RunRef | None) -> None:
        if run is None:
            await asyncio.to_thread(mapper.annotate, procs)
        else:
            await asyncio.to_thread(mapper.annotate, procs, run.pid, run.start_ticks)

    return annotate


def ops_annotator(ops: Any) -> Annotator:
    """Mark run processes through any RemoteOps on the host (agent or one-shot shell).

    A GPU process is the run's when its process-group leader is the run's wrapper: same
    innermost pid (NSpid) and same start time. (The in-agent probe also follows sessions and
    parents; pid_info gives groups only, which is what launch.sh's setsid creates.)
    """

    async def annotate(procs: list[dict], run: RunRef | None) -> None:
        for p in procs:
            p.setdefault("container_pid", None)
            p.setdefault("is_run_process", False)
        if not procs:
            return
        infos = await ops.pid_info([p["pid"] for p in procs])
        leaders = sorted({i.pgid for i in infos if i.alive and i.pgid})
        by_pid = {i.pid: i for i in (await ops.pid_info(leaders) if leaders and run else [])}
        for p, info in zip(procs, infos):
            p["container_pid"] = info.nspid[-1] if len(info.nspid) > 1 else None
            lead = by_pid.get(info.pgid) if info.pgid else None
            if run is None or lead is None or not lead.alive:
                continue
            inner = (lead.nspid or (lead.pid,))[-1]
            p["is_run_process"] = inner == run.pid and (
                run.start_ticks is None or lead.start_ticks == run.start_ticks)

    return annotate


RETRY_START_S = 10.0


class SmiStreamSource:
    """Two long-running nvidia-smi streams on the host: GPUs and compute apps."""

    name = "nvidia-smi"

    def __init__(self, target: Target, *, interval_ms: int = 1000,
                 annotate: Annotator | None = None, stale_after: float = 5.0,
                 retry_after: float = RETRY_START_S, closes: Any = None) -> None:
        self._target = target
        self._closes = closes        # ops opened for this source alone, closed with it
        self._interval_ms = interval_ms
        self._annotate = annotate
        self._stale_after = stale_after
        self._apps = AppsTracker(stale_after=2.5 * interval_ms / 1000)
        self._latest: list[dict] | None = None
        self._latest_at = 0.0
        self._error: dict | None = None
        self._tasks: list[asyncio.Task] = []
        self._retry_after = retry_after
        self._retry_at = 0.0          # when nvidia-smi could not start: when to try again
        self._fields = GPU_FIELDS     # the query's fields: those this driver refused left out

    async def _preflight(self) -> bool:
        """One one-shot query: proves nvidia-smi runs, says why when it does not. A field this
        driver refuses (OPTIONAL_FIELDS) is left out and the query asked again."""
        while True:
            res = await self._query()
            if res is None or res.ok:
                break
            fewer = without_field(self._fields, refused_field(res.stdout + "\n" + res.stderr) or "")
            if fewer is None:
                break
            self._fields = fewer
        if res is None:
            return False
        if res.exit_status == 127 or (not res.ok and not res.stdout.strip()
                                      and "not found" in res.stderr.lower()):
            self._error = classify_message("nvidia-smi: not found")
            return False
        if not res.ok:
            text = (res.stdout + "\n" + res.stderr).strip()
            self._error = classify_message(text) or {
                "kind": "probe_failed", "gpu_index": None,
                "message": f"nvidia-smi exited {res.exit_status}: {' '.join(text.split())[:160]}"}
            return False
        self._consume_gpu_lines(res.stdout.splitlines(), GpuLineGrouper())
        return True

    async def _query(self):
        """The one-shot query's result, or None (the error said) when it could not be run."""
        try:
            return await self._target.run(gpu_query_argv(None, self._fields), timeout=15.0)
        except TargetError as exc:
            self._error = classify_message(str(exc)) or {
                "kind": "probe_failed", "gpu_index": None,
                "message": f"could not run nvidia-smi on {self._target.label}: {exc}"}
            return None

    def _consume_gpu_lines(self, lines, grouper: GpuLineGrouper) -> None:
        for line in lines:
            if not line.strip():
                continue
            try:
                gpu = parse_gpu_line(line, self._fields)
            except SmiLineError:
                self._error = classify_message(line) or {
                    "kind": "probe_failed", "gpu_index": None,
                    "message": f"nvidia-smi printed something unexpected: {line.strip()[:120]!r}"}
                continue
            group = grouper.feed(gpu)
            if group is not None:
                self._latest, self._latest_at, self._error = group, time.monotonic(), None

    async def _follow(self, argv: list[str], on_line: Callable[[str], None]) -> None:
        delay = 1.0
        while True:
            try:
                async for line in self._target.stream(argv):
                    on_line(line)
                    delay = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # transport down: keep the last data, retry with backoff
                self._error = {"kind": "probe_failed", "gpu_index": None,
                               "message": f"nvidia-smi stream on {self._target.label} broke: {exc}"}
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _on_app_line(self, line: str) -> None:
        try:
            self._apps.feed(parse_app_line(line))
        except SmiLineError:
            pass  # the GPU stream reports nvidia-smi's errors; the apps stream says the same

    async def _start(self) -> None:
        if not await self._preflight() and self._error and self._error["kind"] != "gpu_lost":
            # Nothing to stream from; the preflight's reason is the answer. Try again later:
            # a driver reloaded or a reboot after a version mismatch heals without a restart.
            self._retry_at = time.monotonic() + self._retry_after
            return
        grouper = GpuLineGrouper()
        self._tasks = [
            asyncio.create_task(self._follow(gpu_query_argv(self._interval_ms, self._fields),
                                             lambda line: self._consume_gpu_lines([line], grouper))),
            asyncio.create_task(self._follow(apps_query_argv(self._interval_ms), self._on_app_line)),
        ]

    async def sample(self, run: RunRef | None = None) -> GpuSnapshot:
        t0 = time.monotonic()
        try:
            if not self._tasks and time.monotonic() >= self._retry_at:
                await self._start()
            if self._latest is None or time.monotonic() - self._latest_at > self._stale_after:
                err = self._error or {"kind": "probe_failed", "gpu_index": None,
                                      "message": f"nvidia-smi on {self._target.label} sent nothing for "
                                                 f"{self._stale_after:.0f}s: is the host overloaded?"}
                return snapshot_from_dict({"time": time.time(), "gpus": [], "error": err},
                                          source=self.name)
            d = snapshot_dict([dict(g) for g in self._latest], self._apps.processes(), now=time.time())
            procs = [p for g in d["gpus"] for p in g["processes"]]
            if self._annotate is not None:
                try:
                    await self._annotate(procs, run)
                except TargetError:
                    pass  # processes stay unmarked this time; the numbers are still right
            d["latency_ms"] = (time.monotonic() - t0) * 1000.0
            return snapshot_from_dict(d, source=self.name)
        except Exception as exc:
            return error_snapshot(GpuErrorKind.PROBE_FAILED,
                                  f"nvidia-smi source failed: {type(exc).__name__}: {exc}", self.name)

    async def sample_runs(self, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        # The streams' latest lines, no request: each run costs only its marking.
        return await sample_each(self, runs)

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks = []
        if self._closes is not None:
            await self._closes.close()
            self._closes = None


class FallbackSource:
    """NVML first; nvidia-smi as soon as NVML reports its library missing (and from then on).

    NVML's "no NVIDIA GPU on this host" (nvml_reader's `no_gpu`, from the PCI bus) is checked
    against nvidia-smi too: where it finds GPUs it wins, and where it finds none (or is not
    installed) the answer is "no GPU", said as information rather than a missing driver."""

    def __init__(self, primary: GpuSource, make_fallback: Callable[[], GpuSource]) -> None:
        self._primary = primary
        self._make_fallback = make_fallback
        self._fallback: GpuSource | None = None
        self._why = ""
        self._no_gpu: GpuError | None = None

    @property
    def name(self) -> str:
        return self._fallback.name if self._fallback else self._primary.name

    async def sample(self, run: RunRef | None = None) -> GpuSnapshot:
        return (await self._sampled(lambda source: listed(source.sample(run))))[0]

    async def sample_runs(self, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        return await self._sampled(lambda source: source.sample_runs(runs))

    async def _sampled(self, ask: Callable[[GpuSource], Awaitable[list[GpuSnapshot]]]) -> list[GpuSnapshot]:
        if self._fallback is None:
            snaps = await ask(self._primary)
            missing = next((s.error for s in snaps if s.error is not None and s.error.kind in
                            (GpuErrorKind.LIBRARY_NOT_FOUND, GpuErrorKind.NO_GPU)), None)
            if missing is None:
                return snaps
            self._why = missing.message
            self._no_gpu = missing if missing.kind is GpuErrorKind.NO_GPU else None
            self._fallback = self._make_fallback()
        return [self._neither_way(s) for s in await ask(self._fallback)]

    def _neither_way(self, snap: GpuSnapshot) -> GpuSnapshot:
        if snap.error is None or snap.gpus:
            return snap
        if self._no_gpu is not None:
            return GpuSnapshot(time=snap.time, source="none", error=self._no_gpu)
        if snap.error.kind is not GpuErrorKind.LIBRARY_NOT_FOUND:
            return snap
        # Neither way works: say both, the NVML reason first (it names the usual fix).
        msg = f"{self._why.split(':')[0]}, and {snap.error.message}"
        return GpuSnapshot(time=snap.time, source="none", error=GpuError(GpuErrorKind.LIBRARY_NOT_FOUND, msg))

    async def close(self) -> None:
        await self._primary.close()
        if self._fallback is not None:
            await self._fallback.close()


#: Names the NVML module the GPU sources read ("module" or "module:factory"; default pynvml).
#: `DFLASH_TUI_NVML=dflash_tui.gpu.fake_nvml:from_env` shows fake GPUs, shaped by the
#: DFLASH_FAKE_NVML_* variables, on a machine without one (demos, tests, benchmarks).
ENV_NVML_SPEC = "DFLASH_TUI_NVML"


async def open_gpu_source(host_target: Target, *, ops: RemoteOps | None = None, nvml_spec: str | None = None,
                          python: str = "python3", isolate: bool = False) -> GpuSource:
    """The GPU source for a host: in-process NVML for this machine, the host agent's probe for a
    remote one (falling back to nvidia-smi), nvidia-smi alone where the host has no python3.

    Pass `ops` when the host's agent was already started with `gpu_agent_sources()` among its
    extra sources, to share it; otherwise a dedicated agent is started on `host_target` (over
    the same pooled SSH connection) and closed with the source.

    `isolate=True` reads NVML in a child process (an agent running this interpreter) even for
    this machine: an NVML call hung on an in-process thread would hold the interpreter's exit
    until it returns, which a one-shot command like `--check` cannot afford.
    `nvml_spec` defaults to $DFLASH_TUI_NVML, else "pynvml".
    """
    if nvml_spec is None:
        nvml_spec = os.environ.get(ENV_NVML_SPEC) or "pynvml"
    local = isinstance(host_target, LocalTarget)
    if local and nvml_spec == "pynvml" and not isolate:
        return FallbackSource(LocalNvmlSource(gpu_present=nvidia_gpu_present),
                              lambda: SmiStreamSource(host_target, annotate=local_annotator()))
    if local and isolate:
        python = sys.executable   # the interpreter whose pynvml the in-process reader would use
    owns = False
    if not isinstance(ops, AgentOps) or OP_NAME not in ops.info.get("ops", ()):
        ops = await open_ops(host_target, python=python,
                             extra_sources=gpu_agent_sources(nvml_spec))
        if not isinstance(ops, AgentOps) and python != "python3":
            # A profile's python names the trainer's interpreter, which may exist only inside
            # the container; NVML is read on the host, where plain python3 is the usual one.
            await ops.close()
            ops = await open_ops(host_target, extra_sources=gpu_agent_sources(nvml_spec))
        owns = True
    if isinstance(ops, AgentOps) and OP_NAME in ops.info.get("ops", ()):
        return FallbackSource(AgentNvmlSource(ops, owns_ops=owns),
                              lambda: SmiStreamSource(host_target, annotate=ops_annotator(ops)))
    return SmiStreamSource(host_target, annotate=ops_annotator(ops), closes=ops if owns else None)
