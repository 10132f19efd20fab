"""What the driver itself answers for per-process utilisation while a kernel spins: the raw
nvmlDeviceGetProcessUtilization samples (or its error), the running processes' pids, and the
product's NvmlReader view, three times a second apart."""

import json
import subprocess
import sys
import time

import pynvml

from dflash_tui.gpu.nvml_reader import NvmlReader

spin = subprocess.Popen([sys.executable, "-c", "import torch; torch.cuda._sleep(1 << 40); torch.cuda.synchronize()"])
time.sleep(8)
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
reader = NvmlReader(lambda: pynvml)
out = {"spinner_pid": spin.pid, "looks": []}
for _ in range(3):
    look = {"running": [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)],
            "device_util": pynvml.nvmlDeviceGetUtilizationRates(h).gpu}
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(h, int((time.time() - 3) * 1e6))
        look["samples"] = [(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in samples][:12]
    except pynvml.NVMLError as exc:
        look["error"] = f"{type(exc).__name__} {exc.value}"
    look["reader"] = [(p["pid"], p["sm_util_pct"], p["mem_util_pct"]) for g in reader.sample()["gpus"]
                      for p in g["processes"]]
    out["looks"].append(look)
    time.sleep(1)
spin.kill()
print(json.dumps(out))
