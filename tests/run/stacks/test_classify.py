"""Each thread's class and where, from frames as the run probe reports them (innermost first).

The frames here are copied from real stacks (torch 2.x, CPython 3.11) of the programs in
tests/programs and of the cases the issue names; test_run_hang_programs.py reads them live.
"""

from __future__ import annotations

import pytest

from dflash_tui.run.stacks.classify import ThreadClass as C, classify, own_code, parse_frame, where

SITE = "/opt/venv/lib/python3.11/site-packages"
STD = "/usr/lib/python3.11"


@pytest.mark.parametrize("frames, compile_state, cls, doing, at", [
    # a collective that one rank never joins (gloo): the op the program called, where it called it
    ([f"{SITE}/torch/distributed/distributed_c10d.py:3252 all_reduce",
      f"{SITE}/torch/distributed/c10d_logger.py:83 wrapper", "/home/u/train.py:42 step", "/home/u/train.py:80 main"],
     "", C.COLLECTIVE, "all_reduce", "step (train.py:42)"),
    ([f"{SITE}/torch/distributed/distributed_c10d.py:4800 barrier",
      f"{SITE}/torch/distributed/c10d_logger.py:83 wrapper", "/w/x.py:9 <module>"],
     "", C.COLLECTIVE, "barrier", "<module> (x.py:9)"),
    # a native frame of a py-spy --native dump
    (["ProcessGroupNCCL::WorkNCCL::wait", "/w/x.py:9 sync"], "", C.COLLECTIVE, "ProcessGroupNCCL::WorkNCCL::wait",
     "sync (x.py:9)"),
    # waiting on the GPU
    ([f"{SITE}/torch/cuda/__init__.py:1040 synchronize", "/w/gpu_hang.py:7 <module>"], "", C.GPU,
     "torch.cuda.synchronize", "<module> (gpu_hang.py:7)"),
    ([f"{SITE}/torch/cuda/streams.py:225 synchronize", "/w/t.py:3 f"], "", C.GPU, "torch.cuda.synchronize", "f (t.py:3)"),
    (["cudaStreamSynchronize", "/w/t.py:3 f"], "", C.GPU, "cudaStreamSynchronize", "f (t.py:3)"),
    # compiling: the probe's compile state, or the compiler in the frames it kept
    ([f"{SITE}/sympy/core/basic.py:100 subs", f"{SITE}/sympy/core/expr.py:9 x"], "compiling", C.COMPILING, "", ""),
    ([f"{SITE}/torch/_inductor/scheduler.py:2000 fuse_nodes", f"{SITE}/torch/_inductor/graph.py:10 codegen"], "",
     C.COMPILING, "scheduler.fuse_nodes", ""),
    ([f"{STD}/threading.py:320 wait", f"{STD}/concurrent/futures/_base.py:451 result",
      f"{SITE}/torch/_inductor/async_compile.py:300 wait"], "", C.COMPILING, "async_compile.wait", ""),
    # DataLoader: the main process waits for its workers
    ([f"{STD}/threading.py:324 wait", f"{STD}/multiprocessing/queues.py:113 get",
      f"{SITE}/torch/utils/data/dataloader.py:1243 _try_get_data",
      f"{SITE}/torch/utils/data/dataloader.py:1411 _get_data", f"{SITE}/torch/utils/data/dataloader.py:1430 _next_data",
      "/w/train.py:20 main"], "", C.DATALOADER, "dataloader._try_get_data", "main (train.py:20)"),
    # ... as CPython 3.11 shows it, the DataLoader's frame the sixth of six
    ([f"{STD}/selectors.py:415 select", f"{STD}/multiprocessing/connection.py:947 wait",
      f"{STD}/multiprocessing/connection.py:440 _poll", f"{STD}/multiprocessing/connection.py:257 poll",
      f"{STD}/multiprocessing/queues.py:113 get", f"{SITE}/torch/utils/data/dataloader.py:1291 _try_get_data"],
     "", C.DATALOADER, "dataloader._try_get_data", ""),
    # a worker process reading for it: its own code (a blocking read is a C call from there)
    (["/tmp/dl/dl.py:21 __getitem__", f"{SITE}/torch/utils/data/_utils/fetch.py:56 fetch",
      f"{SITE}/torch/utils/data/_utils/worker.py:374 _worker_loop"], "", C.RUNNING, "", "__getitem__ (dl.py:21)"),
    # import torch: the import machinery, whatever it loads
    (["<frozen importlib._bootstrap>:1165 _find_and_load", "<frozen importlib._bootstrap>:241 _call_with_frames_removed",
      "<frozen importlib._bootstrap_external>:1233 create_module"], "", C.IMPORTING, "import", ""),
    ([f"{SITE}/torch/utils/data/dataloader.py:1243 _try_get_data",
      f"{SITE}/torch/utils/data/dataloader.py:1411 _get_data", "/w/train.py:20 main"], "", C.DATALOADER,
     "dataloader._try_get_data", "main (train.py:20)"),
    # locks, joins, queues
    ([f"{STD}/threading.py:1132 _wait_for_tstate_lock", f"{STD}/threading.py:1112 join", "/w/m.py:30 main"], "",
     C.LOCK, "Thread.join", "main (m.py:30)"),
    ([f"{STD}/queue.py:171 get", "/w/m.py:3 consume"], "", C.LOCK, "queue.get", "consume (m.py:3)"),
    # I/O
    ([f"{STD}/socket.py:718 readinto", f"{STD}/http/client.py:300 _read_status", "/w/d.py:5 fetch"], "", C.IO,
     "socket.readinto", "fetch (d.py:5)"),
    # sleeping where Python shows it
    ([f"{STD}/asyncio/tasks.py:649 sleep", "/w/a.py:5 loop"], "", C.SLEEP, "tasks.sleep", "loop (a.py:5)"),
    (["clock_nanosleep", "/w/a.py:5 loop"], "", C.SLEEP, "clock_nanosleep", "loop (a.py:5)"),
    # its own code: a C call from its own line (a plain Lock, time.sleep) looks like this too
    (["/w/deadlock.py:12 save_checkpoint", "/w/deadlock.py:30 run"], "", C.RUNNING, "", "save_checkpoint (deadlock.py:12)"),
    # in a library that is no known wait, called from its own line: the program runs
    ([f"{SITE}/numpy/core/x.py:5 dot", "/w/a.py:2 f"], "", C.RUNNING, "", "f (a.py:2)"),
    ([f"{SITE}/numpy/core/x.py:5 dot"], "", C.LIBRARY, "dot (x.py:5)", ""),
    ([], "", C.UNKNOWN, "", ""),
])
def test_classify(frames, compile_state, cls, doing, at):
    got = classify(frames, compile_state)
    assert (got.cls, got.doing, got.where) == (cls, doing, at), got


def test_own_code_is_neither_stdlib_nor_packages_nor_the_probe():
    assert own_code(parse_frame("/home/u/train.py:1 main"))
    assert own_code(parse_frame("/tmp/fr.py:16 <module>"))
    for not_own in (f"{SITE}/lightning/x.py:1 f", f"{STD}/threading.py:1 wait", "/r/probe/dflash_probe.py:3 beat",
                    "<frozen importlib._bootstrap>:1 _load", "/usr/lib/python3/dist-packages/x.py:1 f",
                    "/src/pytorch/torch/nn/modules/module.py:1 _call_impl", "/tmp/torchinductor_u/ab/cab.py:1 call"):
        assert not own_code(parse_frame(not_own)), not_own


def test_where_is_the_innermost_own_frame():
    frames = [parse_frame(f) for f in (f"{SITE}/torch/nn/functional.py:1 linear", "/w/model.py:12 forward",
                                       "/w/train.py:40 main")]
    assert where(frames) == "forward (model.py:12)"
    assert where([parse_frame(f"{SITE}/a.py:1 f")]) == ""


# A library's helper thread as the probe reports it (CPython 3.11): threading's bootstrap
# outermost, the library's run loop, then the wait it parks in.
BOOT = (f"{STD}/threading.py:1045 _bootstrap_inner", f"{STD}/threading.py:1002 _bootstrap")


@pytest.mark.parametrize("frames, cls, doing, helper, idle", [
    # tqdm's monitor thread between its checks: an Event.wait (a Condition.wait inside)
    ([f"{STD}/threading.py:331 wait", f"{STD}/threading.py:629 wait", f"{SITE}/tqdm/_monitor.py:69 run", *BOOT],
     C.LOCK, "threading.wait", "tqdm monitor (tqdm/_monitor.py:69)", True),
    # rich's refresh thread (Lightning's RichProgressBar)
    ([f"{STD}/threading.py:331 wait", f"{STD}/threading.py:629 wait", f"{SITE}/rich/live.py:35 run", *BOOT],
     C.LOCK, "threading.wait", "rich refresh (rich/live.py:35)", True),
    # an idle ThreadPoolExecutor worker: SimpleQueue.get is a C call from _worker
    ([f"{STD}/concurrent/futures/thread.py:81 _worker", f"{STD}/threading.py:1010 run", *BOOT],
     C.LOCK, "thread._worker", "thread pool worker (concurrent/futures/thread.py:81)", True),
    # a library thread taking a semaphore: a lock wait, not parked
    ([f"{STD}/threading.py:331 wait", f"{STD}/threading.py:494 acquire", f"{SITE}/lib/pool.py:12 fetch", *BOOT],
     C.LOCK, "threading.wait", "fetch (lib/pool.py:12)", False),
    # ... or a multiprocessing Lock's `with` (its C acquire leaves __enter__ innermost)
    ([f"{STD}/multiprocessing/synchronize.py:95 __enter__", f"{SITE}/lib/pool.py:12 fetch", *BOOT],
     C.LOCK, "synchronize.__enter__", "fetch (lib/pool.py:12)", False),
    # rich's refresh thread redrawing (in its own loop, no wait): threading's bootstrap below it
    # is no lock wait
    ([f"{SITE}/rich/live.py:36 run", *BOOT], C.LIBRARY, "run (live.py:36)", "rich refresh (rich/live.py:36)", False),
    # a thread whose target is a C function: threading's run is innermost; never a wait of its own
    ([f"{STD}/threading.py:1010 run", *BOOT], C.LIBRARY, "a C call, the thread's target",
     "Thread.run (threading.py:1010)", False),
    ([*BOOT], C.LIBRARY, "starting or ending", "Thread._bootstrap_inner (threading.py:1045)", False),
])
def test_a_library_helper_thread_is_named_by_its_library_and_idle_when_parked(frames, cls, doing, helper, idle):
    got = classify(frames)
    assert (got.cls, got.doing, got.where, got.helper, got.idle) == (cls, doing, "", helper, idle), got
    assert "_bootstrap" not in got.doing


def test_a_thread_of_the_program_s_own_is_no_helper():
    got = classify([f"{STD}/queue.py:171 get", "/w/m.py:3 consume", *BOOT])
    assert (got.cls, got.where, got.helper, got.idle) == (C.LOCK, "consume (m.py:3)", "", False), got


def test_the_compiler_s_files_run_by_an_import_are_importing_not_compiling():
    # `import lightning` imports torch._dynamo: its top level runs, and calls into it, under the
    # import machinery (frames as sampled from a real `import torch._dynamo`, torch 2.13).
    imports = ["<frozen importlib._bootstrap>:241 _call_with_frames_removed",
               "<frozen importlib._bootstrap_external>:940 exec_module"]
    for frames in ([f"{SITE}/torch/_dynamo/convert_frame.py:55 <module>", *imports],
                   [f"{SITE}/torch/_subclasses/fake_tensor.py:204 ordered_set",
                    f"{SITE}/torch/_subclasses/fake_tensor.py:3104 FakeTensorMode",
                    f"{SITE}/torch/_subclasses/fake_tensor.py:1432 <module>", *imports]):
        assert classify(frames).cls is C.IMPORTING, frames
    # A dataclass built in a class body of the compiler's, its module's top level past the six
    # frames kept (sampled from a real `import torch._inductor.compile_fx`).
    dataclass_built = ["<string>:0 <module>", f"{STD}/dataclasses.py:433 _create_fn",
                       f"{STD}/dataclasses.py:1034 _process_class", f"{STD}/dataclasses.py:1230 wrap",
                       f"{SITE}/torch/_inductor/scheduler.py:567 NestedReduction"]
    assert classify(dataclass_built).cls is C.IMPORTING
    # A class defined inside a compile (its body, then the compiler's function outside it).
    nested = [f"{SITE}/torch/_inductor/codegen/wrapper.py:90 Line",
              f"{SITE}/torch/_inductor/codegen/wrapper.py:88 codegen", "/w/train.py:9 step"]
    assert classify(nested).cls is C.COMPILING
    # A real compile that imports a module lazily, or that the script's own top level started.
    lazy = [f"{SITE}/torch/_inductor/codegen/triton.py:1 <module>", *imports,
            f"{SITE}/torch/_inductor/compile_fx.py:700 compile_fx_inner", "/w/train.py:9 <module>"]
    assert classify(lazy).cls is C.COMPILING
    assert classify([f"{SITE}/torch/_dynamo/convert_frame.py:900 _compile", "/w/train.py:9 <module>"]).cls \
        is C.COMPILING


SAMPLE_IMPORT = """\
import json, sys, threading, time
main, out, done = threading.main_thread().ident, [], threading.Event()

def sample():
    while not done.is_set():
        f, lines = sys._current_frames().get(main), []
        while f is not None and len(lines) < 6:          # as the probe keeps them
            lines.append(f"{f.f_code.co_filename}:{f.f_lineno} {f.f_code.co_name}")
            f = f.f_back
        out.append(lines)
        time.sleep(0.002)

t = threading.Thread(target=sample)
t.start()
import torch._dynamo, torch._inductor.compile_fx    # what `import lightning` brings in, and more
done.set()
t.join()
print(json.dumps(out))
"""


def test_a_real_import_of_the_compiler_is_importing_not_compiling():
    """`import lightning` imports torch._dynamo: sampled as it runs (every 2 ms, the frames the
    probe keeps), the thread imports; it compiles nothing. Where the six frames kept show the
    import (the machinery, a module's top level) it is never compiling; a call from a module's
    top level deeper than six frames cannot show it, and is rare (about 45 % of the samples read
    compiling before imports were told from compiles)."""
    import json
    import subprocess
    import sys

    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, "-c", SAMPLE_IMPORT], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    stacks = [s for s in json.loads(res.stdout) if s]
    classes = [classify(s).cls for s in stacks]
    assert classes.count(C.IMPORTING) > 20, (len(stacks), set(classes))
    compiling = [s for s, c in zip(stacks, classes) if c is C.COMPILING]
    shown = [s for s in compiling if any(" <module>" in f or f.startswith("<frozen importlib") for f in s)]
    assert not shown, shown[:2]
    assert len(compiling) <= len(stacks) // 50, (len(compiling), len(stacks), compiling[:2])
