"""Config presets and validation, the target (taps, frozen, GQA/RoPE shapes) and the drafter
(what it shares with the target, what it trains, how it rejects bad inputs)."""

from __future__ import annotations

import pytest
import torch

from dflash_train.attention import SdpaAttention
from dflash_train.config import ModelConfig
from dflash_train.model.drafter import build_drafter
from dflash_train.model.hf_target import CheckpointError, config_from_checkpoint, load_hf_target
from dflash_train.model.target import build_target
from dflash_train.objective import build_noise_blocks

CFG = ModelConfig.preset("tiny").with_(target_pretrain_steps=0)


@pytest.fixture(scope="module")
def target():
    return build_target(CFG, seed=0)  # no pre-fit: shapes only


def test_presets_round_trip_and_unknown_names():
    for name in ModelConfig.preset_names():
        cfg = ModelConfig.preset(name)
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown model preset 'huge'; choose one of: tiny, small"):
        ModelConfig.preset("huge")
    with pytest.raises(ValueError, match=r"unknown keys \['colour'\]"):
        ModelConfig.from_dict({**CFG.to_dict(), "colour": 1})


@pytest.mark.parametrize("change, message", [
    (dict(num_kv_heads=3), "multiple of num_kv_heads"),
    (dict(target_layer_ids=(1, 9)), r"target_layer_ids \[9\] are outside the target's layers 0..3"),
    (dict(target_layer_ids=()), "target_layer_ids is empty"),
    (dict(mask_token_id=999), "mask_token_id 999 is outside the vocab"),
    (dict(block_size=1), "block_size must be >= 2"),
    (dict(max_seq_len=16), "max_seq_len \\(16\\) must exceed block_size"),
    (dict(head_dim=15), "head_dim must be even"),
])
def test_config_validation_names_the_problem(change, message):
    with pytest.raises(ValueError, match=message):
        CFG.with_(**change)


def test_target_returns_logits_and_concatenated_taps(target):
    ids = torch.randint(0, 256, (2, 32))
    out = target(ids)
    assert out.logits.shape == (2, 32, CFG.vocab_size)
    assert out.taps.shape == (2, 32, 2 * CFG.hidden_size)
    assert not any(p.requires_grad for p in target.parameters()) and not target.training
    # Taps are the outputs of layers 1 and 3, in that order (layer 3 is the last one, so its
    # tap is what the final norm and head see).
    last = out.taps[..., CFG.hidden_size:]
    torch.testing.assert_close(target.lm_head(target.norm(last)), out.logits)
    # Causal: changing a later token never changes earlier outputs.
    ids2 = ids.clone()
    ids2[:, 20] = (ids2[:, 20] + 1) % 256
    torch.testing.assert_close(target(ids2).taps[:, :20], out.taps[:, :20])


def test_target_is_deterministic_per_seed():
    a, b, c = (build_target(CFG, seed=s) for s in (5, 5, 6))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.embed_tokens.weight, c.embed_tokens.weight)


def test_target_rejects_too_long_sequences(target):
    with pytest.raises(ValueError, match="300 positions, more than max_seq_len 256"):
        target(torch.zeros(1, 300, dtype=torch.long))


def test_target_rejects_ids_outside_the_vocab(target):
    with pytest.raises(ValueError, match="token ids 0..999 outside the vocab of 260"):
        target(torch.tensor([[0, 999]]))


def test_drafter_trains_only_its_own_weights_and_shares_the_targets(target):
    drafter = build_drafter(CFG, target, seed=0)
    names = {n for n, _ in drafter.named_parameters()}
    assert not any("embed" in n or "head" in n for n in names)
    assert set(drafter.state_dict()) == names  # checkpoints hold only learned weights
    assert torch.equal(drafter.embed_weight, target.embed_tokens.weight)
    assert drafter.head_weight is drafter.embed_weight  # tied in the tiny preset
    # Every drafter layer takes the injected context through its own k/v projections.
    assert all(hasattr(layer.self_attn, "k_proj") for layer in drafter.layers)
    assert drafter.fc.in_features == CFG.tap_size


def test_drafter_replicas_start_bit_identical(target):
    a, b = build_drafter(CFG, target, seed=4), build_drafter(CFG, target, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    c = build_drafter(CFG, target, seed=5)
    assert not torch.equal(a.fc.weight, c.fc.weight)


def test_drafter_uses_the_context_and_only_before_the_anchor(target):
    drafter = build_drafter(CFG, target, seed=0)
    ids = torch.randint(0, 256, (1, 64))
    taps = target(ids).taps
    anchors = torch.tensor([[20, 40]])
    noise = build_noise_blocks(ids, anchors, 16, CFG.mask_token_id)
    with torch.no_grad():
        base = drafter(taps, noise, anchors, SdpaAttention())
        later = taps.clone()
        later[:, 20:] += 1.0            # after anchor 20: invisible to block 0, visible to block 1
        out = drafter(later, noise, anchors, SdpaAttention())
    torch.testing.assert_close(out[:, :16], base[:, :16])
    assert not torch.allclose(out[:, 16:], base[:, 16:])


@pytest.mark.parametrize("taps_shape, noise_len, anchors, message", [
    ((1, 64, 100), 32, [[3, 9]], r"taps must be \[batch, seq, 128\]"),
    ((1, 64, 128), 31, [[3, 9]], r"noise_ids must be \[1, 32\]"),
    ((1, 64, 128), 32, [[3, 64]], r"anchors must lie in \[0, 63\]"),
    ((1, 300, 128), 32, [[3, 9]], "exceeds max_seq_len 256"),
])
def test_drafter_rejects_bad_shapes_clearly(target, taps_shape, noise_len, anchors, message):
    drafter = build_drafter(CFG, target, seed=0)
    with pytest.raises(ValueError, match=message):
        drafter(torch.zeros(taps_shape), torch.zeros(1, noise_len, dtype=torch.long),
                torch.tensor(anchors), SdpaAttention())


def test_checkpoint_target_errors_are_clear(tmp_path):
    with pytest.raises(CheckpointError, match="directory not found"):
        config_from_checkpoint(tmp_path / "nope", CFG)
    with pytest.raises(CheckpointError, match="has no config.json"):
        config_from_checkpoint(tmp_path, CFG)
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "hidden_size": 4096, '
                                          '"num_hidden_layers": 36, "num_attention_heads": 32, '
                                          '"num_key_value_heads": 8, "head_dim": 128, '
                                          '"vocab_size": 151936, "intermediate_size": 12288}')
    cfg = config_from_checkpoint(tmp_path, CFG)
    assert (cfg.hidden_size, cfg.num_kv_heads, cfg.qk_norm) == (4096, 8, True)
    assert cfg.target_layer_ids == (1, 9, 17, 25, 33)  # DFlash's spread for 36 layers
    try:
        import transformers  # noqa: F401
    except ImportError:
        with pytest.raises(CheckpointError, match="needs the `transformers` package"):
            load_hf_target(tmp_path, cfg, "cpu", torch.float32)


def test_checkpoint_target_taps_match_transformers_hidden_states(tmp_path):
    # Runs where the optional `transformers` is installed (not on the 2-core dev box).
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.Qwen3Config(vocab_size=300, hidden_size=64, num_hidden_layers=6,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      intermediate_size=128, max_position_embeddings=512)
    transformers.Qwen3ForCausalLM(hf_cfg).save_pretrained(tmp_path)
    cfg = config_from_checkpoint(tmp_path, CFG, num_taps=2)
    target = build_target(cfg, seed=0, checkpoint_dir=tmp_path)
    ids = torch.randint(0, 256, (1, 40))
    out = target(ids)
    ref = target.model(input_ids=ids, output_hidden_states=True)
    torch.testing.assert_close(out.logits, ref.logits)
    torch.testing.assert_close(out.taps[..., :64], ref.hidden_states[cfg.target_layer_ids[0] + 1])
    drafter = build_drafter(cfg, target, seed=0)
    noise = build_noise_blocks(ids, torch.tensor([[5, 20]]), cfg.block_size, cfg.mask_token_id)
    assert drafter(out.taps, noise, torch.tensor([[5, 20]]), SdpaAttention()).shape == (1, 32, 300)


def test_traced_drafter_does_not_recompile_for_new_anchors(target):
    # The runtime traces the drafter with dynamo; a value check that reads the anchors would make
    # dynamo specialise on them and recompile every step (seen once: "___stack0 == 2" guards).
    import torch._dynamo

    torch._dynamo.reset()
    drafter = build_drafter(CFG, target, seed=0)
    traced = torch.compile(drafter, backend="eager", dynamic=False)
    ids = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(0))
    taps = target(ids).taps

    def call(anchors):
        anchors = torch.tensor(anchors)
        noise = build_noise_blocks(ids, anchors, CFG.block_size, CFG.mask_token_id)
        return traced(taps, noise, anchors, SdpaAttention())

    call([[1, 9, 20, 30, 33, 40, 41, 48]] * 2)
    with torch.compiler.set_stance("fail_on_recompile"):
        for lo in (2, 3, 5):
            call([[lo, 9, 20, 30, 33, 40, 41, 47]] * 2)


def test_checkpoint_target_refuses_a_config_that_does_not_match(tmp_path, monkeypatch):
    # The shapes check runs before transformers loads any weights, so it needs no transformers.
    import sys
    import types

    (tmp_path / "config.json").write_text('{"hidden_size": 128, "num_hidden_layers": 6, '
                                          '"num_attention_heads": 4, "vocab_size": 300, '
                                          '"intermediate_size": 256}')
    fake = types.ModuleType("transformers")
    fake.AutoModelForCausalLM = None  # never reached: the mismatch is caught first
    monkeypatch.setitem(sys.modules, "transformers", fake)
    with pytest.raises(CheckpointError, match=r"hidden_size 64 \(checkpoint: 128\).*config_from_checkpoint"):
        load_hf_target(tmp_path, CFG, "cpu", torch.float32)
