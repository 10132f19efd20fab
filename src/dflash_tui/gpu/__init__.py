"""GPU telemetry: per-GPU samples wherever the run lives.

sample.py       the dataclasses every source produces (shared contract)
nvml_reader.py  reads all GPUs through an injected NVML module; stdlib-only, also runs in the agent
nspid.py        host pid <-> container pid through NSpid; marks the run's GPU processes
agent_probe.py  the `gpu.sample` op shipped to the host's persistent agent
smi.py          the nvidia-smi fallback: query argv and stream parsers
sources.py      local NVML, agent probe, nvidia-smi stream, fallback; `open_gpu_source`
stream.py       GpuStream: one 1 Hz sampler, many subscribers, bounded history
health.py       the checklist's "gpus" check
codec.py        probe dicts <-> dataclasses, with validation
fake_nvml.py    a pynvml stand-in with the real error classes, for CI and benchmarks
"""
