"""The GPU probe the persistent agent runs on the HOST: the `gpu.sample` op.

NVML must be read on the host, not in the run's container: inside a container NVML reports
host pids that match nothing there. So the dashboard sends this probe along with the host's
agent (`AgentOps.start(host_target, extra_sources=gpu_agent_sources())`); it imports pynvml
lazily, inside the agent, on the first sample, and answers with the same dict as the local
reader, processes already marked as the run's via NSpid (gpu/nspid.py): one run's
(`run_pid`, `run_start_ticks`), or several runs' from one read (`runs`: [[pid, start_ticks],
...]; the answer's "run_processes" lists each run's host pids, in order; fleet/README.md,
"GPU samples", has the contract).

The source is built from the real modules (nspid.py + nvml_reader.py + the glue below), so
the code that runs remotely is the code the tests run locally.
"""

from __future__ import annotations

import inspect

from . import nspid, nvml_reader

OP_NAME = "gpu.sample"

# Runs inside the agent, after nspid.py and nvml_reader.py, in one namespace where the agent
# has put `register`. Python 3.8, stdlib only.
_GLUE = '''
import importlib
import threading

_PROBE_LOCK = threading.Lock()
_PROBE = {}
LOCK_WAIT_S = 3.0   # below the client's 5 s request timeout, so the answer says why
MAX_RUNS = 256      # runs one sample serves (a host's runs; wait_exit's bound too)


def _nvml_loader(spec):
    # spec: "pynvml", or "module:factory" where factory() returns a module-like NVML object.
    def load():
        module_name, _, factory = spec.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, factory)() if factory else module
    return load


def _run_pairs(runs):
    """`runs` as (pid, start_ticks) pairs, or OpFailed naming what is wrong with it."""
    if not isinstance(runs, list) or len(runs) > MAX_RUNS:
        raise OpFailed("runs must be a list of at most %d [pid, start_ticks] pairs" % MAX_RUNS)
    pairs = []
    for run in runs:
        ok = isinstance(run, list) and len(run) == 2 and _whole(run[0]) and run[0] > 0 and (
            run[1] is None or (_whole(run[1]) and run[1] >= 0))
        if not ok:
            raise OpFailed("runs must be [pid, start_ticks] pairs (pid > 0, start_ticks >= 0 or "
                           "null), got %.60r" % (run,))
        pairs.append((run[0], run[1]))
    return pairs


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def gpu_sample(run_pid=None, run_start_ticks=None, nvml=None, runs=None):
    # One run (run_pid, run_start_ticks): its processes marked in the snapshot. Several runs
    # (runs): one NVML read for all of them, and "run_processes" says which are whose.
    if runs is not None:
        if run_pid is not None:
            raise OpFailed("ask for run_pid or for runs, not both")
        runs = _run_pairs(runs)
    spec = nvml or NVML_SPEC
    # Blocking ops run on threads: one reader, one sample at a time. When an NVML call hangs
    # (a failing GPU), later requests answer this error instead of piling up threads behind it.
    if not _PROBE_LOCK.acquire(timeout=LOCK_WAIT_S):
        raise OpFailed("NVML has not answered for %.0f s: a GPU may be failing (check dmesg for Xid errors)"
                       % LOCK_WAIT_S)
    try:
        state = _PROBE.get(spec)
        if state is None:
            # Only real NVML is asked whether the host has a GPU at all: a stand-in's GPUs
            # are not on this machine's PCI bus.
            present = nvidia_gpu_present if spec == "pynvml" else None
            state = _PROBE[spec] = (NvmlReader(_nvml_loader(spec), gpu_present=present), RunPidMapper())
        reader, mapper = state
        snap = reader.sample()
        procs = [p for g in snap["gpus"] for p in g["processes"]]
        if runs is None:
            mapper.annotate(procs, run_pid, run_start_ticks)
        else:
            snap["run_processes"] = mapper.mark_runs(procs, runs)
        return snap
    finally:
        _PROBE_LOCK.release()


register("gpu.sample", gpu_sample, blocking=True)
'''


def _module_source(module) -> str:
    return inspect.getsource(module)


def gpu_agent_sources(nvml_spec: str = "pynvml") -> list[str]:
    """The extra source(s) to hand to `AgentOps.start(..., extra_sources=...)`.

    `nvml_spec` names what the agent imports as NVML: "pynvml" on real hosts, or
    "dflash_tui.gpu.fake_nvml:from_env" for tests and benchmarks (needs dflash_tui on the
    agent's python).
    """
    if not all(c.isalnum() or c in "._:" for c in nvml_spec):
        raise ValueError(f"bad NVML module spec {nvml_spec!r}: expected 'module' or 'module:factory'")
    parts = [_module_source(nspid), _module_source(nvml_reader),
             "NVML_SPEC = %r\n" % nvml_spec, _GLUE]
    return ["\n\n".join(parts)]
