"""A healthy loop whose DataLoader workers end every epoch, some in the middle of an item.

`loader_workers_end.py`: each epoch iterates a DataLoader with two worker processes (not
persistent) over items that each take ~0.4 s of CPU, takes three batches and leaves the epoch
(as an epoch limited to a few batches, or a validation pass, does): the DataLoader shuts its
workers down while they prefetch, so their last moments are spent computing, not waiting at
their queue. Prints `step N loss X` for every batch, forever. Knows nothing of dflash-tui.
"""

import time

from torch.utils.data import DataLoader, Dataset


class Busy(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> float:
        end = time.process_time() + 0.4
        x = 0
        while time.process_time() < end:
            x += 1
        return float(i % 7)


if __name__ == "__main__":
    step = 0
    while True:
        for i, batch in enumerate(DataLoader(Busy(), batch_size=1, num_workers=2, prefetch_factor=2)):
            step += 1
            print(f"step {step} loss {1.0 / step:.4f}", flush=True)
            if i == 2:
                break
        time.sleep(0.3)
