// BatchSource implementations: server stream and synthetic generator.
#include "client/train/batch_source.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/splitmix64.h"

namespace shardcast::train {
namespace {

class ServerBatchSource : public BatchSource {
 public:
  explicit ServerBatchSource(std::unique_ptr<BatchStream> stream) : stream_(std::move(stream)) {}
  int64_t batches_per_epoch() const override { return stream_->batches_per_epoch(); }
  int64_t num_classes() const override { return stream_->registration().num_classes; }
  std::string fingerprint() const override { return stream_->registration().job_fingerprint; }
  client::MixJob mixture() const override {
    const client::Registration& r = stream_->registration();
    client::MixJob job;
    job.job_fingerprint = r.job_fingerprint;
    job.data_fingerprint = r.mix_data_fingerprint;
    job.samples_per_epoch = static_cast<int64_t>(r.samples_per_epoch);
    job.schedule = r.mix;
    return job;
  }
  std::string Describe() const override {
    const client::Registration& r = stream_->registration();
    return absl::StrFormat("server %s: %d samples, %d classes, %d batches/epoch/rank, job %s",
                           r.server_version, r.num_samples, r.num_classes, r.batches_per_epoch,
                           r.job_fingerprint);
  }
  absl::Status StartEpoch(int64_t epoch, int64_t start_batch) override {
    return stream_->StartEpoch(epoch, start_batch);
  }
  absl::StatusOr<int64_t> StartEpochFrom(int64_t epoch, int64_t start_batch, int64_t sample_offset,
                                         const client::MixResume& mix_resume) override {
    if (absl::Status s = stream_->StartEpoch(epoch, start_batch, sample_offset, mix_resume);
        !s.ok()) {
      return s;
    }
    return stream_->batches_in_epoch();
  }
  absl::StatusOr<std::optional<TrainingBatch>> Next() override { return stream_->Next(); }

 private:
  std::unique_ptr<BatchStream> stream_;
};

class SyntheticBatchSource : public BatchSource {
 public:
  explicit SyntheticBatchSource(const SyntheticSpec& spec) : spec_(spec) {}
  int64_t batches_per_epoch() const override { return spec_.batches_per_epoch; }
  int64_t num_classes() const override { return spec_.num_classes; }
  std::string fingerprint() const override {
    return absl::StrFormat("synthetic-n%d-b%d-s%d-c%d-seed%d-w%d", spec_.batches_per_epoch,
                           spec_.batch_size, spec_.image_size, spec_.num_classes, spec_.seed,
                           spec_.world_size);
  }
  std::string Describe() const override {
    return absl::StrFormat(
        "synthetic batches (tests/benchmarks): %d batches/epoch/rank of %d x 3x%dx%d, %d classes",
        spec_.batches_per_epoch, spec_.batch_size, spec_.image_size, spec_.image_size,
        spec_.num_classes);
  }
  absl::Status StartEpoch(int64_t epoch, int64_t start_batch) override {
    if (epoch < 0 || start_batch < 0 || start_batch > spec_.batches_per_epoch) {
      return absl::InvalidArgumentError(
          absl::StrFormat("synthetic StartEpoch(%d, %d): out of range (n = %d)", epoch, start_batch,
                          spec_.batches_per_epoch));
    }
    epoch_ = epoch;
    next_ = start_batch;
    started_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<TrainingBatch>> Next() override {
    if (!started_) return absl::FailedPreconditionError("Next() before StartEpoch()");
    if (next_ >= spec_.batches_per_epoch) return std::optional<TrainingBatch>();
    return std::optional<TrainingBatch>(MakeSyntheticBatch(spec_, epoch_, next_++));
  }

 private:
  SyntheticSpec spec_;
  int64_t epoch_ = 0;
  int64_t next_ = 0;
  bool started_ = false;
};

// One splitmix64 step: distinct streams per (epoch, rank, batch).
uint64_t Mix(uint64_t x) { return SplitMix64(x).Next(); }

}  // namespace

absl::StatusOr<int64_t> BatchSource::StartEpochFrom(int64_t epoch, int64_t start_batch,
                                                    int64_t sample_offset,
                                                    const client::MixResume& mix_resume) {
  if (sample_offset != 0 || mix_resume.position != 0) {
    return absl::UnimplementedError(absl::StrCat(Describe(),
                                                 ": cannot resume an epoch from a sample offset "
                                                 "(another world size or batch size)"));
  }
  if (absl::Status s = StartEpoch(epoch, start_batch); !s.ok()) return s;
  return batches_per_epoch();
}

std::unique_ptr<BatchSource> MakeServerBatchSource(std::unique_ptr<BatchStream> stream) {
  return std::make_unique<ServerBatchSource>(std::move(stream));
}

std::unique_ptr<BatchSource> MakeSyntheticBatchSource(const SyntheticSpec& spec) {
  return std::make_unique<SyntheticBatchSource>(spec);
}

TrainingBatch MakeSyntheticBatch(const SyntheticSpec& spec, int64_t epoch, int64_t index) {
  torch::NoGradGuard no_grad;
  const int64_t b = spec.batch_size, s = spec.image_size;
  // Class patterns depend on the seed only; noise and labels on the batch's identity.
  auto pattern_gen = at::make_generator<at::CPUGeneratorImpl>(Mix(spec.seed));
  torch::Tensor patterns = torch::randn({spec.num_classes, 3, s, s}, pattern_gen);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(
      Mix(Mix(Mix(spec.seed ^ 0x5eed) + static_cast<uint64_t>(epoch)) +
          static_cast<uint64_t>(spec.rank) * 1000003ull + static_cast<uint64_t>(index)));
  torch::Tensor labels = torch::randint(0, spec.num_classes, {b}, gen, torch::kLong);
  torch::Tensor images = patterns.index_select(0, labels) + torch::randn({b, 3, s, s}, gen);

  TrainingBatch batch;
  batch.epoch = epoch;
  batch.index = index;
  batch.images = images.to(spec.device);
  batch.labels = labels.to(spec.device);
  batch.valid = torch::ones({b}, torch::TensorOptions().dtype(torch::kBool).device(spec.device));
  for (int64_t i = 0; i < b; ++i) {
    SampleMeta meta;
    meta.key = absl::StrCat("synthetic/e", epoch, "/r", spec.rank, "/b", index, "/", i);
    batch.samples.push_back(std::move(meta));
  }
  return batch;
}

}  // namespace shardcast::train
