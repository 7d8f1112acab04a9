// Where a trainer rank's batches come from: a shardcast-server (BatchStream), or a
// deterministic in-memory generator used by tests and benchmarks (no server, no I/O).
#ifndef SHARDCAST_CLIENT_TRAIN_BATCH_SOURCE_H_
#define SHARDCAST_CLIENT_TRAIN_BATCH_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/batch_stream.h"

namespace shardcast::train {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t num_classes() const = 0;
  // Identifies the batch sequence (the server's job fingerprint); a checkpoint taken
  // under another fingerprint cannot be resumed with this source.
  virtual std::string fingerprint() const = 0;
  // A mixed job's facts as registered (its schedule, epoch length, fingerprints), for
  // a resume across runs (client/reconnect/mix_resume.h); global_batch is left 0 (the
  // trainer knows it). An empty schedule: not a mixture.
  virtual client::MixJob mixture() const { return {}; }
  virtual std::string Describe() const = 0;
  virtual absl::Status StartEpoch(int64_t epoch, int64_t start_batch) = 0;
  // Elastic resume: `epoch` dealt from global sample position `sample_offset` over this
  // run's ranks (StreamBatchesRequest.sample_offset; split sample), from `start_batch`
  // of that deal; `mix_resume` (position > 0): a mixed job going on from another run
  // (StreamBatchesRequest.mix_resume), sent with every epoch of this run. Returns the
  // epoch's batch count (batches_per_epoch() for offset 0). This default serves offset 0
  // and no mix_resume only; the server source serves any.
  virtual absl::StatusOr<int64_t> StartEpochFrom(int64_t epoch, int64_t start_batch,
                                                 int64_t sample_offset,
                                                 const client::MixResume& mix_resume);
  // The next batch of the epoch, nullopt after batches_per_epoch() of them.
  virtual absl::StatusOr<std::optional<TrainingBatch>> Next() = 0;
};

std::unique_ptr<BatchSource> MakeServerBatchSource(std::unique_ptr<BatchStream> stream);

struct SyntheticSpec {
  int64_t batches_per_epoch = 8;
  int64_t batch_size = 4;
  int64_t image_size = 32;
  int64_t num_classes = 4;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  torch::Device device = torch::kCPU;
};

// Batch `index` of `epoch` for spec.rank: a pure function of (spec, epoch, index).
// Images are per-class patterns plus noise (learnable); keys name epoch, rank, batch
// and position, e.g. "synthetic/e0/r1/b3/2".
TrainingBatch MakeSyntheticBatch(const SyntheticSpec& spec, int64_t epoch, int64_t index);

std::unique_ptr<BatchSource> MakeSyntheticBatchSource(const SyntheticSpec& spec);

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_BATCH_SOURCE_H_
