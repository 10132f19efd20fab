"""The verdict table as a pure function, row by row, plus `since` tracking and tracebacks.

Evidence here is built from the real schema dataclasses (what observe.gather returns); the
end-to-end scenarios that produce each row for real are in test_run_verdicts_*.py.
"""

from __future__ import annotations

from dflash_tui.backends import launcher_for
from dflash_tui.config_file import parse_config
from dflash_tui.config import Profile
from dflash_tui.contract.rundir import ExitRecord, LaunchRecord, StopRecord, ThreadStatus, TrainStatus

from dflash_tui.remote.ops import FileStat, PidInfo
from dflash_tui.run.launch.launcher import Launcher
from dflash_tui.run.attempts import LaunchAttempt
from dflash_tui.run.verdict.health import HealthTracker, Limits, evaluate
from dflash_tui.run.evidence.observe import Evidence
from dflash_tui.run.evidence.tracebacks import exception_line, last_traceback
from dflash_tui.run.verdict.checklist import CheckState, Verdict

NOW = 1_800_000_000.0
RUN = "/r"
LIM = Limits(stall_after_s=60, compile_stall_after_s=600, launch_deadline_s=1.0)


def files(*names: str, **kw) -> dict[str, FileStat]:
    return {n: FileStat(f"{RUN}/{n}", True, size=10, mtime=NOW - 1, **kw) for n in names}


# The wrapper as the launch starts it (`sh RUN/launch.sh RUN_ID`, in the run dir).
WRAPPER_ARGV = ("sh", f"{RUN}/launch.sh", "r1")


def launch(**kw) -> LaunchRecord:
    base = dict(run_id="r1", pid=100, pgid=100, start_ticks=5, start_time=NOW - 300, argv=["x"],
                wrapper_argv=list(WRAPPER_ARGV))
    base.update(kw)
    return LaunchRecord(**base)


def alive(**kw) -> PidInfo:
    kw.setdefault("cmdline", WRAPPER_ARGV)
    kw.setdefault("in_run_dir", True)
    return PidInfo(100, True, start_ticks=kw.pop("start_ticks", 5), state=kw.pop("state", "S"), **kw)


def status(**kw) -> TrainStatus:
    base = dict(run_id="r1", pid=101, time=NOW - 1, phase="training", step=50, total_steps=100,
                heartbeat_time=NOW - 1,
                threads=[ThreadStatus("drafter0", "drafter", "cuda:5", "compiled", step=50,
                                      last_step_time=NOW - 1, last_beat_time=NOW - 1)])
    base.update(kw)
    return TrainStatus(**base)


def ev(**kw) -> Evidence:
    base = dict(now=NOW, run_dir=RUN)
    base.update(kw)
    return Evidence(**base)


def attempt(**kw) -> LaunchAttempt:
    base = dict(run_id="r1", run_dir=RUN, target="t", local_time=NOW, target_time=NOW - 2,
                exit_status=0, stdout="", stderr="", pid=None, via=None)
    base.update(kw)
    return LaunchAttempt(**base)


def by_id(cl):
    return {c.id: c for c in cl.checks}


def test_no_run():
    cl = evaluate(ev(), LIM)
    assert cl.verdict is Verdict.NO_RUN


def test_never_started_after_deadline_names_transport_result():
    cl = evaluate(ev(attempt=attempt(stderr="")), LIM)
    assert cl.verdict is Verdict.NEVER_STARTED
    assert "ran nothing" in cl.summary and "exit status 0" in cl.summary and "no pid" in cl.summary
    assert by_id(cl)["launch_cmd"].state is CheckState.FAIL


def test_waiting_before_the_deadline_is_pending_not_a_verdict():
    e = ev(attempt=attempt(target_time=NOW - 0.3, pid=7, via="setsid", own_session=True),
           files=files("launch.sh"), wrapper_run_id="r1", detached_proc=PidInfo(7, True, state="S"))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STARTING and by_id(cl)["launch_json"].state is CheckState.PENDING


def test_final_evidence_needs_no_deadline():
    # The detach shell printed nothing: it never ran, nothing will appear later.
    cl = evaluate(ev(attempt=attempt(target_time=NOW - 0.1), files=files("launch.sh"), wrapper_run_id="r1"), LIM)
    assert cl.verdict is Verdict.NEVER_STARTED
    # The detached process already ended without launch.json.
    e = ev(attempt=attempt(target_time=NOW - 0.1, pid=7, via="setsid"), files=files("launch.sh"),
           wrapper_run_id="r1", detached_proc=PidInfo(7, False))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.NEVER_STARTED and "pid 7) exited without writing launch.json" in cl.summary


def test_never_started_shows_launch_out():
    e = ev(attempt=attempt(pid=7, via="setsid"), files=files("launch.sh", "launch.out"), wrapper_run_id="r1",
           launch_out="setsid: failed to execute sh: No such file or directory\n")
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.NEVER_STARTED and "failed to execute sh" in cl.summary


def test_log_missing_with_and_without_why():
    cl = evaluate(ev(files=files("launch.sh", "launch.json"), launch=launch(), proc=alive()), LIM)
    assert cl.verdict is Verdict.LOG_MISSING and "/r/train.log does not exist" in cl.summary
    cl = evaluate(ev(files=files("launch.sh", "launch.json"), proc=alive(),
                     launch=launch(log_error="./launch.sh: 32: cannot create /r/train.log: Permission denied")), LIM)
    assert cl.verdict is Verdict.LOG_MISSING and cl.summary == "cannot create /r/train.log: Permission denied"


def test_finished_crashed_killed():
    fs = files("launch.sh", "launch.json", "train.log", "exit.json")
    cl = evaluate(ev(files=fs, launch=launch(), proc=PidInfo(100, False),
                     exit=ExitRecord("r1", 0, None, NOW - 5)), LIM)
    assert cl.verdict is Verdict.FINISHED
    tb = "Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad shape\n"
    cl = evaluate(ev(files=fs, launch=launch(), proc=PidInfo(100, False), last_traceback=last_traceback(tb),
                     exit=ExitRecord("r1", 1, None, NOW - 5)), LIM)
    assert cl.verdict is Verdict.CRASHED and cl.summary == "exit code 1: ValueError: bad shape"
    cl = evaluate(ev(files=fs, launch=launch(), proc=PidInfo(100, False),
                     exit=ExitRecord("r1", None, 9, NOW - 5)), LIM)
    assert cl.verdict is Verdict.CRASHED and "killed by SIGKILL" in cl.summary
    cl = evaluate(ev(files=files("launch.sh", "launch.json", "train.log"), launch=launch(),
                     proc=PidInfo(100, False)), LIM)
    assert cl.verdict is Verdict.KILLED and "no exit.json" in cl.summary


def test_reused_pid_and_zombie_count_as_gone():
    fs = files("launch.sh", "launch.json", "train.log")
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(start_ticks=999)), LIM)
    assert cl.verdict is Verdict.KILLED and "pid reused" in cl.summary
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(state="Z")), LIM)
    assert cl.verdict is Verdict.KILLED


def test_running_and_stalled():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status()), LIM)
    assert cl.verdict is Verdict.RUNNING and cl.summary.startswith("step 50/100")
    old = status(heartbeat_time=NOW - 120, time=NOW - 120)
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=old), LIM)
    assert cl.verdict is Verdict.STALLED and by_id(cl)["heartbeat"].state is CheckState.FAIL


def test_stalled_thread_named_with_compile_state_and_compile_gets_longer_limit():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    threads = [ThreadStatus("drafter0", "drafter", "cuda:5", "compiled", last_step_time=NOW - 1, last_beat_time=NOW - 1),
               ThreadStatus("drafter1", "drafter", "cuda:6", "waiting_at_gate", last_beat_time=NOW - 700),
               ThreadStatus("drafter2", "drafter", "cuda:7", "compiling", last_beat_time=NOW - 300)]
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status(threads=threads)), LIM)
    assert cl.verdict is Verdict.STALLED
    assert "drafter1 [waiting_at_gate]" in cl.summary and "drafter2" not in cl.summary   # 300 s < 600 s


def test_no_status_yet_is_starting_then_stalled():
    fs = files("launch.sh", "launch.json", "train.log")
    cl = evaluate(ev(files=fs, launch=launch(start_time=NOW - 5), proc=alive()), LIM)
    assert cl.verdict is Verdict.STARTING
    cl = evaluate(ev(files=fs, launch=launch(start_time=NOW - 500), proc=alive()), LIM)
    # No status.json is not a stall by itself: a program is judged by its output and CPU.
    assert cl.verdict is Verdict.STALLED and "no log output for 8 min" in cl.summary, cl.summary


def test_steps_not_advancing_while_beating_is_stalled():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    threads = [ThreadStatus("drafter0", "drafter", "cuda:5", "compiled", step=50,
                            last_step_time=NOW - 200, last_beat_time=NOW - 1)]
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status(threads=threads)), LIM)
    assert cl.verdict is Verdict.STALLED and "step 50 unchanged" in cl.summary


def test_stop_request_is_shown_on_the_end_verdict():
    fs = files("launch.sh", "launch.json", "train.log")
    cl = evaluate(ev(files=fs, launch=launch(), proc=PidInfo(100, False),
                     stop=StopRecord("r1", 100, NOW - 3, "me@laptop", "SIGKILL")), LIM)
    assert cl.verdict is Verdict.STOPPED and cl.summary.startswith("stopped by me@laptop 3 s ago"), cl.summary
    assert "SIGKILL after the grace period" in cl.summary and cl.verdict.healthy


def test_a_stop_under_way_is_stopping_and_one_that_did_not_end_the_run_fails_its_check():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    lim = Limits(stall_after_s=60, compile_stall_after_s=600, stop_grace_s=10)
    stop = StopRecord("r1", 100, NOW - 12, "me@laptop", "SIGTERM")
    # Within stop_grace_s and the SIGKILL wait, whatever the trainer reports (steps advancing).
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status(), stop=stop), lim)
    assert cl.verdict is Verdict.STOPPING and not cl.verdict.healthy and not cl.verdict.failing, cl
    assert cl.summary.startswith("stopping: SIGTERM sent by me@laptop 12 s ago"), cl.summary
    assert by_id(cl)["stop"].state is CheckState.WARN and [t.name for t in cl.threads] == ["drafter0"]
    # Past it the process still lives: the stop did not end it; judged as any live run.
    late = StopRecord("r1", 100, NOW - 60, "me@laptop", "SIGKILL")
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status(), stop=late), lim)
    assert cl.verdict is Verdict.RUNNING, cl
    assert by_id(cl)["stop"].state is CheckState.FAIL and "still alive" in by_id(cl)["stop"].cause
    # A Slurm stop (scancel) waits longer for the job.
    slurm = StopRecord("r1", 100, NOW - 40, "me@laptop", "scancel")
    assert slurm_launcher().judge(ev(files=fs, launch=launch(), proc=alive(), status=status(), stop=slurm),
                                  lim).verdict is Verdict.STOPPING


def slurm_launcher() -> Launcher:
    config = parse_config('[profile.s]\nrun_dir = "/r"\nscheduler = "slurm"\n', "c.toml")
    return launcher_for(config.profiles["s"])


def test_how_long_a_stop_may_take_is_its_launchers_to_say_not_its_signals_word():
    """Slurm's stop waits for scancel (its cancel margin) past the grace; a process stopper does
    not. What the stop record's `signal_sent` says decides nothing."""
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    lim = Limits(stall_after_s=60, compile_stall_after_s=600, stop_grace_s=10)
    slurm, local = slurm_launcher(), launcher_for(Profile(name="l", run_dir="/r"))
    assert slurm.STOP_SLACK_S > local.STOP_SLACK_S
    for sent in ("scancel", "SIGTERM", "SIGKILL"):
        # 30 s past the grace: within Slurm's wait, past the process stopper's.
        looked = ev(files=fs, launch=launch(), proc=alive(), status=status(),
                    stop=StopRecord("r1", 100, NOW - 40, "me@laptop", sent))
        assert slurm.judge(looked, lim).verdict is Verdict.STOPPING, sent
        cl = local.judge(looked, lim)
        assert cl.verdict is Verdict.RUNNING and by_id(cl)["stop"].state is CheckState.FAIL, sent
    # Past Slurm's wait too: the stop did not end it.
    late = ev(files=fs, launch=launch(), proc=alive(), status=status(),
              stop=StopRecord("r1", 100, NOW - 10 - slurm.STOP_SLACK_S - 1, "me@laptop", "scancel"))
    assert slurm.judge(late, lim).verdict is Verdict.RUNNING


def test_tracker_keeps_since_until_the_state_changes():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    tr = HealthTracker()
    e1 = ev(files=fs, launch=launch(), proc=alive(), status=status())
    c1 = tr.update(evaluate(e1, LIM), NOW, "r1")
    hb1 = by_id(c1)["heartbeat"].since
    e2 = ev(now=NOW + 5, files=fs, launch=launch(), proc=alive(), status=status(heartbeat_time=NOW + 4))
    c2 = tr.update(evaluate(e2, LIM), NOW + 5, "r1")
    assert by_id(c2)["heartbeat"].since == hb1          # still ok: unchanged since
    e3 = ev(now=NOW + 200, files=fs, launch=launch(), proc=alive(), status=status(heartbeat_time=NOW + 4))
    c3 = tr.update(evaluate(e3, LIM), NOW + 200, "r1")
    assert by_id(c3)["heartbeat"].state is CheckState.FAIL and by_id(c3)["heartbeat"].since == NOW + 200
    c4 = tr.update(evaluate(e3, LIM), NOW + 201, "r2")  # a new run starts the clocks again
    assert by_id(c4)["heartbeat"].since != NOW + 200


def test_last_traceback_chained_and_threads():
    log = ("step 1\nException in thread drafter1:\nTraceback (most recent call last):\n"
           "  File \"a.py\", line 3, in run\n    f()\nKeyError: 'x'\n\n"
           "During handling of the above exception, another exception occurred:\n\n"
           "Traceback (most recent call last):\n  File \"b.py\", line 9, in <module>\n"
           "RuntimeError: FX tracing flag set by another thread\nstep 2 never\n")
    tb = last_traceback(log)
    assert tb.startswith("Traceback") and "KeyError" in tb and tb.endswith("another thread")
    assert exception_line(tb) == "RuntimeError: FX tracing flag set by another thread"
    assert last_traceback("no errors here\n") is None


def test_worker_silence_during_warmup_is_not_a_stall():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    threads = [ThreadStatus("target0", "target", "cpu", "compiled", last_beat_time=NOW - 200),
               ThreadStatus("main", "main", "cpu", "warming", last_beat_time=NOW - 1)]
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(),
                     status=status(phase="warming", step=0, threads=threads)), LIM)
    assert cl.verdict is Verdict.STARTING, cl
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(),
                     status=status(phase="training", threads=threads)), LIM)
    assert cl.verdict is Verdict.STALLED and "target0 [compiled]" in cl.summary


def test_a_warm_up_that_never_ends_is_a_stall():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    st = status(phase="warming", step=0, threads=[])
    cl = evaluate(ev(files=fs, launch=launch(start_time=NOW - 100), proc=alive(), status=st), LIM)
    assert cl.verdict is Verdict.STARTING
    cl = evaluate(ev(files=fs, launch=launch(start_time=NOW - 700), proc=alive(), status=st), LIM)
    assert cl.verdict is Verdict.STALLED and "phase warming, no step in" in cl.summary


# -- any program's evidence: log, events, CPU (run/evidence/activity.py's Activity) ------------------

from dflash_tui.remote.ops import DiskFree  # noqa: E402
from dflash_tui.run.evidence.activity import Activity  # noqa: E402
from dflash_tui.run.verdict.checklist import ThreadState  # noqa: E402


def act(**kw) -> Activity:
    base = dict(samples=2, procs=2, threads=3, states="2 sleeping", cpu_s=10.0)
    base.update(kw)
    return Activity(**base)


def plain(**kw) -> Evidence:
    """A program that writes no status.json, up 300 s."""
    base = dict(files=files("launch.sh", "launch.json", "train.log"), launch=launch(), proc=alive())
    base.update(kw)
    return ev(**base)


def test_a_plain_program_printing_steps_is_running():
    a = act(log_grew_at=NOW - 2, program_output=True, step=120, total=1000, loss=2.31, rate=3.2,
            rate_unit="it/s", step_at=NOW - 2, step_source="log", cpu_cores=0.9, cpu_window_s=1.0)
    cl = evaluate(plain(activity=a), LIM)
    assert cl.verdict is Verdict.RUNNING, cl
    # 880 steps left at the 3.2 it/s it printed: the ETA follows the total.
    assert cl.summary.startswith("step 120/1000, ETA 5 min, loss 2.31, 3.2 it/s"), cl.summary
    assert by_id(cl)["progress"].state is CheckState.OK and "90 % CPU" in by_id(cl)["cpu"].cause


def test_a_silent_program_whose_metrics_file_advances_is_running():
    # Nothing in the log, no stacks; a TensorBoard file of this run written 1 s ago.
    a = act(cpu_cores=0.02, cpu_window_s=1.0, metrics_at=NOW - 1, metrics_file="TensorBoard runs/exp1")
    cl = evaluate(plain(activity=a), LIM)
    assert cl.verdict is Verdict.RUNNING, cl
    assert "metrics written to TensorBoard runs/exp1 1 s ago" in cl.summary, cl.summary
    stale = act(cpu_cores=0.02, cpu_window_s=1.0, metrics_at=NOW - 200, metrics_file="TensorBoard runs/exp1")
    assert evaluate(plain(activity=stale), LIM).verdict is Verdict.STALLED


def test_no_output_yet_is_starting_within_the_limit():
    cl = evaluate(ev(files=files("launch.sh", "launch.json", "train.log"), launch=launch(start_time=NOW - 5),
                     proc=alive(), activity=act(cpu_cores=0.0, cpu_window_s=1.0)), LIM)
    assert cl.verdict is Verdict.STARTING and "no output from the program yet" in cl.summary


def test_idle_hang_and_busy_silent_phase_never_read_the_same():
    silent = dict(log_grew_at=NOW - 120, program_output=True, step=5, step_at=NOW - 120, cpu_window_s=1.0)
    idle = evaluate(plain(activity=act(cpu_cores=0.0, **silent)), LIM)
    busy = evaluate(plain(activity=act(cpu_cores=1.0, cpu_busy_since=NOW - 120, **silent)), LIM)
    assert idle.verdict is Verdict.STALLED and idle.summary.startswith("idle hang: no step, no log output for 2 min")
    assert "0 % CPU" in idle.summary and "2 sleeping" in idle.summary
    # Busy and silent: within compile_stall_after_s it is still RUNNING, with a warn naming the CPU.
    assert busy.verdict is Verdict.RUNNING and "busy (100 % CPU)" in busy.summary, busy.summary
    assert by_id(busy)["progress"].state is CheckState.WARN and "compile_stall_after_s" in by_id(busy)["progress"].hint
    assert idle.summary != busy.summary
    # Past the compile limit a busy silence is a stall too, in its own words.
    long = dict(silent, log_grew_at=NOW - 700, step_at=NOW - 700)
    cl = evaluate(plain(launch=launch(start_time=NOW - 800), activity=act(cpu_cores=1.0, **long)), LIM)
    assert cl.verdict is Verdict.STALLED and cl.summary.startswith("busy but silent"), cl.summary
    assert "100 % CPU" in cl.summary


def test_busy_before_any_output_is_starting_not_stalled():
    cl = evaluate(plain(activity=act(cpu_cores=2.0, cpu_window_s=1.0)), LIM)   # up 300 s, silent
    assert cl.verdict is Verdict.STARTING and "busy (200 % CPU)" in cl.summary, cl.summary


def test_trainer_heartbeat_loss_with_busy_cpu_gets_the_compile_limit():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    old = status(heartbeat_time=NOW - 120, time=NOW - 120)
    busy = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=old,
                       activity=act(cpu_cores=1.0, cpu_window_s=1.0)), LIM)
    assert by_id(busy)["heartbeat"].state is CheckState.OK
    idle = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=old,
                       activity=act(cpu_cores=0.0, cpu_window_s=1.0)), LIM)
    assert idle.verdict is Verdict.STALLED and "idle hang" in idle.summary and "no heartbeat" in idle.summary


def test_main_thread_after_warm_up_is_never_a_stall():
    """The bundled trainer's main thread waits for the pool once the warm-up is over."""
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    threads = [ThreadStatus("main", "main", "-", "compiled", last_beat_time=NOW - 80),
               ThreadStatus("drafter0", "drafter", "cpu", "compiled", step=50, last_step_time=NOW - 1,
                            last_beat_time=NOW - 1)]
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status(threads=threads)), LIM)
    assert cl.verdict is Verdict.RUNNING, cl.summary
    assert cl.thread("main").state is ThreadState.DONE and cl.thread("drafter0").state is ThreadState.OK
    # A thread that reported an error is FAILED, in the checklist and the thread states alike.
    threads[1].error = "ValueError: bad shape"
    cl = evaluate(ev(files=fs, launch=launch(), proc=alive(), status=status(threads=threads)), LIM)
    assert cl.verdict is Verdict.STALLED and cl.thread("drafter0").state is ThreadState.FAILED
    assert "bad shape" in by_id(cl)["threads"].cause


def test_stopped_whatever_the_exit_and_crash_or_kill_without_a_request():
    fs = files("launch.sh", "launch.json", "train.log", "exit.json")
    stop = StopRecord("r1", 100, NOW - 10, "me@laptop", "SIGTERM")
    for exit_ in (ExitRecord("r1", None, 15, NOW - 9), ExitRecord("r1", 1, None, NOW - 9),
                  ExitRecord("r1", 0, None, NOW - 9)):
        cl = evaluate(ev(files=fs, launch=launch(), proc=PidInfo(100, False), exit=exit_, stop=stop,
                         activity=act(checkpoint="/r/checkpoints/step-400", checkpoint_step=400)), LIM)
        assert cl.verdict is Verdict.STOPPED, cl
        assert cl.summary.startswith("stopped by me@laptop 10 s ago"), cl.summary
        assert "last checkpoint step 400 /r/checkpoints/step-400" in cl.summary
        assert by_id(cl)["process"].state is CheckState.OK
    # A crash before the stop request stays a crash.
    cl = evaluate(ev(files=fs, launch=launch(), proc=PidInfo(100, False), stop=stop,
                     exit=ExitRecord("r1", 1, None, NOW - 60)), LIM)
    assert cl.verdict is Verdict.CRASHED


def test_disk_full_is_named_on_the_checks_and_the_verdict():
    full = DiskFree("/r", "/r", free=0, total=16 << 10)
    cl = evaluate(ev(files=files("launch.sh", "launch.json", "train.log"), launch=launch(),
                     proc=PidInfo(100, False), activity=act(disk=full)), LIM)
    assert cl.verdict is Verdict.KILLED and cl.summary.startswith("disk full: 0 B free on /r"), cl.summary
    assert "exit status could not be recorded" in cl.summary
    assert by_id(cl)["disk"].state is CheckState.FAIL and "free space" in by_id(cl)["disk"].hint
    a = act(disk_error="OSError: [Errno 28] No space left on device", log_grew_at=NOW - 200,
            program_output=True, cpu_cores=0.0, cpu_window_s=1.0)
    cl = evaluate(plain(activity=a), LIM)
    assert cl.verdict is Verdict.STALLED and cl.summary.startswith("disk full: the log says"), cl.summary
    cl = evaluate(ev(files=files("launch.sh", "launch.json"), proc=alive(),
                     launch=launch(log_error="./launch.sh: 40: cannot create /r/train.log: No space left on device")),
                  LIM)
    assert cl.verdict is Verdict.LOG_MISSING and cl.summary.startswith("disk full:")


def test_a_stalled_summary_says_whether_the_run_s_gpus_work():
    from dflash_tui.gpu.sample import GpuProcess, GpuSample, GpuSnapshot
    from dflash_tui.run.verdict.health import with_gpu_check

    a = act(log_grew_at=NOW - 200, program_output=True, cpu_cores=0.0, cpu_window_s=1.0)
    e = plain(activity=a)
    cl = evaluate(e, LIM)
    snap = GpuSnapshot(NOW, "fake", gpus=(GpuSample(0, "H200", "u0", util_sm_pct=0.0,
                                                    processes=(GpuProcess(100, 1 << 30, is_run_process=True),)),))
    out = with_gpu_check(cl, e, snap)
    assert out.verdict is Verdict.STALLED and out.summary.endswith("GPU 0 idle (0 % SM, the whole device)")
    assert out.summary.startswith("idle hang")
