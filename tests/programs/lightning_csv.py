"""A real Lightning Trainer.fit on the CPU that logs to CSVLogger only.

`lightning_csv.py SAVE_DIR [ckpt]`: a linear model on random data for 3 epochs of 8 steps; it logs
train_loss every step and, from the end of the first epoch on, val_loss too (a column the CSV
gains mid-run, so Lightning rewrites the file under a new header). With `ckpt`, a ModelCheckpoint
saves every 4 steps (all kept) into SAVE_DIR/ckpt/. Knows nothing of dflash-tui.
"""

import sys

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Tiny(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
save = len(sys.argv) > 2 and sys.argv[2] == "ckpt"
callbacks = [ModelCheckpoint(dirpath=f"{sys.argv[1]}/ckpt", every_n_train_steps=4, save_top_k=-1)] if save else []
trainer = Trainer(max_epochs=3, logger=CSVLogger(sys.argv[1]), log_every_n_steps=1, accelerator="cpu",
                  enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=save,
                  num_sanity_val_steps=0, callbacks=callbacks)
trainer.fit(Tiny(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=32))
