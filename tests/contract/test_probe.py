"""The run probe in real processes: plain Python, a user's own sitecustomize, os.fork, torchrun
with two gloo workers, a torch.compile'd function, the one-line API, and a probe that fails."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import BEAT_HISTORY, EVENTS_JSONL, PROBE_DIR, PROBE_ERRORS_LOG, parse_events

from tests.support.probe import PYTHON, probe_env, reports, thread, wait_reports
from tests.support.signals import default_sigint

pytestmark = pytest.mark.timeout(240)

PROGRAMS = Path(__file__).parents[1] / "programs"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


PLAIN = """\
    import sys, threading, time

    def wait_for_work():
        while True:
            time.sleep(0.05)

    threading.Thread(target=wait_for_work, name="loader", daemon=True).start()
    for i in range(int(sys.argv[1])):
        print(f"step {i}")            # never flushed: block-buffered into a pipe
        time.sleep(0.1)
"""


def test_plain_program_reports_threads_and_frames(tmp_path):
    prog = write(tmp_path / "prog.py", PLAIN)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog), "60"], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    try:
        got = wait_reports(run, lambda rs: any(thread(r, "loader") and thread(r, "loader").frames for r in rs))
        (r,) = got
        assert r.pid == proc.pid and r.ppid == os.getpid() and r.run_id == "run-probe-test"
        assert r.argv == [str(prog), "60"] and r.rank is None and not r.ended and r.node == os.uname().nodename
        loader, main = thread(r, "loader"), thread(r, "MainThread")
        assert loader.daemon and loader.frames[0].startswith(f"{prog}:5 wait_for_work"), loader.frames
        assert main.frames[0].startswith(f"{prog}:10 <module>"), main.frames
        assert "dflash-probe" not in [t.name for t in r.threads]   # the probe leaves itself out
        # A second later it is rewritten: a heartbeat, not a snapshot.
        wait_reports(run, lambda rs: rs and rs[0].seq > r.seq + 1 and rs[0].time > r.time)
    finally:
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.splitlines() == [f"step {i}" for i in range(60)]
    (last,) = reports(run)
    assert last.ended and last.errors == 0 and last.probe_cpu_s < 0.01 * (last.time - last.start_time) + 0.05
    assert not (run / PROBE_DIR / PROBE_ERRORS_LOG).exists()
    assert not list((run / PROBE_DIR).glob(".*.tmp"))            # no temp file left behind


def test_a_process_on_a_node_the_launcher_named_reports_that_name(tmp_path):
    """$DFLASH_NODE (Slurm's node name in a job's task, an SSH node's): what a scheduler is told
    to --exclude, which need not be the host name."""
    prog = write(tmp_path / "prog.py", PLAIN)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog), "20"], env={**probe_env(run), "DFLASH_NODE": "n7"},
                            stdout=subprocess.DEVNULL)
    try:
        (r,) = wait_reports(run, lambda rs: len(rs) == 1)
        assert r.node == "n7"
    finally:
        proc.communicate(timeout=60)



STANDING = """\
    import threading, time

    def spin():                     # one function, its line changing from beat to beat
        while True:
            time.sleep(0.01)
            time.sleep(0.01)

    def phase_one():
        time.sleep(2.5)

    def phase_two():
        time.sleep(120)

    threading.Thread(target=spin, name="spinner", daemon=True).start()
    phase_one()
    print("two", time.time(), flush=True)
    phase_two()
"""


def test_each_thread_says_since_when_its_stack_stands_where_it_is(tmp_path):
    prog = write(tmp_path / "standing.py", STANDING)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog)], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    try:
        moved_at = float(proc.stdout.readline().split()[1])
        (first,) = wait_reports(run, lambda rs: rs and "phase_two" in thread(rs[0], "MainThread").frames[0])
        (later,) = wait_reports(run, lambda rs: rs and rs[0].seq >= first.seq + 2)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    main, main_later = thread(first, "MainThread"), thread(later, "MainThread")
    # Seen there first at the probe's first beat after the move, and the same ever since.
    assert moved_at <= main.stack_since <= first.time and main.stack_since <= moved_at + 3, (moved_at, main)
    assert main_later.stack_since == main.stack_since, main_later
    # A loop inside one function stands in one place, whatever line each beat catches.
    spin, spin_later = thread(first, "spinner"), thread(later, "spinner")
    assert spin_later.stack_since == spin.stack_since < moved_at, (spin, spin_later)
    assert first.start_time <= spin.stack_since

def test_each_report_carries_the_stacks_of_its_recent_beats(tmp_path):
    """A reader that reads a report only every few seconds (a run of many ranks, read in turns)
    still sees each beat's stacks: the report holds its last beats, consecutive, the newest
    its own; daemon threads left out."""
    prog = write(tmp_path / "standing.py", STANDING)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog)], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        (first,) = wait_reports(run, lambda rs: rs and "phase_two" in thread(rs[0], "MainThread").frames[0])
        (later,) = wait_reports(run, lambda rs: rs and rs[0].seq >= first.seq + 2)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    samples = later.beat_samples()
    assert 4 <= len(samples) <= BEAT_HISTORY and [seq for seq, _ in samples] == list(
        range(later.seq - len(samples) + 1, later.seq + 1)), samples
    places = [[st.frames[0].split(" ")[-1] for st in stacks] for _, stacks in samples]
    assert all(len(p) == 1 for p in places), places        # the main thread; not the spinner
    flat = [p[0] for p in places]
    assert flat[-1] == "phase_two" and "phase_one" in flat, flat
    assert flat == sorted(flat), flat                      # phase_one's beats, then phase_two's
    assert later.beat_stacks[later.beats[-1][0]].frames == thread(later, "MainThread").frames
    assert len(later.beat_stacks) <= 3


def test_program_with_its_own_sitecustomize_still_runs_it(tmp_path):
    user_site = tmp_path / "user_site"
    write(user_site / "sitecustomize.py", """\
        import os, sys
        sys.stderr.write("user sitecustomize ran as %s\\n" % __name__)
        os.environ["USER_SITE_MARK"] = "1"
    """)
    prog = write(tmp_path / "prog.py", """\
        import os, sys, time
        print("mark", os.environ.get("USER_SITE_MARK"), sys.modules["sitecustomize"].__file__)
        time.sleep(2.5)
    """)
    run = tmp_path / "run"
    res = subprocess.run([PYTHON, str(prog)], env=probe_env(run, extra_path=str(user_site)),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "user sitecustomize ran as sitecustomize\n"
    assert res.stdout == f"mark 1 {user_site / 'sitecustomize.py'}\n"
    (r,) = reports(run)
    assert r.ended and r.seq >= 2 and r.errors == 0
    # Outside a run (no DFLASH_RUN_DIR) the probe stays off and theirs still runs.
    env = probe_env(tmp_path / "other", extra_path=str(user_site))
    del env["DFLASH_RUN_DIR"]
    res = subprocess.run([PYTHON, str(prog)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == "user sitecustomize ran as sitecustomize\n"
    assert reports(tmp_path / "other") == []


def test_forked_child_restarts_its_heartbeat(tmp_path):
    prog = write(tmp_path / "fork.py", """\
        import os, sys, time
        time.sleep(0.5)
        pid = os.fork()
        if pid == 0:
            time.sleep(4)
            os._exit(0)
        print("child", pid, flush=True)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status) + 5)
    """)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog)], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline().split()[1])
    got = wait_reports(run, lambda rs: any(r.pid == child and r.seq >= 2 for r in rs))
    kid = next(r for r in got if r.pid == child)
    assert kid.ppid == proc.pid and thread(kid, "MainThread").frames[0].startswith(f"{prog}:5 <module>")
    parent = next(r for r in got if r.pid == proc.pid)
    assert parent.seq >= 1 and thread(parent, "MainThread").frames[0].startswith(f"{prog}:8 <module>")
    assert proc.wait(timeout=60) == 5
    assert next(r for r in reports(run) if r.pid == proc.pid).ended


def test_a_parent_that_forks_more_often_than_it_beats_still_beats(tmp_path):
    # A DataLoader forks its workers every epoch, often several times a second: each fork must
    # not put the parent's next beat a whole interval further away.
    prog = write(tmp_path / "forks.py", """\
        import os, time
        end = time.monotonic() + 6
        while time.monotonic() < end:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            time.sleep(0.3)
    """)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog)], env=probe_env(run))
    assert proc.wait(timeout=60) == 0
    parent = [r for r in reports(run) if r.pid == proc.pid]
    # About one beat a second for 6 s, and the last at exit.
    assert len(parent) == 1 and parent[0].ended and parent[0].seq >= 5, [(r.pid, r.seq, r.ended) for r in reports(run)]



def test_a_program_s_objects_are_freed_when_it_drops_them_not_left_to_the_cyclic_gc(tmp_path):
    # The frames a beat reads must not outlive the beat: held in a cycle (the probe's own frame
    # among them), a function's locals outlive its return until the cyclic GC runs, at any
    # allocation (inside a fork, in a forked child). A DataLoader iterator left at `break` then
    # shuts its workers down from the GC, after its queues' finalizers stopped their feeder
    # threads: its workers never get the word to stop, and the loop hangs 10 s joining them.
    prog = write(tmp_path / "frees.py", """\
        import gc, time, weakref
        gc.disable()                      # only reference counting frees, as without the probe

        class Held:
            pass

        def work():
            held = Held()
            end = time.monotonic() + 2.5  # the probe beats (and reads this frame) meanwhile
            while time.monotonic() < end:
                time.sleep(0.01)
            return weakref.ref(held)

        ref = work()
        end = time.monotonic() + 5        # a beat in progress at the return lets go at its end
        while ref() is not None and time.monotonic() < end:
            time.sleep(0.05)
        print("held" if ref() is not None else "freed", flush=True)
    """)
    run = tmp_path / "run"
    out = subprocess.run([PYTHON, str(prog)], env=probe_env(run), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "freed", out
    # It did beat while `work` ran: its frame was read.
    assert any(r.seq >= 2 for r in reports(run)), reports(run)

COMPILE = """\
    import sys, threading, time
    import torch

    def slow_backend(gm, example_inputs):
        time.sleep(float(sys.argv[1]))     # a long compile, as inductor's are
        return gm.forward

    @torch.compile(backend=slow_backend)
    def f(x, k):
        y = torch.sin(x) * k
        torch._dynamo.graph_break()
        return y + 1

    def compile_then_idle():
        for k in (1, 2):                   # k=2: a recompile of the same frame
            f(torch.randn(8), k)
        print("compiled", flush=True)
        time.sleep(120)

    threading.Thread(target=compile_then_idle, name="compiler", daemon=True).start()
    time.sleep(120)
"""


STILL = """\
    import time

    def train():                    # one function: its loop, then a wait at another line
        end = time.time() + 2.5
        while time.time() < end:
            time.sleep(0.01)
        print("waits", time.time(), flush=True)
        time.sleep(120)

    train()
"""


def test_each_thread_says_since_when_its_frames_stand_still(tmp_path):
    prog = write(tmp_path / "still.py", STILL)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog)], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    try:
        waits_at = float(proc.stdout.readline().split()[1])
        (r,) = wait_reports(run, lambda rs: rs and rs[0].time > waits_at + 1.5)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    main = thread(r, "MainThread")
    assert main.frames[0].startswith(f"{prog}:8 train"), main.frames
    # In train since the start; at its line since the loop ended, seen at the next beat.
    assert main.stack_since < waits_at - 2, main
    assert waits_at <= main.frames_since <= waits_at + 1.5, (waits_at, main)


def test_the_compiler_s_files_run_by_an_import_are_no_compile(tmp_path):
    """A module of the compiler's files whose top level runs (`import lightning` imports
    torch._dynamo): its `<module>` frame is no compile. Its top level sleeps here, as a slow
    import would, so a beat catches the thread in it."""
    write(tmp_path / "lib" / "torch" / "_dynamo" / "convert_frame.py", """\
        import time
        def helper():
            time.sleep(120)
        helper()
    """)
    prog = write(tmp_path / "imports.py", f"""\
        import importlib.util
        spec = importlib.util.spec_from_file_location("cf", {str(tmp_path / "lib" / "torch" / "_dynamo" /
                                                               "convert_frame.py")!r})
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    """)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog)], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    try:
        (r,) = wait_reports(run, lambda rs: rs and "helper" in thread(rs[0], "MainThread").frames[0])
    finally:
        proc.kill()
        proc.wait(timeout=30)
    main = thread(r, "MainThread")
    assert main.compile_state == "", main


def test_torch_compile_state_per_thread(tmp_path):
    prog = write(tmp_path / "compile.py", COMPILE)
    run = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, str(prog), "1.5"], env=probe_env(run), stdout=subprocess.PIPE, text=True)
    try:
        def in_backend(rs):   # caught inside the (slow) compile: its frames say where
            t = rs and thread(rs[0], "compiler")
            return bool(t) and t.compile_state == "compiling" and any("slow_backend" in f for f in t.frames)
        (r,) = wait_reports(run, in_backend, timeout=120)
        assert r.torch.startswith(torch_version())
        assert proc.stdout.readline() == "compiled\n"

        def compiled(rs):
            t = rs and thread(rs[0], "compiler")
            return bool(t) and t.compile_state == "compiled" and t.recompiles >= 1
        (r,) = wait_reports(run, compiled, timeout=60)
        t = thread(r, "compiler")
        assert t.graphs >= 2 and t.compile_seconds >= 1.5 and t.compiling_for_s is None, t
        assert r.graphs == t.graphs and r.recompiles == t.recompiles and r.graph_breaks >= 1
        assert r.unique_graphs >= 2 and r.errors == 0
        assert thread(r, "MainThread").compile_state == ""
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def torch_version() -> str:
    out = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, timeout=120)
    return out.stdout.strip()


def test_torchrun_two_gloo_ranks_and_their_threads(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([TORCHRUN, "--standalone", "--nproc_per_node", "2", str(PROGRAMS / "dist_gloo.py"), "30"],
                            env=probe_env(run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def both_ranks_looping(rs):
            return {r.rank for r in rs if (t := thread(r, "allreduce-loop")) and t.frames} == {0, 1}
        got = wait_reports(run, both_ranks_looping, timeout=150)
        agent = next(r for r in got if r.pid == proc.pid)
        assert agent.rank is None and agent.argv[0].endswith("torchrun")
        workers = sorted((r for r in got if r.rank is not None), key=lambda r: r.rank)
        assert [(w.rank, w.local_rank, w.world_size) for w in workers] == [(0, 0, 2), (1, 1, 2)]
        for w in workers:
            assert w.ppid == agent.pid and w.argv == [str(PROGRAMS / "dist_gloo.py"), "30"]
            loop = thread(w, "allreduce-loop")
            assert any("dist_gloo.py" in f and "allreduce_loop" in f for f in loop.frames), loop.frames
            assert w.torch and w.errors == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    assert "rank 0 step" in out and "rank 1 step" in out


def test_accelerate_launch_launcher_and_worker_report(tmp_path, monkeypatch):
    pytest.importorskip("accelerate")   # the [test] extra; a bare environment may lack it
    run = tmp_path / "run"
    env = probe_env(run)
    env["HOME"] = str(tmp_path)         # no accelerate config of the user's is read
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    proc = subprocess.Popen([accelerate, "launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
                             "--mixed_precision", "no", "--dynamo_backend", "no", str(PROGRAMS / "accel_cpu.py"), "30"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def training(rs):
            return any((m := thread(r, "MainThread")) and any("accel_cpu.py" in f for f in m.frames) for r in rs)
        got = wait_reports(run, training, timeout=150)
        launcher = next(r for r in got if r.pid == proc.pid)
        worker = next(r for r in got if r.ppid == proc.pid)
        assert launcher.argv[:2] == [accelerate, "launch"] and worker.argv == [str(PROGRAMS / "accel_cpu.py"), "30"]
        assert worker.torch and worker.errors == 0 and launcher.errors == 0
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert "step 1 loss" in out


def test_one_line_api_steps_land_as_typed_step_events(tmp_path):
    prog = write(tmp_path / "log.py", """\
        import os, threading
        import torch
        import dflash_probe

        def steps(offset):
            for s in range(offset, offset + 50):
                assert dflash_probe.log(step=s, loss=torch.tensor(2.5), lr=1e-4, tokens_per_s=100.0 + s)

        threads = [threading.Thread(target=steps, args=(o,)) for o in (0, 100)]
        for t in threads: t.start()
        pid = os.fork()
        if pid == 0:
            steps(1000)
            os._exit(0)
        for t in threads: t.join()
        os.waitpid(pid, 0)
        print(dflash_probe.log(step=-1), dflash_probe.log(step=5000, loss=float("nan")))
    """)
    run = tmp_path / "run"
    env = probe_env(run)
    env["RANK"] = "3"
    res = subprocess.run([PYTHON, str(prog)], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "False True\n"            # step -1 is refused (and noted), NaN is kept as null
    lines = (run / EVENTS_JSONL).read_text().splitlines()
    batch = parse_events(lines)
    assert batch.skipped == 0 and len(batch.events) == 151
    steps = [e for e in batch.events if e["kind"] == "step"]
    assert sorted(e["step"] for e in steps) == sorted([*range(0, 50), *range(100, 150), *range(1000, 1050), 5000])
    assert {e["rank"] for e in steps} == {3} and len({e["pid"] for e in steps}) == 2
    assert {e["node"] for e in steps} == {os.uname().nodename}
    assert all(e["loss"] == 2.5 and e["lr"] == 1e-4 for e in steps if e["step"] != 5000)
    nan = next(e for e in steps if e["step"] == 5000)
    assert nan["loss"] is None and nan["nonfinite"] == ["loss"]
    assert "log: SchemaError" in (run / PROBE_DIR / PROBE_ERRORS_LOG).read_text()
    (parent,) = [r for r in reports(run) if r.ended]      # the forked child left by os._exit
    assert parent.step == 5000 and parent.step_time == nan["time"]


OUTPUT = """\
    import signal, sys, time
    print("out line", signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGCHLD))
    sys.stderr.write("err line\\n")
    if sys.argv[1:] == ["sleep"]:
        print("sleeping", flush=True)
        time.sleep(60)
    time.sleep(1.2)
    sys.exit(3)
"""


def _run(prog: Path, env: dict[str, str]) -> tuple[int, str, str]:
    res = subprocess.run([PYTHON, str(prog)], env=env, capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout, res.stderr


def test_probe_failures_leave_output_exit_code_and_signals_alone(tmp_path):
    prog = write(tmp_path / "out.py", OUTPUT)
    bare = dict(os.environ)
    bare.pop("PYTHONPATH", None)
    want = _run(prog, bare)
    assert want[0] == 3 and want[2] == "err line\n"

    assert _run(prog, probe_env(tmp_path / "ok")) == want            # a working probe
    assert reports(tmp_path / "ok")[0].ended

    # The probe dir cannot be written (it is a file where the directory should be).
    broken = tmp_path / "broken"
    env = probe_env(tmp_path / "installed")
    env["DFLASH_RUN_DIR"] = str(broken)
    broken.mkdir()
    (broken / PROBE_DIR).write_text("not a directory")
    assert _run(prog, env) == want

    # The probe's own files are damaged: its import fails inside sitecustomize.
    damaged = tmp_path / "damaged"
    env = probe_env(damaged)
    (damaged / PROBE_DIR / "dflash_rundir.py").write_text("this is not python (\n")
    assert _run(prog, env) == want
    assert "sitecustomize start: SyntaxError" in (damaged / PROBE_DIR / PROBE_ERRORS_LOG).read_text()

    # SIGTERM still kills with the default action; SIGINT is still KeyboardInterrupt (then dies of it).
    for sig, rc in ((signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)):
        results = []
        for env in (bare, probe_env(tmp_path / f"sig{sig}")):
            p = subprocess.Popen([PYTHON, str(prog), "sleep"], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
            assert p.stdout.readline().startswith("out line") and p.stdout.readline() == "sleeping\n"
            time.sleep(0.3)
            p.send_signal(sig)
            _, err = p.communicate(timeout=30)
            results.append((p.returncode, err.splitlines()[-1] if err.strip() else ""))
        assert results[0] == results[1] and results[0][0] == rc, results


def _other_pythons() -> list[str]:
    """Interpreters of other versions on this machine that really run (a pyenv shim may not)."""
    found = []
    for v in ("2.7", "3.6", "3.9", "3.10", "3.12", "3.13"):
        path = shutil.which(f"python{v}")
        if path and subprocess.run([path, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
            found.append(path)
    return found


OTHER_PYTHONS = _other_pythons()


@pytest.mark.parametrize("python", OTHER_PYTHONS or [pytest.param(None, marks=pytest.mark.skip("no other pythons"))])
def test_any_python_version_runs_untouched_and_chains(tmp_path, python):
    """Old Pythons (< 3.10) get no probe but still their own sitecustomize; no stray output."""
    user_site = write(tmp_path / "user_site" / "sitecustomize.py", 'import sys\nsys.stderr.write("user site\\n")\n').parent
    prog = write(tmp_path / "fork.py", """\
        import os, sys, time
        time.sleep(1.5)
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        print("ok")
    """)
    run = tmp_path / "run"
    res = subprocess.run([python, "-W", "error::DeprecationWarning", str(prog)],
                         env=probe_env(run, extra_path=str(user_site)), capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (0, "ok\n", "user site\n")
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 10))"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    got = reports(run)
    assert len(got) == (1 if version == "True" else 0) and all(r.ended for r in got), got   # forked children too short to report
    assert not (run / PROBE_DIR / PROBE_ERRORS_LOG).exists()
