"""The nvidia-smi fallback: parsers on recorded H200 output, and the streaming source end to end
against a stand-in that replays those recordings through a real subprocess pipe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_tui.gpu.nspid import read_stat
from dflash_tui.gpu.sample import GpuErrorKind
from dflash_tui.gpu.smi import (GPU_FIELDS, AppsTracker, GpuLineGrouper, SmiLineError, apps_query_argv,
                                classify_message, gpu_query_argv, parse_app_line, parse_gpu_line,
                                snapshot_dict)
from dflash_tui.gpu.codec import snapshot_from_dict
from dflash_tui.gpu.sources import RunRef, SmiStreamSource, local_annotator
from dflash_tui.remote.local import LocalTarget

FIX = Path(__file__).parents[1] / "fixtures" / "nvidia_smi"
H200_UUID = "GPU-2348b5de-3186-5fcf-d969-532aaad974cd"
MIB = 1024 * 1024


def lines(name: str) -> list[str]:
    return [ln for ln in (FIX / name).read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_fixture_headers_name_the_exact_query():
    # The recordings must have been made with the query this parser expects.
    assert " ".join(gpu_query_argv(None)) in (FIX / "h200_load_query_gpu.csv").read_text()
    assert " ".join(apps_query_argv(500)) in (FIX / "h200_load_compute_apps_lms.csv").read_text()


def test_parse_recorded_h200_line_under_load():
    (line,) = lines("h200_load_query_gpu.csv")
    g = parse_gpu_line(line)
    assert g["count"] == 1 and g["index"] == 0
    assert g["name"] == "NVIDIA H200" and g["uuid"] == H200_UUID
    assert g["util_sm_pct"] == 99.0 and g["util_mem_pct"] == 24.0
    assert g["mem_used_bytes"] == 9331 * MIB and g["mem_total_bytes"] == 143771 * MIB
    assert g["temperature_c"] == 59.0
    assert g["power_w"] == pytest.approx(689.87) and g["power_limit_w"] == 700.0
    # Power-capped: the SMs run well under their top clock.
    assert (g["sm_clock_mhz"], g["sm_clock_max_mhz"], g["mem_clock_mhz"]) == (1455, 1980, 3201)
    assert g["throttle_reasons"] == ["sw_power_cap"]     # 0x4: at the 700 W cap under matmul
    assert g["ecc_errors_uncorrected"] == 0 and not g["lost"]


def test_parse_recorded_idle_line():
    (line,) = lines("h200_idle_query_gpu.csv")
    g = parse_gpu_line(line)
    assert g["util_sm_pct"] == 0.0 and g["power_w"] == pytest.approx(79.10)
    assert (g["sm_clock_mhz"], g["sm_clock_max_mhz"]) == (345, 1980)   # idle far under its top
    assert g["throttle_reasons"] == ["gpu_idle"]


def test_parse_recorded_compute_apps():
    apps = [parse_app_line(ln) for ln in lines("h200_load_compute_apps_lms.csv")]
    assert {a["pid"] for a in apps} == {514}
    assert apps[0]["used_memory_bytes"] == 9322 * MIB
    assert apps[0]["gpu_uuid"] == H200_UUID and apps[0]["name"] == "/opt/torch/.venv/bin/python3"
    assert lines("h200_idle_compute_apps.csv") == []   # no process: nvidia-smi prints nothing


def test_unavailable_values_and_lost_gpu():
    gpus = [parse_gpu_line(ln) for ln in lines("synthetic_8gpu_lms.csv")]
    g3 = gpus[3]
    assert g3["util_sm_pct"] is None and g3["power_w"] is None and g3["power_limit_w"] is None
    assert g3["ecc_errors_uncorrected"] is None and g3["mem_used_bytes"] == 1024 * MIB
    assert g3["throttle_reasons"] == [] and not g3["lost"]
    assert g3["sm_clock_mhz"] == 1980 and g3["sm_clock_max_mhz"] is None   # clocks.max.sm [N/A]
    assert gpus[0]["sm_clock_max_mhz"] == 1980 and gpus[0]["power_w"] == pytest.approx(600.25)
    lost = gpus[8 + 5]
    assert lost["lost"] and lost["index"] == 5 and lost["name"] == "" and lost["util_sm_pct"] is None
    assert lost["sm_clock_max_mhz"] is None and lost["power_w"] is None


@pytest.mark.parametrize("power, limit, clock, top", [
    ("[N/A]", "[N/A]", "[N/A]", "[N/A]"), ("", "", "", ""), ("[Not Supported]", "700.00", "1980", "[Unknown Error]"),
])
def test_power_and_clocks_not_given_read_none(power, limit, clock, top):
    """power.draw, enforced.power.limit, clocks.sm and clocks.max.sm as drivers leave them out:
    None each (shown n/a, never 0, never "spins"), the rest of the line still read."""
    cells = [c.strip() for c in lines("synthetic_8gpu_lms.csv")[0].split(",")]
    names = [f for f, _, _ in GPU_FIELDS]
    for name, value in (("power.draw", power), ("enforced.power.limit", limit), ("clocks.sm", clock),
                        ("clocks.max.sm", top)):
        cells[names.index(name)] = value
    g = parse_gpu_line(", ".join(cells))
    assert g["power_w"] is None and g["sm_clock_max_mhz"] is None and not g["lost"]
    assert g["power_limit_w"] == (700.0 if limit == "700.00" else None)
    assert g["sm_clock_mhz"] == (1980 if clock == "1980" else None)
    assert g["util_sm_pct"] == 90.0 and g["index"] == 0


def test_comma_in_process_name_and_na_memory():
    apps = [parse_app_line(ln) for ln in lines("synthetic_compute_apps_lms.csv")]
    assert apps[1]["name"] == "python3 -m dflash_train, run 7"
    assert apps[1]["used_memory_bytes"] is None and apps[2]["used_memory_bytes"] == 512 * MIB


@pytest.mark.parametrize("bad", ["", "garbage", "1, 2, 3", "2026/11/30 11:00:00.000, x, y" + ", z" * 13])
def test_malformed_lines_are_refused(bad):
    with pytest.raises(SmiLineError):
        parse_gpu_line(bad)


def test_grouper_emits_whole_loops_and_drops_a_cut_one():
    grouper = GpuLineGrouper()
    out = [g for g in (grouper.feed(parse_gpu_line(ln)) for ln in lines("synthetic_8gpu_lms.csv")) if g]
    assert [len(g) for g in out] == [8, 8]     # the trailing 2-line loop is not complete yet
    assert [g["index"] for g in out[1]] == list(range(8))
    # A restart mid-loop (index goes back to 0) starts a new group instead of mixing two.
    grouper = GpuLineGrouper()
    cut = lines("synthetic_8gpu_lms.csv")
    for ln in cut[:3]:
        assert grouper.feed(parse_gpu_line(ln)) is None
    for ln in cut[8:15]:
        assert grouper.feed(parse_gpu_line(ln)) is None
    assert len(grouper.feed(parse_gpu_line(cut[15]))) == 8


def test_apps_tracker_completes_on_next_loop_and_expires():
    now = [0.0]
    tracker = AppsTracker(stale_after=2.5, clock=lambda: now[0])
    apps = [parse_app_line(ln) for ln in lines("synthetic_compute_apps_lms.csv")]
    for a in apps[:3]:
        tracker.feed(a)
    assert len(tracker.processes()) == 3
    tracker.feed(apps[3])
    assert [a["pid"] for a in tracker.processes()] == [4242, 4243, 5151]   # the complete loop
    now[0] = 3.0
    assert tracker.processes() == []          # no line for 2.5 s: no process on any GPU


def test_snapshot_dict_attaches_processes_by_uuid():
    gpus = [parse_gpu_line(ln) for ln in lines("synthetic_8gpu_lms.csv")[8:16]]
    apps = [parse_app_line(ln) for ln in lines("synthetic_compute_apps_lms.csv")[:3]]
    snap = snapshot_from_dict(snapshot_dict(gpus, apps, now=1.0), source="nvidia-smi")
    assert [p.pid for p in snap.gpus[0].processes] == [4242]
    assert [p.pid for p in snap.gpus[1].processes] == [4243, 5151]
    assert snap.error.kind is GpuErrorKind.GPU_LOST and snap.error.gpu_index == 5


def test_messages_classified():
    for row in (FIX / "synthetic_messages.txt").read_text().splitlines():
        if row.startswith("#") or not row.strip():
            continue
        text, expected = row.rsplit(" => ", 1)
        err = classify_message(text)
        assert (err["kind"] if err else "None") == expected, text
        if err:
            assert "\n" not in err["message"]


# -- the streaming source, through a real pipe ----------------------------------------------

def standin_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{FIX / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["NVIDIA_SMI_STANDIN_GPU"] = str(FIX / "h200_load_query_gpu_lms.csv")
    env["NVIDIA_SMI_STANDIN_APPS"] = str(FIX / "h200_load_compute_apps_lms.csv")
    env.update(extra)
    return env


async def test_stream_source_samples_and_marks_the_run():
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              start_new_session=True)
    try:
        target = LocalTarget(env=standin_env(NVIDIA_SMI_STANDIN_PID=str(leader.pid)))
        source = SmiStreamSource(target, interval_ms=100, annotate=local_annotator())
        run = RunRef(leader.pid, read_stat(leader.pid).start_ticks)
        try:
            snap = await source.sample(run)                  # from the one-shot preflight
            assert snap.error is None and snap.source == "nvidia-smi"
            assert snap.gpus[0].uuid == H200_UUID and snap.gpus[0].power_w is not None
            for _ in range(50):                              # the apps stream catches up
                await asyncio.sleep(0.05)
                snap = await source.sample(run)
                if snap.gpus[0].processes:
                    break
            (proc,) = snap.gpus[0].processes
            assert proc.pid == leader.pid and proc.is_run_process
            assert proc.used_memory_bytes == 9322 * MIB
        finally:
            await source.close()
    finally:
        leader.kill()
        leader.wait()


@pytest.mark.parametrize("env, kind", [
    ({"NVIDIA_SMI_STANDIN_MODE": "no_driver"}, GpuErrorKind.NO_DRIVER),
    ({"NVIDIA_SMI_STANDIN_MODE": "mismatch"}, GpuErrorKind.VERSION_MISMATCH),
    ({"PATH": "/nonexistent"}, GpuErrorKind.LIBRARY_NOT_FOUND),
])
async def test_stream_source_errors_are_states(env, kind):
    source = SmiStreamSource(LocalTarget(env={**standin_env(), **env}), interval_ms=100)
    try:
        snap = await source.sample(None)
        assert snap.gpus == () and snap.error is not None and snap.error.kind is kind
        assert "\n" not in snap.error.message
    finally:
        await source.close()


async def test_stream_source_recovers_when_the_driver_comes_back():
    env = standin_env(NVIDIA_SMI_STANDIN_MODE="no_driver")
    source = SmiStreamSource(LocalTarget(env=env), interval_ms=100, retry_after=0.2)
    try:
        assert (await source.sample(None)).error.kind is GpuErrorKind.NO_DRIVER
        env["NVIDIA_SMI_STANDIN_MODE"] = "ok"           # modprobe nvidia, on the host
        assert (await source.sample(None)).error.kind is GpuErrorKind.NO_DRIVER  # not retried yet
        await asyncio.sleep(0.25)
        snap = await source.sample(None)
        assert snap.error is None and snap.gpus[0].name == "NVIDIA H200"
    finally:
        await source.close()


@pytest.mark.parametrize("prefer", ["agent", "shell"])
async def test_ops_annotator_marks_the_run_through_remote_ops(prefer):
    # The nvidia-smi path on a remote host marks processes through the host's RemoteOps
    # (agent or one-shot shell): a process is the run's when its group leader is the wrapper.
    from dflash_tui.gpu.sources import ops_annotator
    from dflash_tui.remote.agent import open_ops

    src = ("import subprocess, sys, time; "
           "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
           "print(p.pid, flush=True); time.sleep(30)")
    leader = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    ops = await open_ops(LocalTarget(), prefer=prefer)
    try:
        trainer = int(leader.stdout.readline())
        run = RunRef(leader.pid, read_stat(leader.pid).start_ticks)
        procs = [{"pid": trainer}, {"pid": os.getpid()}]
        await ops_annotator(ops)(procs, run)
        assert procs[0]["is_run_process"] and procs[0]["container_pid"] is None
        assert not procs[1]["is_run_process"]
        stale = [{"pid": trainer}]
        await ops_annotator(ops)(stale, RunRef(leader.pid, run.start_ticks + 1))   # a reused pid
        assert not stale[0]["is_run_process"]
    finally:
        await ops.close()
        os.killpg(leader.pid, 9)
        leader.wait()


@pytest.mark.parametrize("refused", ["clocks.max.sm", "clocks_throttle_reasons.active,clocks.max.sm"])
async def test_a_driver_that_refuses_an_optional_field_is_queried_without_it(refused):
    """An older driver (no clocks.max.sm) or a newer one that dropped a name prints `Field "x"
    is not a valid field to query.` and exits 2: the query goes on without that field, whose
    value reads None; the rest is the snapshot as always."""
    source = SmiStreamSource(LocalTarget(env=standin_env(NVIDIA_SMI_STANDIN_REFUSE=refused)), interval_ms=100)
    try:
        snap = await source.sample(None)
        for _ in range(20):   # the stream's first loop, after the one-shot query
            if snap.error is None and snap.gpus:
                break
            await asyncio.sleep(0.1)
            snap = await source.sample(None)
        assert snap.error is None, snap.error
        (gpu,) = snap.gpus
        assert gpu.name == "NVIDIA H200" and gpu.util_sm_pct is not None and gpu.sm_clock_mhz is not None
        assert gpu.sm_clock_max_mhz is None
        assert (gpu.throttle_reasons == ()) == ("throttle" in refused)
    finally:
        await source.close()


async def test_a_refused_field_the_snapshot_needs_is_an_error_that_names_it():
    source = SmiStreamSource(LocalTarget(env=standin_env(NVIDIA_SMI_STANDIN_REFUSE="memory.used")), interval_ms=100)
    try:
        snap = await source.sample(None)
        assert snap.gpus == () and snap.error is not None
        assert 'too old for the query: Field "memory.used" is not a valid field' in snap.error.message
    finally:
        await source.close()
