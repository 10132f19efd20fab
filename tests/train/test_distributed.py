"""dflash-train under torchrun on CPU (gloo), as real processes: one process per "node", the
thread pool inside each.

- 2 ranks x 1 drafter replica train until SIGTERM reaches their torchrun (as a stop does):
  both ranks end after the same step S, rank 0 alone saves step S; then --resume on both ranks
  to step 24. The final weights equal, bit for bit (tolerance: exact, torch.equal), a
  1-process run of 2 replicas with the same global batch (--cpu-threads 1 everywhere, so no
  kernel's reduction order depends on a thread count). Every rank writes its own status and
  events with its rank and node, and the ranks' weight digests agree.
- two torchrun agents, as two nodes with their own run directories: SIGKILL one rank's
  process (rank 1, or rank 0, whose node holds the rendezvous store), or SIGSTOP it (a hang:
  no socket closes, so no collective fails before --dist-timeout), and the other exits on its
  own (exit 1, within --peer-timeout plus slack) with an error that names the lost rank.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from dflash_tui.contract import rundir

from tests.support.ports import free_port

COMMON = ["--compile", "off", "--eval-every", "0", "--log-every", "4", "--batch-size", "2", "--cpu-threads", "1"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _env(run_id):
    # gloo on the loopback interface only: the tests talk to 127.0.0.1 and nothing else
    return {**os.environ, "DFLASH_RUN_ID": run_id, "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}


def _train(run_dir, *args):
    return ["-m", "dflash_train", "--run-dir", str(run_dir), *args]


def _run(cmd, run_id, timeout=300):
    proc = subprocess.run(cmd, env=_env(run_id), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _status(run_dir, rank=0):
    with open(os.path.join(run_dir, rundir.rank_file(rundir.STATUS_JSON, rank))) as fh:
        return rundir.parse_status(fh.read())


def _events(run_dir, rank=0):
    with open(os.path.join(run_dir, rundir.rank_file(rundir.EVENTS_JSONL, rank))) as fh:
        batch = rundir.parse_events(fh)
    assert batch.skipped == 0
    return batch.events


def _weights(run_dir, step):
    path = os.path.join(run_dir, rundir.CHECKPOINTS_DIR, f"step-{step:08d}", "state.pt")
    return torch.load(path, weights_only=True)["drafter"]


@pytest.mark.slow
def test_two_ranks_stop_together_resume_and_end_bitwise_equal_to_one_process(tmp_path):
    alone, ranks = tmp_path / "alone", tmp_path / "ranks"
    standalone = [*TORCHRUN, "--standalone", "--nproc_per_node", "2"]
    agent = subprocess.Popen([*standalone, *_train(ranks, "--drafter-devices", "cpu", "--steps", "100000",
                                                   "--checkpoint-every", "100000", *COMMON)],
                             env=_env("ranks"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: min(_step(ranks, r) for r in (0, 1)) >= 3, 240, "both ranks at step 3")
        agent.send_signal(signal.SIGTERM)     # torchrun passes it on to every rank
        agent.wait(120)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(30)
    stopped = [_status(ranks, r) for r in (0, 1)]
    stop_step = stopped[0].step
    assert [st.phase for st in stopped] == ["finished"] * 2 and stopped[1].step == stop_step >= 3
    # However fast the stop arrived (a loaded machine runs many steps before it does), the
    # resumed run goes on past it and the one-process run trains the same number of steps.
    steps = stop_step + 8
    _run([sys.executable, *_train(alone, "--drafter-devices", "cpu,cpu", "--steps", str(steps), *COMMON)], "alone")
    assert os.listdir(ranks / rundir.CHECKPOINTS_DIR) == [f"step-{stop_step:08d}"]
    _run([*standalone, *_train(ranks, "--drafter-devices", "cpu", "--steps", str(steps), "--resume", *COMMON)],
         "ranks")

    a, b = _weights(alone, steps), _weights(ranks, steps)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    digests = []
    for rank in (0, 1):
        st = _status(ranks, rank)
        assert (st.rank, st.world_size, st.phase, st.step) == (rank, 2, "finished", steps)
        assert st.node == socket.gethostname() and st.run_id == "ranks"
        events = _events(ranks, rank)
        assert {e["rank"] for e in events} == {rank} and all(e["node"] == st.node for e in events)
        resumed = [e for e in events if e["kind"] == "checkpoint" and e["action"] == "resumed"]
        assert [e["step"] for e in resumed] == [stop_step]
        assert [e["step"] for e in events if e["kind"] == "step"] == list(range(1, steps + 1))
        exits = [e for e in events if e["kind"] == "exit"]
        assert [(e["code"], e["reason"]) for e in exits] == [(0, "stopped"), (0, "finished")]
        digests.append(exits[-1]["weights_sha256"])
        assert exits[-1]["all_reduce_s"] > 0
    assert digests[0] == digests[1]          # the replicas are identical across the ranks
    assert "sent by rank 0" in (ranks / rundir.rank_file(rundir.TRAIN_LOG, 1)).read_text()


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _step(run_dir, rank):
    try:
        return _status(run_dir, rank).step
    except (OSError, rundir.SchemaError):
        return -1


@pytest.mark.slow
@pytest.mark.parametrize("how, victim", [(signal.SIGKILL, 1), (signal.SIGKILL, 0), (signal.SIGSTOP, 1)],
                         ids=["kill-rank1", "kill-rank0", "hang-rank1"])
def test_losing_one_rank_makes_the_other_exit_naming_it(tmp_path, how, victim):
    peer_timeout = 10
    port = free_port()
    dirs = [tmp_path / "node0", tmp_path / "node1"]
    agents = []
    for node in (0, 1):
        cmd = [*TORCHRUN, "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(node),
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               *_train(dirs[node], "--drafter-devices", "cpu", "--steps", "100000", "--checkpoint-every", "100000",
                       "--peer-timeout", str(peer_timeout), "--dist-timeout", "120", *COMMON)]
        agents.append(subprocess.Popen(cmd, env=_env("kill"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True))
    try:
        _wait_for(lambda: min(_step(dirs[r], r) for r in (0, 1)) >= 3, 240, "both ranks at step 3")
        victim_pid = _status(dirs[victim], victim).pid
        os.kill(victim_pid, how)
        t_kill = time.monotonic()
        survivor = 1 - victim
        rc = agents[survivor].wait(peer_timeout + 30)
        took = time.monotonic() - t_kill
    finally:
        if how == signal.SIGSTOP:
            os.kill(victim_pid, signal.SIGKILL)
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait(30)
    assert rc != 0 and took < peer_timeout + 15, (rc, took)
    st = _status(dirs[survivor], survivor)
    assert st.phase == "failed" and st.rank == survivor
    # "rank 1 (node vm, pid 123) stopped responding: ...", or, when rank 0's node and the
    # store with it are gone, "the rendezvous store at ... is gone: rank 0's node ... is down"
    expect = f"rank {victim}"
    assert expect in st.last_error, st.last_error
    errors = [e for e in _events(dirs[survivor], survivor) if e["kind"] == "error"]
    assert errors and errors[-1]["fatal"] and expect in errors[-1]["message"]
    assert [e["code"] for e in _events(dirs[survivor], survivor) if e["kind"] == "exit"] == [1]


@pytest.mark.parametrize("env, words", [
    ({"RANK": "0"}, "RANK set but WORLD_SIZE, MASTER_ADDR, MASTER_PORT not: start the trainer with torchrun"),
    ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "must be integers"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "RANK 2 is outside 0..WORLD_SIZE-1"),
])
def test_a_broken_torchrun_environment_is_one_line_naming_the_variable(env, words):
    from dflash_train.distributed import World, WorldError

    with pytest.raises(WorldError, match=words.replace("(", r"\(")):
        World.from_env(env)
    assert not World.from_env({}).launched
    world = World.from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": "29500"})
    assert (world.rank, world.world_size, world.launched, world.is_leader) == (1, 2, True, False)
