// The rules of a training run that every client applies the same way (shardcast-train,
// and Python's Loader through _native): the job id a run makes up when none is given,
// and where a saved position (a checkpoint's, a Loader state's) resumes. Torch-free and
// gRPC-free: plain values in, plain values out.
#ifndef SHARDCAST_CLIENT_RECONNECT_RUN_RULES_H_
#define SHARDCAST_CLIENT_RECONNECT_RUN_RULES_H_

#include <cstdint>
#include <string>

namespace shardcast::client {

// "run-<host>-<pid>-<8 hex digits>": a new job per run (unique per run, readable in the
// server's status), so that a rerun with other settings never collides with the job an
// earlier run left on the server. Rank 0 makes it and hands it to the other ranks.
std::string NewRunJobId();

// A position saved by a run: `next_batch` batches of `epoch` done by every rank, the
// epoch dealt from global sample `sample_offset` (0 but after an elastic resume), by
// `world_size` ranks of `batch_size`.
struct SavedPosition {
  int64_t epoch = 0;
  int64_t next_batch = 0;
  int64_t sample_offset = 0;
  int64_t world_size = 1;
  int64_t batch_size = 0;

  // Samples of `epoch` consumed by all ranks together (split sample): where a resume
  // with another world size or batch size continues the epoch from.
  int64_t SamplesConsumed() const { return sample_offset + next_batch * world_size * batch_size; }
};

struct ResumePosition {
  int64_t epoch = 0;
  int64_t batch = 0;          // the first batch to stream
  int64_t sample_offset = 0;  // the global position the epoch is dealt from
  bool elastic = false;       // another world size or batch size, mid-epoch
};

// Where `saved` resumes in a run of `world_size` ranks of `batch_size`: with the same
// world size and batch size, at the same batch of the same epoch dealt from the same
// offset; otherwise (an elastic resume, split sample only: the stream refuses split
// shard with the reason) at batch 0 of the same epoch dealt from the samples all ranks
// consumed in it, at most `num_samples`.
ResumePosition ResumeAt(const SavedPosition& saved, int64_t world_size, int64_t batch_size,
                        int64_t num_samples);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_RUN_RULES_H_
