"""FusedAdamW (adamw.py) is torch.optim.AdamW(fused=True), bit for bit, without torch._dynamo:
the same tensors after every step, the same state_dict, checkpoints exchanged both ways."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import torch

from dflash_train.adamw import TORCH_GROUP_FLAGS, FusedAdamW

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
HP = {"lr": 3e-3, "betas": (0.9, 0.95), "weight_decay": 0.01}


def _params(device: str, seed: int = 0) -> list[torch.nn.Parameter]:
    """A drafter's mix: matrices, vectors, a scalar; bfloat16 where the trainer uses it (CUDA)
    plus one float32 parameter there, so the kernel runs once per (device, dtype)."""
    g = torch.Generator().manual_seed(seed)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shapes = [(64, 32), (32,), (), (17, 5, 3)]
    ps = [torch.nn.Parameter(torch.randn(s, generator=g).to(device=device, dtype=dtype)) for s in shapes]
    ps.append(torch.nn.Parameter(torch.randn(8, generator=g, device="cpu").to(device)))   # float32
    return ps


def _set_grads(params, step: int) -> None:
    g = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device=p.device, dtype=p.dtype)


def _torch_adamw(params):
    return torch.optim.AdamW(params, lr=HP["lr"], betas=HP["betas"], weight_decay=HP["weight_decay"], fused=True)


def _ours(params):
    return FusedAdamW(params, **HP)


def _run(opt, params, steps, first=0):
    for s in range(first, first + steps):
        _set_grads(params, s)
        for group in opt.param_groups:
            group["lr"] = HP["lr"] * (s + 1) / 10     # the trainer's warm-up sets lr every step
        opt.step()


def _assert_same_state(a_state: dict, b_state: dict) -> None:
    assert list(a_state) == list(b_state)
    for k in a_state:
        assert set(a_state[k]) == set(b_state[k]) == {"step", "exp_avg", "exp_avg_sq"}
        for name in a_state[k]:
            x, y = a_state[k][name], b_state[k][name]
            assert x.dtype == y.dtype and x.device == y.device and torch.equal(x, y), (k, name)


def _roundtrip(state_dict):
    """Through torch.save / torch.load as the checkpoint store does."""
    buf = io.BytesIO()
    torch.save(state_dict, buf)
    buf.seek(0)
    return torch.load(buf, map_location="cpu", weights_only=True)


@pytest.mark.parametrize("device", DEVICES)
def test_every_step_is_bit_identical_to_torch_fused_adamw(device):
    pa, pb = _params(device), _params(device)
    ref, ours = _torch_adamw(pa), _ours(pb)
    for s in range(6):
        _run(ref, pa, 1, first=s)
        _run(ours, pb, 1, first=s)
        for a, b in zip(pa, pb):
            assert torch.equal(a, b), s
    _assert_same_state(ref.state_dict()["state"], ours.state_dict()["state"])


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_has_torch_adamws_layout(device):
    pa, pb = _params(device), _params(device)
    ref, ours = _torch_adamw(pa), _ours(pb)
    _run(ref, pa, 2)
    _run(ours, pb, 2)
    a, b = ref.state_dict(), ours.state_dict()
    assert set(a) == set(b) == {"state", "param_groups"}
    (ga,), (gb,) = a["param_groups"], b["param_groups"]
    assert {k: gb[k] for k in ga} == ga                           # every key torch keeps, same value
    assert set(gb) - set(ga) <= set(TORCH_GROUP_FLAGS)            # an older torch may keep fewer flags
    _assert_same_state(a["state"], b["state"])


@pytest.mark.parametrize("device", DEVICES)
def test_checkpoints_move_between_it_and_torch_adamw_both_ways(device):
    """A checkpoint of either optimizer, saved and loaded as the trainer does, continues in the
    other exactly as an uninterrupted run of torch's AdamW."""
    straight = _params(device)
    ref = _torch_adamw(straight)
    _run(ref, straight, 6)

    # torch.optim -> ours, then ours -> torch.optim
    p1 = _params(device)
    first = _torch_adamw(p1)
    _run(first, p1, 2)
    p2 = [torch.nn.Parameter(p.detach().clone()) for p in p1]
    second = _ours(p2)
    second.load_state_dict(_roundtrip(first.state_dict()))
    _run(second, p2, 2, first=2)
    p3 = [torch.nn.Parameter(p.detach().clone()) for p in p2]
    third = _torch_adamw(p3)
    third.load_state_dict(_roundtrip(second.state_dict()))
    _run(third, p3, 2, first=4)

    for a, b in zip(straight, p3):
        assert torch.equal(a, b)
    _assert_same_state(ref.state_dict()["state"], third.state_dict()["state"])


def test_a_parameter_without_gradient_keeps_its_value_and_gets_no_state():
    pa, pb = _params("cpu"), _params("cpu")
    ref, ours = _torch_adamw(pa), _ours(pb)
    for params, opt in ((pa, ref), (pb, ours)):
        _set_grads(params, 0)
        params[1].grad = None
        opt.step()
    assert torch.equal(pb[1], _params("cpu")[1])
    assert pb[1] not in ours.state
    _assert_same_state(ref.state_dict()["state"], ours.state_dict()["state"])


def test_optimizers_loaded_from_one_state_share_no_tensor():
    """The trainer loads one checkpoint into every replica's optimizer: a shared tensor would
    make every replica step one Adam state."""
    src = _params("cpu")
    opt = _ours(src)
    _run(opt, src, 1)
    state = opt.state_dict()
    a, b = _ours(_params("cpu")), _ours(_params("cpu"))
    a.load_state_dict(state)
    b.load_state_dict(state)
    tensors = [t for o in (a, b, opt) for s in o.state.values() for t in s.values()]
    assert len({t.data_ptr() for t in tensors}) == len(tensors)


def test_a_state_of_other_parameters_is_refused():
    opt = _ours(_params("cpu"))
    state = _ours(_params("cpu")[:2]).state_dict()
    with pytest.raises(ValueError, match="holds \\[2\\] parameter"):
        opt.load_state_dict(state)


def test_it_never_imports_torch_dynamo():
    """The reason it exists: torch.optim imports torch._dynamo (seconds) on construction."""
    code = ("import sys, torch\n"
            "from dflash_train.adamw import FusedAdamW\n"
            "p = torch.nn.Parameter(torch.ones(4)); opt = FusedAdamW([p])\n"
            "p.grad = torch.ones(4); opt.step()\n"
            "FusedAdamW([torch.nn.Parameter(torch.ones(4))]).load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules)\n"
            "torch.optim.AdamW([p], fused=True)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]    # the second line shows the check can fail
