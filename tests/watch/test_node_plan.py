"""`nodes` in a profile: the config's one-line errors, each node's plan (profile, run dir, argv,
rendezvous), and the rule that combines the nodes' verdicts into the run's (watch/node_plan.py, run/verdict/combine.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dflash_tui.cli import EXIT_FAILING, EXIT_HEALTHY, EXIT_UNDECIDED, EXIT_UNREACHABLE, exit_code_of
from dflash_tui.config import ConfigError, parse_config
from dflash_tui.contract.rundir import ExitRecord
from dflash_tui.run.verdict.combine import NodeReport, combine
from dflash_tui.watch.node_plan import plan_nodes
from dflash_tui.run.verdict.report import RunReport
from dflash_tui.run.verdict.checklist import Check, CheckState, Checklist, Verdict


def profile(**keys):
    keys = {k: v for k, v in {"nodes": ["gpu1", "gpu2"], "run_dir": "/runs/d", **keys}.items() if v is not None}
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items())
    return parse_config(f"[profile.p]\n{body}\n", "c.toml").profiles["p"]


def test_a_nodes_profile_loads():
    p = profile(user="root", port=2222, container="pct:200", master_port=29611)
    assert p.is_multinode and not p.is_local and p.host is None
    assert p.nodes == ("gpu1", "gpu2") and p.master_port == 29611 and p.python == "python3"
    assert p.where() == "nodes gpu1,gpu2 · pct:200"


@pytest.mark.parametrize("keys, message", [
    ({"host": "gpu1"}, "host and nodes are both set"),
    ({"nodes": []}, "nodes = [] is empty"),
    ({"nodes": ["gpu1", ""]}, "nodes entry '' is not a host name"),
    ({"nodes": ["gpu1", "root@gpu2"]}, "nodes entry 'root@gpu2' is not a host name"),
    ({"nodes": ["gpu1", "gpu2", "gpu1"]}, "nodes lists 'gpu1' twice"),
    ({"nodes": ["gpu1", 2]}, "2 is not a string"),
    ({"nodes": "gpu1"}, "nodes = 'gpu1' is not a list of host names"),
    ({"master_port": 70000}, "master_port = 70000 is not a port number"),
    ({"master_addr": " 10.0.0.1"}, "master_addr = ' 10.0.0.1' is empty or has surrounding spaces"),
    ({"run_dir": "/runs/{rank}"}, "the only placeholder is {node}"),
    # The keys of a run on several nodes, in a profile without nodes:
    ({"nodes": None, "host": "h", "master_port": 29500}, "master_port is set but nodes is not"),
    ({"nodes": None, "host": "h", "run_dir": "/runs/{node}"}, "run_dir holds {node} but nodes is not set"),
])
def test_bad_nodes_are_one_line_errors(keys, message):
    with pytest.raises(ConfigError) as exc:
        profile(**keys)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith("c.toml: [profile.p]: ")


def test_run_dir_is_required_with_nodes():
    with pytest.raises(ConfigError, match="run_dir is missing"):
        parse_config('[profile.p]\nnodes = ["a", "b"]\n', "c.toml")


def test_each_node_gets_its_rank_run_dir_and_rendezvous(tmp_path):
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host gpu1\n  HostName 10.1.2.3\n  Port 2200\n")
    p = profile(nodes=["gpu1", "localhost", "gpu3"], run_dir="/runs/{node}/d", user="root", port=22,
                identity_file="/k", ssh_config=str(ssh_config), command=["/venv/bin/python", "prog.py"],
                train_args=["--steps=3"], master_port=29611)
    plans = plan_nodes(p)
    assert [(x.node, x.rank, x.profile.run_dir) for x in plans] == [
        ("gpu1", 0, "/runs/gpu1/d"), ("localhost", 1, "/runs/localhost/d"), ("gpu3", 2, "/runs/gpu3/d")]
    gpu1, here, gpu3 = plans
    assert gpu1.profile.host == "gpu1" and gpu1.profile.user == "root" and gpu1.profile.nodes == ()
    # This machine: no SSH settings at all (they would make no sense without a host).
    assert here.profile.host is None and here.profile.user is None and here.profile.identity_file is None
    # The rendezvous is the first node's HostName as this machine's ssh config resolves it.
    env = dict(a.split("=", 1) for a in gpu3.argv[1:] if "=" in a and not a.startswith("-"))
    assert gpu3.argv[0] == "env" and gpu3.argv[-3:] == ("/venv/bin/python", "prog.py", "--steps=3")
    assert env["MASTER_ADDR"] == "10.1.2.3" and env["MASTER_PORT"] == "29611"
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["DFLASH_NODE"]) == ("2", "3", "0", "gpu3")
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]) == ("3", "2", "10.1.2.3")
    loop = tmp_path / "loop_config"
    loop.write_text("Host gpu2\n  HostName 127.0.0.1\n")
    local_first = profile(nodes=["localhost", "gpu2"], command=["x"], ssh_config=str(loop))
    assert plan_nodes(local_first)[1].argv.count("MASTER_ADDR=127.0.0.1") == 1
    # This machine first, a node elsewhere: 127.0.0.1 would be the other node itself.
    with pytest.raises(ConfigError, match="the first node is localhost and gpu2 cannot reach it at 127.0.0.1; set master_addr"):
        plan_nodes(profile(nodes=["localhost", "gpu2"], command=["x"], ssh_config=str(ssh_config)))
    assert "MASTER_ADDR=10.9.9.9" in plan_nodes(profile(command=["x"], master_addr="10.9.9.9"))[1].argv


def test_the_bundled_trainer_gets_what_torchrun_gives_a_worker():
    p = profile(nodes=["gpu1", "gpu2"], python="/venv/bin/python", run_dir="/runs/{node}", train_args=["--steps", "5"])
    argv = plan_nodes(p)[1].argv
    i = argv.index("/venv/bin/python")
    assert argv[i:] == ("/venv/bin/python", "-m", "dflash_train", "--run-dir", "/runs/gpu2", "--steps", "5")
    env = dict(a.split("=", 1) for a in argv[1:i])
    assert argv[0] == "env" and {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")} == {
        "MASTER_ADDR": "gpu1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0"}


# -- the combination ----------------------------------------------------------------------------

def node(name: str, rank: int, verdict: Verdict, summary: str = "", *, end: float | None = None,
         code: int | None = None, sig: int | None = None, connected: bool = True, since: float = 100.0) -> NodeReport:
    checks = [Check("process", "Process", CheckState.FAIL if verdict.failing else CheckState.OK, "", "", since)]
    ex = ExitRecord(run_id="r", exit_code=code, signal=sig, end_time=end) if end is not None else None
    return NodeReport(name, rank, RunReport(time=200.0, profile="p", target_label=name, run_dir="/d",
                                            checklist=Checklist(verdict, checks, summary), exit=ex,
                                            connected=connected, error=None if connected else "timed out"))


def test_any_failing_node_fails_the_run_and_is_named():
    run = combine([node("gpu1", 0, Verdict.RUNNING, "step 9"), node("gpu2", 1, Verdict.STALLED, "last heartbeat 70 s ago")])
    assert run.verdict is Verdict.STALLED
    assert run.summary == "node gpu2: STALLED last heartbeat 70 s ago"
    assert exit_code_of(run.report("p", "nodes", "/d")) == EXIT_FAILING
    cl = run.checklist()
    assert [(c.id, c.state) for c in cl.checks if c.id.startswith("node:")] == [
        ("node:gpu1", CheckState.OK), ("node:gpu2", CheckState.FAIL)]
    assert "gpu2 · Process" in [c.label for c in cl.checks]


def test_the_node_that_failed_first_is_named_first():
    # gpu1 exited with a code a second after gpu2 was killed: gpu2 is the cause.
    killed = node("gpu2", 1, Verdict.CRASHED, "killed by SIGKILL", end=1000.0, sig=9)
    reacted = node("gpu1", 0, Verdict.CRASHED, "exit code 1: RuntimeError: peer closed", end=1001.0, code=1)
    run = combine([reacted, killed])
    assert run.summary == ("node gpu2: CRASHED killed by SIGKILL; "
                           "also node gpu1: CRASHED exit code 1: RuntimeError: peer closed")
    # The same second: a kill before an exit code; and a never-started node before a later crash.
    same = node("gpu1", 0, Verdict.CRASHED, "exit code 1", end=1000.4, code=1)
    assert combine([same, killed]).summary.startswith("node gpu2: CRASHED killed by SIGKILL")
    never = node("gpu3", 2, Verdict.NEVER_STARTED, "no launch.json", since=50.0)
    assert combine([reacted, killed, never]).verdict is Verdict.NEVER_STARTED


def test_running_and_finished_need_every_node():
    assert combine([node("a", 0, Verdict.RUNNING), node("b", 1, Verdict.RUNNING)]).verdict is Verdict.RUNNING
    both = combine([node("a", 0, Verdict.FINISHED), node("b", 1, Verdict.FINISHED)])
    assert both.verdict is Verdict.FINISHED and exit_code_of(both.report("p", "nodes", "/d")) == EXIT_HEALTHY
    half = combine([node("a", 0, Verdict.RUNNING), node("b", 1, Verdict.STARTING, "waiting for the first heartbeat")])
    assert half.verdict is Verdict.STARTING and exit_code_of(half.report("p", "nodes", "/d")) == EXIT_UNDECIDED
    assert half.summary == "waiting for node b: STARTING waiting for the first heartbeat"
    ending = combine([node("a", 0, Verdict.FINISHED), node("b", 1, Verdict.RUNNING, "step 40")])
    assert ending.verdict is Verdict.STARTING and ending.summary == "ended on a; still going: node b: RUNNING step 40"
    stopped = combine([node("a", 0, Verdict.STOPPED), node("b", 1, Verdict.FINISHED)])
    assert stopped.verdict is Verdict.STOPPED and exit_code_of(stopped.report("p", "nodes", "/d")) == EXIT_HEALTHY
    assert stopped.summary == "2 nodes stopped: a, b"
    assert combine([node("a", 0, Verdict.NO_RUN), node("b", 1, Verdict.NO_RUN)]).verdict is Verdict.NO_RUN
    # A stop under way on one node, ended on the other: the run is stopping (exit 4, no verdict yet).
    stopping = combine([node("a", 0, Verdict.STOPPED), node("b", 1, Verdict.STOPPING, "stopping: SIGTERM sent")])
    assert stopping.verdict is Verdict.STOPPING and stopping.summary == "node b: STOPPING stopping: SIGTERM sent"
    assert exit_code_of(stopping.report("p", "nodes", "/d")) == EXIT_UNDECIDED


def test_an_unreachable_node_is_exit_3_unless_the_run_already_failed():
    run = combine([node("a", 0, Verdict.RUNNING), node("b", 1, Verdict.RUNNING, connected=False)])
    assert run.unreachable == ["b"] and exit_code_of(run.report("p", "nodes", "/d")) == EXIT_UNREACHABLE
    assert run.checklist().checks[-2].state is CheckState.WARN and "unreachable: timed out" in run.checklist().checks[-2].cause
    failed = combine([node("a", 0, Verdict.KILLED, "pid gone"), node("b", 1, Verdict.RUNNING, connected=False)])
    assert exit_code_of(failed.report("p", "nodes", "/d")) == EXIT_FAILING


def test_cli_with_an_unreachable_node_exits_3_and_starts_no_node(tmp_path):
    cfg = tmp_path / "c.toml"
    # Port 1 on loopback: a real connection refused, at once.
    cfg.write_text(f'[profile.u]\nnodes = ["localhost", "127.0.0.1"]\nport = 1\npython = {json.dumps(sys.executable)}\n'
                   f'run_dir = {json.dumps(str(tmp_path / "run-{node}"))}\ncommand = ["sleep", "60"]\n')
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    for mode in ("--check", "--launch"):
        res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), mode, "--json"],
                             capture_output=True, text=True, timeout=120, env=env)
        doc = json.loads(res.stdout)
        assert res.returncode == EXIT_UNREACHABLE == doc["exit_code"], (mode, doc)
        assert doc["unreachable"] == ["127.0.0.1"] and "connection refused" in doc["nodes"][1]["error"]
        assert doc["nodes"][0]["connected"] is True
    assert not (tmp_path / "run-localhost" / "launch.json").exists()
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--check"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == EXIT_UNREACHABLE and "node 127.0.0.1 (rank 1)" in res.stdout and "UNREACHABLE" in res.stdout
