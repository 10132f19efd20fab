"""A real transformers Trainer on a tiny model built from a config (nothing downloaded).

`hf_trainer.py OUT MAX_STEPS [STEP_S]`: trains a 2-layer GPT-2 of width 32 on random tokens on
the CPU for MAX_STEPS steps, logging every 5 steps and saving a checkpoint every 10 into OUT
(each with its trainer_state.json). Each step takes at least STEP_S seconds (default 0.15), as
a real model's would: so tiny a model otherwise ends before anyone has looked at it.
Knows nothing of dflash-tui.
"""

import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

out, max_steps = sys.argv[1], int(sys.argv[2])
step_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.15


class Pace(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(step_s)


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (64, 16))]
args = TrainingArguments(output_dir=out, max_steps=max_steps, per_device_train_batch_size=4, logging_steps=5,
                         save_steps=10, report_to=[], use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data, callbacks=[Pace()]).train()
