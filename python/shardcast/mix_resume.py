"""A mixed job's resume across runs (docs/python.md, "Mixtures"): what state_dict keeps
of how the run drew its sequence (its segments of global batch, its schedule), and the
StreamBatchesRequest.mix_resume a later run sends so that the server replays that and
deals on from the same position: an elastic resume of a schedule, or new weights that
continue every dataset's pass. The planner is a pure function of these, so no planner
state travels. Resumes chain: each segment keeps the schedule its run drew under, and
the server replays each segment under its own."""

from typing import Any, Dict, List, Optional, Tuple

from shardcast.errors import JobChangedError
from shardcast.position import saved_position

Segment = Tuple[int, int, int]  # (start position, start step, global batch)
Schedule = List[Tuple[int, Dict[str, float]]]  # [(step, {dataset: weight})]


def next_segment(segments: List[Segment], position: int, global_batch: int) -> Segment:
    """The segment a run resumed at `position` adds: from the step after the earlier
    run's last one (the server's rule: MixtureJobPlan::Resumed)."""
    start, step, batch = [s for s in segments if s[0] < position][-1]
    return (position, step + (position - 1 - start) // batch + 1, global_batch)


def _plain(schedule: Schedule) -> List[List[Any]]:
    return [[int(step), dict(weights)] for step, weights in schedule]


def state_fields(
    reg: Any, segments: List[Segment], schedules: List[Schedule], schedule: Schedule
) -> Dict[str, Any]:
    """What state_dict adds for a mixed job: the run's segments and each one's schedule
    (`schedules`, parallel to `segments`), and this run's schedule."""
    return {
        "mix_segments": [list(s) for s in segments],
        "mix_segment_schedules": [_plain(s) for s in schedules],
        "mix_schedule": _plain(schedule),
        "mix_data_fingerprint": reg.mix_data_fingerprint,
        "samples_per_epoch": reg.samples_per_epoch,
    }


def segment_schedules(state: Dict[str, Any], n: int) -> List[Schedule]:
    """The schedule each of the state's n segments drew under. A state from before they
    were kept (no mix_segment_schedules) meant its mix_schedule for every segment."""
    kept = state.get("mix_segment_schedules")
    if kept is None or len(kept) != n:
        kept = [state["mix_schedule"]] * n
    return [[(int(step), dict(weights)) for step, weights in s] for s in kept]


def _add_points(points: Any, schedule: Schedule) -> None:
    for step, weights in schedule:
        point = points.add(step=int(step))
        for name, weight in weights.items():
            point.weights.add(dataset=name, weight=float(weight))


def _global_position(state: Dict[str, Any], S: int) -> int:
    epoch, done = int(state["epoch"]), int(state["batches_done"])
    if done >= int(state["batches_in_epoch"]):
        return (epoch + 1) * S
    consumed = saved_position(
        epoch, done, int(state["sample_offset"]), state["world_size"], state["batch_size"]
    ).samples_consumed
    return epoch * S + consumed


def _check_segments(segments: List[Any], where: str) -> None:
    """A state's mix_segments as the planner takes them (the first at position 0, start
    positions increasing, global batches >= 1): checked before next_segment divides by a
    global batch. The server checks the rest (steps, bounds) of what is sent."""
    starts = [s[0] for s in segments if len(s) == 3]
    if (
        len(starts) != len(segments)
        or not starts
        or starts[0] != 0
        or any(s[2] < 1 for s in segments)
        or any(b <= a for a, b in zip(starts, starts[1:]))
    ):
        raise ValueError(
            f"{where}: mix_segments {segments[:4]!r} is not a run's sequence of (start "
            "position, start step, global batch) from position 0"
        )


def resumed_from(
    state: Dict[str, Any], reg: Any, pb: Any, where: str, schedule: Schedule
) -> Optional[Tuple[int, int, bytes, List[Segment], List[Schedule]]]:
    """(epoch, sample offset, serialized MixtureResume, this run's segments and their
    schedules) when `state` is of another run of this mixture (another global batch, an
    earlier resume, other weights); None when this job goes on as the state's own (same
    weights and batch). `schedule`: this run's. JobChangedError when the data, the epoch
    length or the config differ."""
    if "mix_segments" not in state or not reg.mix:
        return None
    segments = [tuple(int(x) for x in s) for s in state["mix_segments"]]
    _check_segments(segments, where)
    global_batch = reg.world_size * reg.batch_size
    same_weights = state["job_fingerprint"] == reg.job_fingerprint
    if same_weights and segments == [(0, 0, global_batch)]:
        return None  # the same run: the ordinary resume
    if state["mix_data_fingerprint"] != reg.mix_data_fingerprint:
        raise JobChangedError(
            f"{where}: the state is of a mixture with other datasets, settings or epoch "
            f"length (mix_data_fingerprint {state['mix_data_fingerprint']!r}, this job's "
            f"{reg.mix_data_fingerprint!r}); other weights may resume a mixture, nothing else"
        )
    S = int(reg.samples_per_epoch)
    position = _global_position(state, S)
    if position == 0:
        return None  # nothing drawn yet: this run starts the sequence
    schedules = segment_schedules(state, len(segments))
    resume = pb.MixtureResume(position=position)
    for (start, step, batch), drawn_under in zip(segments, schedules):
        segment = resume.segments.add(start_position=start, start_step=step, global_batch=batch)
        _add_points(segment.schedule, drawn_under)  # resumes chain: each segment's own
    if not same_weights:  # what servers before per-segment schedules read
        _add_points(resume.schedule, state["mix_schedule"])
    own = [s for s in segments if s[0] < position]
    own_schedules = schedules[: len(own)] + [list(schedule)]
    own.append(next_segment(segments, position, global_batch))
    return position // S, position % S, resume.SerializeToString(), own, own_schedules
