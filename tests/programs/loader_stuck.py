"""A DataLoader worker stuck in a read that never returns.

`loader_stuck.py FIFO`: a DataLoader with one worker process yields three batches, then the
worker's fourth item reads a remote shard (FIFO, a named pipe nobody writes: the open blocks as
a read from a dead network mount would) and the main process waits for it forever. Knows
nothing of dflash-tui.
"""

import sys

from torch.utils.data import DataLoader, Dataset

SHARD = sys.argv[1]


def read_remote_shard(path: str) -> str:
    with open(path) as f:
        return f.read()


class Shards(Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> int:
        if i == 3:
            return len(read_remote_shard(SHARD))
        return i


if __name__ == "__main__":
    for batch in DataLoader(Shards(), num_workers=1, batch_size=None):
        print(f"step {batch + 1} batch {batch}", flush=True)
