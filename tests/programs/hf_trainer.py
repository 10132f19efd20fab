"""A real transformers Trainer on a tiny model built from a config (nothing downloaded).

`hf_trainer.py OUT MAX_STEPS`: trains a 2-layer GPT-2 of width 32 on random tokens on the CPU
for MAX_STEPS steps, logging every 5 steps and saving a checkpoint every 10 into OUT (each
with its trainer_state.json). Knows nothing of dflash-tui.
"""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

out, max_steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (64, 16))]
args = TrainingArguments(output_dir=out, max_steps=max_steps, per_device_train_batch_size=4, logging_steps=5,
                         save_steps=10, report_to=[], use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data).train()
