"""The collective bandwidth probe, run on a target by `dflash-tui --health` (never imported there).

health/probe_run.py sends this file's text on stdin to the profile's python (the training
environment: torch is there) with BOOTSTRAP, so nothing is installed on the target. It starts
one worker process per GPU with NCCL where CUDA is available, else 2 gloo processes on CPU,
torchrun-style (MASTER_ADDR 127.0.0.1, a free port, RANK, WORLD_SIZE), times all_reduce of
`--bytes` (warm-ups, then the median of the timed rounds) and prints ONE JSON line:
{"backend", "world_size", "bytes", "seconds", "algbw_gbps", "busbw_gbps", "devices", "torch"}
or {"error": "..."} with one line saying why. Python 3.8, torch imported only where it runs.
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import time

WARMUPS = 3
ROUNDS = 5
CPU_WORKERS = 2


def _say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, backend, nbytes):
    import torch
    import torch.distributed as dist
    dist.init_process_group(backend, rank=rank, world_size=world)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)

    def once():
        start = time.perf_counter()
        dist.all_reduce(x)
        if backend == "nccl":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for _ in range(WARMUPS):
        once()
    times = []
    for _ in range(ROUNDS):
        dist.barrier()
        times.append(once())
    # The slowest rank's median is the collective's time: gather every rank's.
    mine = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if rank == 0:
        _say({"seconds": float(mine.item())})
    dist.destroy_process_group()


def main(argv, source):
    nbytes = int(argv[argv.index("--bytes") + 1]) if "--bytes" in argv else 64 << 20
    limit = float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else 60.0
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        _say({"error": "no torch in %s (%s): the health probe needs the training environment's python"
              % (sys.executable, exc)})
        return 0
    if torch.cuda.is_available() and dist.is_nccl_available() and torch.cuda.device_count() > 0:
        backend, world = "nccl", torch.cuda.device_count()
        devices = [torch.cuda.get_device_name(i) for i in range(world)]
    elif dist.is_gloo_available():
        backend, world = "gloo", CPU_WORKERS
        devices = ["cpu"] * world
    else:
        _say({"error": "torch %s in %s has neither NCCL nor gloo" % (torch.__version__, sys.executable)})
        return 0
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    procs = []
    for rank in range(world):
        p = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, "--worker", str(rank), str(world), backend,
                              str(nbytes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)))
        p.stdin.write(source.encode("utf-8"))
        p.stdin.close()
        p.stdin = None   # written and closed: communicate() must not flush it again
        procs.append(p)
    deadline = time.monotonic() + limit
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outs.append((p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        _say({"error": "all_reduce over %d %s processes did not finish within %.0f s"
              % (world, backend, limit)})
        return 0
    for rank, (code, out, err) in enumerate(outs):
        if code != 0:
            last = [line for line in err.splitlines() if line.strip()][-1:] or ["no output"]
            _say({"error": "%s rank %d exited with %s: %s" % (backend, rank, code, last[0][:300])})
            return 0
    seconds = json.loads(outs[0][1].strip().splitlines()[-1])["seconds"]
    algbw = nbytes / seconds / 1e9
    _say({"backend": backend, "world_size": world, "bytes": nbytes, "seconds": seconds,
          "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world,
          "devices": devices, "torch": torch.__version__, "python": sys.executable})
    return 0


# Reads this file's text from stdin and runs it as __main__, handing it its own source so the
# workers can be started the same way.
BOOTSTRAP = ("import sys;s=sys.stdin.read();exec(compile(s,'<dflash-health>','exec'),"
             "{'__name__':'__main__','PROBE_SOURCE':s})")

if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        r, w, b, n = sys.argv[2:6]
        worker(int(r), int(w), b, int(n))
    else:
        try:
            sys.exit(main(sys.argv[1:], globals().get("PROBE_SOURCE", "")))
        except Exception as exc:   # one line for the dashboard, never a traceback
            _say({"error": "health probe: %s: %s" % (type(exc).__name__, str(exc)[:300])})
