#!/usr/bin/env python3
"""The seed article's Lightning DDP script with shardcast.Loader as its data source.

The article trains ResNet-18 with a LightningModule, Trainer(strategy="ddp") and a
webdataset WebLoader cut to n batches with `.repeat(nbatches=n).slice(n)`. Here the
LightningModule and the Trainer stay; the WebLoader becomes shardcast.Loader, made in
train_dataloader() (after Lightning has set up the process group, so every rank
registers the same job and the server deals each rank exactly len(loader) batches).

    examples/train_lightning.py --server HOST:PORT --devices 1 --accelerator gpu
    examples/train_lightning.py --server HOST:PORT --devices 2 --accelerator cpu

Needs the `lightning` package: `pip install lightning` (it is not in Debian 12, and
torch does not bring it).
"""

import argparse
import time
from typing import Optional

import lightning as L
import torch
import torchvision
from torch import nn

import shardcast


class ShardcastClassifier(L.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.model: Optional[nn.Module] = None
        self.criterion = nn.CrossEntropyLoss(ignore_index=-1)  # -1: padding
        self.loader: Optional[shardcast.Loader] = None
        self._epoch_start = 0.0
        self._images = 0

    def train_dataloader(self) -> shardcast.Loader:
        # Rank and world size come from the process group Lightning has set up. One
        # loader per run: configure_model may have made it already (a second one would
        # register a second job).
        if self.loader is not None:
            return self.loader
        self.loader = shardcast.Loader(
            self.args.server,
            batch_size=self.args.batch_size,
            split=self.args.split,
            seed=self.args.seed,
        )
        return self.loader

    def configure_model(self) -> None:
        # The class count is the server's, so the model is built once the loader knows it;
        # Lightning calls configure_model before the optimizer is made.
        if self.model is None:
            classes = self._num_classes()
            torch.manual_seed(self.args.seed)
            self.model = torchvision.models.resnet18(num_classes=classes)

    def _num_classes(self) -> int:
        return self.train_dataloader().num_classes

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.model.parameters(), lr=self.args.lr, betas=tuple(self.args.betas)
        )

    def on_train_epoch_start(self) -> None:
        self._epoch_start = time.monotonic()
        self._images = 0

    def training_step(self, batch: shardcast.Batch, batch_idx: int) -> torch.Tensor:
        images, labels, _ = batch
        x = shardcast.normalize(images, self.device)
        output = self.model(x)
        loss = self.criterion(output, labels)
        valid = labels >= 0
        top1 = ((output.argmax(1) == labels) & valid).sum() * 100.0 / valid.sum().clamp(min=1)
        self.log("loss", loss, prog_bar=True, sync_dist=True, on_epoch=True, on_step=False)
        self.log("top1", top1, prog_bar=True, sync_dist=True, on_epoch=True, on_step=False)
        self._images += images.shape[0]
        return loss

    def on_train_epoch_end(self) -> None:
        seconds = time.monotonic() - self._epoch_start
        metrics = self.trainer.callback_metrics
        if self.global_rank == 0:
            print(
                f"epoch {self.current_epoch}: loss {float(metrics['loss']):.4f} top1 "
                f"{float(metrics['top1']):.2f}% ({len(self.loader)} batches per rank, "
                f"{self._images * self.trainer.world_size / seconds:.1f} img/s)",
                flush=True,
            )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", "--batch_size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--n_epochs", type=int, default=10)
    p.add_argument("-lr", type=float, default=0.0001)
    p.add_argument("--betas", nargs=2, type=float, default=[0.9, 0.999])
    p.add_argument("--server", default="127.0.0.1:50051")
    p.add_argument("--split", choices=["shard", "sample"], default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accelerator", default="auto", help="gpu | cpu | auto")
    p.add_argument("--devices", type=int, default=1, help="ranks on this machine")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    trainer = L.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy="ddp",
        max_epochs=args.n_epochs,
        # shardcast.Loader is not a DataLoader: each rank already gets its own part.
        use_distributed_sampler=False,
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
    )
    trainer.fit(ShardcastClassifier(args))


if __name__ == "__main__":
    main()
