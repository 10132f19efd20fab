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
