"""The incident's pattern in a user's program: 8 threads share one torch.compile(flex_attention)
and call it at once, as a thread-pooled trainer's drafter threads did.

`threaded_flex_compile.py [varied]`: with `varied`, each thread's sequence length differs, so
the threads' compiles and recompiles overlap (dynamic shapes) as the drafters' did."""

import sys
import threading

import torch
from torch.nn.attention.flex_attention import flex_attention

compiled = torch.compile(flex_attention)


def drafter(i: int) -> None:
    seq = 256 + 128 * i if sys.argv[1:] == ["varied"] else 512
    q, k, v = (torch.randn(1, 4, seq, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for step in range(3):
        out = compiled(q, k, v)
        torch.cuda.synchronize()
        print(f"thread {i} step {step} norm {out.float().norm().item():.3f}", flush=True)


threads = [threading.Thread(target=drafter, args=(i,), name=f"drafter-{i}") for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("all threads done", flush=True)
