"""On a GPU host: real NVML through the reader (per-process user, throttle reasons, power against
its limit, under a bf16 matmul load), and the run probe in a torch.compile program on CUDA.

    python3 benchmarks/gpu_probe_check.py      # from the repo root, on the GPU host
"""
import json, os, subprocess, sys, time, tempfile, shutil
sys.path.insert(0, "src")
from dflash_tui.gpu.nvml_reader import NvmlReader
import pynvml
load = subprocess.Popen([sys.executable, "-c",
    "import torch,time\na=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\nt=time.time()\n"
    "while time.time()-t<25: b=a@a\ntorch.cuda.synchronize()"])
time.sleep(8)
r = NvmlReader(lambda: pynvml)
snap = r.sample()
for g in snap.get("gpus", []):
    print("gpu", g.get("index"), g.get("name"), "util", g.get("util_sm_pct"), "mem", g.get("mem_used_bytes"),
          "power", g.get("power_w"), "/", g.get("power_limit_w"), "throttle", g.get("throttle_reasons"), "xid", g.get("xid_count"))
    for p in g.get("processes", []):
        print("   proc", p)
# the run probe: a torch.compile program on CUDA in two threads
run = tempfile.mkdtemp()
probe = os.path.join(run, "probe"); os.makedirs(probe)
shutil.copy("src/dflash_tui/contract/probe.py", os.path.join(probe, "dflash_probe.py"))
shutil.copy("src/dflash_tui/contract/rundir.py", os.path.join(probe, "dflash_rundir.py"))
from dflash_tui.run.launch import probe_install
probe_install.write_probe_dir(probe)
prog = os.path.join(run, "prog.py")
open(prog, "w").write('''
import threading, time, torch
def f(x): return torch.nn.functional.gelu(x @ x).sum()
cf = torch.compile(f)
x = torch.randn(512, 512, device="cuda")
cf(x)
def worker():
    y = torch.randn(1024, 1024, device="cuda")
    for _ in range(50): cf(y)
    time.sleep(3)
t = threading.Thread(target=worker, name="drafter0"); t.start(); t.join()
time.sleep(2)
''')
env = dict(os.environ, DFLASH_RUN_DIR=run, DFLASH_RUN_ID="dev-1", PYTHONPATH=probe)
p = subprocess.run([sys.executable, prog], env=env, capture_output=True, text=True, timeout=240)
print("prog rc", p.returncode, p.stderr[-800:])
for name in os.listdir(probe):
    if name.endswith(".json"):
        rep = json.load(open(os.path.join(probe, name)))
        print("report", name, {k: rep.get(k) for k in ("pid", "torch", "graphs", "recompiles", "compile_seconds", "unique_graphs", "graph_breaks", "ended")})
        for t in rep.get("threads", []):
            print("   thread", t.get("name"), t.get("compile_state"), t.get("graphs"), t.get("compile_seconds"), (t.get("frames") or [""])[0])
if os.path.exists(os.path.join(probe, "errors.log")):
    print("errors.log:", open(os.path.join(probe, "errors.log")).read()[-1500:])
load.wait()
