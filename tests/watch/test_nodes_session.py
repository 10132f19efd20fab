"""A run on several nodes, for real: two loopback "hosts" (this machine, and the same machine
through the real sshd by its ~/.ssh/config alias), each node a real process of a small gloo
torch.distributed program (tests/programs/gloo_allreduce.py) launched through the wrapper.
The nodes share this machine's filesystem, so the run dir names the node ({node})."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import ConfigError, parse_config
from dflash_tui.contract.rundir import STATUS_JSON, parse_status, rank_file
from dflash_tui.run.launch.launch import LaunchRefused
from dflash_tui.run.launch.request import Placement
from dflash_tui.watch import NodesWatch
from dflash_tui.run.verdict.checklist import Verdict

from tests.programs.gloo_allreduce import PROGRAM
from tests.support.ports import free_port
from tests.support.runs import alive

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(240)]

LOCAL = "localhost"


def nodes_toml(sshd, tmp_path: Path, *train_args: str, **extra) -> str:
    keys = {"nodes": [LOCAL, sshd.alias], "ssh_config": str(sshd.ssh_config),
            "run_dir": str(tmp_path / "run-{node}"), "python": sys.executable,
            "command": [sys.executable, PROGRAM], "train_args": list(train_args),
            "master_port": free_port(),
            # A loaded 2-core machine: importing torch and joining the group take seconds.
            "stall_after_s": 30, "compile_stall_after_s": 60, "launch_deadline_s": 10,
            "stop_grace_s": 10, "min_free_gb": 0, **extra}
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items() if v is not None)
    return f"[profile.two]\n{body}\n"


def nodes_profile(sshd, tmp_path: Path, *train_args: str, **extra):
    return parse_config(nodes_toml(sshd, tmp_path, *train_args, **extra), str(tmp_path / "c.toml")).profiles["two"]


@pytest.fixture
async def nodes_session(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made: list[NodesWatch] = []

    def make(profile) -> NodesWatch:
        s = NodesWatch(profile)
        made.append(s)
        return s
    yield make
    for s in made:
        try:
            await s.stop()   # nothing outlives the test
        finally:
            await s.close()


async def wait_run(nodes: NodesWatch, want: set[Verdict], timeout: float = 90.0, *, statuses: bool = False):
    """The run once its verdict is in `want` (and, with `statuses`, every node's status file of
    this run is read: RUNNING may come from the log's progress before it), or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        run = await nodes.check()
        ready = not statuses or all(n.report.status is not None for n in run.nodes)
        if (run.checklist.verdict in want and ready) or time.monotonic() > deadline:
            return run
        await asyncio.sleep(0.2)


def program_pid(run_dir: str, rank: int) -> int:
    return parse_status(Path(run_dir, rank_file(STATUS_JSON, rank)).read_text()).pid


async def test_two_nodes_reach_running_then_finished(sshd, nodes_session, tmp_path):
    nodes = nodes_session(nodes_profile(sshd, tmp_path, "--steps=80", "--interval=0.1"))
    out = await nodes.launch()
    assert out.launched, out.report.checklist.summary
    assert {o.preflight.ok for o in out.outcomes.values()} == {True}
    run = await wait_run(nodes, {Verdict.RUNNING, Verdict.FINISHED} | {v for v in Verdict if v.failing})
    assert run.checklist.verdict is Verdict.RUNNING, run.checklist.summary
    assert [n.verdict for n in run.nodes] == [Verdict.RUNNING, Verdict.RUNNING]
    assert run.checklist.summary == f"2 nodes running: {LOCAL}, {sshd.alias}"
    # Once both ranks' probe reports are read, the groups of ranks name their nodes.
    deadline = time.monotonic() + 8
    while {n for g in run.checklist.rank_groups for n in g.nodes} != {LOCAL, sshd.alias} and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        run = await nodes.check()
    groups = run.checklist.rank_groups
    assert {n for g in groups for n in g.nodes} == {LOCAL, sshd.alias}, [g.words() for g in groups]
    assert all(g.nodes for g in groups) and {r for g in groups for r in g.ranks} == {0, 1}, [g.words() for g in groups]
    # Each node is its own wrapper, run dir and rank; the SSH node was reached through sshd.
    local, remote = run.nodes
    assert local.report.run_dir == str(tmp_path / f"run-{LOCAL}")
    assert remote.report.run_dir == str(tmp_path / f"run-{sshd.alias}")
    assert local.report.target_label == "local" and sshd.alias in remote.report.target_label
    assert local.report.launch.argv[:2] == ["env", f"DFLASH_NODE={LOCAL}"]
    assert "RANK=1" in remote.report.launch.argv and "MASTER_ADDR=127.0.0.1" in remote.report.launch.argv
    run = await wait_run(nodes, {Verdict.FINISHED} | {v for v in Verdict if v.failing})
    assert run.checklist.verdict is Verdict.FINISHED, run.checklist.summary
    for n in run.nodes:
        assert "finished 80 steps" in Path(n.report.run_dir, "train.log").read_text()

    # --check and --check --json report the nodes, from another process.
    cfg = tmp_path / "c.toml"
    cfg.write_text(nodes_toml(sshd, tmp_path))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--check", "--json"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "FINISHED" and doc["exit_code"] == 0 and doc["unreachable"] == []
    assert [(n["node"], n["rank"], n["verdict"]) for n in doc["nodes"]] == [(LOCAL, 0, "FINISHED"),
                                                                           (sshd.alias, 1, "FINISHED")]
    assert all({c["id"] for c in n["checks"]} >= {"launch_json", "train_log", "process", "exit"}
               for n in doc["nodes"])
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--check"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert f"node {sshd.alias} (rank 1)" in res.stdout and "FINISHED: 2 nodes finished" in res.stdout


async def test_a_killed_node_fails_the_run_by_name_and_its_peer_exits(sshd, nodes_session, tmp_path):
    nodes = nodes_session(nodes_profile(sshd, tmp_path, "--interval=0.1", "--timeout=15"))
    out = await nodes.launch()
    assert out.launched, out.report.checklist.summary
    run = await wait_run(nodes, {Verdict.RUNNING} | {v for v in Verdict if v.failing})
    assert run.checklist.verdict is Verdict.RUNNING, run.checklist.summary
    local, remote = run.nodes
    os.kill(program_pid(remote.report.run_dir, remote.rank), signal.SIGKILL)
    run = await wait_run(nodes, {v for v in Verdict if v.failing}, timeout=30)
    assert run.checklist.verdict is Verdict.CRASHED, run.checklist.summary
    assert run.checklist.summary.startswith(f"node {sshd.alias}: CRASHED killed by SIGKILL"), run.checklist.summary
    # The surviving node's program ends by itself (its collective fails), within its timeout.
    t0 = time.monotonic()
    while alive(local.report.launch.pid) and time.monotonic() - t0 < 15 + 30:
        await asyncio.sleep(0.2)
    assert not alive(local.report.launch.pid), "the surviving node hangs"
    run = await nodes.check()
    assert [n.verdict for n in run.nodes] == [Verdict.CRASHED, Verdict.CRASHED]
    # Named first although both failed: the killed node, then its peer's reaction.
    assert run.checklist.summary.startswith(f"node {sshd.alias}: CRASHED killed by SIGKILL; also node {LOCAL}: CRASHED exit code 1")
    assert run.checklist.checks[0].id == f"node:{LOCAL}"


async def test_the_bundled_trainer_on_two_nodes(sshd, nodes_session, tmp_path):
    """No `command`: each node runs `python -m dflash_train` (torch.distributed, gloo) as the
    wrapper's own child, with the environment torchrun gives a worker. Killing rank 1 fails the
    run naming its node, and rank 0 exits by itself, naming rank 1; a relaunch starts both
    again, and a stop ends both trainers (SIGTERM: the stop is agreed between the ranks)."""
    peer_timeout = 10
    nodes = nodes_session(nodes_profile(
        sshd, tmp_path, "--target-devices", "cpu", "--drafter-devices", "cpu", "--steps", "100000",
        "--checkpoint-every", "100000", "--compile", "off", "--eval-every", "0", "--log-every", "2",
        "--batch-size", "2", "--peer-timeout", str(peer_timeout), "--dist-timeout", "60", command=None))
    out = await nodes.launch()
    assert out.launched, out.report.checklist.summary
    run = await wait_run(nodes, {Verdict.RUNNING} | {v for v in Verdict if v.failing}, timeout=180, statuses=True)
    assert run.checklist.verdict is Verdict.RUNNING, run.checklist.summary
    for n in run.nodes:   # each node's checklist reads its own rank's status file
        assert (n.report.status.rank, n.report.status.world_size) == (n.rank, 2)
        argv = n.report.launch.argv
        assert f"RANK={n.rank}" in argv and argv[argv.index("-m") + 1] == "dflash_train"
    local, remote = run.nodes

    os.kill(remote.report.status.pid, signal.SIGKILL)
    t0 = time.monotonic()
    run = await wait_run(nodes, {v for v in Verdict if v.failing}, timeout=30)
    assert run.checklist.summary.startswith(f"node {sshd.alias}: CRASHED killed by SIGKILL"), run.checklist.summary
    while alive(local.report.launch.pid) and time.monotonic() - t0 < peer_timeout + 30:
        await asyncio.sleep(0.2)
    assert not alive(local.report.launch.pid), "rank 0 does not notice that rank 1 is gone"
    run = await nodes.check()
    assert run.nodes[0].verdict is Verdict.CRASHED, run.checklist.summary
    assert run.nodes[0].report.status.last_error.startswith("rank 1 (node "), run.nodes[0].report.status.last_error

    again = await nodes.relaunch()
    assert again.launched, again.report.checklist.summary
    run = await wait_run(nodes, {Verdict.RUNNING} | {v for v in Verdict if v.failing}, timeout=180, statuses=True)
    assert run.checklist.verdict is Verdict.RUNNING, run.checklist.summary
    trainers = [n.report.status.pid for n in run.nodes]
    stopped = await nodes.stop()
    assert {r.outcome for r in stopped.values()} == {"terminated"}, stopped
    assert not any(alive(p) for p in trainers)
    run = await nodes.check()
    statuses = [n.report.status for n in run.nodes]
    # The stop was agreed between the ranks: both ended after the same step.
    assert [st.phase for st in statuses] == ["finished", "finished"] and statuses[0].step == statuses[1].step
    assert run.checklist.verdict is Verdict.STOPPED, run.checklist.summary
    assert [n.verdict for n in run.nodes] == [Verdict.STOPPED, Verdict.STOPPED]


async def test_a_node_that_fails_its_preflight_means_no_node_starts(sshd, nodes_session, tmp_path):
    (tmp_path / f"run-{sshd.alias}").write_text("a file where the run dir should be")
    nodes = nodes_session(nodes_profile(sshd, tmp_path, "--interval=0.1"))
    out = await nodes.launch()
    assert not out.launched and out.report.checklist.verdict is Verdict.NOT_LAUNCHED
    # The node whose preflight failed is named first; the other was refused because of it.
    assert out.report.checklist.summary.startswith(f"node {sshd.alias}: NOT LAUNCHED cannot create "), out.report.checklist.summary
    assert out.report.checklist.summary.endswith(f"also node {LOCAL}: NOT LAUNCHED not launched: the preflight of node "
                                    f"{sshd.alias} failed"), out.report.checklist.summary
    assert not (tmp_path / f"run-{LOCAL}" / "launch.json").exists()
    assert (await nodes.check()).checklist.verdict is Verdict.NO_RUN


def run_cli(cfg: Path, tmp_path: Path, *args: str) -> tuple[int, dict]:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), *args, "--json"],
                         capture_output=True, text=True, timeout=180, env=env)
    assert res.stdout.count("\n") == 1, (res.stdout, res.stderr)
    return res.returncode, json.loads(res.stdout)


def test_cli_launch_relaunch_stop_on_every_node(sshd, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(nodes_toml(sshd, tmp_path, "--interval=0.1"))
    try:
        code, doc = run_cli(cfg, tmp_path, "--launch", "--wait", "90")
        assert (code, doc["verdict"]) == (0, "RUNNING"), doc
        assert [n["verdict"] for n in doc["nodes"]] == ["RUNNING", "RUNNING"]
        first = doc["run_ids"]
        assert set(first) == {LOCAL, sshd.alias} and all(first.values())
        old_pids = [n["pid"] for n in doc["nodes"]]

        code, doc = run_cli(cfg, tmp_path, "--launch")
        # The preflight of every node refuses a second launch over its live run.
        assert (code, doc["verdict"]) == (1, "NOT LAUNCHED"), doc
        assert doc["summary"].startswith(f"node {LOCAL}: NOT LAUNCHED"), doc["summary"]
        assert all(first[n["node"]] in n["summary"] for n in doc["nodes"]), doc["nodes"]

        code, doc = run_cli(cfg, tmp_path, "--relaunch", "--wait", "90")
        assert (code, doc["verdict"]) == (0, "RUNNING"), doc
        # Every node was stopped (by its own pid) before any started again.
        assert set(doc["stopped"]) == {LOCAL, sshd.alias}
        assert all("ended after SIGTERM" in m for m in doc["stopped"].values()), doc["stopped"]
        assert not any(alive(p) for p in old_pids)
        assert all(doc["run_ids"][n] != first[n] for n in first)
        pids = [n["pid"] for n in doc["nodes"]]
    finally:
        code, doc = run_cli(cfg, tmp_path, "--stop")
    assert code == 0, doc
    assert {n: s["outcome"] for n, s in doc["stop"].items()} == {LOCAL: "terminated", sshd.alias: "terminated"}
    assert doc["verdict"] == "STOPPED" and not any(alive(p) for p in pids)
    assert [n["verdict"] for n in doc["nodes"]] == ["STOPPED", "STOPPED"] and doc["summary"].startswith("2 nodes stopped")


async def test_a_hung_node_is_named_before_its_peer_that_timed_out(sshd, nodes_session, tmp_path):
    """SIGSTOP one node's program: its peer's collective times out (the peer crashes) and it goes silent
    (STALLED); the run names the hung node first, although its peer's exit came first."""
    nodes = nodes_session(nodes_profile(sshd, tmp_path, "--interval=0.1", "--timeout=6",
                                        stall_after_s=4, stop_grace_s=1))
    out = await nodes.launch()
    assert out.launched, out.report.checklist.summary
    run = await wait_run(nodes, {Verdict.RUNNING} | {v for v in Verdict if v.failing})
    assert run.checklist.verdict is Verdict.RUNNING, run.checklist.summary
    local, remote = run.nodes
    hung = program_pid(remote.report.run_dir, remote.rank)
    os.kill(hung, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run = await nodes.check()
            if [n.verdict for n in run.nodes] == [Verdict.CRASHED, Verdict.STALLED]:
                break
            await asyncio.sleep(0.2)
        assert [n.verdict for n in run.nodes] == [Verdict.CRASHED, Verdict.STALLED], run.checklist.summary
        assert run.checklist.verdict is Verdict.STALLED
        assert run.checklist.summary.startswith(f"node {sshd.alias}: STALLED"), run.checklist.summary
        # gloo's timeout, as the peer reported it (it may end by exit code or by SIGABRT).
        assert f"also node {LOCAL}: CRASHED" in run.checklist.summary and "Timed out" in run.checklist.summary
    finally:
        await nodes.stop()   # SIGTERM waits while it is stopped; SIGKILL after the grace does not
        os.kill(hung, signal.SIGCONT) if alive(hung) else None


async def test_a_placement_is_refused_before_any_node_is_touched(sshd, nodes_session, tmp_path):
    """The nodes are the profile's own list: a relaunch asked to avoid one is refused in one
    line, never carried out without it, and no node is stopped or started."""
    nodes = nodes_session(nodes_profile(sshd, tmp_path))
    assert not nodes.places_nodes
    with pytest.raises(LaunchRefused) as err:
        await nodes.relaunch(placement=Placement(exclude=(sshd.alias,)))
    assert str(err.value) == f"cannot launch excluding node {sshd.alias}: the profile's nodes are its own list"
    assert not any((tmp_path / f"run-{node}").exists() for node in (LOCAL, sshd.alias))


async def test_the_canary_runs_on_every_node(sshd, nodes_session, tmp_path):
    nodes = nodes_session(nodes_profile(sshd, tmp_path))
    results = await nodes.canary(sleep_s=3)
    assert set(results) == {LOCAL, sshd.alias}
    assert all(r.ok for r in results.values()), {n: r.message for n, r in results.items()}


def trainer_nodes_profile(sshd, tmp_path: Path, **extra):
    """The bundled trainer on two nodes, on CPU, saving a checkpoint every 2 steps."""
    return nodes_profile(sshd, tmp_path, "--target-devices", "cpu", "--drafter-devices", "cpu", "--steps", "100000",
                         "--checkpoint-every", "2", "--compile", "off", "--eval-every", "0", "--log-every", "1",
                         "--batch-size", "2", "--peer-timeout", "10", "--dist-timeout", "60", command=None, **extra)


async def test_relaunch_resume_continues_on_every_node(sshd, nodes_session, tmp_path):
    """`--relaunch --resume` on two nodes: both trainers start again with --resume and continue
    from rank 0's newest checkpoint (rank 1's own run dir holds none; rank 0 sends it). Before,
    the resume was dropped and both nodes started again from step 0 without a word."""
    nodes = nodes_session(trainer_nodes_profile(sshd, tmp_path))
    with pytest.raises(LaunchRefused, match=r"no checkpoint in .*run-localhost/checkpoints \(node localhost, rank 0"):
        await nodes.launch(resume=True)   # nothing to resume from: refused, nothing started
    assert not (tmp_path / f"run-{LOCAL}" / "launch.json").exists()
    out = await nodes.launch()
    assert out.launched, out.report.checklist.summary
    ckpts = tmp_path / f"run-{LOCAL}" / "checkpoints"
    deadline = time.monotonic() + 150
    while not (ckpts.is_dir() and any(ckpts.iterdir())) and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
    assert ckpts.is_dir() and any(ckpts.iterdir()), (await nodes.check()).checklist.summary

    again = await nodes.relaunch(resume=True)
    assert again.launched, again.report.checklist.summary
    assert all(argv[-1] == "--resume" for argv in (o.evidence.launch.argv for o in again.outcomes.values()))
    deadline = time.monotonic() + 150
    logs: list[str] = []
    while time.monotonic() < deadline:
        logs = [Path(tmp_path / f"run-{n}" / "train.log").read_text() for n in (LOCAL, sshd.alias)]
        if all("resume: loaded checkpoint at step" in log for log in logs):
            break
        await asyncio.sleep(0.3)
    assert "resume: loaded checkpoint at step" in logs[0], logs[0][-2000:]
    assert ", sent by rank 0" in logs[1], logs[1][-2000:]
    assert not any("resume: no checkpoint" in log for log in logs)


async def test_resume_of_a_program_of_ones_own_on_nodes_is_refused_in_one_line(sshd, nodes_session, tmp_path):
    nodes = nodes_session(nodes_profile(sshd, tmp_path, "--interval=0.1"))
    with pytest.raises(ConfigError, match="runs its own command; resume works with the bundled trainer"):
        await nodes.relaunch(resume=True)
    assert not (tmp_path / f"run-{LOCAL}" / "launch.json").exists()


MEM_GROW = str(Path(__file__).resolve().parents[1] / "programs" / "mem_grow.py")
MB = 1 << 20


def test_each_nodes_memory_runway_and_the_soonest_forecast_across_them(sshd, tmp_path):
    """Every node's leak is its own series (each `--check --json` a new process goes on from the
    samples the earlier ones kept); the combined report carries every node's memory runway, keyed
    by node, and the run's `memory` check names the node whose forecast comes first: rank 1
    grows twice as fast as rank 0 toward the same 1 GiB `memory_limit_mb`."""
    cfg = tmp_path / "c.toml"
    # Rank 0: 1 MiB a step, rank 1: 2 MiB, 4 steps a second, up to 480 MiB each.
    cfg.write_text(nodes_toml(sshd, tmp_path, memory_limit_mb=1024, command=[
        "sh", "-c", f'exec "$0" {MEM_GROW} $((1 + RANK)) 0.25 480', sys.executable]))
    try:
        code, doc = run_cli(cfg, tmp_path, "--launch", "--wait", "90")
        assert (code, doc["verdict"]) == (0, "RUNNING"), doc
        deadline = time.monotonic() + 150
        mem = None
        while time.monotonic() < deadline:
            code, doc = run_cli(cfg, tmp_path, "--check")
            mem = next((c for c in doc["checks"] if c["id"] == "memory"), None)
            if mem is not None and mem["state"] == "warn" and all(f"node {n}: " in mem["cause"] for n in (LOCAL, sshd.alias)):
                break
        assert mem is not None and mem["state"] == "warn", (doc.get("runway"), mem)
        assert all(f"node {n}: " in mem["cause"] for n in (LOCAL, sshd.alias)), (doc["runway"], mem)
        assert doc["verdict"] == "RUNNING"
        # The soonest first, named by its node; then the other node's.
        assert mem["cause"].startswith(f"node {sshd.alias}: host: +"), mem["cause"]
        assert f"; node {LOCAL}: host: +" in mem["cause"] and "of 1.0 GiB, memory_limit_mb)" in mem["cause"], mem
        runway = doc["runway"]["memory"]
        assert list(runway) == [LOCAL, sshd.alias], runway
        local, remote = runway[LOCAL]["host"], runway[sshd.alias]["host"]
        assert 80 * MB <= local["growth"]["bytes_per_100_steps"] <= 120 * MB, local
        assert 180 * MB <= remote["growth"]["bytes_per_100_steps"] <= 230 * MB, remote
        assert {local["limit_source"], remote["limit_source"]} == {"memory_limit_mb"}
        assert 0 < remote["growth"]["full_in_s"] < local["growth"]["full_in_s"] < 3600, runway
        # Each node's own object carries its runway (and its energy and cost: none here, no GPU,
        # and so none for the run either).
        assert doc["energy"] is None and doc["cost"] is None, doc
        for n in doc["nodes"]:
            assert n["runway"]["memory"] == runway[n["node"]] and n["energy"] is None, n
            assert {c["id"]: c["state"] for c in n["checks"]}["memory"] == "warn", n["checks"]
    finally:
        run_cli(cfg, tmp_path, "--stop")
