"""The GPU source for a remote host, over a real loopback sshd: the host agent's probe through
SSH, and the nvidia-smi stream when the host's python has no NVML."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dflash_tui.gpu.nvml_reader import nvidia_gpu_present
from dflash_tui.gpu.sample import GpuErrorKind
from dflash_tui.gpu.sources import open_gpu_source
from dflash_tui.gpu.stream import GpuStream
from dflash_tui.remote.factory import make_host_target
from dflash_tui.remote.ssh_dest import SSHDest

pytestmark = pytest.mark.sshd

# The project's interpreter has dflash_tui installed (editable), so the agent it runs over SSH
# can load the fake NVML by module name; a real host would use "pynvml".
VENV_PYTHON = sys.executable


async def test_remote_host_agent_probe_through_ssh(sshd):
    host = make_host_target(SSHDest(**sshd.profile()))
    try:
        source = await open_gpu_source(host, nvml_spec="dflash_tui.gpu.fake_nvml:from_env",
                                       python=VENV_PYTHON)
        async with GpuStream(source, interval=0.05) as stream:
            sub = stream.subscribe()
            snaps = [await anext(sub) for _ in range(3)]
        assert all(s.error is None and len(s.gpus) == 8 for s in snaps)
        assert snaps[-1].source == "nvml" and snaps[-1].gpus[0].name == "NVIDIA H200"
    finally:
        await host.close()


async def test_remote_host_without_nvml_says_why(sshd):
    # /usr/bin/python3 on this machine has no pynvml and there is no nvidia-smi: the answer is a
    # one-line state naming both, through SSH, never an exception.
    if Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has nvidia-smi")
    host = make_host_target(SSHDest(**sshd.profile()))
    try:
        source = await open_gpu_source(host, python="/usr/bin/python3")
        try:
            snap = await source.sample(None)
        finally:
            await source.close()
        if nvidia_gpu_present() is False:
            # A host whose PCI bus shows no NVIDIA GPU: said as that, no driver asked for.
            assert snap.gpus == () and snap.error.kind is GpuErrorKind.NO_GPU, snap.error
            assert snap.error.message == f"no NVIDIA GPU on {os.uname().nodename}"
        else:
            assert snap.gpus == () and snap.error.kind is GpuErrorKind.LIBRARY_NOT_FOUND
            assert "pynvml" in snap.error.message and "nvidia-smi" in snap.error.message
    finally:
        await host.close()


async def test_a_python_missing_on_the_host_falls_back_to_python3(sshd):
    # The profile's python may exist only in the container: the host agent then uses python3.
    host = make_host_target(SSHDest(**sshd.profile()))
    try:
        source = await open_gpu_source(host, python="/nonexistent/container-only/python")
        try:
            snap = await source.sample(None)
        finally:
            await source.close()
        # This host has neither NVML nor nvidia-smi: the answer is the probe's, run by python3.
        assert snap.source == "none" and snap.gpus == (), snap
        if nvidia_gpu_present() is False:   # only the probe reads the PCI bus: it ran
            assert snap.error.kind is GpuErrorKind.NO_GPU, snap.error
        else:
            assert snap.error.kind is GpuErrorKind.LIBRARY_NOT_FOUND, snap.error
            assert "pynvml for the host's python3" in snap.error.message, snap.error.message
        assert "/nonexistent" not in snap.error.message and "\n" not in snap.error.message
        assert type(source).__name__ == "FallbackSource"     # the agent path, not smi alone
    finally:
        await host.close()
