// Job registration, plan cache and rank progress (see job_registry.h).
#include "server/serving/job_registry.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/image/image_decode_internal.h"
#include "common/image/webp_decode.h"
#include "common/plan/job_fingerprint.h"
#include "common/util/utf8.h"
#include "proto/job_config_proto.h"
#include "server/base/log.h"
#include "server/base/version.h"
#include "server/serving/stall_watch.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

namespace {

// Ranks of a job agree on every setting, world and batch size included; the error
// names the first field that differs.
absl::Status CheckAgreement(const std::string& job, int32_t rank, const JobConfig& has,
                            const JobConfig& asked) {
  std::optional<ConfigDifference> diff = FirstDifference(has, asked);
  if (!diff.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      diff->field, ": job '", LogSafe(job), "' has ", diff->a, ", rank ", rank, " asked ", diff->b,
      " (ranks of a job must agree; use another job id for another config)"));
}

// A batch of the job's largest selected samples must fit one message: pixels and
// overheads (BatchMessageBytes) plus every sample's members sent as stored (fields,
// encoded images).
absl::Status CheckMessageSize(const JobConfig& config, const JobSamples& samples,
                              int64_t max_message_bytes) {
  const int64_t members = static_cast<int64_t>(samples.largest_sample_member_bytes());
  const int64_t message_bytes = BatchMessageBytes(config) + config.plan.batch_size * members;
  if (message_bytes <= max_message_bytes) return absl::OkStatus();
  const bool encoded = SendsEncodedImages(config);
  std::string members_named = encoded ? "image as stored" : "";
  if (!config.fields.empty()) {
    absl::StrAppend(&members_named, encoded ? " and " : "", "'", FieldSpecsString(config.fields),
                    "'");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      encoded ? "delivery: " : "fields: ", "a batch of ", config.plan.batch_size,
      " samples whose members take ", members, " bytes each (the largest selected sample's ",
      members_named, ") makes a ", message_bytes,
      "-byte message, above the server's max message size ", max_message_bytes,
      encoded ? " (lower batch_size, use server delivery, or lower --max-member-bytes: an image "
                "above it is substituted, not sent)"
              : " (lower batch_size, leave the large field out, or lower --max-member-bytes to "
                "leave such samples out)"));
}

// A new mixed job: its mixture built (each dataset's selection, the planner), and
// every dataset's largest sample within one message.
absl::StatusOr<std::shared_ptr<Job>> NewMixtureJob(const std::string& job_id,
                                                   const MixtureRequest& asked,
                                                   const std::vector<const NamedDataset*>& datasets,
                                                   const JobConfig& config,
                                                   const JobRegistry::Options& options,
                                                   const std::string& peer) {
  absl::StatusOr<std::unique_ptr<JobMixture>> mixture =
      BuildMixture(asked, datasets, config, options.max_member_bytes);
  if (!mixture.ok()) {
    return absl::Status(mixture.status().code(),
                        absl::StrCat("job '", LogSafe(job_id), "': ", mixture.status().message()));
  }
  for (size_t d = 0; d < datasets.size(); ++d) {
    if (absl::Status fits =
            CheckMessageSize(config, *(*mixture)->samples[d], options.limits.max_message_bytes);
        !fits.ok()) {
      return absl::Status(fits.code(), absl::StrCat("job '", LogSafe(job_id), "' (dataset '",
                                                    datasets[d]->name, "'): ", fits.message()));
    }
  }
  const int64_t n = (*mixture)->plan->batches_per_rank();
  return std::make_shared<Job>(job_id, config, n, *std::move(mixture), peer, options.clock);
}

}  // namespace

// ---------------------------------------------------------------------------- ServeSettings

int64_t DecodeNeedBound() {
  // A JPEG is at most 65500 pixels a side (libjpeg's JPEG_MAX_DIMENSION) and kMaxPixels
  // in all, so the padded blocks add at most 15 * (65500 + kMaxPixels / 65500) + 225
  // pixels; 4 bytes a pixel decoded (CMYK) plus 4 components x 2 bytes of coefficients.
  // A PNG needs less (3 bytes a pixel and a row pointer a row: at most 11 per pixel).
  // A WebP can need more: a lossless stream's entropy tables (MaxWebpDecodeBytes).
  constexpr int64_t kMaxSide = 65500;
  constexpr int64_t kPadded =
      internal::kMaxPixels + 15 * (kMaxSide + internal::kMaxPixels / kMaxSide + 1) + 225;
  return std::max(4 * internal::kMaxPixels + 8 * kPadded, internal::MaxWebpDecodeBytes());
}

ServeSettings ServeSettingsFor(const DatasetIndex& index, int64_t max_member_bytes,
                               int64_t max_decode_bytes, bool resend_first_batch) {
  const uint64_t largest_image = index.LargestImageBytes();
  ServeSettings serve;
  // BatchAssembler substitutes a member whose size is above the limit.
  if (max_member_bytes > 0 && largest_image > static_cast<uint64_t>(max_member_bytes)) {
    serve.max_member_bytes = max_member_bytes;
  }
  // The decode budget refuses bytes above its limit.
  if (max_decode_bytes > 0 && max_decode_bytes < DecodeNeedBound()) {
    serve.max_decode_bytes = max_decode_bytes;
  }
  serve.max_pixels = internal::kMaxPixels;
  serve.resend_first_batch = resend_first_batch;
  return serve;
}

void AddLeftOut(const JobSamples& samples,
                google::protobuf::RepeatedPtrField<v1::ReasonCount>* left_out) {
  for (const LeftOut& out : samples.left_out()) {
    v1::ReasonCount* reason = left_out->Add();
    reason->set_reason(EscapeToUtf8(out.reason));
    reason->set_count(out.count);
  }
}

// ---------------------------------------------------------------------------- Job

Job::Job(std::string id, JobConfig config, int64_t batches_per_epoch, std::string job_fingerprint,
         const NamedDataset* dataset, std::shared_ptr<const JobSamples> samples, std::string peer,
         const Clock* clock)
    : clock_(clock),
      id_(std::move(id)),
      config_(std::move(config)),
      batches_per_epoch_(batches_per_epoch),
      job_fingerprint_(std::move(job_fingerprint)),
      dataset_(dataset),
      samples_(std::move(samples)),
      content_(std::make_shared<const BatchContent>(
          BatchContent{config_.image, config_.transform, config_.fields, config_.delivery})),
      peer_(std::move(peer)),
      last_active_(clock->Now()) {}

Job::Job(std::string id, JobConfig config, int64_t batches_per_epoch,
         std::unique_ptr<JobMixture> mixture, std::string peer, const Clock* clock)
    : Job(std::move(id), std::move(config), batches_per_epoch, mixture->job_fingerprint,
          mixture->datasets[0], mixture->samples[0], std::move(peer), clock) {
  mixture_ = std::move(mixture);
}

int64_t Job::num_samples() const {
  return mixture_ != nullptr ? mixture_->plan->samples_per_epoch() : samples_->num_samples();
}

BatchAssembler* Job::assembler() const {
  return mixture_ != nullptr ? mixture_->assembler.get() : dataset_->assembler.get();
}

std::unique_ptr<RankBatchIterator> Job::MapToIndex(
    std::unique_ptr<RankBatchIterator> batches) const {
  if (mixture_ != nullptr) return MapMixtureToIndex(mixture_->samples, std::move(batches));
  return samples_->MapToIndex(std::move(batches));
}

int64_t Job::batch_memory_bytes() const {
  const int64_t pixels =
      content_->pixels() ? int64_t{3} * config_.transform.crop * config_.transform.crop : 0;
  const int64_t members = mixture_ != nullptr ? mixture_->largest_sample_member_bytes
                          : samples_ == nullptr
                              ? 0
                              : static_cast<int64_t>(samples_->largest_sample_member_bytes());
  return int64_t{config_.plan.batch_size} * (pixels + members);
}

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
      mixture_ != nullptr ? mixture_->plan->Epoch(epoch)
                          : EpochPlan::Create(samples_->shard_sizes(), config_.plan, epoch);
  if (!plan.ok()) return plan.status();
  plans_.emplace_front(epoch, *plan);
  if (plans_.size() > kPlanCacheSize) plans_.pop_back();
  return *plan;
}

absl::StatusOr<std::shared_ptr<const EpochPlan>> Job::ResumedPlan(int64_t epoch,
                                                                  const v1::MixtureResume& resume) {
  if (mixture_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("mix_resume: job '", LogSafe(id_), "' reads one dataset, not a mixture"));
  }
  std::string key;
  resume.SerializeToString(&key);
  std::shared_ptr<const MixtureJobPlan> plan;
  {
    absl::MutexLock lock(&mu_);
    auto it = resumed_.find(key);
    if (it != resumed_.end()) plan = it->second;
  }
  if (plan == nullptr) {
    // Replayed outside the lock (O(position k)); two ranks may both replay, the first
    // kept: the plans are equal.
    absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> made =
        server::ResumedPlan(*mixture_, resume);
    if (!made.ok()) return made.status();
    absl::MutexLock lock(&mu_);
    if (resumed_.size() >= kPlanCacheSize) resumed_.clear();
    plan = resumed_.emplace(key, *made).first->second;
  }
  return plan->Epoch(epoch);
}

void Job::MarkRegistered(int32_t rank) {
  absl::MutexLock lock(&mu_);
  RankProgress& progress = ranks_[rank];
  progress.rank = rank;
  last_active_ = clock_->Now();
  // The stall clock of a rank that has not streamed yet starts at its registration.
  if (progress.last_batch == absl::InfinitePast()) progress.last_batch = last_active_;
}

bool Job::QuietFor(absl::Duration ttl, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  return now - last_active_ >= ttl;
}

bool Job::EverStreamed() const {
  absl::MutexLock lock(&mu_);
  return ever_streamed_;
}

bool Job::IsRegistered(int32_t rank) const {
  absl::MutexLock lock(&mu_);
  return ranks_.count(rank) > 0;
}

void Job::StreamStarted(int32_t rank, int64_t epoch, int64_t start_batch) {
  absl::MutexLock lock(&mu_);
  RankProgress& progress = ranks_[rank];
  progress.rank = rank;
  progress.epoch = epoch;
  progress.next_batch = start_batch;
  progress.last_batch = clock_->Now();
  progress.stalled = false;
  ever_streamed_ = true;
  last_active_ = clock_->Now();
}

void Job::BatchSent(int32_t rank) {
  absl::MutexLock lock(&mu_);
  ++ranks_[rank].batches_sent;
}

bool Job::RankTookBatch(int32_t rank, int64_t batch_index, absl::Time now) {
  absl::MutexLock lock(&mu_);
  RankProgress& progress = ranks_[rank];
  progress.next_batch = batch_index + 1;
  progress.last_batch = now;
  const bool was_stalled = progress.stalled;
  progress.stalled = false;
  return was_stalled;
}

void Job::StreamEnded() {
  absl::MutexLock lock(&mu_);
  last_active_ = clock_->Now();
}

std::vector<RankProgress> Job::UpdateStalls(absl::Duration stall_warn, absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<RankActivity> activity;
  activity.reserve(ranks_.size());
  for (const auto& [rank, progress] : ranks_) {
    activity.push_back(
        {progress.epoch * batches_per_epoch_ + progress.next_batch, progress.last_batch});
  }
  const std::vector<bool> stalled = StalledRanks(activity, stall_warn, now);
  std::vector<RankProgress> newly_stalled;
  size_t i = 0;
  for (auto& [rank, progress] : ranks_) {
    // Flags are only raised here; only a batch or a new stream (the rank moved)
    // lowers one, so a rank stays flagged while its peers also stop.
    if (stalled[i++] && !progress.stalled) {
      progress.stalled = true;
      newly_stalled.push_back(progress);
    }
  }
  return newly_stalled;
}

std::vector<RankProgress> Job::Progress() const {
  absl::MutexLock lock(&mu_);
  std::vector<RankProgress> progress;
  progress.reserve(ranks_.size());
  for (const auto& [rank, rank_progress] : ranks_) progress.push_back(rank_progress);
  return progress;
}

// ---------------------------------------------------------------------------- JobRegistry

JobRegistry::Options JobRegistry::OptionsFor(const ServerOptions& options) {
  Options registry;
  registry.defaults = options.defaults;
  registry.limits = JobLimits{options.max_message_bytes};
  registry.max_member_bytes = options.max_member_bytes;
  registry.job_ttl = options.job_ttl;
  registry.max_jobs = options.max_jobs;
  registry.unstreamed_job_ttl = options.unstreamed_job_ttl;
  registry.max_unstreamed_jobs_per_peer = options.max_unstreamed_jobs_per_peer;
  registry.clock = options.clock;
  return registry;
}

JobRegistry::JobRegistry(Options options) : options_(std::move(options)) {}

absl::Status JobRegistry::CheckPeerLimit(const std::string& job_id, const std::string& peer) const {
  if (options_.max_unstreamed_jobs_per_peer <= 0) return absl::OkStatus();
  int unstreamed = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->peer() == peer && !job->EverStreamed()) ++unstreamed;
  }
  if (unstreamed < options_.max_unstreamed_jobs_per_peer) return absl::OkStatus();
  // How the peer's places come free again without a stream: the TTL that applies.
  std::string expiry = "restart the server (--job-ttl and --unstreamed-job-ttl are 0)";
  if (options_.unstreamed_job_ttl > absl::ZeroDuration()) {
    expiry = absl::StrCat("wait until they expire (--unstreamed-job-ttl ",
                          absl::FormatDuration(options_.unstreamed_job_ttl), ")");
  } else if (options_.job_ttl > absl::ZeroDuration()) {
    expiry = absl::StrCat("wait until they expire (--job-ttl ",
                          absl::FormatDuration(options_.job_ttl), ")");
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "job '", LogSafe(job_id), "': peer ", LogSafe(peer), " already holds ", unstreamed,
      " jobs that never opened a stream, its limit (--max-unstreamed-jobs-per-peer ",
      options_.max_unstreamed_jobs_per_peer, "); open a stream for one of them, ", expiry,
      ", or raise --max-unstreamed-jobs-per-peer"));
}

bool JobRegistry::Expired(const Job& job, absl::Time now, HasOpenStream has_open_stream,
                          bool* never_streamed) const {
  // A job with a stream open never expires, however long that stream runs.
  if (has_open_stream(job)) {
    *never_streamed = false;
    return false;
  }
  const bool expired =
      options_.job_ttl > absl::ZeroDuration() && job.QuietFor(options_.job_ttl, now);
  const bool unstreamed = options_.unstreamed_job_ttl > absl::ZeroDuration() &&
                          !job.EverStreamed() && job.QuietFor(options_.unstreamed_job_ttl, now);
  *never_streamed = unstreamed && !expired;
  return expired || unstreamed;
}

std::vector<std::shared_ptr<Job>> JobRegistry::LiveJobs(absl::Time now,
                                                        HasOpenStream has_open_stream) const {
  std::vector<std::shared_ptr<Job>> live;
  for (std::shared_ptr<Job>& job : Jobs()) {
    bool never_streamed = false;
    if (!Expired(*job, now, has_open_stream, &never_streamed)) live.push_back(std::move(job));
  }
  return live;
}

std::vector<JobRegistry::Dropped> JobRegistry::DropExpired(absl::Time now,
                                                           HasOpenStream has_open_stream) {
  absl::MutexLock lock(&mu_);
  std::vector<Dropped> dropped;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    bool never_streamed = false;
    if (Expired(*it->second, now, has_open_stream, &never_streamed)) {
      dropped.push_back(Dropped{it->first, never_streamed});
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

absl::StatusOr<v1::RegisterResponse> JobRegistry::Register(const v1::RegisterRequest& request,
                                                           const NamedDataset* dataset,
                                                           const std::string& peer) {
  if (request.mix_size() > 0) {
    // The service routes a mixture to RegisterMixture; a caller that did not must not
    // get a job of one dataset that silently ignores the mixture.
    return absl::InvalidArgumentError(
        "mix: a mixture is registered with RegisterMixture (its datasets resolved by name)");
  }
  return RegisterJob(request, nullptr, {dataset}, peer);
}

absl::StatusOr<v1::RegisterResponse> JobRegistry::RegisterMixture(
    const v1::RegisterRequest& request, const MixtureRequest& mixture,
    const std::vector<const NamedDataset*>& datasets, const std::string& peer) {
  return RegisterJob(request, &mixture, datasets, peer);
}

namespace {

// The request's job config, its job id and rank checked; INVALID_ARGUMENT naming the
// field otherwise.
absl::StatusOr<JobConfig> CheckedJobConfig(const v1::RegisterRequest& request, bool mixed,
                                           const JobRegistry::Options& options) {
  const std::string& job_id = request.job_id();
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (job_id.size() > kMaxJobIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id: longer than ", kMaxJobIdLength, " characters"));
  }
  absl::StatusOr<JobConfig> config = EffectiveJobConfig(request, options.defaults, options.limits);
  if (!config.ok()) return config.status();
  // A mixture is dealt as split sample (mixture_epoch.h): unset means that, not the
  // server's default; split shard is refused by the planner, saying so.
  if (mixed && request.split() == v1::SPLIT_UNSPECIFIED) {
    config->plan.split = Split::kSample;
  }
  if (request.rank() < 0 || request.rank() >= request.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank: must be in [0, world_size=", request.world_size(), "), got ", request.rank()));
  }
  return config;
}

// FAILED_PRECONDITION when a rank of the existing `job` asks for another mixture, or
// another dataset, than the job reads.
absl::Status CheckSameData(const Job& job, const v1::RegisterRequest& request,
                           const MixtureRequest* mixture, const NamedDataset* dataset) {
  const std::string& job_id = request.job_id();
  const std::string has =
      job.mixture() != nullptr ? MixtureRequestString(job.mixture()->asked) : "";
  const std::string asked = mixture != nullptr ? MixtureRequestString(*mixture) : "";
  if (has != asked) {
    return absl::FailedPreconditionError(
        absl::StrCat("mix: job '", LogSafe(job_id), "' reads ",
                     job.mixture() != nullptr ? absl::StrCat("the mixture ", has)
                                              : absl::StrCat("dataset '", job.dataset().name, "'"),
                     ", rank ", request.rank(), " asked for ",
                     mixture != nullptr ? absl::StrCat("the mixture ", asked)
                                        : absl::StrCat("dataset '", dataset->name, "'"),
                     " (ranks of a job must agree; use another job id for another mixture)"));
  }
  if (mixture == nullptr && &job.dataset() != dataset) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset: job '", LogSafe(job_id), "' reads dataset '", job.dataset().name,
                     "', rank ", request.rank(), " asked for '", dataset->name,
                     "' (ranks of a job must agree; use another job id for another dataset)"));
  }
  return absl::OkStatus();
}

// A new job of one dataset: its samples selected, a batch of the largest within one
// message, and its batches per rank planned.
absl::StatusOr<std::shared_ptr<Job>> NewDatasetJob(const std::string& job_id,
                                                   const NamedDataset* dataset,
                                                   const JobConfig& config,
                                                   const JobRegistry::Options& options,
                                                   const std::string& peer) {
  absl::StatusOr<std::shared_ptr<const JobSamples>> samples =
      JobSamples::Select(dataset->data->index(), config, options.max_member_bytes);
  if (!samples.ok()) {
    return absl::Status(samples.status().code(),
                        absl::StrCat("job '", LogSafe(job_id), "' on dataset '", dataset->name,
                                     "': ", samples.status().message()));
  }
  if (absl::Status fits = CheckMessageSize(config, **samples, options.limits.max_message_bytes);
      !fits.ok()) {
    return absl::Status(fits.code(), absl::StrCat("job '", LogSafe(job_id), "': ", fits.message()));
  }
  absl::StatusOr<int64_t> n = BatchesPerRank((*samples)->shard_sizes(), config.plan);
  if (!n.ok()) {
    return absl::Status(n.status().code(),
                        absl::StrCat("job '", LogSafe(job_id), "': ", n.status().message()));
  }
  // The limit decides which samples the job serves once it leaves one out: replicas
  // whose limits differ there serve other samples, so their fingerprints differ.
  ServeSettings serve = dataset->serve;
  if ((*samples)->member_limit_reached()) serve.max_member_bytes = options.max_member_bytes;
  return std::make_shared<Job>(job_id, config, *n,
                               JobFingerprint(dataset->data->index().fingerprint, config, serve),
                               dataset, *std::move(samples), peer, options.clock);
}

// The image shape a batch's images take: 3 channels of crop x crop, when the job has images.
void AddImageShape(const JobConfig& config, v1::RegisterResponse* response) {
  if (config.image) {
    response->add_image_shape(3);
    response->add_image_shape(config.transform.crop);
    response->add_image_shape(config.transform.crop);
  }
}

// The answer to a rank of a mixed job.
v1::RegisterResponse MixtureRegisterResponse(const Job& job) {
  const JobConfig& effective = job.config();
  v1::RegisterResponse response;
  response.set_batches_per_epoch(job.batches_per_epoch());
  AddImageShape(effective, &response);
  SetMixtureResponse(*job.mixture(), &response);
  response.set_job_fingerprint(job.job_fingerprint());
  SetResponseConfig(effective, &response);
  response.set_server_version(kServerVersion);
  return response;
}

// The answer to rank `rank` of a job of `dataset`: with a split by shard, the shards
// it reads in epoch 0.
absl::StatusOr<v1::RegisterResponse> DatasetRegisterResponse(Job& job, const NamedDataset& dataset,
                                                             int32_t rank) {
  const JobConfig& effective = job.config();
  const DatasetIndex& index = dataset.data->index();
  v1::RegisterResponse response;
  response.set_batches_per_epoch(job.batches_per_epoch());
  response.set_num_classes(index.num_classes);
  // Wire strings are UTF-8: label text and shard names are escaped (common/util/utf8.h).
  for (const std::string& name : index.class_names) response.add_class_names(EscapeToUtf8(name));
  response.set_num_samples(job.samples().num_samples());
  AddImageShape(effective, &response);
  AddLeftOut(job.samples(), response.mutable_left_out());
  response.set_job_fingerprint(job.job_fingerprint());
  if (effective.plan.split == Split::kShard) {
    absl::StatusOr<std::shared_ptr<const EpochPlan>> plan = job.Plan(0);
    if (!plan.ok()) return plan.status();
    for (int32_t shard : (*plan)->ShardsOfRank(rank)) {
      response.add_shards(EscapeToUtf8(index.shards[shard].path));
    }
  }
  SetResponseConfig(effective, &response);
  response.set_index_fingerprint(index.fingerprint);
  response.set_server_version(kServerVersion);
  response.set_dataset(dataset.name);
  return response;
}

}  // namespace

absl::StatusOr<v1::RegisterResponse> JobRegistry::RegisterJob(
    const v1::RegisterRequest& request, const MixtureRequest* mixture,
    const std::vector<const NamedDataset*>& datasets, const std::string& peer) {
  absl::StatusOr<JobConfig> config = CheckedJobConfig(request, mixture != nullptr, options_);
  if (!config.ok()) return config.status();
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<Job>> joined =
        JoinOrAddJob(request, mixture, datasets, *config, peer);
    if (!joined.ok()) return joined.status();
    job = *std::move(joined);
  }
  job->MarkRegistered(request.rank());
  if (job->mixture() != nullptr) return MixtureRegisterResponse(*job);
  return DatasetRegisterResponse(*job, *datasets[0], request.rank());
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::JoinOrAddJob(
    const v1::RegisterRequest& request, const MixtureRequest* mixture,
    const std::vector<const NamedDataset*>& datasets, const JobConfig& config,
    const std::string& peer) {
  const std::string& job_id = request.job_id();
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    if (absl::Status same = CheckSameData(*it->second, request, mixture, datasets[0]); !same.ok()) {
      return same;
    }
    absl::Status agree = CheckAgreement(job_id, request.rank(), it->second->config(), config);
    if (!agree.ok()) return agree;
    return it->second;
  }
  // Only a new job counts against the peer: the other ranks of a job join it
  // from wherever they run.
  if (absl::Status limit = CheckPeerLimit(job_id, peer); !limit.ok()) return limit;
  if (options_.max_jobs > 0 && jobs_.size() >= static_cast<size_t>(options_.max_jobs)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job '", LogSafe(job_id), "': the server already has ", jobs_.size(),
                     " jobs, its limit (--max-jobs ", options_.max_jobs,
                     "); retry once a job ends and expires (--job-ttl), or raise --max-jobs"));
  }
  absl::StatusOr<std::shared_ptr<Job>> job =
      mixture != nullptr ? NewMixtureJob(job_id, *mixture, datasets, config, options_, peer)
                         : NewDatasetJob(job_id, datasets[0], config, options_, peer);
  if (!job.ok()) return job.status();
  jobs_.emplace(job_id, *job);
  return job;
}

std::shared_ptr<Job> JobRegistry::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

size_t JobRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

std::vector<std::shared_ptr<Job>> JobRegistry::Jobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Job>> jobs;
  for (const auto& [id, job] : jobs_) jobs.push_back(job);
  return jobs;
}

}  // namespace shardcast::server
