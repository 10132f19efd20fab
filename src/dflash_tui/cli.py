"""dflash-tui: the dashboard, or a headless check/launch/stop/canary with an exit code.

Exit codes (README, "Exit codes"; tests/test_cli_exit_codes.py runs every row):
  0  healthy: RUNNING, FINISHED or STOPPED (ended after a stop request) (for --stop: the run
     is stopped or was not running; --canary: it passed)
  1  failing verdict: NEVER STARTED, LOG MISSING, CRASHED, KILLED, STALLED, NOT LAUNCHED,
     GPU LOST (a GPU of the host fell off the bus while the run is alive); a refused launch
     (another launch of the run dir in progress, or its run still alive); --stop signalled
     nothing (pid reused, or launch.json has no start time to verify it) or the process
     survived SIGKILL; --canary failed (an operation the target refused on its own files,
     should one ever reach this far, exits 1 too: it is bad data there, not a dead link)
  2  usage or config error, out-of-range number or unusable SSH file included; a watch store
     that cannot be used or that another --watch holds
  3  target unreachable (connect, auth, host key, timeout, container not running)
  4  no verdict yet: STARTING (launched, not yet stepping), STOPPING (a stop under way: the
     process still saves or shuts down within its grace period) or NO RUN (nothing launched
     here); pass --wait SECONDS to wait for one
  130  interrupted (Ctrl-C); the run on the target keeps running
--bundle: 0 written, the run's target looked at; 3 written, but the target could not be looked
at (manifest.json says why; the bundle holds what this machine knows); 2 the file cannot be
written (it exists, or its folder does not) or --bundle-max-mb is out of range.
A profile with `nodes` (one run on several hosts) reports every node, and its code is 1 when
the run fails (any node failing: run/verdict/combine.py `combine`), else 3 while a node is unreachable,
else the combined verdict's (`exit_code_of`).
`--check --all` exits with the worst of its profiles' codes: 2 > 1 > 3 > 4 > 0
(fleet/checkall.py EXIT_PRECEDENCE).
--health: 0 every node measured, none below 0.5x its own median; 1 a node below it, or a probe
that failed on a reachable node; 2 config, a python without torch, a Slurm profile; 3 a node
unreachable; the worst of its nodes (health/door.py).
Every error is one line on stderr; set DFLASH_TUI_DEBUG=1 to see a traceback as well.

--check, --launch/--relaunch and their --wait loops carry the dashboard's "gpus" check too,
from one GPU sample of the profile's host per check (run/verdict/health.py `with_gpu_check`, the same
function the dashboard calls). It is bounded to a few seconds: a hung or missing NVML is a
warn check with the reason, never a hang or an exit code of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any, Sequence

from . import __version__
from .bundle import default_bundle_path, take_bundle
from .config import MAX_WAIT_S, Config, ConfigError, Profile, default_config_path
from .config_file import load_config
from .fleet.checkall import check_all, worst_exit_code
from .health.door import health_mode
from .recording import flags as recording_flags
from .recording.recovery.outside import bundle_extras, check_extras
from .recording.recovery.settings import RECOVER_SECTION
from .recording.recovery.stop_cancel import stop_as_person
from .remote.base import OpRefused, TargetError
from .run.launch.launch import LaunchRefused
from .run.verdict.report import RunReport
from .run.verdict.checklist import CheckId, CheckState, Checklist, Verdict
from .serve_auth import DEFAULT_HOST, DEFAULT_PORT, new_token
from .verdicts import TargetState
from .watch import LaunchRequest, RunWatch, open_watch
from .words import compact

EXIT_HEALTHY, EXIT_FAILING, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_UNDECIDED = 0, 1, 2, 3, 4
WAIT_INTERVAL_S = 0.25


def exit_code_for(verdict: Verdict) -> int:
    if verdict.healthy:
        return EXIT_HEALTHY
    if verdict.failing:
        return EXIT_FAILING
    return EXIT_UNDECIDED


def one_line(message: str) -> str:
    """The message with every control character escaped: an error is always ONE line, whatever
    a path, a profile name or a target's answer held."""
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in message)


def _number_in(text: str, low: float, high: float, unit: str) -> float:
    """An option's value: a finite number of `unit` from `low` to `high`; else argparse's error,
    one line naming the value and the range."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
    if not (low <= value <= high):   # False for nan too
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; use {low:g} to {high:g} {unit}")
    return value


def wait_seconds(text: str) -> float:
    """--wait's value: a finite number of seconds from 0 to a day."""
    return _number_in(text, 0.0, MAX_WAIT_S, "seconds")


DEFAULT_BUNDLE_MB = 20.0
MAX_BUNDLE_MB = 1024.0


def bundle_mb(text: str) -> float:
    """--bundle-max-mb's value: a finite number of MiB from 1 to 1024."""
    return _number_in(text, 1.0, MAX_BUNDLE_MB, "MiB")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every other usage problem
        self.exit(EXIT_USAGE, f"dflash-tui: {one_line(message)} (see dflash-tui --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dflash-tui", description=(
        "Launch a training run on a GPU box, verified, and watch it live. Without a mode flag, "
        "starts the dashboard."),
        epilog="exit codes: 0 healthy (RUNNING/FINISHED/STOPPED), 1 failing verdict (GPU LOST included), "
               "2 usage or config error, "
               "3 target unreachable, 4 no verdict yet (STARTING / STOPPING / NO RUN)")
    p.add_argument("--config", metavar="FILE",
                   help=f"profiles file (default {default_config_path()}; absent: built-in 'local')")
    p.add_argument("--profile", "-p", metavar="NAME", help="profile to use (default: the only one, or 'local')")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="evaluate the checklist for the profile's current run")
    mode.add_argument("--launch", action="store_true", help="preflight, launch, then check")
    mode.add_argument("--relaunch", action="store_true", help="stop the live run (if any), then launch and check")
    mode.add_argument("--stop", action="store_true",
                      help="stop the run by pid (SIGTERM, grace, SIGKILL), guarded against pid reuse")
    mode.add_argument("--canary", action="store_true",
                      help="launch `sleep` through the same wrapper/transport and check it outlives the channel")
    mode.add_argument("--list-profiles", action="store_true", help="list the profiles and exit")
    mode.add_argument("--health", action="store_true",
                      help="time all_reduce of 64 MB on each node (NCCL on its GPUs, else 2 gloo processes) "
                           "with the profile's python, against the node's own earlier results; exit 1 "
                           "below 0.5x its median")
    mode.add_argument("--bundle", nargs="?", const="", metavar="FILE",
                      help="write one evidence archive of the run (tar.gz, manifest.json first, secrets "
                           "masked) to FILE (default ./dflash-bundle-PROFILE-TIME.tar.gz); never signals a process")
    p.add_argument("--all", action="store_true",
                   help="with --check or --health: every profile of the config file at once (text: one line "
                        "each; --json: a list); the exit code is the worst, 2 > 1 > 3 > 4 > 0")
    p.add_argument("--resume", action="store_true",
                   help="with --launch/--relaunch: the bundled trainer continues from the newest "
                        "checkpoint in the run dir")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--wait", type=wait_seconds, default=0.0, metavar="SECONDS",
                   help="keep checking until RUNNING, FINISHED or a failing verdict, at most this long")
    p.add_argument("--no-preflight", action="store_true", help="with --launch/--relaunch: skip the preflight")
    p.add_argument("--bundle-max-mb", type=bundle_mb, default=None, metavar="MIB",
                   help=f"with --bundle: the archive's size bound (default {DEFAULT_BUNDLE_MB:g} MiB)")
    p.add_argument("--version", action="version", version=f"dflash-tui {__version__}")
    _add_serve_arguments(p)
    recording_flags.add_arguments(p, mode)   # --watch, --timeline and their options
    return p


# -- --serve: the dashboard in a browser (ui/serve.py; the token: serve_auth.py) ---------------

def _add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--serve", action="store_true",
                   help="serve the dashboard to a browser (textual-serve); every request needs the printed token")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"with --serve: address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"with --serve: port (default {DEFAULT_PORT})")


def _serve(args, config: Config, profile: Profile) -> int:
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: must be 1-65535")
    try:
        from .ui.serve import CannotServe, serve   # the optional browser stack (textual-serve, aiohttp)
    except ImportError as exc:
        raise ConfigError(f"--serve needs textual-serve ({exc}); pip install textual-serve") from None
    try:
        return serve(str(config.path) if config.path else None, profile.name,
                     host=args.host, port=args.port, token=new_token())
    except CannotServe as exc:     # a port in use, an address not on this host: the user's to fix
        raise ConfigError(str(exc)) from None


# -- output ------------------------------------------------------------------------------------

_STUCK_THREADS_SHOWN = 8
_RANK_GROUPS_SHOWN = 6       # text --check: the odd ones out and the biggest groups
_MARK = {CheckState.OK: "ok", CheckState.WARN: "warn", CheckState.FAIL: "FAIL", CheckState.PENDING: "..."}


def _fmt_since(since: float | None, now: float) -> str:
    return "" if since is None else compact(now - since)


def exit_code_of(report: RunReport) -> int:
    """The report's exit code; a run on several nodes: 1 when it fails, else 3 while a node is
    unreachable, else the verdict's own."""
    verdict = report.checklist.verdict
    if not verdict.failing and any(not n.report.connected for n in report.nodes):
        return EXIT_UNREACHABLE
    return exit_code_for(verdict)


def _checklist_lines(checklist: Checklist, now: float) -> list[str]:
    lines = [f"{checklist.verdict.value}: {checklist.summary}" if checklist.summary else checklist.verdict.value]
    width = max((len(c.label) for c in checklist.checks), default=10)
    for c in checklist.checks:
        since = _fmt_since(c.since, now)
        lines.append(f"  {_MARK[c.state]:<4}  {c.label:<{width}}  {c.cause}" + (f"  ({since})" if since else ""))
        if c.hint and c.state in (CheckState.FAIL, CheckState.WARN):
            lines.append(f"  {'':<4}  {'':<{width}}  → {c.hint}")
    # The threads the engine found stuck, each with its class and where (all of them: --json).
    for t in [t for t in checklist.threads if t.pid is not None and t.trouble][:_STUCK_THREADS_SHOWN]:
        proc = (f"rank {t.rank} · " if t.rank is not None else "") + f"pid {t.pid}"
        since = _fmt_since(t.since, now)
        lines.append(f"  thread  {proc} {t.name}: {t.cls}" + (f" {t.doing}" if t.doing else "")
                     + (f" in {t.where}" if t.where else "") + (f"  ({since})" if since else ""))
    # Many ranks as one picture: where the ranks stand, the odd ones out first (all: --json);
    # only where ranks share a place (one rank a group: the thread lines say it all).
    groups = checklist.rank_groups if any(len(g.ranks) > 1 for g in checklist.rank_groups) else []
    for g in groups[:_RANK_GROUPS_SHOWN]:
        lines.append(f"  ranks   {g.words()}" + (f"  [{g.threads} threads]" if g.threads > len(g.ranks) else ""))
    if len(groups) > _RANK_GROUPS_SHOWN:
        lines.append(f"  ranks   ... and {len(groups) - _RANK_GROUPS_SHOWN} more groups (--json: rank_groups)")
    return lines


def render_text(profile: Profile, report: RunReport, *, now: float, extra: Sequence[str] = ()) -> str:
    """The report as --check prints it; a run on several nodes: the run, then every node's checks."""
    verdict, *checks = _checklist_lines(report.checklist, now)
    lines = [f"{profile.name} · {profile.where()} · {profile.run_dir}", verdict, *(f"  {x}" for x in extra)]
    return "\n".join(lines + _output_of(report).body_lines(report, checks, now))


def metrics_json(report: RunReport) -> dict[str, dict]:
    """{name: {"step", "value", "source"}}: each series' newest point (log lines, metric files)."""
    m = report.metrics
    if m is None:
        return {}
    return {name: {"step": step, "value": value, "source": source}
            for name, (step, value, source) in sorted(m.latest.items())}


def progress_json(report: RunReport) -> dict[str, Any] | None:
    """{"step", "total", "eta_s", "source"} of the report's progress; None before any."""
    p = report.progress
    if p is None or p.step is None:
        return None
    return {"step": p.step, "total": p.total,
            "eta_s": round(p.eta_s, 1) if p.eta_s is not None else None, "source": p.source}


def foresight_json(report: RunReport) -> dict[str, Any]:
    """One host's (or one node's) "runway" (disk, memory), "energy" and "cost"."""
    return {"runway": {"disk": report.runway.to_json() if report.runway is not None else None,
                       "memory": report.memory.to_json() if report.memory is not None else None},
            "energy": report.energy.to_json() if report.energy is not None else None,
            "cost": report.cost.to_json() if report.cost is not None else None}


def report_json(profile: Profile, report: RunReport, **extra: Any) -> dict[str, Any]:
    """The report as --check --json prints it (`extra` adds or overrides fields); a run on
    several nodes: the run's node checks and one object per node."""
    return _output_of(report).json(profile, report, **extra)


class _OneHost:
    """How a run on one host is put out: its checks, its launch's preflight and its stop."""

    @staticmethod
    def body_lines(report: RunReport, checks: list[str], now: float) -> list[str]:
        return checks

    @staticmethod
    def json(profile: Profile, report: RunReport, **extra: Any) -> dict[str, Any]:
        d, launch = report.checklist.to_dict(), report.launch
        return {"verdict": d["verdict"], "summary": d["summary"], "checks": d["checks"], "threads": d["threads"],
                "rank_groups": d["rank_groups"], "stragglers": d["stragglers"],
                "stall_limit_s": d["stall_limit_s"], "stall_limit_why": d["stall_limit_why"],
                "gpus": d["gpus"], "run_dir": profile.run_dir, "pid": launch.pid if launch else None,
                "run_id": launch.run_id if launch else None, "profile": profile.name,
                "target": profile.where(), "exit_code": exit_code_of(report),
                "metrics": metrics_json(report), "progress": progress_json(report),
                "checkpoints": report.checkpoints.to_json(report.time) if report.checkpoints is not None else None,
                # the watch's energy (run/verdict/energy.py); --check's extra prices the watcher's goodput too
                **foresight_json(report),
                **({s.name: s.facts} if (s := report.checklist.scheduler) is not None else {}),
                **extra}   # a scheduler's job, under the scheduler's name

    @staticmethod
    def refused(args, profile: Profile, report: RunReport, result) -> int | None:
        """The exit code of a launch that did not happen (its words printed), else None."""
        (outcome,) = result.outcomes.values()
        if outcome.unreachable:
            fail = next((c for c in outcome.checklist.checks if c.state is CheckState.FAIL), None)
            return _fail(args, EXIT_UNREACHABLE,
                         f"{profile.where()} unreachable: {fail.cause if fail else outcome.checklist.summary}"
                         + (f" ({fail.hint})" if fail and fail.hint else ""))
        if report.checklist.verdict is Verdict.NOT_LAUNCHED:
            return _emit(args, profile, report)
        return None

    @staticmethod
    def launched(args, profile: Profile, report: RunReport, result) -> int:
        (outcome,) = result.outcomes.values()
        pre = outcome.preflight.checks if outcome.preflight else []
        cl = report.checklist
        report = replace(report, checklist=cl.with_parts(checks=[*pre, *cl.checks]))
        stopped = {"stopped": outcome.stopped.message} if outcome.stopped else {}
        resumed = {"resume_from": outcome.resume_from} if outcome.resume_from else {}
        return _emit(args, profile, report, run_id=outcome.run_id, launch_seconds=round(result.seconds, 3),
                     extra_text=[*stopped.values(), *(f"resuming from checkpoint {w}" for w in resumed.values())],
                     **stopped, **resumed)

    @staticmethod
    def stopped(args, profile: Profile, report: RunReport, results: dict, code: int,
                lines: Sequence[str] = (), extra: dict | None = None) -> int:
        (res,) = results.values()
        return _emit(args, profile, report, code=code, extra_text=[f"stop: {res.message}", *lines], pid=res.pid,
                     run_id=res.run_id, stop={"outcome": res.outcome, "message": res.message,
                                              "seconds": round(res.seconds, 3)}, **(extra or {}))


class _Nodes:
    """How a run on several nodes is put out: the run, then each node's."""

    @staticmethod
    def body_lines(report: RunReport, checks: list[str], now: float) -> list[str]:
        lines = []
        for n in report.nodes:
            r = n.report
            lines.append(f"node {n.node} (rank {n.rank}) · {r.target_label} · {r.run_dir}"
                         + ("" if r.connected else f" · UNREACHABLE: {r.error}"))
            lines += _checklist_lines(r.checklist, now)
        return lines

    @staticmethod
    def json(profile: Profile, report: RunReport, **extra: Any) -> dict[str, Any]:
        d = report.checklist.to_dict()
        nodes = []
        for n in report.nodes:
            r = n.report
            nodes.append({"node": n.node, "rank": n.rank, "target": r.target_label, "run_dir": r.run_dir,
                          **r.checklist.to_dict(),
                          "pid": r.launch.pid if r.launch else None, "run_id": r.launch.run_id if r.launch else None,
                          "connected": r.connected, "error": r.error, "exit_code": exit_code_for(n.verdict),
                          **foresight_json(r)})
        return {"verdict": d["verdict"], "summary": d["summary"],
                "checks": [c for c in d["checks"]
                           if c["id"].startswith("node:") or c["id"] in (CheckId.STRAGGLERS, CheckId.MEMORY)],
                # every node's memory runway, keyed by node in rank order (its disk: in its own
                # object under "nodes"); the energy and cost over every node, each its own there
                "runway": {"memory": {n.node: (n.report.memory.to_json() if n.report.memory is not None else None)
                                      for n in report.nodes}},
                "energy": report.energy.to_json() if report.energy is not None else None,
                "cost": report.cost.to_json() if report.cost is not None else None,
                "rank_groups": d["rank_groups"], "stragglers": d["stragglers"],
                "stall_limit_s": d["stall_limit_s"], "stall_limit_why": d["stall_limit_why"],
                "nodes": nodes, "unreachable": [n.node for n in report.nodes if not n.report.connected],
                "profile": profile.name, "target": profile.where(), "run_dir": profile.run_dir,
                "exit_code": exit_code_of(report), **extra}

    @staticmethod
    def refused(args, profile: Profile, report: RunReport, result) -> int | None:
        return None   # a node that could not start says so in its own report

    @staticmethod
    def launched(args, profile: Profile, report: RunReport, result) -> int:
        # No node started because one could not be reached: 3, as for one host.
        code = EXIT_UNREACHABLE if not result.launched and result.unreachable else None
        return _emit(args, profile, report, extra_text=[f"node {n}: {r.message}" for n, r in result.stopped.items()],
                     code=code, launch_seconds=round(result.seconds, 3),
                     run_ids={n: o.run_id for n, o in result.outcomes.items()},
                     **({"stopped": {n: r.message for n, r in result.stopped.items()}} if result.stopped else {}))

    @staticmethod
    def stopped(args, profile: Profile, report: RunReport, results: dict, code: int,
                lines: Sequence[str] = (), extra: dict | None = None) -> int:
        return _emit(args, profile, report, code=code,
                     extra_text=[*(f"stop node {n}: {r.message}" for n, r in results.items()), *lines],
                     stop={n: {"outcome": r.outcome, "message": r.message, "pid": r.pid,
                               "seconds": round(r.seconds, 3)} for n, r in results.items()}, **(extra or {}))


def _output_of(report: RunReport) -> type[_OneHost] | type[_Nodes]:
    """The one place the shape of the output is chosen: a run on one host, or on several nodes."""
    return _Nodes if report.nodes else _OneHost


def _emit(args, profile: Profile, report: RunReport, *, extra_text: Sequence[str] = (), code: int | None = None,
          **extra: Any) -> int:
    code = exit_code_of(report) if code is None else code
    if args.json:
        print(json.dumps({**report_json(profile, report, **extra), "exit_code": code}))
    else:
        print(render_text(profile, report, now=time.time(), extra=extra_text))
    return code


# -- modes -------------------------------------------------------------------------------------

def _decided(report: RunReport) -> bool:
    return report.checklist.verdict.healthy or report.checklist.verdict.failing


async def _check_until(watch: RunWatch, wait_s: float, first: RunReport | None = None) -> RunReport:
    """The report now (or `first`), or — with --wait — once it is decided or the time is up."""
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        report = first if first is not None else await watch.check(gpus=True)
        first = None
        if _decided(report) or time.monotonic() >= deadline:
            return report
        await asyncio.sleep(WAIT_INTERVAL_S)


async def _run_mode(args, profile: Profile, config: Config) -> int:
    async with open_watch(profile) as watch:
        if args.check:
            report = await _check_until(watch, args.wait)
            # The watcher's view (recovery state, goodput): shown, never acted on here.
            extra, lines = check_extras(config, profile, report)
            return _emit(args, profile, report, extra_text=lines, **extra)
        if args.launch or args.relaunch:
            return await _launch_mode(args, profile, watch)
        if args.stop:
            return await _stop_mode(args, profile, config, watch)
        if args.canary:
            return await _canary_mode(args, profile, watch)
    raise AssertionError("no mode")


def _bundle_path(args, profile: Profile) -> str:
    """Where --bundle writes: a new file in a folder that exists (nothing is overwritten)."""
    path = args.bundle or default_bundle_path(profile.name)
    if os.path.lexists(path):
        raise ConfigError(f"--bundle {path}: the file exists; name another file or move it away")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"--bundle {path}: no folder {folder}; create it or name another file")
    return path


async def _bundle_mode(args, profile: Profile, config: Config) -> int:
    path = _bundle_path(args, profile)
    urls, extra = bundle_extras(config, profile)
    async with open_watch(profile) as watch:
        try:
            result = await take_bundle(watch, path, profile=profile, notify_urls=urls, extra=extra,
                                       config_path=str(config.path) if config.path else None,
                                       max_bytes=int((args.bundle_max_mb or DEFAULT_BUNDLE_MB) * (1 << 20)))
        except OSError as exc:
            raise ConfigError(f"--bundle {path}: cannot write it ({exc.strerror or exc})") from None
    code = EXIT_UNREACHABLE if result.unreachable else EXIT_HEALTHY
    if args.json:
        print(json.dumps({"bundle": result.path, "bytes": result.size, "members": result.members,
                          "not_taken": [{"name": m.name, "reason": m.reason} for m in result.missing],
                          "seconds": round(result.seconds, 3), "verdict": result.verdict,
                          "unreachable": result.unreachable, "exit_code": code}))
    else:
        print(one_line(result.words()))
    return code


async def _launch_mode(args, profile: Profile, watch: RunWatch) -> int:
    request = LaunchRequest(relaunch=args.relaunch, preflight=not args.no_preflight, resume=args.resume, gpus=True)
    try:
        result = await watch.launch(request)
    except LaunchRefused as exc:
        return _fail(args, EXIT_FAILING, str(exc))
    report = result.report
    out = _output_of(report)
    code = out.refused(args, profile, report, result)
    if code is not None:
        return code
    if result.launched and args.wait > 0:
        report = await _check_until(watch, args.wait, first=report)
    return _output_of(report).launched(args, profile, report, result)


async def _stop_mode(args, profile: Profile, config: Config, watch: RunWatch) -> int:
    done = await stop_as_person(config, watch)   # a restart pending under [recover] is cancelled
    results = done.results
    ok = all(r.ok for r in results.values())
    report = await watch.check()
    code = EXIT_HEALTHY if ok else EXIT_FAILING
    policy = RECOVER_SECTION.of(config).for_profile(profile.name)
    line = done.recovery_line(policy.max_restarts) if policy is not None else ""
    extra, _ = check_extras(config, profile, report) if policy is not None else ({}, [])
    return _output_of(report).stopped(args, profile, report, results, code, [line] if line else [],
                                      {"recovery": extra["recovery"]} if extra else {})


async def _canary_mode(args, profile: Profile, watch: RunWatch) -> int:
    results = await watch.canary()
    ok = all(r.ok for r in results.values())
    code = EXIT_HEALTHY if ok else EXIT_FAILING
    if not profile.is_multinode:
        (res,) = results.values()
        if args.json:
            print(json.dumps({"canary": "ok" if res.ok else "fail", "message": res.message, "run_dir": res.run_dir,
                              "pid": res.pid, "seconds": round(res.seconds, 3),
                              "checks": [c.to_dict() for c in res.checks],
                              "verdict": (Verdict.RUNNING if res.ok else Verdict.KILLED).value, "exit_code": code}))
        else:
            print(f"canary {'passed' if res.ok else 'FAILED'}: {res.message}")
        return code
    if args.json:
        print(json.dumps({"canary": "ok" if ok else "fail", "exit_code": code,
                          "nodes": [{"node": n, "canary": "ok" if r.ok else "fail", "message": r.message}
                                    for n, r in results.items()]}))
    else:
        for n, r in results.items():
            print(f"node {n}: canary {'passed' if r.ok else 'FAILED'}: {r.message}")
    return code


async def _check_all_mode(args, config: Config, profiles: Sequence[Profile]) -> int:
    """--check --all: each profile as --check would print it, all at once; the worst exit code."""
    results = await check_all(profiles, lambda watch: _check_until(watch, args.wait))
    objects, lines = [], []
    width = max(len(p.name) for p in profiles)
    for r in results:
        p = r.profile
        if r.error is not None:
            word = TargetState.CONFIG_ERROR if r.error_code == EXIT_USAGE else TargetState.UNREACHABLE
            objects.append({"verdict": None, "error": r.error, "exit_code": r.error_code,
                            "profile": p.name, "target": p.where(), "run_dir": p.run_dir})
            lines.append(f"{p.name:<{width}}  {word:<13}  {p.where()}  {r.error}")
            continue
        cl = r.value.checklist
        extra, _ = check_extras(config, p, r.value)   # the watcher's view, as --check shows it
        objects.append(report_json(p, r.value, **extra))
        lines.append(f"{p.name:<{width}}  {cl.verdict.value:<13}  {p.where()}  {cl.summary}")
    print(json.dumps(objects) if args.json else "\n".join(lines))
    return worst_exit_code([o["exit_code"] for o in objects])


def _start_dashboard(config: Config, profile: Profile, fleet_home: bool = True) -> int:
    try:
        from .ui.main import run_app   # Textual: a start-up cost the headless modes never pay
    except ImportError as exc:
        print(f"dflash-tui: the dashboard is not available in this install ({exc}); "
              "use --check/--launch/--stop/--canary", file=sys.stderr)
        return EXIT_USAGE
    return run_app(config, profile.name, fleet_home=fleet_home)


def _fail(args, code: int, message: str) -> int:
    """One line on stderr; with --json also one object on stdout, so a script always parses."""
    message = one_line(message)
    print(f"dflash-tui: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"verdict": None, "error": message, "exit_code": code}))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
        if args.list_profiles:
            for name, prof in sorted(config.profiles.items()):
                mark = "*" if name == config.default else " "
                # With a config file, --watch and --check --all take its profiles only: say so.
                builtin = config.path is not None and prof.source != config.path
                print(f"{mark} {name:<16} {prof.where():<32} {prof.run_dir}"
                      + ("  (built-in: not in --watch or --check --all)" if builtin else ""))
            return EXIT_HEALTHY
        if recording_flags.wants(args):
            # Apprise, the store and the watcher: a start-up cost the other modes never pay.
            from .recording.modes import run_mode as recording_mode
            return recording_mode(args, config)
        if args.health:
            if args.all and args.profile:
                raise ConfigError("--all goes with --check or --health (and not with --profile)")
            return health_mode(args, config.file_profiles() if args.all else [config.profile(args.profile)])
        if args.all:
            if not args.check or args.profile:
                raise ConfigError("--all goes with --check or --health (and not with --profile)")
            return asyncio.run(_check_all_mode(args, config, config.file_profiles()))
        if args.bundle_max_mb is not None and args.bundle is None:
            raise ConfigError("--bundle-max-mb goes with --bundle")
        if args.resume and not (args.launch or args.relaunch):
            raise ConfigError("--resume goes with --launch or --relaunch")
        no_mode = not (args.check or args.launch or args.relaunch or args.stop or args.canary
                       or args.bundle is not None)
        if no_mode and args.profile is None and len(config.file_profiles()) > 1:
            # Several profiles: the dashboard opens on the fleet screen, no choice needed.
            if args.json or args.wait:
                raise ConfigError("--json and --wait go with --check, --launch, --relaunch, --stop or --canary")
            return _start_dashboard(config, config.file_profiles()[0])
        profile = config.profile(args.profile)
        if args.bundle is not None:
            return asyncio.run(_bundle_mode(args, profile, config))
        if args.serve:
            return _serve(args, config, profile)
        if not (args.check or args.launch or args.relaunch or args.stop or args.canary):
            if args.json or args.wait:
                raise ConfigError("--json and --wait go with --check, --launch, --relaunch, --stop or --canary")
            return _start_dashboard(config, profile, fleet_home=args.profile is None)
        return asyncio.run(_run_mode(args, profile, config))
    except ConfigError as exc:
        return _fail(args, EXIT_USAGE, str(exc))
    except OpRefused as exc:     # the target answered: what it refused is bad data there, not a dead link
        return _fail(args, EXIT_FAILING, str(exc))
    except TargetError as exc:   # unreachable, auth, host key, container stopped, timeout
        return _fail(args, EXIT_UNREACHABLE, str(exc))
    except BrokenPipeError:
        # stdout closed early (`| head`): nothing left to say, and nobody to say it to.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_FAILING
    except KeyboardInterrupt:
        print("dflash-tui: interrupted (the run on the target, if any, keeps running)", file=sys.stderr)
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        if os.environ.get("DFLASH_TUI_DEBUG"):
            raise
        return _fail(args, EXIT_FAILING, f"internal error: {type(exc).__name__}: {exc} "
                     "(set DFLASH_TUI_DEBUG=1 for the traceback)")
