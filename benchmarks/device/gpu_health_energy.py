"""On the GPU machine (issue 46 items 3 and 4): the node-health fields of every GPU as NVML gives
them and as the product's reader and "gpu_health" check read them, then the total-energy
counter against the power integrated at 10 Hz over a minute of bf16 matmuls on GPU 0.

Prints one JSON object per line; the last line is the summary with the energy ratio.
Usage: python3 benchmarks/device/gpu_health_energy.py [SECONDS]   (PYTHONPATH=src)
"""

from __future__ import annotations

import json
import sys
import threading
import time

import pynvml
import torch

from dflash_tui.gpu.codec import snapshot_from_dict
from dflash_tui.gpu.nvml_reader import NvmlReader
from dflash_tui.run.verdict.energy import run_energy
from dflash_tui.run.verdict.gpu_health import gpu_health_check


def raw_health(h) -> dict:
    """Each health getter called directly, its answer or the NVML error's name."""
    def ask(fn, *args):
        try:
            value = fn(h, *args)
            return list(value) if isinstance(value, tuple) else value
        except pynvml.NVMLError as exc:
            return f"error: {exc}"

    return {
        "ecc_volatile_uncorrected": ask(pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                        pynvml.NVML_VOLATILE_ECC),
        "ecc_aggregate_uncorrected": ask(pynvml.nvmlDeviceGetTotalEccErrors, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                         pynvml.NVML_AGGREGATE_ECC),
        "retired_pages_dbe": ask(lambda d: len(pynvml.nvmlDeviceGetRetiredPages(
            d, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))),
        "retired_pages_pending": ask(pynvml.nvmlDeviceGetRetiredPagesPendingStatus),
        "remapped_rows(corr,unc,pending,failed)": ask(pynvml.nvmlDeviceGetRemappedRows),
        "pcie_gen/max": [ask(pynvml.nvmlDeviceGetCurrPcieLinkGeneration), ask(pynvml.nvmlDeviceGetMaxPcieLinkGeneration)],
        "pcie_width/max": [ask(pynvml.nvmlDeviceGetCurrPcieLinkWidth), ask(pynvml.nvmlDeviceGetMaxPcieLinkWidth)],
        "clock_event_reasons": ask(pynvml.nvmlDeviceGetCurrentClocksEventReasons),
        "energy_mj": ask(pynvml.nvmlDeviceGetTotalEnergyConsumption),
    }


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        print(json.dumps({"gpu": i, "name": pynvml.nvmlDeviceGetName(h), "raw": raw_health(h)}), flush=True)

    reader = NvmlReader(lambda: pynvml)
    t0 = time.perf_counter()
    snap = snapshot_from_dict(reader.sample())
    first_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    reader.sample()
    second_ms = (time.perf_counter() - t0) * 1000
    for g in snap.gpus:
        print(json.dumps({"reader_gpu": g.index, **{k: getattr(g, k) for k in (
            "ecc_errors_uncorrected", "ecc_errors_uncorrected_aggregate", "retired_pages", "retired_pages_pending",
            "remapped_rows_uncorrectable", "remap_pending", "remap_failed", "pcie_gen", "pcie_gen_max", "pcie_width",
            "pcie_width_max", "throttle_reasons", "xid_errors", "energy_mj")}}), flush=True)
    check = gpu_health_check(snap, where="this host")
    print(json.dumps({"gpu_health": check.state.value, "cause": check.cause, "hint": check.hint,
                      "reader_first_sample_ms": round(first_ms, 2), "reader_next_sample_ms": round(second_ms, 2)}),
          flush=True)

    # A minute of bf16 matmuls on GPU 0; power sampled at 10 Hz and integrated (trapezoid).
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    stop = threading.Event()

    def work() -> None:
        a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    time.sleep(3)   # past the ramp: the integral starts with the load steady
    e_start = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    r_start = snapshot_from_dict(reader.sample()).gpus[0].energy_mj
    t_prev, p_prev = time.monotonic(), pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
    t_end = t_prev + seconds
    joules_power, samples = 0.0, 0
    while True:
        time.sleep(0.1)
        t, p = time.monotonic(), pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        joules_power += (p + p_prev) / 2 * (t - t_prev)
        t_prev, p_prev = t, p
        samples += 1
        if t >= t_end:
            break
    e_end = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    r_end = snapshot_from_dict(reader.sample()).gpus[0].energy_mj
    stop.set()
    worker.join()
    joules_counter = (e_end - e_start) / 1000.0
    print(json.dumps({
        "seconds": round(seconds, 1), "power_samples": samples,
        "joules_counter": round(joules_counter, 1), "joules_power_10hz": round(joules_power, 1),
        "ratio_counter_over_power": round(joules_counter / joules_power, 4) if joules_power else None,
        "joules_reader": None if r_start is None or r_end is None else round((r_end - r_start) / 1000.0, 1),
        # the product's own arithmetic (run/verdict/energy.py) on the reader's two readings
        "run_energy": run_energy({"0": r_start}, {0: r_end}, power_w=joules_power / seconds).to_json(),
        "mean_w": round(joules_power / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
