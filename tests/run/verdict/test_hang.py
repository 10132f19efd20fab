"""Where a silent run is stuck, from its stacks: constructed evidence through the real engine.

The run probe's reports (and stack dumps of processes whose report went stale) go through the
real ProgressTracker (its memory across looks) and the real `evaluate` / `with_gpu_check`; the
same classes are produced by real programs in test_run_hang_programs.py. The cases whose
evidence only the stack dumps give (a C call that holds the GIL: the probe cannot write) are
covered here only.
"""

from __future__ import annotations

from dataclasses import replace

from dflash_tui.contract.rundir import ExitRecord, ProbeReport, ProbeThread
from dflash_tui.gpu.sample import GpuProcess, GpuSample, GpuSnapshot
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.evidence.memory import LookMemory
from dflash_tui.run.verdict.hang import thread_views
from dflash_tui.run.stacks.records import CollectiveProgress, HangEvidence, RankFailure, StackDump
from dflash_tui.run.verdict.health import Limits, evaluate, with_gpu_check
from dflash_tui.run.verdict.checklist import CheckState, ThreadState, Verdict

from tests.run.verdict.test_health import NOW, alive, by_id, files, launch, plain

LIM = Limits(stall_after_s=60, compile_stall_after_s=600, launch_deadline_s=1.0)
SITE = "/opt/venv/lib/python3.11/site-packages"
STD = "/usr/lib/python3.11"
ALL_REDUCE = [f"{SITE}/torch/distributed/distributed_c10d.py:3252 all_reduce",
              f"{SITE}/torch/distributed/c10d_logger.py:83 wrapper"]
_ident = iter(range(1000, 10_000))


def th(name: str, *frames: str, daemon: bool = False, compile_state: str = "", ident: int | None = None) -> ProbeThread:
    return ProbeThread(name=name, ident=ident if ident is not None else hash(name) % 100_000, daemon=daemon,
                       frames=list(frames), compile_state=compile_state)


def rep(pid: int, *threads: ProbeThread, at: float = NOW - 0.5, rank: int | None = None, ppid: int = 100,
        ended: bool = False, cpu_s: float = 1.0) -> ProbeReport:
    return ProbeReport(run_id="r1", pid=pid, time=at, ppid=ppid, rank=rank, threads=list(threads), ended=ended,
                       cpu_s=cpu_s)


def looked(*looks: list[ProbeReport], cpu: float | None = 0.0, silent_s: float = 200.0,
           hang: HangEvidence | None = None, **kw):
    """Evidence of a program that printed its last line `silent_s` ago, whose probe reports were
    read at each look in `looks` (oldest first); the last look is the evidence's probes."""
    tracker = ProgressTracker()
    hang = hang or HangEvidence()
    for probes in looks:
        tracker.sample_stacks(probes, hang.stack_dumps)
    act = replace(tracker.activity(NOW, None), samples=len(looks), log_grew_at=NOW - silent_s, program_output=True,
                  output_polls=3, cpu_s=50.0, procs=3, threads=6, states="3 sleeping",
                  cpu_cores=cpu, cpu_window_s=1.0 if cpu is not None else None)
    return plain(activity=act, probes=list(looks[-1]), hang=hang, **kw)


def held(*reports_at: tuple[float, list[ProbeReport]]):
    """The same stacks seen at several times: [(t, reports)] with each report's time set to t."""
    return [[replace(r, time=t) for r in reports] for t, reports in reports_at]


# -- the kinds of hang -------------------------------------------------------------------------

def test_a_collective_one_rank_never_joins_names_both_ranks():
    ranks = [rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step", "/w/train.py:80 main"), rank=0),
             rep(202, th("MainThread", "/w/train.py:9 checkpoint_to_slow_disk", "/w/train.py:80 main"), rank=1)]
    e = looked(*held((NOW - 180, ranks), (NOW - 0.5, ranks)))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("hung in a collective: rank 0 waits in all_reduce (train.py:42) for 3 min; "
                                 "rank 1 is not in it: checkpoint_to_slow_disk (train.py:9)"), cl.summary
    stacks = by_id(cl)["stacks"]
    assert stacks.state is CheckState.FAIL and stacks.cause.startswith("hung in a collective"), stacks
    assert by_id(cl)["progress"].cause.endswith("(limit stall_after_s 60 s)"), by_id(cl)["progress"]


def test_the_flight_recorder_s_sequence_numbers_name_the_lagging_rank():
    ranks = [rep(200 + r, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step"), rank=r) for r in range(3)]
    colls = [CollectiveProgress(rank=r, time=NOW - 1, last_enqueued_seq=12 if r != 2 else 11,
                                last_completed_seq=11, pending_op="allreduce" if r != 2 else "",
                                pending_seq=12 if r != 2 else None) for r in range(3)]
    e = looked(*held((NOW - 120, ranks), (NOW - 0.5, ranks)), hang=HangEvidence(collectives=colls))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED
    assert "ranks 0-2 wait in all_reduce (train.py:42) for 2 min" in cl.summary, cl.summary
    assert ("collectives reached: rank 0 #12 (allreduce #12 pending), rank 1 #12 (allreduce #12 pending), "
            "rank 2 #11 (rank 2 lags)") in cl.summary, cl.summary


def test_waiting_on_the_gpu_says_the_run_s_own_gpu_use():
    p = [rep(201, th("MainThread", f"{SITE}/torch/cuda/__init__.py:1040 synchronize", "/w/train.py:7 <module>"))]
    e = looked(*held((NOW - 240, p), (NOW - 0.5, p)), cpu=1.01)
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("waiting on the GPU: MainThread in torch.cuda.synchronize (train.py:7) for 4 min"), \
        cl.summary

    def snap(own: float | None, device: float, power: float | None = None, limit: float | None = 700.0,
             sm: int | None = None, top: int | None = None) -> GpuSnapshot:
        procs = (GpuProcess(201, 1 << 30, is_run_process=True, sm_util_pct=own),
                 GpuProcess(999, 1 << 30, is_run_process=False, sm_util_pct=100.0 - (own or 0)))
        return GpuSnapshot(NOW, "nvml", gpus=(GpuSample(0, "H200", "u0", util_sm_pct=device, processes=procs,
                                                        power_w=power, power_limit_w=limit, sm_clock_mhz=sm,
                                                        sm_clock_max_mhz=top),))
    assert with_gpu_check(cl, e, snap(100.0, 100.0)).summary.endswith("GPU 0 100 % busy (the run's processes)")
    # Another user's kernel keeps the device busy: the run's own share is what is said.
    assert with_gpu_check(cl, e, snap(0.0, 100.0)).summary.endswith("GPU 0 idle (0 % SM, the run's processes)")
    # No per-process numbers: the device's, said as the device's.
    assert with_gpu_check(cl, e, snap(None, 97.0)).summary.endswith("GPU 0 97 % busy (the whole device)")
    # Power tells arithmetic from a kernel that spins: both read 100 % busy.
    assert with_gpu_check(cl, e, snap(100.0, 100.0, 690.0, sm=1755, top=1980)).summary.endswith(
        "GPU 0 100 % busy (the run's processes), 690 W of 700 W, SM 1755 of 1980 MHz")
    spin = with_gpu_check(cl, e, snap(100.0, 100.0, 112.0, sm=1980, top=1980))
    assert spin.summary.endswith("GPU 0 100 % busy (the run's processes) but drawing 112 W of 700 W: "
                                 "a kernel that spins, not compute"), spin.summary
    assert spin.gpus[0].spinning and spin.gpus[0].to_dict()["power_pct"] == 16.0
    # Power or its limit not given ("[N/A]", NotSupported): never called spinning, nothing made up.
    assert with_gpu_check(cl, e, snap(100.0, 100.0, None, sm=1980)).summary.endswith(
        "GPU 0 100 % busy (the run's processes), SM 1980 MHz")
    assert with_gpu_check(cl, e, snap(100.0, 100.0, 112.0, limit=None)).summary.endswith(
        "GPU 0 100 % busy (the run's processes), 112 W")


def test_a_lock_order_deadlock_names_both_threads():
    p = [rep(201, th("MainThread", f"{STD}/threading.py:1132 _wait_for_tstate_lock", f"{STD}/threading.py:1112 join",
                     "/w/x.py:30 main"),
             th("checkpointer", "/w/x.py:8 save_checkpoint", f"{STD}/threading.py:1010 run"),
             th("metrics-writer", "/w/x.py:12 write_metrics", f"{STD}/threading.py:1010 run"))]
    e = looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=0.0)
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith(
        "deadlock: checkpointer is blocked in save_checkpoint (x.py:8) (a lock or another C call); "
        "metrics-writer is blocked in write_metrics (x.py:12) (a lock or another C call) for 2 min, 0 % CPU"), cl.summary
    # Busy, the same stacks are no deadlock: threads that run.
    busy = evaluate(looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=2.0), LIM)
    assert busy.verdict is Verdict.STALLED and not busy.summary.startswith("deadlock"), busy.summary


BOOT = (f"{STD}/threading.py:1045 _bootstrap_inner", f"{STD}/threading.py:1002 _bootstrap")
TQDM_MONITOR = th("tqdm_monitor", f"{STD}/threading.py:331 wait", f"{STD}/threading.py:629 wait",
                  f"{SITE}/tqdm/_monitor.py:69 run", *BOOT, daemon=True)


def test_a_progress_bar_s_idle_helper_beside_a_hang_is_no_party_of_it():
    # tqdm's monitor thread (every tqdm and Lightning script) parked beside a program blocked in
    # a C call: the program's thread is where it stopped; no deadlock, the monitor not STUCK.
    p = [rep(201, TQDM_MONITOR, th("MainThread", "/w/t.py:22 wait_for_peer", "/w/t.py:25 <module>"))]
    cl = evaluate(looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=0.0), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("blocked in a C call: MainThread in wait_for_peer (t.py:22) for 2 min, 0 % CPU"), \
        cl.summary
    threads = {t.name: t for t in cl.threads}
    monitor = threads["tqdm_monitor"]
    assert monitor.state is ThreadState.OK and monitor.where == "tqdm monitor (tqdm/_monitor.py:69)", monitor
    assert "_bootstrap" not in monitor.doing, monitor
    assert threads["MainThread"].state is ThreadState.STUCK, threads["MainThread"]


def test_a_thousand_parked_pool_workers_beside_a_hang_are_no_deadlock():
    worker = (f"{STD}/concurrent/futures/thread.py:81 _worker", f"{STD}/threading.py:1010 run", *BOOT)
    p = [rep(201, th("MainThread", "/w/t.py:22 wait_for_peer", "/w/t.py:25 <module>"),
             *(th(f"loader_{i}", *worker, ident=i) for i in range(1000)))]
    cl = evaluate(looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=0.0), LIM)
    assert cl.summary.startswith("blocked in a C call: MainThread in wait_for_peer (t.py:22)"), cl.summary[:200]
    assert sum(t.state is ThreadState.STUCK for t in cl.threads) == 1, [t for t in cl.threads if t.trouble][:3]


def test_threads_of_the_program_waiting_for_work_are_no_deadlock():
    # Two consumers of the program's own at their queues: waits for work, not locks taken.
    p = [rep(201, th("MainThread", "/w/t.py:22 wait_for_peer"),
             th("consumer-1", f"{STD}/threading.py:320 wait", f"{STD}/queue.py:171 get", "/w/t.py:3 consume"),
             th("consumer-2", f"{STD}/threading.py:320 wait", f"{STD}/queue.py:171 get", "/w/t.py:3 consume"))]
    cl = evaluate(looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=0.0), LIM)
    assert cl.summary.startswith("blocked in a C call: MainThread in wait_for_peer (t.py:22)"), cl.summary
    # Two of its threads taking semaphores are.
    sem = (f"{STD}/threading.py:331 wait", f"{STD}/threading.py:494 acquire")
    p = [rep(201, th("a", *sem, "/w/t.py:3 take_a"), th("b", *sem, "/w/t.py:9 take_b"))]
    cl = evaluate(looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=0.0), LIM)
    assert cl.summary.startswith("deadlock: a waits in threading.wait in take_a (t.py:3); b waits"), cl.summary


def test_how_long_a_thread_waits_counts_from_when_its_stack_stopped_changing():
    # In one function all along: running its loop (line 5) until 30 s ago, blocked at line 9 since.
    loop = [rep(201, th("MainThread", "/w/t.py:5 train", "/w/t.py:12 <module>"))]
    hung = [rep(201, th("MainThread", "/w/t.py:9 train", "/w/t.py:12 <module>"))]
    cl = evaluate(looked(*held((NOW - 100, loop), (NOW - 30, hung), (NOW - 0.5, hung)), cpu=0.0), LIM)
    assert cl.summary.startswith("blocked in a C call: MainThread in train (t.py:9) for 30 s, 0 % CPU"), cl.summary
    # The probe's own word, in one look (a one-shot --check): in train since 100 s, still since 30 s.
    one = [rep(201, replace(hung[0].threads[0], stack_since=NOW - 100, frames_since=NOW - 30), at=NOW - 0.5)]
    one[0] = replace(one[0], start_time=NOW - 200)
    cl = evaluate(looked(one, cpu=0.0), LIM)
    assert cl.summary.startswith("blocked in a C call: MainThread in train (t.py:9) for 30 s"), cl.summary
    # A busy loop in one function is in it since it entered it.
    cl = evaluate(looked(*held((NOW - 100, loop), (NOW - 30, hung), (NOW - 0.5, hung)), cpu=1.0), LIM)
    assert cl.summary.startswith("busy in its own code: MainThread in train (t.py:9) for 2 min"), cl.summary


def test_waiting_for_dataloader_workers_names_the_stuck_worker():
    main = rep(201, th("MainThread", f"{SITE}/torch/utils/data/dataloader.py:1243 _try_get_data",
                       f"{SITE}/torch/utils/data/dataloader.py:1411 _get_data", "/w/train.py:20 main"))
    worker = rep(812, th("MainThread", f"{STD}/socket.py:718 readinto", "/w/data.py:5 read_remote_shard",
                         "/w/data.py:20 __getitem__", f"{SITE}/torch/utils/data/_utils/fetch.py:52 fetch",
                         f"{SITE}/torch/utils/data/_utils/worker.py:351 _worker_loop"), ppid=201)
    e = looked(*held((NOW - 180, [main, worker]), (NOW - 0.5, [main, worker])))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("waiting for DataLoader workers: worker pid 812 in socket.readinto (data.py:5) "
                                 "for 3 min"), cl.summary


def test_busy_in_c_comes_from_the_stack_dump_of_a_stale_report():
    # The report stopped at NOW-120 (no Python ran since); the dump taken after it has the stack.
    stale = rep(201, th("MainThread", "/w/x.py:3 main"), at=NOW - 120)
    dump = StackDump(pid=201, time=NOW - 2, source="faulthandler",
                     threads=(th("MainThread", "/w/x.py:6 parse_metadata", "/w/x.py:3 main"),))
    e = looked([stale], cpu=1.0, hang=HangEvidence(stack_dumps={201: dump}))
    views = thread_views(e, LookMemory())
    assert [(v.name, v.where, v.source, v.stale) for v in views] == [
        ("MainThread", "parse_metadata (x.py:6)", "faulthandler", True)]
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("busy in C: MainThread in parse_metadata (x.py:6), 100 % CPU, stack unchanged "
                                 "for 2 min (pid 201 runs no Python)"), cl.summary
    assert by_id(cl)["probe"].state is CheckState.WARN and "silent: pid 201 (2 min ago)" in by_id(cl)["probe"].cause
    # A dump older than the report is not this moment's stack.
    old = looked([stale], cpu=1.0, hang=HangEvidence(stack_dumps={201: replace(dump, time=NOW - 130)}))
    assert thread_views(old, LookMemory())[0].where == "main (x.py:3)"


def test_a_move_a_dump_reveals_happened_by_the_stale_reports_next_beat():
    """The report went stale when the main thread entered a C call that holds the GIL; the dump
    taken seconds later shows it there. That move happened by the report's next beat (no Python
    ran after it), not when the dump was taken: the silence is counted from then."""
    before = rep(201, th("MainThread", "/w/x.py:24 <module>"), at=NOW - 10)
    dump = StackDump(pid=201, time=NOW - 2, source="faulthandler",
                     threads=(th("MainThread", "/w/x.py:19 parse_metadata", "/w/x.py:25 <module>"),))
    tracker = ProgressTracker()
    tracker.sample_stacks([before])
    tracker.sample_stacks([before], {201: dump})
    assert tracker.activity(NOW, None).stack_moved_at == NOW - 9


# -- progress that never reaches the log --------------------------------------------------------

def test_a_moving_stack_is_progress_the_log_lacks():
    a = [rep(201, th("MainThread", f"{SITE}/lightning/loop.py:9 run", "/w/model.py:12 training_step"))]
    b = [rep(201, th("MainThread", f"{SITE}/torch/nn/modules/module.py:1 _call_impl", "/w/model.py:30 forward",
                     "/w/model.py:13 training_step"))]
    e = looked(*held((NOW - 3, a), (NOW - 2, b), (NOW - 1, a)), cpu=1.5)
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.RUNNING, cl
    progress = by_id(cl)["progress"]
    assert progress.state is CheckState.WARN and "its stack moves (MainThread in training_step (model.py:12))" \
        in progress.cause, progress
    assert progress.hint.startswith("its progress does not reach the log"), progress
    # Never printed at all: RUNNING too, past stall_after_s (a Lightning script without a terminal).
    never = looked(*held((NOW - 3, a), (NOW - 2, b), (NOW - 1, a)), cpu=1.5, silent_s=200.0)
    never = replace(never, activity=replace(never.activity, log_grew_at=None, program_output=False))
    cl = evaluate(never, LIM)
    assert cl.verdict is Verdict.RUNNING and cl.summary.startswith("no output yet but its stack moves"), cl.summary


def test_a_daemon_thread_s_loop_is_not_progress():
    main = th("MainThread", *ALL_REDUCE, "/w/train.py:42 step")
    beat1 = th("beat", "/w/train.py:60 run", daemon=True)
    beat2 = th("beat", "/w/train.py:55 write", "/w/train.py:61 run", daemon=True)
    e = looked(*held((NOW - 90, [rep(201, main, beat1)]), (NOW - 1, [rep(201, main, beat2)])))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED and cl.summary.startswith("hung in a collective: MainThread waits in "
                                                                   "all_reduce (train.py:42)"), cl.summary


def test_a_loop_inside_one_function_is_no_progress():
    # A spin on two lines of one function: the call chain stands still.
    a = [rep(201, th("MainThread", "/w/busy.py:13 <module>"))]
    b = [rep(201, th("MainThread", "/w/busy.py:14 <module>"))]
    e = looked(*held((NOW - 90, a), (NOW - 1, b)), cpu=1.0)
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("busy in its own code: MainThread in <module> (busy.py:14) for 2 min, 100 % CPU"), \
        cl.summary


# -- the limits ---------------------------------------------------------------------------------

def test_the_compile_limit_applies_while_the_stacks_show_a_working_compile():
    p = [rep(201, th("MainThread", f"{SITE}/torch/_inductor/scheduler.py:2000 fuse_nodes", "/w/m.py:5 main",
                     compile_state="compiling"))]
    e = looked(*held((NOW - 200, p), (NOW - 0.5, p)), cpu=1.0)
    cl = evaluate(e, LIM)                                  # 200 s: past stall_after_s, within 600 s
    assert cl.verdict is Verdict.RUNNING and cl.summary.startswith("compiling: no output for 3 min"), cl.summary
    assert by_id(cl)["progress"].state is CheckState.WARN
    late = looked(*held((NOW - 700, p), (NOW - 0.5, p)), cpu=1.0, silent_s=700)
    cl = evaluate(late, LIM)
    assert cl.verdict is Verdict.STALLED and cl.summary.startswith("compile never ended: MainThread in the compiler"), \
        cl.summary
    assert "(limit compile_stall_after_s 600 s)" in by_id(cl)["progress"].cause
    # A compile at 0 % CPU does not work: stuck, after stall_after_s.
    idle = evaluate(looked(*held((NOW - 200, p), (NOW - 0.5, p)), cpu=0.0), LIM)
    assert idle.verdict is Verdict.STALLED and idle.summary.startswith("stuck in the compiler: MainThread"), idle.summary


def test_a_busy_silence_that_is_no_compile_gets_stall_after_s():
    p = [rep(201, th("MainThread", "/w/prep.py:9 tokenize", "/w/prep.py:30 main"))]
    cl = evaluate(looked(*held((NOW - 90, p), (NOW - 0.5, p)), cpu=1.0, silent_s=90), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert "(limit stall_after_s 60 s)" in by_id(cl)["progress"].cause
    # Without stacks (no probe: not Python), nothing tells a compile from a hang: the long limit.
    bare = looked([], cpu=1.0, silent_s=90)
    assert evaluate(bare, LIM).verdict is Verdict.RUNNING


# -- several ranks: the first failure ------------------------------------------------------------

def test_a_dead_distributed_run_names_the_rank_that_failed_first():
    tb = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 50, in <module>\n"
          "RuntimeError: CUDA out of memory on rank 3\n")
    e = plain(proc=replace(alive(), alive=False), exit=ExitRecord(run_id="r1", exit_code=1, signal=None, end_time=NOW - 5),
              hang=HangEvidence(root_cause=RankFailure(time=NOW - 20, message="worker failed", rank=3, pid=333,
                                                       traceback=tb)))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.CRASHED, cl
    assert "rank 3 failed first (20 s ago): RuntimeError: CUDA out of memory on rank 3" in cl.summary, cl.summary
    assert by_id(cl)["root_cause"].state is CheckState.FAIL


# -- the checks that said "pending" forever ---------------------------------------------------------

def test_processes_that_ended_are_no_warning():
    main = rep(201, th("MainThread", "/w/train.py:20 main"))
    done = rep(202, th("MainThread", "/w/x.py:1 f"), at=NOW - 100, ended=True)
    gone_worker = rep(812, th("MainThread", f"{STD}/multiprocessing/queues.py:113 get",
                              f"{SITE}/torch/utils/data/_utils/worker.py:300 _worker_loop"), at=NOW - 100, ppid=201)
    e = looked([main, done, gone_worker], silent_s=1)
    probe = by_id(evaluate(e, LIM))["probe"]
    assert probe.state is CheckState.OK and probe.cause.startswith("1 of 1 process(es) beating"), probe
    assert "1 DataLoader worker(s) ended" in probe.cause



def test_workers_ended_long_ago_stay_ended_while_their_parent_is_briefly_silent():
    # The parent ran no Python for 7 s (a machine starved of CPU): it is the one silent process.
    # Its workers that stopped 47 s ago, mid-item, ended while it still beat; a worker that
    # stopped with it (its last report as late as the parent's) is not known to have ended.
    busy = ("/w/data.py:12 __getitem__", f"{SITE}/torch/utils/data/_utils/fetch.py:52 fetch",
            f"{SITE}/torch/utils/data/_utils/worker.py:349 _worker_loop")
    main = rep(201, th("MainThread", "/w/train.py:20 main"), at=NOW - 7)
    old = [rep(pid, th("MainThread", *busy), at=NOW - 47, ppid=201) for pid in (812, 813)]
    late = rep(814, th("MainThread", *busy), at=NOW - 7.5, ppid=201)
    probe = by_id(evaluate(looked([main, *old, late], silent_s=7), replace(LIM, stall_after_s=6)))["probe"]
    assert probe.state is CheckState.WARN, probe
    assert "2 DataLoader worker(s) ended" in probe.cause, probe.cause
    assert probe.cause.endswith("silent: pid 201 (7 s ago), pid 814 (8 s ago)"), probe.cause


def test_workers_whose_processes_are_gone_are_ended_though_their_parent_went_silent_with_them():
    # As seen on a starved machine: the loop's workers stopped mid-item 1.8 s before the loop's
    # own last beat, then the loop ran no Python for 5 s, while its next loader's workers beat
    # at their queues. By the beats alone the two may still live (silent); the target says
    # their processes are gone: ended, their threads none of the run's.
    busy = ("/w/data.py:22 __getitem__", f"{SITE}/torch/utils/data/_utils/fetch.py:54 fetch",
            f"{SITE}/torch/utils/data/_utils/worker.py:374 _worker_loop")
    waits = (f"{STD}/multiprocessing/queues.py:113 get", f"{SITE}/torch/utils/data/_utils/worker.py:351 _worker_loop")
    main = rep(201, th("MainThread", f"{STD}/multiprocessing/queues.py:113 get",
                       f"{SITE}/torch/utils/data/dataloader.py:1291 _try_get_data"), at=NOW - 5.1)
    ended = [rep(pid, th("MainThread", *busy), at=NOW - 6.9, ppid=201) for pid in (812, 813)]
    next_loader = [rep(pid, th("MainThread", *waits), at=NOW - 0.5, ppid=201) for pid in (814, 815)]
    lim = replace(LIM, stall_after_s=6)
    by_beats = by_id(evaluate(looked([main, *ended, *next_loader], silent_s=5), lim))["probe"]
    assert by_beats.cause.endswith("silent: pid 812 (7 s ago), pid 813 (7 s ago)"), by_beats.cause
    e = looked([main, *ended, *next_loader], silent_s=5, hang=HangEvidence(gone=frozenset({812, 813})))
    probe = by_id(evaluate(e, lim))["probe"]
    assert probe.state is CheckState.OK and probe.cause == ("3 of 3 process(es) beating, newest just now; "
                                                            "2 DataLoader worker(s) ended"), probe.cause
    assert {v.pid for v in thread_views(e, LookMemory())} == {201, 814, 815}
    # A worker busy when last seen, whose process lives on, is still silent: gone names others.
    alive_too = looked([main, *ended], silent_s=5, hang=HangEvidence(gone=frozenset({813})))
    assert by_id(evaluate(alive_too, lim))["probe"].cause.endswith("silent: pid 812 (7 s ago)")

def test_one_look_at_the_cpu_says_its_lifetime_average():
    e = looked([], cpu=None, silent_s=1)                   # up 300 s, 50 CPU seconds
    cpu = by_id(evaluate(e, LIM))["cpu"]
    assert cpu.state is CheckState.OK and cpu.cause.startswith("50.0 CPU seconds in 5 min, 17 % CPU on average"), cpu


def test_the_gpus_check_judges_any_program_s_gpus():
    e = looked([], silent_s=1, files=files("launch.sh", "launch.json", "train.log"), launch=launch())
    cl = evaluate(e, LIM)
    snap = GpuSnapshot(NOW, "nvml", gpus=(
        GpuSample(0, "H200", "u0", util_sm_pct=90.0, processes=(GpuProcess(201, 2 << 30, is_run_process=True,
                                                                             sm_util_pct=88.0),)),
        GpuSample(1, "H200", "u1", util_sm_pct=0.0)))
    gpus = by_id(with_gpu_check(cl, e, snap))["gpus"]
    assert gpus.state is CheckState.OK and gpus.cause == "run processes on 1 GPU(s) (0), 2.0 GiB, 88 % SM " \
                                                         "(the run's processes)", gpus
    none = by_id(with_gpu_check(cl, e, replace(snap, gpus=snap.gpus[1:])))["gpus"]
    assert none.state is CheckState.OK and "no process of the run on the host's 1 GPU(s)" in none.cause, none


def test_json_threads_carry_class_where_and_since():
    ranks = [rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step", ident=7), rank=0),
             rep(202, th("MainThread", "/w/train.py:9 checkpoint_to_slow_disk", ident=8), rank=1)]
    cl = evaluate(looked(*held((NOW - 180, ranks), (NOW - 0.5, ranks))), LIM)
    threads = cl.to_dict()["threads"]
    assert threads == [
        {"name": "MainThread", "state": "STUCK", "why": "in a collective in all_reduce (train.py:42)", "pid": 201,
         "rank": 0, "class": "collective", "doing": "all_reduce", "where": "step (train.py:42)", "since": NOW - 180,
         "source": "probe", "stale": False},
        {"name": "MainThread", "state": "STUCK", "why": "blocked in a C call in checkpoint_to_slow_disk (train.py:9)",
         "pid": 202, "rank": 1, "class": "blocked", "doing": "", "where": "checkpoint_to_slow_disk (train.py:9)",
         "since": NOW - 180, "source": "probe", "stale": False}], threads


def test_start_up_in_library_code_is_starting_never_stalled():
    # import torch: deep in library code with no frame of the program in view, busy; its
    # functions change from look to look. Neither a hang nor the program's progress.
    a = [rep(201, th("MainThread", f"{STD}/inspect.py:1230 getblock", f"{STD}/inspect.py:1250 getsource"), cpu_s=10)]
    b = [rep(201, th("MainThread", f"{SITE}/torch/_ops.py:844 __init__", f"{SITE}/torch/_ops.py:900 load"),
             cpu_s=11.8)]
    e = looked(*held((NOW - 3, a), (NOW - 1, b)), cpu=1.0, silent_s=200)
    e = replace(e, activity=replace(e.activity, log_grew_at=None, program_output=False, output_polls=0))
    cl = evaluate(e, LIM)
    assert cl.verdict is Verdict.STARTING and cl.summary == ("no output yet but its stack moves in library code "
                                                              "(MainThread in __init__ (_ops.py:844))"), cl.summary
    imports = [rep(201, th("MainThread", "<frozen importlib._bootstrap>:1165 _find_and_load", "/w/t.py:1 <module>"))]
    cl = evaluate(replace(e, probes=imports), LIM)
    assert cl.verdict is Verdict.STARTING and cl.summary.startswith("importing modules: no output yet"), cl.summary


def test_a_library_s_polling_loop_is_not_progress():
    # The main process polls its DataLoader's queue: the library frames change, the wait does not.
    a = [rep(201, th("MainThread", f"{STD}/selectors.py:415 select", f"{STD}/multiprocessing/connection.py:947 wait",
                     f"{SITE}/torch/utils/data/dataloader.py:1291 _try_get_data"))]
    b = [rep(201, th("MainThread", f"{STD}/multiprocessing/connection.py:440 _poll",
                     f"{SITE}/torch/utils/data/dataloader.py:1291 _try_get_data"))]
    cl = evaluate(looked(*held((NOW - 90, a), (NOW - 2, b), (NOW - 1, a))), LIM)
    assert cl.verdict is Verdict.STALLED and cl.summary.startswith("waiting for DataLoader workers: MainThread in "
                                                                   "dataloader._try_get_data"), cl.summary


def test_check_text_names_each_stuck_thread():
    from dflash_tui.cli import render_text
    from dflash_tui.config import Profile
    from dflash_tui.run.verdict.report import report_from

    ranks = [rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step", ident=7), rank=0),
             rep(202, th("MainThread", "/w/train.py:9 checkpoint_to_slow_disk", ident=8), rank=1)]
    ev = looked(*held((NOW - 180, ranks), (NOW - 0.5, ranks)))
    report = report_from(ev, evaluate(ev, LIM), profile="p", target_label="local")
    text = render_text(Profile(name="p", run_dir="/r"), report, now=NOW)
    assert text.splitlines()[-2:] == [
        "  thread  rank 0 · pid 201 MainThread: collective all_reduce in step (train.py:42)  (3m00s)",
        "  thread  rank 1 · pid 202 MainThread: blocked in checkpoint_to_slow_disk (train.py:9)  (3m00s)"], text


def test_several_nodes_name_the_node_whose_rank_is_not_in_the_collective():
    from dflash_tui.run.verdict.combine import NodeReport, combine
    from dflash_tui.run.verdict.report import report_from

    gpu1 = looked(*held((NOW - 180, [rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step"), rank=0)]),
                        (NOW - 0.5, [rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step"), rank=0)])))
    slow = [rep(301, th("MainThread", "/w/train.py:9 checkpoint_to_slow_disk", "/w/train.py:80 main"), rank=1)]
    gpu2 = looked(*held((NOW - 180, slow), (NOW - 0.5, slow)))
    nodes = [NodeReport(name, rank, report_from(e, evaluate(e, LIM), profile="p", target_label=name))
             for name, rank, e in (("gpu1", 0, gpu1), ("gpu2", 1, gpu2))]
    assert [n.verdict for n in nodes] == [Verdict.STALLED, Verdict.STALLED]
    run = combine(nodes)
    assert run.verdict is Verdict.STALLED
    assert run.summary == ("hung in a collective: node gpu1 (rank 0) waits in all_reduce (train.py:42); "
                           "node gpu2 (rank 1) is not in it: checkpoint_to_slow_disk (train.py:9)"), run.summary


def test_torchrun_s_agent_is_no_rank_on_any_node():
    from dflash_tui.run.verdict.combine import NodeReport, combine
    from dflash_tui.run.verdict.report import report_from

    # Each node runs its torchrun agent (no rank) beside its rank; only the ranks are named.
    agent = rep(150, th("MainThread", f"{SITE}/torch/distributed/elastic/agent/server/api.py:908 _invoke_run",
                        f"{SITE}/torch/distributed/launcher/api.py:308 launch_agent"))
    waiting = [agent, rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step"), rank=0)]
    slow = [agent, rep(301, th("MainThread", "/w/train.py:9 checkpoint_to_slow_disk", "/w/train.py:80 main"), rank=1)]
    gpu1, gpu2 = (looked(*held((NOW - 180, p), (NOW - 0.5, p))) for p in (waiting, slow))
    cl = evaluate(gpu1, LIM)
    assert cl.summary.startswith("hung in a collective: rank 0 waits in all_reduce (train.py:42) for 3 min; "
                                 "no step"), cl.summary
    nodes = [NodeReport(name, rank, report_from(e, evaluate(e, LIM), profile="p", target_label=name))
             for name, rank, e in (("gpu1", 0, gpu1), ("gpu2", 1, gpu2))]
    assert combine(nodes).summary == ("hung in a collective: node gpu1 (rank 0) waits in all_reduce (train.py:42); "
                                      "node gpu2 (rank 1) is not in it: checkpoint_to_slow_disk (train.py:9)")


def test_threads_compiling_at_zero_cpu_are_a_deadlock_in_the_compiler():
    # The incident: eight threads sharing one compiled flex_attention, every one in the compiler.
    p = [rep(201, *(th(f"drafter{i}", f"{SITE}/torch/_dynamo/convert_frame.py:900 _compile",
                       "/w/attn.py:30 forward", compile_state="compiling", ident=i) for i in range(8)))]
    cl = evaluate(looked(*held((NOW - 100, p), (NOW - 0.5, p)), cpu=0.0), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("deadlock in the compiler: 8 threads in the compiler for 2 min, 0 % CPU"), cl.summary
    assert "(limit stall_after_s 60 s)" in by_id(cl)["progress"].cause


def test_the_fleet_row_leads_with_the_kind_of_hang():
    from dflash_tui.config import Profile
    from dflash_tui.contract.rundir import ThreadStatus, TrainStatus
    from dflash_tui.fleet.row import row_from_report
    from dflash_tui.run.verdict.report import report_from

    # The bundled trainer: its heartbeat check fails first; the row still says the kind first.
    st = TrainStatus(run_id="r1", pid=201, time=NOW - 90, phase="training", step=5, heartbeat_time=NOW - 90,
                     threads=[ThreadStatus("MainThread", "main", "cpu", "compiled", last_beat_time=NOW - 90)])
    p = [rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step"))]
    e = looked(*held((NOW - 90, p), (NOW - 0.5, p)), status=st)
    report = report_from(e, evaluate(e, LIM), profile="p", target_label="t")
    assert report.checklist.verdict is Verdict.STALLED
    assert not report.checklist.summary.startswith("hung in a collective"), report.checklist.summary
    row = row_from_report(Profile(name="p", run_dir="/r"), report)
    assert row.cause.startswith("hung in a collective: MainThread waits in all_reduce (train.py:42)"), row.cause
    assert row.cause.count("hung in a collective") == 1, row.cause


def test_a_gpu_wait_behind_a_pending_nccl_collective_gets_its_sequence_numbers():
    # NCCL returns to Python at once: the thread waits at the next sync, the collective is pending.
    ranks = [rep(200 + r, th("MainThread", f"{SITE}/torch/cuda/__init__.py:1040 synchronize",
                             "/w/train.py:50 step"), rank=r) for r in range(2)]
    colls = [CollectiveProgress(rank=0, time=NOW - 1, last_enqueued_seq=40, last_completed_seq=39,
                                pending_op="allreduce", pending_seq=40),
             CollectiveProgress(rank=1, time=NOW - 1, last_enqueued_seq=39, last_completed_seq=39)]
    cl = evaluate(looked(*held((NOW - 120, ranks), (NOW - 0.5, ranks)), cpu=2.0,
                         hang=HangEvidence(collectives=colls)), LIM)
    assert cl.summary.startswith("waiting on the GPU: rank 0 in torch.cuda.synchronize (train.py:50); rank 1 in "
                                 "torch.cuda.synchronize (train.py:50) for 2 min; collectives reached: rank 0 #40 "
                                 "(allreduce #40 pending), rank 1 #39 (rank 1 lags)"), cl.summary


def test_a_launcher_s_loop_and_an_idle_library_loop_are_not_progress():
    # torchrun's agent polls its workers (library frames that change, at no CPU) while rank 0
    # waits in a collective: the run is hung, not working.
    def agent(fn: str, cpu: float) -> ProbeReport:
        return rep(150, th("MainThread", f"{SITE}/torch/distributed/elastic/agent/server/api.py:900 {fn}"), cpu_s=cpu)
    worker = rep(201, th("MainThread", *ALL_REDUCE, "/w/train.py:42 step"), rank=0)
    def looks(cpu: tuple[float, float, float], rank: int | None = 0):
        w = replace(worker, rank=rank)
        return held((NOW - 90, [agent("_invoke_run", cpu[0]), w]), (NOW - 2, [agent("_monitor_workers", cpu[1]), w]),
                    (NOW - 1, [agent("_invoke_run", cpu[2]), w]))
    # Even a busy launcher's loop is not the run's.
    cl = evaluate(looked(*looks((1.0, 60.0, 61.0))), LIM)
    assert cl.verdict is Verdict.STALLED and cl.summary.startswith("hung in a collective"), cl.summary
    # Without ranks: an idle library loop is no progress (no CPU between the looks); a busy one is.
    cl = evaluate(looked(*looks((1.0, 1.0, 1.0), rank=None)), LIM)
    assert cl.verdict is Verdict.STALLED, cl.summary
    cl = evaluate(looked(*looks((1.0, 60.0, 61.0), rank=None)), LIM)
    assert cl.verdict is not Verdict.STALLED and "stack moves in library code" in cl.summary, cl.summary
