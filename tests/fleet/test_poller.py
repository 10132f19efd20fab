"""The fleet's headless core for real: profiles on the loopback sshd and on this machine, real
detached runs, a port that refuses and a "host" that accepts TCP and then never speaks.

- profiles on one host share ONE SSH connection and ONE agent per host/container target;
- each row says what its run's checklist says; a dead host is UNREACHABLE with the reason and
  the next retry (never NO RUN), and it does not slow the others down;
- --check --all's exit code is the worst by the documented precedence.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile, parse_config
from dflash_tui.fleet.checkall import EXIT_PRECEDENCE, check_all, worst_exit_code
from dflash_tui.fleet.poller import FleetPoller
from dflash_tui.fleet.row import DOWN, FAIL, OK, UNREACHABLE
from dflash_tui.watch.transport import SharedTransport
from dflash_tui.run.verdict.checklist import CheckId, Verdict
from dflash_tui.watch.session import Session
from dflash_tui.watch import NodesWatch

from tests.support.run_standins import PROGRAM
from tests.support.runs import standin_profile

pytestmark = [pytest.mark.timeout(120)]

PRINT_LOOP = str(Path(__file__).resolve().parents[1] / "programs" / "print_loop.py")


def ssh_profile(sshd, name: str, run_dir, mode: str = "beat", **kw) -> Profile:
    return standin_profile(run_dir, mode, "--interval=0.2", name=name, host=sshd.host, port=sshd.port,
                           user=sshd.user, identity_file=str(sshd.client_key),
                           known_hosts=str(sshd.known_hosts), **kw)


async def until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not reached in {timeout:.0f} s: {what}"
        await asyncio.sleep(0.05)


@pytest.fixture
def silent_port():
    """A TCP port that completes the handshake and then never sends an SSH banner (a wedged host)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


def test_exit_precedence_is_the_documented_one():
    assert EXIT_PRECEDENCE == (2, 1, 3, 4, 0)
    assert worst_exit_code([0, 4, 3]) == 3
    assert worst_exit_code([3, 1, 0]) == 1
    assert worst_exit_code([4, 0]) == 4
    assert worst_exit_code([1, 2]) == 2
    assert worst_exit_code([0, 0]) == 0 and worst_exit_code([]) == 0


@pytest.mark.sshd
async def test_profiles_on_one_host_share_one_connection_and_one_agent(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    profiles = [ssh_profile(sshd, f"p{i}", tmp_path / f"run{i}") for i in range(3)]
    before = sshd.accepted_connections()
    transport = SharedTransport()
    try:
        results = await check_all(profiles, lambda watch: watch.check(), transport=transport)
        assert [r.value.checklist.verdict for r in results] == [Verdict.NO_RUN] * 3, results
        assert transport.host_count == 1 and transport.agent_count == 1
        deadline = time.monotonic() + 5
        while sshd.accepted_connections() - before < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sshd.accepted_connections() - before == 1, sshd.log_tail()
    finally:
        await transport.close()


@pytest.mark.sshd
async def test_fleet_rows_mixed_verdicts_and_a_dead_host_delays_nobody(sshd, tmp_path, monkeypatch, silent_port):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    beat = ssh_profile(sshd, "beat", tmp_path / "beat")
    crash = ssh_profile(sshd, "crash", tmp_path / "crash", mode="crash")
    local = standin_profile(tmp_path / "local", "beat", "--interval=0.2", name="local-beat")
    refused = Profile(name="refused", host="127.0.0.1", port=1, run_dir="/nowhere")
    wedged = Profile(name="wedged", host="127.0.0.1", port=silent_port, run_dir="/nowhere",
                     known_hosts=str(sshd.known_hosts))
    for p in (beat, crash, local):
        async with Session(p) as s:
            out = await s.launch()
            assert out.run_id, out.checklist

    # Every target at 0.5 s whatever its runs do (steady_interval=None): the rhythm checked below.
    poller = FleetPoller([beat, crash, local, refused, wedged], interval=0.5, poll_timeout=1.5,
                         gpu_interval=None, steady_interval=None)
    try:
        async with poller:
            rows = poller.rows
            await until(lambda: rows["beat"].verdict is Verdict.RUNNING and rows["crash"].verdict is Verdict.CRASHED
                        and rows["local-beat"].verdict is Verdict.RUNNING
                        and rows["refused"].state == UNREACHABLE and rows["wedged"].state == UNREACHABLE,
                        30, "every row reaches its verdict")
            assert rows["beat"].severity == OK and rows["crash"].severity == FAIL
            assert "RuntimeError" in rows["crash"].cause
            assert rows["beat"].step and rows["beat"].loss is not None and rows["beat"].uptime_s is not None
            assert rows["refused"].severity == DOWN and rows["refused"].verdict is None
            assert "connection refused" in rows["refused"].cause and "next retry in" in rows["refused"].cause
            assert "did not answer within" in rows["wedged"].cause, rows["wedged"].cause
            assert rows["refused"].fresh_at is None and rows["refused"].step is None   # no data it never had

            # While the wedged host eats its whole poll timeout, the others keep their 0.5 s rhythm.
            steps0 = rows["beat"].step
            await asyncio.sleep(3.0)
            assert rows["beat"].step > steps0
            assert rows["beat"].age_s(time.time()) < 1.5 and rows["local-beat"].age_s(time.time()) < 1.5
            good = [k for k in poller.latencies if k[0] == "local" or k[2] == sshd.port]
            assert good and all(max(poller.latencies[k]) < 1.5 for k in good), poller.latencies
            # beat and crash ride the same target: one agent; local is another.
            assert poller.transport.agent_count == 2

            # A failing run turns its row red within a poll or two.
            async with Session(beat) as s:
                ev = await s.evidence()
            t_kill = time.time()
            os.killpg(ev.launch.pid, signal.SIGKILL)
            await until(lambda: rows["beat"].severity == FAIL, 5, "the killed run's row turns red")
            assert rows["beat"].verdict is Verdict.KILLED and time.time() - t_kill < 3.0
    finally:
        async with Session(local) as s:
            await s.stop()
        async with Session(crash) as s:
            await s.stop()


@pytest.mark.sshd
async def test_a_steady_target_is_polled_less_and_a_run_that_dies_still_turns_red_at_once(sshd, tmp_path,
                                                                                         monkeypatch):
    """Two RUNNING runs on one target, 0.5 s polls: once their checklists stood still for
    `steady_after` polls and the exit watch on the target's agent covers both wrappers, the target
    is polled every `steady_interval` (4 s); a poke brings back 0.5 s; a SIGKILL just after a
    poll turns the row red long before the next steady poll was due, and that change of verdict
    brings back 0.5 s too."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    a, b = (ssh_profile(sshd, n, tmp_path / n, stall_after_s=30.0) for n in ("a", "b"))
    for p in (a, b):
        async with Session(p) as s:
            out = await s.launch()
            assert out.run_id, out.checklist
    try:
        async with FleetPoller([a, b], interval=0.5, steady_interval=4.0, steady_after=4,
                               gpu_interval=None) as poller:
            (key,) = poller.cadence
            cadence, polls = poller.cadence[key], poller.latencies[key]
            steady = lambda: cadence.pause() == 4.0   # noqa: E731
            # The stall_limit check comes once a run's pace is learned: a check that comes is a
            # change, which starts the count of unchanged polls again. Steady is judged after it.
            learned = lambda: all(poller.watches[n].last is not None and any(  # noqa: E731
                c.id is CheckId.STALL_LIMIT for c in poller.watches[n].last.checklist.checks) for n in "ab")
            await until(learned, 30, "each run's pace learned")
            await until(steady, 30, "the target steady")
            wrappers = {(poller.watches[n].last.launch.pid, poller.watches[n].last.launch.start_ticks) for n in "ab"}
            assert cadence.watched >= wrappers

            # 4.5 s: ~9 polls at 0.5 s, one or two at 4 s.
            n0 = len(polls)
            await asyncio.sleep(4.5)
            assert 1 <= len(polls) - n0 <= 2, len(polls) - n0
            # The rows say how often they are polled now (their Age cell's "fresh" follows it).
            assert {poller.rows[n].polled_every_s for n in "ab"} == {4.0}

            poller.poke("a")
            n0 = len(polls)
            await asyncio.sleep(0.3)
            assert {poller.rows[n].polled_every_s for n in "ab"} == {0.5}   # the poke's poll said so
            await asyncio.sleep(1.5)
            assert len(polls) - n0 >= 3, len(polls) - n0   # 0.5 s again, for steady_after polls (4 expected)

            await until(steady, 10, "the target steady again")   # true right after a poll
            t_kill = time.monotonic()
            os.killpg(poller.watches["a"].last.launch.pid, signal.SIGKILL)
            await until(lambda: poller.rows["a"].severity == FAIL, 5, "the killed run's row red")
            red_s = time.monotonic() - t_kill
            assert poller.rows["a"].verdict is Verdict.KILLED and red_s < 2.5, red_s   # the next steady poll: ~4 s
            n0 = len(polls)
            await asyncio.sleep(1.6)
            assert len(polls) - n0 >= 2, len(polls) - n0   # 0.5 s again (3 or more expected)
            # An ended run with no process stands still too: steady again beside the RUNNING one.
            await until(steady, 10, "the target steady again, one run KILLED")
            assert cadence.watched >= {(poller.watches["b"].last.launch.pid, poller.watches["b"].last.launch.start_ticks)}
    finally:
        async with Session(b) as s:
            await s.stop()


class CountingTransport(SharedTransport):
    """The real transport, counting the fleet's GPU asks: (when, how many runs) each."""

    def __init__(self) -> None:
        super().__init__()
        self.gpu_asks: list[tuple[float, int]] = []

    async def gpu_sample_runs(self, profile, runs):
        self.gpu_asks.append((time.monotonic(), len(runs)))
        return await super().gpu_sample_runs(profile, runs)


async def test_fleet_rows_show_each_runs_gpus_from_one_sample_of_their_host(tmp_path, monkeypatch):
    """The GPU cells: the host's NVML (the fake NVML module, read by a real probe process on
    the host) with two runs' trainers on GPUs 0 and 1 of 2: each row shows one GPU, its own
    run's memory, and the GPU check; the host is sampled once per period for both runs."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    profiles = [standin_profile(tmp_path / name, "beat", "--interval=0.2", f"--device=cuda:{i}", name=name,
                                stall_after_s=30.0) for i, name in enumerate(("gpu-a", "gpu-b"))]
    for p in profiles:
        async with Session(p) as s:
            out = await s.launch()
            assert out.run_id, out.checklist
    try:
        trainers = []
        for p in profiles:
            log = Path(p.run_dir) / "train.log"
            await until(lambda: log.exists() and "standin beat pid" in log.read_text(), 10, "the trainer started")
            trainers.append(int(re.search(r"standin beat pid (\d+)", log.read_text()).group(1)))
        monkeypatch.setenv("DFLASH_TUI_NVML", "dflash_tui.gpu.fake_nvml:from_env")
        monkeypatch.setenv("DFLASH_FAKE_NVML_GPUS", "2")
        monkeypatch.setenv("DFLASH_FAKE_NVML_PROCS", f"0:{trainers[0]}:{20 << 30},1:{trainers[1]}:{7 << 30}")
        transport = CountingTransport()
        async with FleetPoller(profiles, interval=0.5, gpu_interval=0.5, transport=transport) as poller:
            rows = lambda: [poller.rows[p.name] for p in profiles]   # noqa: E731
            await until(lambda: all(r.gpus.count == 1 for r in rows()), 30, "each run's GPU in its row")
            assert [r.gpus.mem_bytes for r in rows()] == [20 << 30, 7 << 30]
            assert all(r.gpus.util_pct is not None for r in rows())
            await until(lambda: all(any(c.id == "gpus" and c.state.value == "ok"
                                        for c in poller.watches[p.name].last.checklist.checks) for p in profiles),
                        10, "the same sample in each verdict's gpus check")
            n, t0 = len(transport.gpu_asks), time.monotonic()
            await asyncio.sleep(1.2)
            window = [k for t, k in transport.gpu_asks[n:]]
            # One ask per 0.5 s period for the host, each for both runs.
            assert window and set(window) == {2}, transport.gpu_asks
            assert len(window) <= (time.monotonic() - t0) / 0.5 + 1, transport.gpu_asks
    finally:
        for p in profiles:
            async with Session(p) as s:
                await s.stop()


@pytest.mark.sshd
async def test_a_run_on_several_nodes_is_one_row_and_one_check_all_object(sshd, tmp_path, monkeypatch):
    """A profile with `nodes` (this machine and the loopback sshd) gets one row with the combined
    verdict, and --check --all prints the object `--check --json` prints for it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    toml = (f'[profile.two]\nnodes = ["localhost", "{sshd.alias}"]\nssh_config = "{sshd.ssh_config}"\n'
            f'run_dir = "{tmp_path}/run-{{node}}"\n'
            f'[profile.one]\nrun_dir = "{tmp_path}/one"\n')
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    profiles = parse_config(toml, str(cfg)).file_profiles()
    async with FleetPoller(profiles, interval=0.5, gpu_interval=None) as poller:
        await until(lambda: all(r.verdict is not None for r in poller.rows.values()), 30, "both rows decided")
        assert poller.rows["two"].verdict is Verdict.NO_RUN and poller.rows["two"].host.startswith("nodes ")
        assert poller.rows["one"].verdict is Verdict.NO_RUN
    r = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--check", "--all", "--json"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    objs = json.loads(r.stdout)
    assert r.returncode == 4 and [o["profile"] for o in objs] == ["two", "one"], (r.stdout, r.stderr)
    assert [n["node"] for n in objs[0]["nodes"]] == ["localhost", sshd.alias] and objs[0]["verdict"] == "NO RUN"


@pytest.mark.sshd
async def test_a_run_on_several_nodes_shows_gpu_lost_in_its_row(sshd, tmp_path, monkeypatch):
    """A GPU of one node's host falls off the bus while the run there is alive: the fleet's row
    of the run says GPU LOST, as the run view and `--check` say (each node's GPUs are sampled
    for that node's "gpus" check; the fake NVML is this machine's, the localhost node's host)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    toml = (f'[profile.two]\nnodes = ["localhost", "{sshd.alias}"]\nssh_config = "{sshd.ssh_config}"\n'
            f'run_dir = "{tmp_path}/run-{{node}}"\npython = {json.dumps(sys.executable)}\n'
            f'command = {json.dumps([sys.executable, PROGRAM, "beat"])}\n'
            f'train_args = ["--interval=0.2", "--device=cuda:0"]\n'
            f'stall_after_s = 30\nstop_grace_s = 2\nmin_free_gb = 0\n')
    profile = parse_config(toml, str(tmp_path / "c.toml")).profiles["two"]
    async with NodesWatch(profile) as nodes:
        out = await nodes.launch()
        assert out.launched, out.report.checklist.summary
    try:
        monkeypatch.setenv("DFLASH_TUI_NVML", "dflash_tui.gpu.fake_nvml:from_env")
        monkeypatch.setenv("DFLASH_FAKE_NVML_GPUS", "2")
        monkeypatch.setenv("DFLASH_FAKE_NVML_LOST", "1")
        async with FleetPoller([profile], interval=0.5, gpu_interval=0.5) as poller:
            await until(lambda: poller.rows["two"].verdict is Verdict.GPU_LOST, 30, "the row says GPU LOST")
            assert poller.rows["two"].severity == FAIL
            assert poller.watches["two"].last.checklist.summary.startswith("node localhost: GPU LOST")
    finally:
        async with NodesWatch(profile) as nodes:
            await nodes.stop()


async def test_a_steady_run_that_goes_quiet_is_stalled_at_its_limit_not_at_the_next_steady_poll(tmp_path, monkeypatch):
    """A program that is not ours (a plain print loop) steady on its target, then silent and alive
    (SIGSTOP) just after a steady poll: STALLED comes at its 7 s limit, because the first steady
    poll after the silence sees its last output older than `steady_interval` and brings back
    `interval`; polled on at 3 s it would come at the 9 s poll."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    limit = 7.0
    p = standin_profile(tmp_path / "quiet", "beat", name="quiet", command=(sys.executable, PRINT_LOOP),
                        train_args=("36000", "0.3"), stall_after_s=limit, compile_stall_after_s=limit)
    async with Session(p) as s:
        out = await s.launch()
        assert out.run_id, out.checklist
    pid = None
    try:
        async with FleetPoller([p], interval=0.5, steady_interval=3.0, gpu_interval=None) as poller:
            (key,) = poller.cadence
            cadence, polls = poller.cadence[key], poller.latencies[key]
            await until(lambda: cadence.pause() == 3.0, 30, "the print loop's target steady")
            assert poller.rows["quiet"].verdict is Verdict.RUNNING
            pid = poller.watches["quiet"].last.launch.pid
            n = len(polls)
            await until(lambda: len(polls) != n, 5, "the end of a steady poll")
            t0 = time.monotonic()
            os.killpg(pid, signal.SIGSTOP)
            await until(lambda: poller.rows["quiet"].verdict is Verdict.STALLED, limit + 10, "STALLED")
            stalled_s = time.monotonic() - t0
            assert limit - 1.0 < stalled_s < limit + 1.5, stalled_s
    finally:
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)


async def test_rows_of_user_programs_show_the_logs_step_loss_and_rate_and_keep_them_once_ended(tmp_path, monkeypatch):
    """Programs that write no status.json (a tqdm bar with a loss postfix, a print loop that
    crashes): each row shows the step, loss and rate their log gives (what the detail line says,
    run/verdict/report.py `RunProgress`), while they run and after they ended."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    programs = Path(__file__).resolve().parents[1] / "programs"
    bar = standin_profile(tmp_path / "bar", "beat", name="bar", command=(sys.executable, str(programs / "tqdm_bar.py")),
                          train_args=("30", "0.1"), stall_after_s=10.0, compile_stall_after_s=10.0)
    crash = standin_profile(tmp_path / "crash", "beat", name="crash", train_args=("4",), stall_after_s=10.0,
                            command=(sys.executable, str(programs / "crash_after_steps.py")))
    for p in (bar, crash):
        async with Session(p) as s:
            out = await s.launch()
            assert out.run_id, out.checklist
    running = []
    async with FleetPoller([bar, crash], interval=0.3, gpu_interval=None, steady_interval=None) as poller:
        rows = poller.rows

        def ended() -> bool:
            if "bar" in rows and rows["bar"].verdict is Verdict.RUNNING:
                running.append(rows["bar"])
            return (rows.get("bar") and rows["bar"].verdict is Verdict.FINISHED
                    and rows.get("crash") and rows["crash"].verdict is Verdict.CRASHED)
        await until(ended, 30, "the bar finished and the loop crashed")
        done, crashed = rows["bar"], rows["crash"]
    assert any(r.step is not None and r.rate is not None for r in running), running
    assert done.step == 30 and done.total_steps == 30 and done.loss is not None, done
    assert done.rate is not None and done.rate_unit == "it/s", done
    assert crashed.step == 4 and crashed.loss == 0.25 and crashed.tau is None, crashed
