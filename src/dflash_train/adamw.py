"""AdamW for the drafter replicas: torch's fused AdamW kernel, called without torch.optim.

Why not `torch.optim.AdamW(fused=True)`: the update is the same kernel, but torch.optim's
Optimizer wraps its construction (`add_param_group`), `step`, `zero_grad` and `load_state_dict`
in functions that import torch._dynamo at their first call, and that import is seconds of
Python holding the GIL. Nothing else before the trainer's first step needs dynamo (the step
runs eager while the compiled one is built after it), so with torch.optim the first step
either waited for that import or shared the interpreter with it.

Bit for bit `torch.optim.AdamW(params, lr, betas, eps, weight_decay, fused=True)`: the same
state per parameter (`step`, a float32 scalar on the parameter's device; `exp_avg` and
`exp_avg_sq` shaped like the parameter), `step` advanced by `torch._foreach_add_` before the
kernel, one `torch._fused_adamw_` call per (device, dtype) of the parameters in their order,
and the same `state_dict()` layout, so a checkpoint's optimizer state loads into either.
tests/train/test_adamw.py holds it to torch's own optimizer (the same tensors after every
step, the same state_dict, checkpoints exchanged both ways). The fused kernel also reads no
process-global flag (unlike the unfused AdamW, see pool.py), so a step's arithmetic never
depends on another thread compiling.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

# The flags torch.optim.AdamW keeps in a parameter group (its state_dict carries them): this
# optimizer is that AdamW with these settings, and no other.
TORCH_GROUP_FLAGS = {"amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                     "differentiable": False, "fused": True, "decoupled_weight_decay": True}
HYPERPARAMETERS = ("lr", "betas", "eps", "weight_decay")


class FusedAdamW:
    """AdamW over one list of parameters (one group), updated by torch's fused kernel.

    `param_groups[0]` holds the hyperparameters under torch.optim's keys (set `"lr"` there to
    schedule the learning rate); `state` maps each parameter that has been stepped to its
    `step`, `exp_avg` and `exp_avg_sq`, as torch.optim's `state` does."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        params = list(params)
        if not params:
            raise ValueError("FusedAdamW got an empty parameter list")
        for p in params:
            if not p.is_floating_point():
                raise ValueError(f"FusedAdamW updates floating-point parameters only (got {p.dtype})")
        if not (lr >= 0 and eps >= 0 and weight_decay >= 0 and 0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"FusedAdamW: invalid hyperparameters lr={lr} betas={betas} eps={eps} "
                             f"weight_decay={weight_decay}")
        self.param_groups: list[dict[str, Any]] = [
            {"params": params, "lr": lr, "betas": (float(betas[0]), float(betas[1])), "eps": eps,
             "weight_decay": weight_decay, **TORCH_GROUP_FLAGS}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def step(self) -> None:
        """One AdamW update of every parameter that has a gradient (the others keep their state)."""
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        # (device, dtype) -> (params, grads, exp_avgs, exp_avg_sqs, steps), parameters in order
        batches: dict[tuple[torch.device, torch.dtype], tuple[list[torch.Tensor], ...]] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("FusedAdamW does not take sparse gradients")
            state = self.state.get(p) or self._new_state(p)
            batch = batches.setdefault((p.device, p.dtype), ([], [], [], [], []))
            for lst, t in zip(batch, (p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"])):
                lst.append(t)
        with torch.no_grad():
            for params, grads, exp_avgs, exp_avg_sqs, steps in batches.values():
                torch._foreach_add_(steps, 1)
                torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=group["lr"],
                                    beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"],
                                    eps=group["eps"], amsgrad=False, maximize=False,
                                    grad_scale=None, found_inf=None)

    def _new_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state[p] = {
            "step": torch.zeros((), dtype=torch.float32, device=p.device),
            "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
        }
        return state

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: parameters by their index, state tensors as they are (not copies)."""
        index = {id(p): i for i, p in enumerate(self.params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.params)))
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()}, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from `state_dict` (this optimizer's or a torch.optim Adam/AdamW's over the
        same parameters): the state is copied, cast to each parameter's dtype and device as
        torch.optim does, so optimizers loaded from one dict never share a tensor."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(f"the optimizer state holds {[len(g['params']) for g in groups]} parameter(s) "
                             f"by group; this optimizer has one group of {len(self.params)}")
        saved = groups[0]
        if saved.get("amsgrad") or saved.get("maximize") or saved.get("decoupled_weight_decay") is False:
            raise ValueError("the optimizer state is not plain AdamW's (amsgrad, maximize or Adam's "
                             "coupled weight decay)")
        by_index = dict(zip(saved["params"], self.params))
        state = {}
        for i, s in state_dict["state"].items():
            p = by_index[i]
            state[p] = {
                "step": torch.as_tensor(s["step"]).to(dtype=torch.float32, device=p.device, copy=True),
                "exp_avg": s["exp_avg"].to(dtype=p.dtype, device=p.device, copy=True),
                "exp_avg_sq": s["exp_avg_sq"].to(dtype=p.dtype, device=p.device, copy=True),
            }
        self.state = state
        for key in HYPERPARAMETERS:
            self.param_groups[0][key] = tuple(saved[key]) if key == "betas" else saved[key]
