"""Who the ranks are and that they agree: rank and world size from torch.distributed or
torchrun's environment, the job's name shared by rank 0, and the check before the first
batch that every rank registered the same job."""

import os
from typing import Any, Dict, List, Optional, Tuple

import torch

from shardcast import _native
from shardcast.errors import JobChangedError


def default_rank_and_world() -> Tuple[int, int]:
    """torch.distributed's when a process group exists, else torchrun's RANK and
    WORLD_SIZE, else a single process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def resolve_job_id(job_id: Optional[str], world_size: int) -> str:
    """The given id, else a new job per run: rank 0 names it and the torch.distributed
    process group hands the name to the other ranks, so a rerun with other settings
    never collides with the job an earlier run left on the server (as shardcast-train
    does through its rendezvous store)."""
    if job_id is not None:
        return job_id
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        name = [new_job_id() if torch.distributed.get_rank() == 0 else None]
        torch.distributed.broadcast_object_list(name, src=0)
        return str(name[0])
    if world_size == 1:
        return new_job_id()
    raise ValueError(
        "job_id: with several ranks and no torch.distributed process group the ranks "
        "cannot agree on a generated name; pass the same job_id on every rank"
    )


def new_job_id() -> str:
    """run-<host>-<pid>-<random>: shardcast-train's rule (client/reconnect/run_rules.h)."""
    return _native.new_job_id()


def agreement_group(
    process_group: Optional[Any], world_size: int, job_id: str
) -> Tuple[bool, Optional[Any]]:
    """Whether the ranks can compare their jobs, and through which group: `process_group`,
    else torch.distributed's default group when one is initialized with `world_size`
    ranks. ValueError for a given group of another size."""
    dist = torch.distributed
    if process_group is None:
        if not (dist.is_available() and dist.is_initialized()):
            return False, None  # no process group: nothing to compare through
        if dist.get_world_size() != world_size:
            return False, None  # the default group is not this job's ranks
    elif dist.get_world_size(process_group) != world_size:
        raise ValueError(
            f"process_group has {dist.get_world_size(process_group)} ranks, the loader's job "
            f"'{job_id}' {world_size}: pass the group of the job's ranks"
        )
    return True, process_group


def agree_on_job(mine: Dict[str, Any], world_size: int, group: Optional[Any]) -> None:
    """Every rank's job as its server registered it (`mine`: rank, job_id, world_size,
    job_fingerprint, batches_per_epoch, batch_size) is all-gathered through `group` and
    must be the same on every rank. Ranks registered at replicas that serve other bytes
    or other settings would otherwise train on mixed batches, or hang in DDP at the end
    of an epoch whose batch counts differ. Every rank sees the same table, so every rank
    raises the same JobChangedError, naming each rank's values. Costs one
    all_gather_object of about 200 bytes per rank."""
    everyone: List[Any] = [None] * world_size
    torch.distributed.all_gather_object(everyone, mine, group=group)
    differences = []
    for field in ("job_fingerprint", "batches_per_epoch", "batch_size", "world_size", "job_id"):
        if any(e[field] != everyone[0][field] for e in everyone):
            differences.append(
                f"{field}: " + ", ".join(f"rank {e['rank']} has {e[field]!r}" for e in everyone)
            )
    if sorted(e["rank"] for e in everyone) != list(range(world_size)):
        differences.append(
            "rank: the group's ranks have ranks " + ", ".join(str(e["rank"]) for e in everyone)
        )
    if differences:
        raise JobChangedError(
            f"job '{mine['job_id']}': the ranks disagree before the first batch: "
            + "; ".join(differences)
            + ". Their servers (replicas) serve other data or "
            "other byte-changing settings (each server logs its job fingerprint and "
            "settings), or the ranks asked for other jobs: training on would mix batches "
            "or hang at the epoch's end. Give every replica the same shards and flags"
        )
