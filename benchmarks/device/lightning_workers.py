"""A healthy Lightning fit on the GPU whose DataLoader workers end every epoch (issue 48, item 9).

Two workers per loader, not persistent; epochs of 20 batches (`limit_train_batches`) and a
validation pass of 4 after each, so the loaders shut their workers down every few seconds, some
while they prefetch. Each item costs ~5 ms of CPU, as decoding a sample does. Prints
`step N loss X` after every batch; runs until stopped. Knows nothing of dflash-tui.
"""

import time

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        end = time.process_time() + 0.005
        while time.process_time() < end:
            pass
        g = torch.Generator().manual_seed(i)
        x = torch.randn(256, generator=g)
        return x, x.sum().reshape(1)


class Net(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)


class Say(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        print(f"step {trainer.global_step} loss {float(outputs['loss']):.4f}", flush=True)


if __name__ == "__main__":
    trainer = Trainer(accelerator="gpu", devices=1, max_epochs=100_000, limit_train_batches=20,
                      limit_val_batches=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, callbacks=[Say()])
    loader = DataLoader(Samples(), batch_size=16, num_workers=2, shuffle=True)
    val = DataLoader(Samples(), batch_size=16, num_workers=2)
    trainer.fit(Net(), loader, val)
