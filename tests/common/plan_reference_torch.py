"""The seed's loader, run for real: webdataset's split_by_node / split_by_worker /
batched(partial=False) over (shard, index) pairs, torch's DataLoader with K worker
processes, and repeat(nbatches=n) + slice(n). Reads cases from stdin, one per line:
`SIZES(comma-separated) WORLD BATCH WORKERS`; prints `CASE RANK BATCH SHARD:INDEX,...`
lines for tests/common/plan_torch_conformance_test.cc to compare with the planner.
"""
import sys
import warnings

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class ShardSamples(IterableDataset):
    """wds.WebDataset(urls, nodesplitter=wds.split_by_node).batched(B, partial=False),
    with each sample reduced to its (shard, index) pair."""

    def __init__(self, sizes, rank, world, batch):
        super().__init__()
        self.sizes, self.rank, self.world, self.batch = sizes, rank, world, batch

    def __iter__(self):
        urls = list(range(len(self.sizes)))
        urls = urls[self.rank :: self.world]  # split_by_node
        info = get_worker_info()
        if info is not None:  # split_by_worker
            urls = urls[info.id :: info.num_workers]
        batch = []
        for shard in urls:
            for index in range(self.sizes[shard]):
                batch.append((shard, index))
                if len(batch) == self.batch:
                    yield torch.tensor(batch)
                    batch = []
        # partial=False: a worker's trailing partial batch is dropped


def main():
    warnings.simplefilter("ignore")  # "more workers than cores": intended here
    for case, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        fields = line.split()
        sizes = [int(s) for s in fields[0].split(",")]
        world, batch, workers = (int(a) for a in fields[1:4])
        n = sum(sizes) // (batch * world)  # the seed's num_batches
        for rank in range(world):
            loader = DataLoader(
                ShardSamples(sizes, rank, world, batch), batch_size=None, num_workers=workers
            )
            out = []
            while len(out) < n:  # repeat(nbatches=n) + slice(n)
                for b in loader:
                    out.append(b)
                    if len(out) >= n:
                        break
            for j, b in enumerate(out):
                refs = ",".join(f"{s}:{i}" for s, i in b.tolist())
                print(f"{case} {rank} {j} {refs}")


if __name__ == "__main__":
    main()
