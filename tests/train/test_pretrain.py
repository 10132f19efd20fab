"""The target's pre-fit (model/pretrain.py): a cold start's first run pays it on the critical
path, so it must not import torch._dynamo (seconds of Python holding the GIL)."""

from __future__ import annotations

import subprocess
import sys


def test_the_pre_fit_imports_no_torch_dynamo_and_caches_its_result(tmp_path):
    code = ("import sys, torch\n"
            "from dflash_train.config import ModelConfig\n"
            "from dflash_train.model.target import build_target\n"
            "cfg = ModelConfig.preset('tiny').with_(target_pretrain_steps=4)\n"
            f"build_target(cfg, 0, 'cpu', cache_dir={str(tmp_path)!r})\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False"]
    assert "pre-fitting the target" in out.stderr
    assert len(list(tmp_path.glob("target-*.pt"))) == 1
