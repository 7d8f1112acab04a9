#!/usr/bin/env python3
"""A small CLIP-style model trained from scratch on image-caption shards, DDP over Gloo.

Two encoders map an image and its caption to the same unit sphere; the symmetric
InfoNCE loss pulls each pair together and pushes it away from the other captions and
images of its batch. The images come decoded and cropped from the server as usual; the
captions arrive beside them as the bytes of each sample's `.txt` member
(`Loader(..., fields=("txt",))`, `info[i].fields["txt"]`), nothing decoded or tokenized
by the server. No download: shardcast-pack writes captioned shards (img2dataset's
layout, jpg + txt + json and no label):

    shardcast-pack --synthetic 4000 --captions --no-labels /tmp/captioned
    shardcast-server --shards /tmp/captioned --listen 127.0.0.1:50051 &
    examples/train_clip.py --server 127.0.0.1:50051 --nproc-per-node 2 --n_epochs 5

Every epoch prints its mean loss and the pairs the ranks saw, which is exact: with split
"sample" and remainder "drop" each rank gets the same number of full batches, so the
count is ranks x batches x batch size, and the ranks' (shard, index) lists, gathered on
rank 0, hold no pair twice. The run fails (exit status 1) when either does not hold.
"""

import argparse
import os
import re
import socket
import time
import zlib
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel

import shardcast

# The text encoder's vocabulary: words hashed into this many buckets (no tokenizer to
# download; a collision only merges two words' embeddings).
HASH_BUCKETS = 8192
# Words are runs of letters and digits, or single characters of other scripts (so a
# Chinese caption is a bag of its characters) and emoji.
WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9.,;:!?()\"']")


def caption_words(caption: bytes) -> List[int]:
    """The hashed words of a caption: crc32, so every rank and run agrees (Python's
    hash() of a str is salted per process). Bytes that are not UTF-8 become U+FFFD."""
    text = caption.decode("utf-8", errors="replace").lower()
    return [zlib.crc32(w.encode()) % HASH_BUCKETS for w in WORD.findall(text)] or [0]


class ImageEncoder(nn.Module):
    """Four stride-2 conv blocks and a global average: small enough for two CPU ranks."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        layers, width = [], 3
        for out in (32, 64, 128, 256):
            layers += [
                nn.Conv2d(width, out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
            ]
            width = out
        self.features = nn.Sequential(*layers)
        self.project = nn.Linear(width, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.features(x).mean(dim=(2, 3)))


class TextEncoder(nn.Module):
    """A bag of hashed word embeddings (mean) and a two-layer MLP."""

    def __init__(self, dim: int, width: int = 256) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(HASH_BUCKETS, width, mode="mean")
        self.mlp = nn.Sequential(
            nn.Linear(width, width), nn.ReLU(inplace=True), nn.Linear(width, dim)
        )

    def forward(self, words: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(words, offsets))


class Clip(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.image = ImageEncoder(dim)
        self.text = TextEncoder(dim)
        # CLIP's learned temperature, starting at 1/0.07.
        self.log_scale = nn.Parameter(torch.tensor(1 / 0.07).log())

    def forward(
        self, images: torch.Tensor, words: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        """The batch's image-to-caption similarity logits."""
        image = F.normalize(self.image(images), dim=1)
        text = F.normalize(self.text(words, offsets), dim=1)
        return self.log_scale.clamp(max=4.6052).exp() * image @ text.t()  # scale <= 100


def symmetric_info_nce(logits: torch.Tensor) -> torch.Tensor:
    """CLIP's loss: cross entropy of each image over the captions and of each caption
    over the images, the pair on the diagonal."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2


def caption_batch(info) -> tuple:
    """EmbeddingBag's input for the batch's captions: every word, and where each starts."""
    words, offsets = [], []
    for sample in info:
        offsets.append(len(words))
        words += caption_words(sample.fields["txt"])
    return torch.tensor(words), torch.tensor(offsets)


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="127.0.0.1:50051", help="shardcast-server HOST:PORT")
    p.add_argument(
        "--job-id", default=None, help="job name shared by all ranks (default: a new job per run)"
    )
    p.add_argument(
        "-b",
        "--batch_size",
        type=int,
        default=64,
        help="per-rank batch size (also the InfoNCE negatives + 1)",
    )
    p.add_argument("--n_epochs", type=int, default=5, help="number of epochs")
    p.add_argument("-lr", type=float, default=2e-3, help="AdamW learning rate")
    p.add_argument("--dim", type=int, default=64, help="embedding size")
    p.add_argument("--resize", type=int, default=64, help="server-side Resize")
    p.add_argument("--crop", type=int, default=64, help="server-side CenterCrop")
    p.add_argument("--seed", type=int, default=0, help="model init and the job's seed")
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="start this many local ranks (torch.multiprocessing); without it the "
        "ranks come from torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else one process",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op CPU threads per rank (default: cores / local ranks)",
    )
    return p.parse_args(argv)


def check_epoch_pairs(pairs: List[tuple], expected: int, world: int) -> str:
    """Rank 0's check of the ranks' gathered (shard, index) lists: the count is exact
    and no pair came twice. Returns the line to print; raises when either fails."""
    gathered: List[Optional[List[tuple]]] = [None] * world
    dist.all_gather_object(gathered, pairs)
    seen = [p for rank_pairs in gathered for p in rank_pairs]
    if len(seen) != expected:
        raise RuntimeError(f"saw {len(seen)} pairs, expected {expected}")
    if len(set(seen)) != len(seen):
        raise RuntimeError(f"{len(seen) - len(set(seen))} pairs were seen twice")
    return f"{len(seen)} pairs, each once"


def train(args: argparse.Namespace, local_world: int) -> None:
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    # split "sample": every pair exactly once per epoch; "drop": full batches only, the
    # same count on every rank.
    loader = shardcast.Loader(
        args.server,
        job_id=args.job_id,
        batch_size=args.batch_size,
        split="sample",
        remainder="drop",
        seed=args.seed,
        resize=args.resize,
        crop=args.crop,
        fields=("txt",),
    )
    expected = world * len(loader) * loader.batch_size
    if rank == 0:
        print(
            f"{world} ranks (gloo), {len(loader)} batches of {loader.batch_size} pairs per "
            f"rank and epoch: {expected} pairs per epoch, images {loader.image_shape}",
            flush=True,
        )

    torch.manual_seed(args.seed)
    model = DistributedDataParallel(Clip(args.dim))
    optimizer = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    losses = []
    for epoch in range(args.n_epochs):
        loader.set_epoch(epoch)
        model.train()
        totals = torch.zeros(3, dtype=torch.float64)  # loss, top-1 image->caption, batches
        pairs = []
        start = time.monotonic()
        for images, _, info in loader:
            words, offsets = caption_batch(info)
            logits = model(shardcast.normalize(images, "cpu"), words, offsets)
            loss = symmetric_info_nce(logits)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            top1 = (logits.argmax(1) == torch.arange(len(info))).double().mean() * 100
            totals += torch.tensor([loss.item(), top1.item(), 1.0], dtype=torch.float64)
            pairs += [(s.shard, s.index_in_shard) for s in info]
        seconds = time.monotonic() - start
        dist.all_reduce(totals)
        counted = check_epoch_pairs(pairs, expected, world)
        loss_sum, top1_sum, batches = totals.tolist()
        losses.append(loss_sum / batches)
        if rank == 0:
            print(
                f"epoch {epoch}: loss {losses[-1]:.4f}, image->caption top-1 in batch "
                f"{top1_sum / batches:.1f}%, {counted} ({world} ranks x "
                f"{batches / world:.0f} batches x {loader.batch_size}), "
                f"{expected / seconds:.0f} pairs/s",
                flush=True,
            )
    if rank == 0 and len(losses) > 1:
        print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} epochs", flush=True)
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
    train(args, args.nproc_per_node)


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
    train(args, int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))


if __name__ == "__main__":
    main()
