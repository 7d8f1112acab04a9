// Job registration, plan cache and rank progress (see job_registry.h).
#include "server/job_registry.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/batch_window.h"
#include "server/version.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

shardcast::v1::Split ToProto(Split split) {
  return split == Split::kShard ? v1::SPLIT_SHARD : v1::SPLIT_SAMPLE;
}
shardcast::v1::Remainder ToProto(Remainder remainder) {
  return remainder == Remainder::kDrop ? v1::REMAINDER_DROP : v1::REMAINDER_PAD;
}
shardcast::v1::TransformMode ToProto(TransformMode mode) {
  return mode == TransformMode::kCenter ? v1::TRANSFORM_MODE_CENTER : v1::TRANSFORM_MODE_RANDOM;
}

namespace {

constexpr int32_t kMaxWorldSize = 1 << 16;
constexpr int kMaxCrop = 8192;
constexpr size_t kMaxJobIdLength = 256;
// Per-sample bytes of a Batch message besides pixels (label, key, shard, flags) and
// the fixed part, counted generously when checking the message size limit.
constexpr int64_t kSampleOverheadBytes = 512;
constexpr int64_t kBatchOverheadBytes = 4096;

const char* Name(Split split) { return split == Split::kShard ? "shard" : "sample"; }
const char* Name(Remainder remainder) { return remainder == Remainder::kDrop ? "drop" : "pad"; }
const char* Name(TransformMode mode) {
  return mode == TransformMode::kCenter ? "center" : "random";
}

absl::Status NonNegative(const char* field, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be >= 0 (0 = server default), got ", value));
}

// "field: job 'x' has A, rank R asked B" when the values differ.
template <typename T>
absl::Status Agree(const char* field, const std::string& job, int32_t rank, const T& has,
                   const T& asked) {
  if (has == asked) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(field, ": job '", job, "' has ", has, ", rank ", rank, " asked ", asked,
                   " (ranks of a job must agree; use another job id for another config)"));
}

absl::Status CheckAgreement(const std::string& job, int32_t rank, const JobConfig& has,
                            const JobConfig& asked) {
  const PlanConfig& a = has.plan;
  const PlanConfig& b = asked.plan;
  for (absl::Status status : {
           Agree("world_size", job, rank, a.world_size, b.world_size),
           Agree("batch_size", job, rank, a.batch_size, b.batch_size),
           Agree("split", job, rank, std::string(Name(a.split)), std::string(Name(b.split))),
           Agree("remainder", job, rank, std::string(Name(a.remainder)),
                 std::string(Name(b.remainder))),
           Agree("workers", job, rank, a.workers, b.workers),
           Agree("seed", job, rank, a.seed, b.seed),
           Agree("shuffle_shards", job, rank, std::string(a.shuffle_shards ? "true" : "false"),
                 std::string(b.shuffle_shards ? "true" : "false")),
           Agree("shuffle_buffer", job, rank, a.shuffle_buffer, b.shuffle_buffer),
           Agree("block_size", job, rank, a.block_size, b.block_size),
           Agree("transform.mode", job, rank, std::string(Name(has.transform.mode)),
                 std::string(Name(asked.transform.mode))),
           Agree("transform.resize", job, rank, has.transform.resize, asked.transform.resize),
           Agree("transform.crop", job, rank, has.transform.crop, asked.transform.crop),
       }) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------- Job

Job::Job(std::string id, JobConfig config, int64_t batches_per_epoch, std::string plan_fingerprint,
         const ServedDataset* dataset)
    : id_(std::move(id)),
      config_(config),
      batches_per_epoch_(batches_per_epoch),
      plan_fingerprint_(std::move(plan_fingerprint)),
      dataset_(dataset) {}

absl::StatusOr<std::shared_ptr<const EpochPlan>> Job::Plan(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->first == epoch) {
      plans_.splice(plans_.begin(), plans_, it);
      return plans_.front().second;
    }
  }
  // Built under the lock: ranks asking for the same new epoch wait for one build
  // instead of each building it.
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan =
      EpochPlan::Create(dataset_->shard_sizes(), config_.plan, epoch);
  if (!plan.ok()) return plan.status();
  plans_.emplace_front(epoch, *plan);
  if (plans_.size() > kPlanCacheSize) plans_.pop_back();
  return *plan;
}

void Job::MarkRegistered(int32_t rank) {
  absl::MutexLock lock(&mu_);
  ranks_[rank].progress.rank = rank;
}

bool Job::IsRegistered(int32_t rank) const {
  absl::MutexLock lock(&mu_);
  return ranks_.count(rank) > 0;
}

int64_t Job::OpenStream(int32_t rank, int64_t epoch, int64_t start_batch,
                        std::weak_ptr<BatchWindow> window) {
  absl::MutexLock lock(&mu_);
  RankState& state = ranks_[rank];
  state.progress.rank = rank;
  state.progress.epoch = epoch;
  state.progress.next_batch = start_batch;
  state.progress.streaming = true;
  state.stream_id = next_stream_id_++;
  state.window = std::move(window);
  return state.stream_id;
}

void Job::BatchSent(int32_t rank, int64_t stream_id, int64_t batch_index) {
  absl::MutexLock lock(&mu_);
  RankState& state = ranks_[rank];
  ++state.progress.batches_sent;
  if (state.stream_id == stream_id) state.progress.next_batch = batch_index + 1;
}

void Job::CloseStream(int32_t rank, int64_t stream_id) {
  absl::MutexLock lock(&mu_);
  RankState& state = ranks_[rank];
  if (state.stream_id != stream_id) return;
  state.progress.streaming = false;
  state.progress.window_depth = 0;
  state.window.reset();
}

std::vector<RankProgress> Job::Progress() const {
  std::vector<std::pair<RankProgress, std::shared_ptr<BatchWindow>>> ranks;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [rank, state] : ranks_) {
      ranks.emplace_back(state.progress, state.window.lock());
    }
  }
  std::vector<RankProgress> progress;
  for (auto& [rank_progress, window] : ranks) {
    // Window depth read outside the job lock (the window has its own).
    if (window != nullptr) rank_progress.window_depth = window->depth();
    progress.push_back(rank_progress);
  }
  return progress;
}

// ---------------------------------------------------------------------------- JobRegistry

JobRegistry::JobRegistry(const ServedDataset* dataset, const JobConfig& defaults,
                         int64_t max_message_bytes)
    : dataset_(dataset), defaults_(defaults), max_message_bytes_(max_message_bytes) {}

absl::StatusOr<JobConfig> JobRegistry::EffectiveConfig(const v1::RegisterRequest& request) const {
  for (absl::Status status :
       {NonNegative("batch_size", request.batch_size()), NonNegative("workers", request.workers()),
        NonNegative("shuffle_buffer", request.shuffle_buffer()),
        NonNegative("block_size", request.block_size()),
        NonNegative("transform.resize", request.transform().resize()),
        NonNegative("transform.crop", request.transform().crop())}) {
    if (!status.ok()) return status;
  }
  JobConfig config;
  PlanConfig& plan = config.plan;
  plan.world_size = request.world_size();
  plan.batch_size = request.batch_size() > 0 ? request.batch_size() : defaults_.plan.batch_size;
  switch (request.split()) {
    case v1::SPLIT_SHARD:
      plan.split = Split::kShard;
      break;
    case v1::SPLIT_SAMPLE:
      plan.split = Split::kSample;
      break;
    case v1::SPLIT_UNSPECIFIED:
      plan.split = defaults_.plan.split;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("split: unknown value ", request.split()));
  }
  switch (request.remainder()) {
    case v1::REMAINDER_DROP:
      plan.remainder = Remainder::kDrop;
      break;
    case v1::REMAINDER_PAD:
      plan.remainder = Remainder::kPad;
      break;
    case v1::REMAINDER_UNSPECIFIED:
      plan.remainder = defaults_.plan.remainder;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("remainder: unknown value ", request.remainder()));
  }
  plan.workers = request.workers() > 0 ? request.workers() : defaults_.plan.workers;
  plan.seed = request.has_seed() ? request.seed() : defaults_.plan.seed;
  plan.shuffle_shards =
      request.has_shuffle_shards() ? request.shuffle_shards() : defaults_.plan.shuffle_shards;
  plan.shuffle_buffer =
      request.has_shuffle_buffer() ? request.shuffle_buffer() : defaults_.plan.shuffle_buffer;
  plan.block_size = request.has_block_size() ? request.block_size() : defaults_.plan.block_size;

  TransformSpec& transform = config.transform;
  switch (request.transform().mode()) {
    case v1::TRANSFORM_MODE_CENTER:
      transform.mode = TransformMode::kCenter;
      break;
    case v1::TRANSFORM_MODE_RANDOM:
      transform.mode = TransformMode::kRandom;
      break;
    case v1::TRANSFORM_MODE_UNSPECIFIED:
      transform.mode = defaults_.transform.mode;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("transform.mode: unknown value ", request.transform().mode()));
  }
  transform.crop =
      request.transform().crop() > 0 ? request.transform().crop() : defaults_.transform.crop;
  transform.resize =
      request.transform().resize() > 0 ? request.transform().resize() : defaults_.transform.resize;
  if (transform.crop > kMaxCrop) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform.crop: ", transform.crop, " is above the limit ", kMaxCrop));
  }
  if (transform.mode == TransformMode::kCenter && transform.resize < transform.crop) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform.resize: ", transform.resize, " is smaller than transform.crop ",
                     transform.crop, " (center mode resizes the short side, then crops)"));
  }
  const int64_t sample_pixels = 3ll * transform.crop * transform.crop;
  const int64_t message_bytes =
      plan.batch_size * (sample_pixels + kSampleOverheadBytes) + kBatchOverheadBytes;
  if (message_bytes > max_message_bytes_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch_size: %d images of 3x%dx%d make a %d-byte message, above the server's "
        "max message size %d (lower batch_size or crop, or raise --max-message-size)",
        plan.batch_size, transform.crop, transform.crop, message_bytes, max_message_bytes_));
  }
  return config;
}

absl::StatusOr<v1::RegisterResponse> JobRegistry::Register(const v1::RegisterRequest& request) {
  const std::string& job_id = request.job_id();
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (job_id.size() > kMaxJobIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id: longer than ", kMaxJobIdLength, " characters"));
  }
  if (request.world_size() < 1 || request.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: must be in [1, ", kMaxWorldSize,
                                                   "], got ", request.world_size()));
  }
  if (request.rank() < 0 || request.rank() >= request.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank: must be in [0, world_size=", request.world_size(), "), got ", request.rank()));
  }
  absl::StatusOr<JobConfig> config = EffectiveConfig(request);
  if (!config.ok()) return config.status();

  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) {
      job = it->second;
      absl::Status agree = CheckAgreement(job_id, request.rank(), job->config(), *config);
      if (!agree.ok()) return agree;
    } else {
      absl::StatusOr<int64_t> n = BatchesPerRank(dataset_->shard_sizes(), config->plan);
      if (!n.ok()) {
        return absl::Status(n.status().code(),
                            absl::StrCat("job '", job_id, "': ", n.status().message()));
      }
      job = std::make_shared<Job>(job_id, *config, *n,
                                  PlanFingerprint(dataset_->index().fingerprint, config->plan),
                                  dataset_);
      jobs_.emplace(job_id, job);
    }
  }
  job->MarkRegistered(request.rank());

  const DatasetIndex& index = dataset_->index();
  const JobConfig& effective = job->config();
  v1::RegisterResponse response;
  response.set_batches_per_epoch(job->batches_per_epoch());
  response.set_num_classes(index.num_classes);
  for (const std::string& name : index.class_names) response.add_class_names(name);
  response.set_num_samples(index.num_samples);
  response.add_image_shape(3);
  response.add_image_shape(effective.transform.crop);
  response.add_image_shape(effective.transform.crop);
  response.set_plan_fingerprint(job->plan_fingerprint());
  if (effective.plan.split == Split::kShard) {
    absl::StatusOr<std::shared_ptr<const EpochPlan>> plan = job->Plan(0);
    if (!plan.ok()) return plan.status();
    for (int32_t shard : (*plan)->ShardsOfRank(request.rank())) {
      response.add_shards(index.shards[shard].path);
    }
  }
  response.set_batch_size(effective.plan.batch_size);
  response.set_split(ToProto(effective.plan.split));
  response.set_remainder(ToProto(effective.plan.remainder));
  response.set_workers(effective.plan.workers);
  response.set_seed(effective.plan.seed);
  response.set_shuffle_shards(effective.plan.shuffle_shards);
  response.set_shuffle_buffer(effective.plan.shuffle_buffer);
  response.set_block_size(effective.plan.block_size);
  response.mutable_transform()->set_mode(ToProto(effective.transform.mode));
  response.mutable_transform()->set_resize(effective.transform.resize);
  response.mutable_transform()->set_crop(effective.transform.crop);
  response.set_index_fingerprint(index.fingerprint);
  response.set_server_version(kServerVersion);
  return response;
}

std::shared_ptr<Job> JobRegistry::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Job>> JobRegistry::Jobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& [id, job] : jobs_) jobs.push_back(job);
  return jobs;
}

}  // namespace shardcast::server
