#!/usr/bin/env python3
"""A small classifier trained on a mixture of two labelled datasets whose weights move
over training (a curriculum), single process, CPU.

The job reads two of the server's datasets in one global sequence at exact proportions
(`Loader(mix=[(step, {name: weight}), ...])`): "easy" alone at first, then moving
linearly to "hard" 0.8 / "easy" 0.2 by the schedule's last step. Each dataset is read in
passes of its own (every sample once per pass, a new shuffle each pass). No download:

    shardcast-pack --synthetic 2000 --classes 4 /tmp/easy
    shardcast-pack --synthetic 500 --classes 4 --size 48x48 /tmp/hard
    shardcast-server --dataset easy=/tmp/easy --dataset hard=/tmp/hard \\
        --listen 127.0.0.1:50051 --resize 32 --crop 32 &
    examples/train_mix.py --server 127.0.0.1:50051 --epochs 4

Every epoch prints the share of each dataset in it and the schedule's mean weight over the
epoch's steps: they agree to within two samples of the epoch, whatever the batch size
(docs/python.md, "Mixtures").
"""

import argparse
import collections
import time

import torch.nn.functional as F
from torch import nn, optim

import shardcast


def scheduled(schedule, step):
    """The schedule's normalised weights at `step` (linear between points, held outside)."""

    def normalised(p):
        total = sum(schedule[p][1].values())
        return {k: v / total for k, v in schedule[p][1].items()}

    if step <= schedule[0][0]:
        return normalised(0)
    for p in range(1, len(schedule)):
        if step < schedule[p][0]:
            f = (step - schedule[p - 1][0]) / (schedule[p][0] - schedule[p - 1][0])
            a, b = normalised(p - 1), normalised(p)
            return {k: a[k] * (1 - f) + b[k] * f for k in a}
    return normalised(len(schedule) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples-per-epoch", type=int, default=1024)
    parser.add_argument("--classes", type=int, default=4)
    args = parser.parse_args()

    steps_per_epoch = args.samples_per_epoch // args.batch_size
    # "easy" alone for the first epoch, then "hard" takes over over the next two.
    schedule = [
        (steps_per_epoch, {"easy": 1.0, "hard": 0.0}),
        (3 * steps_per_epoch, {"easy": 0.2, "hard": 0.8}),
    ]
    loader = shardcast.Loader(
        args.server,
        mix=schedule,
        samples_per_epoch=args.samples_per_epoch,
        batch_size=args.batch_size,
        rank=0,
        world_size=1,
    )
    print(f"mixture {loader.mix}, {len(loader)} batches per epoch")
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, args.classes),
    )
    opt = optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    for epoch in range(args.epochs):
        start = time.monotonic()
        share = collections.Counter()
        total_loss = 0.0
        for images, labels, info in loader:
            x = shardcast.normalize(images)
            loss = F.cross_entropy(model(x), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
            share.update(s.dataset for s in info if s.valid)
            step += 1
        n = sum(share.values())
        # The schedule's mean weight over the epoch's steps: what the shares must be,
        # to within a sample or two of the epoch.
        steps = range(step - len(loader), step)
        mean = {
            name: sum(scheduled(schedule, s)[name] for s in steps) / len(steps)
            for name in ("easy", "hard")
        }
        shares = ", ".join(
            f"{name} {share[name] / n:.4f} (schedule {mean[name]:.4f})" for name in sorted(mean)
        )
        print(
            f"epoch {epoch}: loss {total_loss / len(loader):.3f}, {shares}, "
            f"{time.monotonic() - start:.1f}s"
        )
    loader.close()


if __name__ == "__main__":
    main()
