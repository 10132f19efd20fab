"""Learning quality on CPU, tiny preset: the default target carries structure, and a drafter
trained on it learns (loss falls, accuracy rises) and is accepted more (τ rises).

Single thread, our own short loop: the thread pool has its own tests (runtime).
"""

from __future__ import annotations

import pytest
import torch

from dflash_train.attention import SdpaAttention
from dflash_train.config import ModelConfig
from dflash_train.data import BatchSource, open_stream
from dflash_train.model.drafter import build_drafter
from dflash_train.model.target import TargetModel, build_target, freeze
from dflash_train.model.layers import init_weights
from dflash_train.objective import drafter_loss, target_forward
from dflash_train.verify import acceptance_stats

CFG = ModelConfig.preset("tiny")


@pytest.fixture(scope="module")
def target():
    # Uses the shared on-disk cache (DFLASH_TRAIN_CACHE or ~/.cache/dflash_train): the pre-fit
    # runs once per machine, then loads in milliseconds.
    return build_target(CFG, seed=0)


@pytest.fixture(scope="module")
def source():
    return BatchSource(open_stream("synthetic", seed=0), 8, (64, 128), seed=0)


def _greedy_continuation(model, prompt, n):
    ids = prompt.view(1, -1)
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    return ids[0, prompt.numel():]


def test_default_target_has_learnable_structure_a_random_one_does_not(target, source):
    prompts = source.heldout_prompts(4, 32)
    random_target = TargetModel(CFG)
    init_weights(random_target, torch.Generator().manual_seed(0))
    freeze(random_target)
    # Teacher-forced: the pre-fit target predicts the held-out text; the random one does not.
    batch = next(iter([source.batch_at(0)]))
    fitted = target_forward(target, batch)
    rand = target_forward(random_target, batch)
    fit_match = (fitted.greedy[:, 1:] == batch.input_ids[:, 1:]).float().mean().item()
    rand_match = (rand.greedy[:, 1:] == batch.input_ids[:, 1:]).float().mean().item()
    assert fit_match > 0.6 > 0.1 > rand_match, (fit_match, rand_match)
    # Free-running: the random target repeats one token (measured: token 109 forever, for init
    # seeds 0, 1 and 2), so a drafter that always guesses it would score τ = block: the trap.
    # The pre-fit target writes words of the language (17-21 distinct bytes per 48).
    assert len(set(_greedy_continuation(random_target, prompts[0], 48).tolist())) <= 2
    text = bytes(_greedy_continuation(target, prompts[0], 48).tolist()).decode("ascii", "replace")
    assert len(set(text)) >= 8 and " " in text, text


@pytest.fixture
def one_thread():
    # Two shared cores: one intra-op thread per process avoids oversubscription stalls.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_drafter_learns_and_tau_rises(target, source, one_thread):
    torch.manual_seed(0)
    prompts = source.heldout_prompts(4, 32)
    attention = SdpaAttention()
    drafter = build_drafter(CFG, target, seed=1)
    untrained = acceptance_stats(target, drafter, prompts, attention, max_new_tokens=32)

    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
    gen = torch.Generator().manual_seed(0)
    losses, accs = [], []
    for _ in range(300):
        loss, m = drafter_loss(drafter, target_forward(target, next(source)), gen, attention)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(m["loss"])
        accs.append(m["acc"])
    trained = acceptance_stats(target, drafter, prompts, attention, max_new_tokens=32)

    def mean(xs):
        return sum(xs) / len(xs)

    early_loss, late_loss = mean(losses[10:60]), mean(losses[-50:])
    early_acc, late_acc = mean(accs[:50]), mean(accs[-50:])
    print(f"loss {early_loss:.3f} -> {late_loss:.3f}, acc {early_acc:.3f} -> {late_acc:.3f}, "
          f"tau {untrained.tau:.3f} -> {trained.tau:.3f} {trained.accepted_hist}")
    # Measured here (2 shared cores, torch 2.13): loss 3.18 -> 2.30, acc 0.137 -> 0.298,
    # tau 1.00 -> 3.62. The bounds leave room for other CPUs' float rounding.
    assert late_loss < 0.85 * early_loss
    assert late_acc > early_acc + 0.10
    assert untrained.tau < 1.2
    assert trained.tau > untrained.tau + 1.0
