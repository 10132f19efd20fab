"""`dflash-train --target-checkpoint DIR` end to end, against a tiny random Qwen3 checkpoint and a
BPE tokenizer that the test builds with transformers/tokenizers themselves (no download).

Needs the optional `transformers` (`pip install 'dflash-tui[hf]'`); skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from dflash_train.config import ModelConfig  # noqa: E402
from dflash_train.data import SyntheticCorpus  # noqa: E402
from dflash_train.model.target import build_target  # noqa: E402
from dflash_train.train import ConfigError, TrainArgs, prepare  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VOCAB = 320        # > the tokenizer's 300 ids, as real checkpoints pad their embedding
LAYERS = 2         # differs from the tiny preset's 4: proves the config came from the checkpoint


def _qwen3_config(**overrides):
    kw = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, intermediate_size=128, max_position_embeddings=256)
    kw.update(overrides)
    return transformers.Qwen3Config(**kw)


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SyntheticCorpus().text(20_000, seed=1).splitlines(), trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A complete checkpoint: random Qwen3 weights, config.json and a BPE tokenizer."""
    d = tmp_path_factory.mktemp("qwen3-tiny")
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(_qwen3_config()).save_pretrained(d)
    _tokenizer().save_pretrained(d)
    return d


def _config_only(tmp_path: Path, hf_config) -> Path:
    """A checkpoint directory with config.json and nothing else: prepare() reads no weights."""
    hf_config.save_pretrained(tmp_path)
    return tmp_path


def _args(tmp_path: Path, ckpt: Path, **kw) -> TrainArgs:
    return TrainArgs(run_dir=str(tmp_path / "run"), target_checkpoint=str(ckpt), **kw)


def test_prepare_takes_target_shapes_from_the_checkpoint_and_drafter_settings_from_the_preset(tmp_path, checkpoint):
    prep = prepare(_args(tmp_path, checkpoint))
    preset = ModelConfig.preset("tiny")
    cfg = prep.cfg
    assert (cfg.vocab_size, cfg.num_target_layers, cfg.hidden_size, cfg.num_kv_heads) == (VOCAB, LAYERS, 64, 2)
    assert cfg.target_layer_ids == (1,) and cfg.target_pretrain_steps == 0
    assert (cfg.num_drafter_layers, cfg.block_size, cfg.anchors_per_seq, cfg.loss_gamma) == (
        preset.num_drafter_layers, preset.block_size, preset.anchors_per_seq, preset.loss_gamma)
    # synthetic data went through the checkpoint's tokenizer, not bytes
    assert "tokenizer of" in prep.stream.name
    tok = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    text = SyntheticCorpus().text(400_000, seed=0)
    assert prep.stream.tokens[:50].tolist() == tok.encode(text[:2000], add_special_tokens=False)[:50]
    assert int(prep.stream.tokens.max()) < len(tok) <= VOCAB
    # the mask is the embedding's last (padding) row, which no text ever encodes to
    assert cfg.mask_token_id == VOCAB - 1 and int(prep.stream.tokens.max()) < cfg.mask_token_id


def test_data_file_is_tokenized_with_the_checkpoint_tokenizer(tmp_path, checkpoint):
    data = tmp_path / "data.jsonl"
    docs = SyntheticCorpus().text(30_000, seed=3).split("\n")[:-1]
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prep = prepare(_args(tmp_path, checkpoint, data=str(data)))
    tok = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    first = tok.encode(docs[0], add_special_tokens=False)
    assert prep.stream.tokens[:len(first) + 1].tolist() == first + [tok.eos_token_id]


def test_taps_are_the_checkpoint_hidden_states(tmp_path, checkpoint):
    prep = prepare(_args(tmp_path, checkpoint))
    target = build_target(prep.cfg, seed=0, checkpoint_dir=checkpoint)
    ids = prep.source.batch_at(0).input_ids
    # an independent load of the same checkpoint: the trainer's target must be exactly it
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint)).eval()
    with torch.no_grad():
        out, want = target(ids), ref(input_ids=ids, output_hidden_states=True)
    torch.testing.assert_close(out.taps, torch.cat([want.hidden_states[i + 1] for i in prep.cfg.target_layer_ids], -1))
    torch.testing.assert_close(out.logits, want.logits)
    assert not torch.equal(out.taps, want.hidden_states[0].repeat(1, 1, len(prep.cfg.target_layer_ids)))


@pytest.mark.slow
def test_cli_trains_against_the_checkpoint(tmp_path, checkpoint):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(run), "--target-checkpoint", str(checkpoint),
           "--target-devices", "cpu", "--drafter-devices", "cpu", "--steps", "20", "--eval-every", "10",
           "--eval-prompts", "2", "--checkpoint-every", "20"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0, proc.stderr[-3000:] + (run / "train.log").read_text()[-3000:]
    status = json.loads((run / "status.json").read_text())
    assert status["step"] == 20 and status["phase"] == "finished", status
    log = (run / "train.log").read_text()
    assert "tokenizer of" in log  # the data line names the checkpoint's tokenizer
    assert f"target: checkpoint {checkpoint}, {LAYERS} layers" in log
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e.get("kind") == "eval"] == [0, 10, 20]
    ckpts = sorted((run / "checkpoints").rglob("*.pt"))
    assert ckpts, list((run / "checkpoints").rglob("*"))
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
    assert (state["config"]["num_target_layers"], state["config"]["vocab_size"]) == (LAYERS, VOCAB)


def test_missing_config_json_is_a_one_line_error(tmp_path):
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(ConfigError, match="has no config.json") as e:
        prepare(_args(tmp_path, tmp_path / "ckpt"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("hf_config, message", [
    (lambda: transformers.BertConfig(architectures=["BertForMaskedLM"]), "unsupported architecture BertForMaskedLM"),
    (lambda: transformers.T5Config(architectures=["T5ForConditionalGeneration"]), "unsupported architecture"),
])
def test_unsupported_architecture_is_a_one_line_error(tmp_path, hf_config, message):
    with pytest.raises(ConfigError, match=message) as e:
        prepare(_args(tmp_path, _config_only(tmp_path / "ckpt", hf_config())))
    assert "\n" not in str(e.value)


def test_model_type_unknown_to_transformers_is_a_one_line_error(tmp_path):
    ckpt = _config_only(tmp_path / "ckpt", _qwen3_config())
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(model_type="frobnicator", architectures=["FrobnicatorForCausalLM"])
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="cannot read its config \\(model_type 'frobnicator'\\)") as e:
        prepare(_args(tmp_path, ckpt))
    assert "\n" not in str(e.value)


def test_without_tokenizer_synthetic_data_is_bytes_if_they_fit_the_vocab(tmp_path):
    prep = prepare(_args(tmp_path, _config_only(tmp_path / "ckpt", _qwen3_config())))
    assert prep.stream.name == "synthetic(language=0)" and int(prep.stream.tokens.max()) < VOCAB
    small = _config_only(tmp_path / "small", _qwen3_config(vocab_size=100))
    with pytest.raises(ConfigError, match=r"so the data are byte ids, up to 122, outside its vocab of 100"):
        prepare(_args(tmp_path, small))


def test_without_tokenizer_a_data_file_is_refused(tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("some text\n")
    with pytest.raises(ConfigError, match="has no tokenizer files, so --data .* cannot be tokenized"):
        prepare(_args(tmp_path, _config_only(tmp_path / "ckpt", _qwen3_config()), data=str(data)))


def test_cli_without_transformers_names_the_install_command(tmp_path):
    ckpt = _config_only(tmp_path / "ckpt", _qwen3_config())
    # the real CLI in a process where `import transformers` fails
    code = ("import sys; sys.modules['transformers'] = None; from dflash_train.cli import main; "
            f"sys.exit(main(['--run-dir', {str(tmp_path / 'run')!r}, '--target-checkpoint', {str(ckpt)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'dflash-tui[hf]'" in lines[0], proc.stderr


def test_a_tokenizer_bigger_than_the_vocab_is_refused(tmp_path):
    ckpt = _config_only(tmp_path / "ckpt", _qwen3_config(vocab_size=200))
    _tokenizer().save_pretrained(ckpt)  # 300 ids for a 200-row embedding
    with pytest.raises(ConfigError, match=r"tokenizer gives token id 2\d\d, outside the model's vocab of 200"):
        prepare(_args(tmp_path, ckpt))


def test_a_tokenizer_that_leaves_no_free_id_for_the_mask_is_refused(tmp_path, checkpoint):
    # The mask is the embedding's last row; an embedding exactly as large as the ids the text
    # uses leaves that row to a real token.
    top = int(prepare(_args(tmp_path / "a", checkpoint)).stream.tokens.max())
    ckpt = _config_only(tmp_path / "ckpt", _qwen3_config(vocab_size=top + 1))
    _tokenizer().save_pretrained(ckpt)
    with pytest.raises(ConfigError, match=rf"holds token id {top}, which the drafter uses as its mask token"):
        prepare(_args(tmp_path / "b", ckpt))


def test_a_malformed_config_field_is_a_one_line_error(tmp_path):
    ckpt = _config_only(tmp_path / "ckpt", _qwen3_config())
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": "two"}))
    with pytest.raises(ConfigError, match="config.json has a malformed shape field"):
        prepare(_args(tmp_path, ckpt))
