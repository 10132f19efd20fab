"""The probe source shipped to GPU hosts must run on their python: 3.8 grammar, stdlib only."""

from __future__ import annotations

import ast
import sys

import pytest

from dflash_tui.gpu.agent_probe import gpu_agent_sources


def test_probe_source_is_python38_and_stdlib_only():
    (src,) = gpu_agent_sources()
    tree = ast.parse(src, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module != "__future__", "no relative/__future__ imports"
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_probe_refuses_a_hostile_module_spec():
    with pytest.raises(ValueError, match="bad NVML module spec"):
        gpu_agent_sources("pynvml; import os")
