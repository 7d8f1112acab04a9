#!/usr/bin/env python3
"""The seed article's DDP training script (webdataset + Lightning), ported to plain
PyTorch DDP with shardcast.Loader as its data source.

What changed against the article: the webdataset pipeline, WebLoader and its
`.repeat(nbatches=n).slice(n)` became one shardcast.Loader (the server decodes,
transforms and guarantees every rank the same n batches per epoch); the Lightning
Trainer became the loop below. Its flags stay: -b, --n_epochs, -lr, --betas, --shuffle,
-w.

    examples/train_ddp.py --server HOST:PORT --nproc-per-node 2 -b 32 --n_epochs 10
    torchrun --nproc_per_node 2 examples/train_ddp.py --server HOST:PORT ...

Collectives: NCCL on CUDA (one rank per GPU, cuda:LOCAL_RANK), Gloo on CPU.
"""

import argparse
import os
import socket
import time
from typing import Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel

import shardcast


def accuracy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy in percent over the valid samples (padding has label -1)."""
    valid = target >= 0
    correct = (output.argmax(1) == target) & valid
    return correct.sum() * 100.0 / valid.sum().clamp(min=1)


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The article's flags.
    p.add_argument("-b", "--batch_size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--n_epochs", type=int, default=10, help="number of epochs")
    p.add_argument("-lr", type=float, default=0.0001, help="Adam learning rate")
    p.add_argument("--betas", nargs=2, type=float, default=[0.9, 0.999], help="Adam betas")
    p.add_argument(
        "--shuffle",
        type=int,
        default=-1,
        help="shuffle buffer size; negative means no shuffle (shuffles shards too)",
    )
    p.add_argument(
        "-w",
        "--num_workers",
        type=int,
        default=None,
        help="virtual loader workers per rank, as the seed's DataLoader "
        "workers (split shard); default: the server's",
    )
    # The server and the job.
    p.add_argument("--server", default="127.0.0.1:50051", help="shardcast-server HOST:PORT")
    p.add_argument(
        "--job-id",
        default=None,
        help="job name shared by all ranks (default: a new job per run, named by rank 0)",
    )
    p.add_argument(
        "--split",
        choices=["shard", "sample"],
        default=None,
        help="shard: the seed's split_by_node semantics; sample: exactly once "
        "per epoch (default: the server's)",
    )
    p.add_argument("--resize", type=int, default=None, help="Resize (default: the server's)")
    p.add_argument("--crop", type=int, default=None, help="CenterCrop (default: the server's)")
    p.add_argument("--seed", type=int, default=0, help="model init and the job's seed")
    # Processes and devices.
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="start this many local ranks (torch.multiprocessing); without it the "
        "ranks come from torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else one process",
    )
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op CPU threads per rank (default: cores / local ranks)",
    )
    p.add_argument(
        "--save",
        default=None,
        help="rank 0 saves the model's state_dict here at the end; '{rank}' in the "
        "path makes every rank save its own",
    )
    return p.parse_args(argv)


def train(args: argparse.Namespace, local_rank: int, local_world: int) -> None:
    """One rank: process group, loader, model, the epochs."""
    use_cuda = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    # Rank and world size come from the process group.
    loader = shardcast.Loader(
        args.server,
        job_id=args.job_id,
        batch_size=args.batch_size,
        split=args.split,
        # The seed's -w 0 (DataLoader reading in the main process) is one stream of
        # shards: workers=1. The Loader itself refuses 0 rather than guess.
        workers=None if args.num_workers is None else max(args.num_workers, 1),
        shuffle_shards=args.shuffle >= 0,
        shuffle_buffer=max(args.shuffle, 0),
        seed=args.seed,
        resize=args.resize,
        crop=args.crop,
    )
    if rank == 0:
        print(
            f"{world} ranks ({'nccl' if use_cuda else 'gloo'}), {len(loader)} batches of "
            f"{loader.batch_size} per rank and epoch, {loader.num_classes} classes, images "
            f"{loader.image_shape}",
            flush=True,
        )

    torch.manual_seed(args.seed)
    model = torchvision.models.resnet18(num_classes=loader.num_classes).to(device)
    model = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    criterion = nn.CrossEntropyLoss(ignore_index=-1)  # label -1: padding (remainder pad)
    optimizer = optim.Adam(model.parameters(), lr=args.lr, betas=tuple(args.betas))

    for epoch in range(args.n_epochs):
        loader.set_epoch(epoch)
        model.train()
        totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, top1, batches
        start = time.monotonic()
        for images, labels, _ in loader:
            x = shardcast.normalize(images, device)
            y = labels.to(device, non_blocking=True)
            output = model(x)
            loss = criterion(output, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            totals += torch.stack(
                [
                    loss.detach().double(),
                    accuracy(output, y).double(),
                    torch.ones((), dtype=torch.float64, device=device),
                ]
            )
        seconds = time.monotonic() - start
        dist.all_reduce(totals)  # every rank ran len(loader) steps: the means are global
        if rank == 0:
            loss_sum, top1_sum, batches = totals.tolist()
            print(
                f"epoch {epoch}: loss {loss_sum / batches:.4f} top1 {top1_sum / batches:.2f}% "
                f"({batches / world:.0f} batches per rank, "
                f"{batches * loader.batch_size / seconds:.1f} img/s)",
                flush=True,
            )

    if args.save and (rank == 0 or "{rank}" in args.save):
        torch.save(model.module.state_dict(), args.save.replace("{rank}", str(rank)))
    loader.close()
    dist.destroy_process_group()


def _spawned(local_rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(args.nproc_per_node),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    train(args, local_rank, args.nproc_per_node)


def main() -> None:
    args = parse_args()
    if args.nproc_per_node:
        with socket.socket() as s:  # a free rendezvous port on this machine
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_spawned, args=(args, port), nprocs=args.nproc_per_node)
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    train(args, int(os.environ.get("LOCAL_RANK", "0")), local_world)


if __name__ == "__main__":
    main()
