"""Where a Loader's epoch goes on from a state_dict: the same batches with the same world
size and batch size, the rest of the epoch's samples dealt over the new ranks otherwise
(an elastic resume, split sample only: shardcast-train's rule, client/reconnect/
run_rules.h), or the next epoch when the state's was finished."""

from typing import Any, Dict, Tuple

from shardcast import _native
from shardcast._proto import pb
from shardcast.errors import JobChangedError


def saved_position(
    epoch: int, done: int, offset: int, world_size: int, batch_size: int
) -> "_native.SavedPosition":
    saved = _native.SavedPosition()
    saved.epoch, saved.next_batch, saved.sample_offset = epoch, done, offset
    saved.world_size, saved.batch_size = world_size, batch_size
    return saved


def resume_position(
    state: Dict[str, Any], reg: "pb.RegisterResponse", job_id: str
) -> Tuple[int, int, int]:
    """(epoch, next batch, sample offset) where `state` goes on in the job `reg`
    registered. JobChangedError for a state of another job, or an elastic resume
    mid-epoch of split shard; ValueError for a position that cannot be."""
    where = (
        f"load_state_dict: cannot resume epoch {state['epoch']} at batch "
        f"{state['batches_done']}"
    )
    if state["job_fingerprint"] != reg.job_fingerprint:
        raise JobChangedError(
            f"{where}: the state is of a job with job_fingerprint "
            f"{state['job_fingerprint']!r}, this loader's job '{job_id}' has "
            f"{reg.job_fingerprint!r} (other data or settings)"
        )
    if len(reg.mix) > 1 and state["world_size"] * state["batch_size"] != (
        reg.world_size * reg.batch_size
    ):
        # Only a state without the run's segments gets here (the Loader's keep them:
        # mix_resume.py): a schedule's step is position // (B*W), so under another global
        # batch the planner would replay the sequence before this point with other
        # weights, and the passes would not continue where they are.
        raise JobChangedError(
            f"{where}: the state is of a mixed job with a schedule at a global batch of "
            f"{state['world_size'] * state['batch_size']} (world size x batch size), this "
            f"loader's is {reg.world_size * reg.batch_size}, and the state does not say how its "
            "run drew the sequence (mix_segments): take the state with this shardcast"
        )
    epoch, done = int(state["epoch"]), int(state["batches_done"])
    offset = int(state.get("sample_offset", 0))  # absent from states before elastic resume
    epoch_batches = int(state.get("batches_in_epoch", state["batches_per_epoch"]))
    if epoch < 0 or not 0 <= done <= epoch_batches or not 0 <= offset <= reg.num_samples:
        raise ValueError(
            f"bad position in state: epoch {epoch}, batches_done {done} of "
            f"{epoch_batches}, sample_offset {offset}"
        )
    if done == epoch_batches:  # the epoch was finished: any world size goes on from here
        return epoch + 1, 0, 0
    if state["world_size"] != reg.world_size or state["batch_size"] != reg.batch_size:
        return _elastic(state, reg, job_id, where, (epoch, done, offset))
    if state["batches_per_epoch"] != reg.batches_per_epoch:
        raise JobChangedError(
            f"{where}: the state is of a job with batches_per_epoch "
            f"{state['batches_per_epoch']!r}, this loader's job '{job_id}' has "
            f"{reg.batches_per_epoch!r}"
        )
    return epoch, done, offset


def _elastic(
    state: Dict[str, Any],
    reg: "pb.RegisterResponse",
    job_id: str,
    where: str,
    position: Tuple[int, int, int],
) -> Tuple[int, int, int]:
    """Where the epoch goes on with another world size or batch size."""
    epoch, done, offset = position
    saved = saved_position(epoch, done, offset, int(state["world_size"]), int(state["batch_size"]))
    at = _native.resume_at(saved, reg.world_size, reg.batch_size, reg.num_samples)
    if at.elastic and reg.split != pb.SPLIT_SAMPLE:
        raise JobChangedError(
            f"{where}: the state has world size {state['world_size']} and batch size "
            f"{state['batch_size']}, this loader's job '{job_id}' "
            f"{reg.world_size} and {reg.batch_size}; an elastic resume mid-epoch needs "
            "split sample (with split shard the ranks' shards and the repeat/slice "
            "depend on the world size): resume with the same world size and batch "
            "size, or from a state taken at the end of an epoch"
        )
    return epoch, at.batch, at.sample_offset
