// The serving core (see shardcast_service_impl.h).
#include "server/serving/shardcast_service_impl.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "common/remote/dataset_url.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags/flags.h"
#include "common/util/utf8.h"
#include "proto/job_config_proto.h"
#include "server/base/log.h"
#include "server/base/memory_limit.h"
#include "server/base/version.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

// ---------------------------------------------------------------------------- service

namespace {

int64_t DecodeMemoryLimit(const ServerOptions& options) {
  if (options.max_decode_memory_bytes > 0) return options.max_decode_memory_bytes;
  return DefaultDecodeMemoryBytes(AvailableMemory());
}

v1::DatasetStatus::State ToProto(DatasetRegistry::State state) {
  switch (state) {
    case DatasetRegistry::State::kIndexing:
      return v1::DatasetStatus::INDEXING;
    case DatasetRegistry::State::kServing:
      return v1::DatasetStatus::SERVING;
    case DatasetRegistry::State::kFailed:
      return v1::DatasetStatus::FAILED;
  }
  return v1::DatasetStatus::STATE_UNSPECIFIED;
}

// Descriptors this process has open (the entries of /proc/self/fd, less the one
// listing them); -1 when /proc is not mounted.
int64_t OpenDescriptorCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;
}

// Appends one shard problem of `dataset` to `list` while the list is below its bound;
// the path and reason come from the data and are made log-safe.
void ListShardProblem(const std::string& dataset, const std::string& path,
                      const std::string& reason,
                      google::protobuf::RepeatedPtrField<v1::ShardProblem>* list) {
  using Impl = ShardcastServiceImpl;
  if (list->size() >= Impl::kMaxListedShardProblems) return;
  v1::ShardProblem* problem = list->Add();
  problem->set_path(LogSafe(path, Impl::kMaxShardNameBytes));
  // A store's error quotes its URL: GetStatus needs no token, so no secret of it.
  problem->set_reason(LogSafe(remote::RedactUrlsIn(reason), Impl::kMaxShardReasonBytes));
  problem->set_dataset(dataset);
}

// The skipped and changed shards of `dataset` into its totals in `status` and into the
// response's lists and totals, which hold every dataset's: a changed shard of any
// dataset fails the streams that read it, so none may go unreported.
void AddShardProblems(const ServedDataset& dataset, v1::DatasetStatus* status,
                      v1::GetStatusResponse* response) {
  const DatasetIndex& index = dataset.index();
  const std::vector<ChangedShard> changed = dataset.reader().ChangedShards();
  status->set_total_skipped_shards(static_cast<int32_t>(index.skipped_shards.size()));
  status->set_total_changed_shards(static_cast<int32_t>(changed.size()));
  response->set_total_skipped_shards(response->total_skipped_shards() +
                                     status->total_skipped_shards());
  response->set_total_changed_shards(response->total_changed_shards() +
                                     status->total_changed_shards());
  for (const SkippedShard& skipped : index.skipped_shards) {
    ListShardProblem(status->name(), skipped.path, skipped.reason,
                     response->mutable_skipped_shards());
  }
  for (const ChangedShard& shard : changed) {
    ListShardProblem(status->name(), shard.path, shard.change, response->mutable_changed_shards());
  }
  const std::vector<UnreadableShard> unreadable = dataset.reader().UnreadableShards();
  status->set_total_unreadable_shards(static_cast<int32_t>(unreadable.size()));
  response->set_total_unreadable_shards(response->total_unreadable_shards() +
                                        status->total_unreadable_shards());
  for (const UnreadableShard& shard : unreadable) {
    ListShardProblem(status->name(), shard.path, shard.error,
                     response->mutable_unreadable_shards());
  }
}

}  // namespace

ShardcastServiceImpl::ShardcastServiceImpl(const ServerOptions& options)
    : options_(options),
      stats_(options.clock->Now()),
      decode_budget_(DecodeMemoryLimit(options)),
      pool_(std::make_unique<DecodePool>(options.decode_threads)),
      options_error_(DatasetsToServe(options).status()),
      remote_storage_(options.remote),
      datasets_(options_error_.ok() ? *DatasetsToServe(options) : std::vector<DatasetSpec>{}),
      jobs_(options.defaults, JobLimits{options.max_message_bytes}, options.job_ttl,
            options.max_jobs, options.unstreamed_job_ttl, options.max_unstreamed_jobs_per_peer,
            options.clock),
      // Dropping expired jobs between Registers frees their memory.
      streams_(std::make_unique<StreamManager>(options_, &stats_, &jobs_, options.clock,
                                               [this] { DropExpiredJobs(); })) {}

ShardcastServiceImpl::~ShardcastServiceImpl() {
  // The threads that act on streams first; then the pool, whose last tasks may still
  // hold batches that give memory back to the streams' budget; then that budget.
  streams_->Stop();
  pool_.reset();
  streams_.reset();
}

std::string ShardcastServiceImpl::IndexState(DatasetRegistry::State dataset) const {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return "draining";
  }
  switch (dataset) {
    case DatasetRegistry::State::kIndexing:
      return "indexing";
    case DatasetRegistry::State::kServing:
      return "serving";
    case DatasetRegistry::State::kFailed:
      return "failed";
  }
  return "unknown";
}

absl::Status ShardcastServiceImpl::LoadDatasets(
    const std::function<void(const std::string&)>& on_ready) {
  if (!options_error_.ok()) return options_error_;
  for (const DatasetRegistry::Entry& entry : datasets_.Entries()) {
    if (entry.state != DatasetRegistry::State::kIndexing) continue;
    if (absl::Status s = LoadDataset(entry.spec); !s.ok()) return s;
    if (on_ready) on_ready(entry.spec.name);
  }
  return absl::OkStatus();
}

absl::Status ShardcastServiceImpl::LoadDataset(const DatasetSpec& spec) {
  IndexOptions index_options;
  index_options.label_field = options_.label_field;
  index_options.max_classes = options_.max_classes;
  index_options.cache_dir = options_.index_cache_dir;
  // A directory, a URL of a store, or neither (gs://, a typo'd scheme): said once, here.
  const absl::StatusOr<remote::DatasetUrl> where = remote::ParseDatasetUrl(spec.dir);
  const bool remote = where.ok() && where->kind != remote::DatasetUrl::Kind::kLocal;
  // A remote dataset's index (listing, ETags) is cached beside its bytes by default:
  // listing a bucket is cheap, scanning it is not.
  if (index_options.cache_dir.empty() && remote && !options_.remote.cache_dir.empty()) {
    index_options.cache_dir = options_.remote.cache_dir + "/index";
  }
  index_options.cancelled = &stop_indexing_;
  const absl::Time start = absl::Now();
  const std::string what =
      absl::StrCat("dataset '", spec.name, "' (", remote::RedactedUrl(spec.dir), ")");
  LogInfo("index", absl::StrCat("indexing ", what));
  absl::StatusOr<std::unique_ptr<ServedDataset>> dataset =
      !where.ok() ? where.status()
      : remote    ? remote_storage_.Load(*where, index_options,
                                         static_cast<size_t>(options_.gzip_index_memory_bytes))
                  : ServedDataset::Load(spec.dir, index_options,
                                        static_cast<size_t>(options_.gzip_index_memory_bytes));
  if (!dataset.ok()) {
    if (absl::IsCancelled(dataset.status())) {
      LogInfo("index", absl::StrCat("indexing ", what, " stopped: the server is shutting down"));
    } else {
      LogError("index", absl::StrCat("cannot index ", what, ": ", dataset.status().ToString()));
    }
    datasets_.Fail(spec.name, dataset.status());
    return absl::Status(dataset.status().code(),
                        absl::StrCat(what, ": ", dataset.status().message()));
  }
  const DatasetIndex& index = (*dataset)->index();
  LogInfo("index", absl::StrFormat("%s: %d shards (%d skipped), %d samples, %d classes, %d samples "
                                   "skipped, fingerprint %s%s (%.2f s)",
                                   what, index.shards.size(), index.skipped_shards.size(),
                                   index.num_samples, index.num_classes, index.skipped.size(),
                                   index.fingerprint, index.loaded_from_cache ? ", from cache" : "",
                                   absl::ToDoubleSeconds(absl::Now() - start)));
  for (const std::string& warning : index.warnings) LogWarning("index", warning);
  size_t shown = 0;
  for (const SkippedSample& skipped : index.skipped) {
    if (++shown > 20) {
      LogWarning("index", absl::StrCat("... and ", index.skipped.size() - 20, " more skipped"));
      break;
    }
    LogWarning("index",
               absl::StrCat("skipped ", skipped.shard, " '", skipped.key, "': ", skipped.reason));
  }
  SetDataset(*std::move(dataset), spec.name);
  return absl::OkStatus();
}

void ShardcastServiceImpl::SetDataset(std::unique_ptr<ServedDataset> dataset,
                                      const std::string& name) {
  auto named = std::make_unique<NamedDataset>();
  named->data = std::move(dataset);
  named->dir = named->data->index().root;
  named->serve = ServeSettingsFor(named->data->index(), options_.max_member_bytes,
                                  decode_budget_.limit(), options_.bench_only_resend_first_batch);
  // Replicas whose job fingerprints differ compare these lines (docs/server.md, replicas).
  LogInfo("index", absl::StrCat("dataset '", name, "': server settings in its job fingerprints: ",
                                ServeSettingsString(named->serve)));
  named->assembler = std::make_unique<BatchAssembler>(
      named->data.get(), pool_.get(), &stats_,
      DecodeLimits{&decode_budget_, options_.max_member_bytes, options_.shard_read_retry});
  datasets_.Publish(name, std::move(named));
}

void ShardcastServiceImpl::BeginDrain() {
  stop_indexing_.store(true);
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  streams_->BeginDrain();
}

bool ShardcastServiceImpl::serving() const {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return false;
  }
  return datasets_.AllServing();
}

absl::Status ShardcastServiceImpl::Available() const {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("draining: the server is shutting down");
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterResponse> ShardcastServiceImpl::Register(
    const v1::RegisterRequest& request, const std::string& peer) {
  if (absl::Status s = Available(); !s.ok()) return s;
  absl::StatusOr<const NamedDataset*> dataset = datasets_.Resolve(request.dataset());
  if (dataset.ok()) DropExpiredJobs();
  absl::StatusOr<v1::RegisterResponse> response =
      dataset.ok() ? jobs_.Register(request, *dataset, peer)
                   : absl::StatusOr<v1::RegisterResponse>(dataset.status());
  if (!response.ok()) {
    LogWarning("register",
               absl::StrCat("refused job '", LogSafe(request.job_id()), "' rank ", request.rank(),
                            "/", request.world_size(), ": ", response.status().ToString()));
    return response;
  }
  LogInfo("register",
          absl::StrFormat("job '%s' rank %d/%d: dataset '%s', batch %d, crop %d, split %s, "
                          "n=%d, job %s",
                          LogSafe(request.job_id()), request.rank(), request.world_size(),
                          response->dataset(), response->batch_size(), response->transform().crop(),
                          response->split() == v1::SPLIT_SHARD ? "shard" : "sample",
                          response->batches_per_epoch(), response->job_fingerprint()));
  return response;
}

void ShardcastServiceImpl::DropExpiredJobs() {
  for (const JobRegistry::Dropped& job : jobs_.DropExpired(options_.clock->Now())) {
    LogInfo("register",
            job.never_streamed
                ? absl::StrCat("dropped job '", LogSafe(job.job_id), "': registered, no stream in ",
                               absl::FormatDuration(options_.unstreamed_job_ttl),
                               " (--unstreamed-job-ttl)")
                : absl::StrCat("dropped job '", LogSafe(job.job_id), "': no stream open for ",
                               absl::FormatDuration(options_.job_ttl), " (--job-ttl)"));
  }
}

std::shared_ptr<StreamManager::Pending> ShardcastServiceImpl::OpenStream(
    const v1::StreamBatchesRequest& request, StreamManager::OpenDone done) {
  // A refusal is logged with the request it refused, whenever it comes.
  auto log_refusal = [done = std::move(done),
                      request_described = absl::StrCat(
                          "job '", LogSafe(request.job_id()), "' rank ", request.rank(), " epoch ",
                          request.epoch(), " from batch ", request.start_batch())](
                         absl::StatusOr<std::unique_ptr<StreamSession>> session) mutable {
    if (!session.ok()) {
      LogWarning("stream",
                 absl::StrCat("refused ", request_described, ": ", session.status().ToString()));
    }
    done(std::move(session));
  };
  absl::StatusOr<StreamPlan> plan = PlanStream(request);
  if (!plan.ok()) {
    log_refusal(plan.status());
    return nullptr;
  }
  BatchAssembler* assembler = plan->job->dataset().assembler.get();
  return streams_->Open(*std::move(plan), assembler, std::move(log_refusal));
}

absl::StatusOr<StreamPlan> ShardcastServiceImpl::PlanStream(
    const v1::StreamBatchesRequest& request) {
  if (absl::Status s = Available(); !s.ok()) return s;
  std::shared_ptr<Job> job = jobs_.Find(request.job_id());
  if (job == nullptr && !datasets_.AllServing()) {
    // A restarted server still indexing: the client retries, then registers again.
    return absl::UnavailableError("indexing datasets; retry shortly");
  }
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("job '", LogSafe(request.job_id()),
                                            "' is not registered (call Register first)"));
  }
  const int32_t world_size = job->config().plan.world_size;
  if (request.rank() < 0 || request.rank() >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank: job '", LogSafe(job->id()),
                                                   "' has world_size ", world_size, ", got rank ",
                                                   request.rank()));
  }
  if (!request.job_fingerprint().empty() && request.job_fingerprint() != job->job_fingerprint()) {
    // The server was restarted with other data or defaults, or another run took the
    // job id: this stream would get other samples or other pixels than its rank
    // registered for.
    // The asked value is the client's: echoed only when it has a fingerprint's shape,
    // so a huge or binary field never lands in the status message and the log.
    const std::string& asked = request.job_fingerprint();
    const bool printable = asked.size() == job->job_fingerprint().size() &&
                           asked.find_first_not_of("0123456789abcdef") == std::string::npos;
    return absl::FailedPreconditionError(absl::StrCat(
        "job_fingerprint: job '", LogSafe(job->id()), "' on this server is ",
        job->job_fingerprint(), ", the stream asked for ",
        printable ? asked : absl::StrCat("a malformed value of ", asked.size(), " bytes"),
        " (the data, the job config or a byte-changing server setting changed since the rank "
        "registered)"));
  }
  if (!job->IsRegistered(request.rank())) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", request.rank(), " of job '",
                                                      LogSafe(job->id()),
                                                      "' has not registered (call Register)"));
  }
  if (request.epoch() < 0 || request.epoch() > kMaxEpoch) {
    return absl::OutOfRangeError(
        absl::StrCat("epoch: must be in [0, ", kMaxEpoch, "], got ", request.epoch()));
  }
  // Batches of this epoch: n, or fewer for an elastic resume from a sample offset.
  absl::StatusOr<int64_t> n = job->batches_per_epoch();
  if (request.sample_offset() != 0) {
    n = BatchesFromOffset(job->dataset().data->index().num_samples, job->config().plan,
                          request.sample_offset());
    if (!n.ok()) {
      return absl::Status(n.status().code(), absl::StrCat("sample_offset: ", n.status().message()));
    }
  }
  if (request.start_batch() < 0 || request.start_batch() > *n) {
    return absl::OutOfRangeError(absl::StrCat("start_batch: must be in [0, ", *n,
                                              "] (batches of this epoch), got ",
                                              request.start_batch()));
  }
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan = job->Plan(request.epoch());
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<RankBatchIterator>> batches =
      (*plan)->IterateFrom(request.rank(), request.start_batch(), request.sample_offset());
  if (!batches.ok()) return batches.status();

  StreamPlan stream;
  stream.description = absl::StrCat(
      "job '", LogSafe(job->id()), "' rank ", request.rank(), " epoch ", request.epoch(),
      request.sample_offset() != 0 ? absl::StrCat(" from sample ", request.sample_offset()) : "",
      " batches [", request.start_batch(), ", ", *n, ")");
  stream.job = std::move(job);
  stream.rank = request.rank();
  stream.epoch = request.epoch();
  stream.start_batch = request.start_batch();
  stream.count = *n - request.start_batch();
  stream.batches = *std::move(batches);
  return stream;
}

MetricsSnapshot ShardcastServiceImpl::Metrics() const {
  MetricsSnapshot snapshot;
  snapshot.status = GetStatus();
  snapshot.decode_time = stats_.decode_time.Read();
  // The per-dataset series come from snapshot.status.datasets(); only "draining" (see
  // IndexState) is not in the reply's DatasetStatus.State.
  {
    absl::MutexLock lock(&mu_);
    snapshot.draining = draining_;
  }
  return snapshot;
}

v1::GetStatusResponse ShardcastServiceImpl::GetStatus() const {
  v1::GetStatusResponse response;
  const absl::Time now = options_.clock->Now();
  response.set_version(kServerVersion);
  response.set_uptime_seconds(absl::ToDoubleSeconds(now - stats_.start_time));
  FillDatasetStatus(&response);
  FillJobStatus(now, &response);
  streams_->FillStatus(&response);
  FillTrafficStatus(now, &response);
  FillDecodeStatus(&response);
  FillHostStatus(&response);
  remote_storage_.FillStatus(&response);
  bool all_serving = true;
  for (const v1::DatasetStatus& dataset : response.datasets()) {
    all_serving &= dataset.state() == v1::DatasetStatus::SERVING;
  }
  {
    absl::MutexLock lock(&mu_);
    response.set_serving(!draining_ && all_serving && response.datasets_size() > 0 &&
                         response.listener_accepting());
  }
  return response;
}

void ShardcastServiceImpl::FillDatasetStatus(v1::GetStatusResponse* response) const {
  const std::vector<DatasetRegistry::Entry> entries = datasets_.Entries();
  std::string primary = entries.empty() ? "" : entries.front().spec.name;
  for (const DatasetRegistry::Entry& entry : entries) {
    if (entry.spec.name == kDefaultDatasetName) primary = entry.spec.name;
  }
  for (const DatasetRegistry::Entry& entry : entries) {
    v1::DatasetStatus* dataset = response->add_datasets();
    dataset->set_name(entry.spec.name);
    // Operator-given paths and index errors need not be UTF-8; proto3 strings must be.
    // GetStatus needs no token: a URL's password or signature is not shown.
    dataset->set_dir(EscapeToUtf8(remote::RedactedUrl(entry.spec.dir)));
    dataset->set_state(ToProto(entry.state));
    if (!entry.error.ok()) {
      dataset->set_error(EscapeToUtf8(remote::RedactUrlsIn(entry.error.message())));
    }
    if (entry.data != nullptr) {
      const DatasetIndex& index = entry.data->data->index();
      dataset->set_num_shards(static_cast<int32_t>(index.shards.size()));
      dataset->set_num_samples(index.num_samples);
      dataset->set_num_classes(index.num_classes);
      dataset->set_index_fingerprint(index.fingerprint);
      dataset->set_skipped_samples(static_cast<int64_t>(index.skipped.size()));
      AddShardProblems(*entry.data->data, dataset, response);
    }
    // The single-dataset fields describe "default", else the first dataset.
    if (entry.spec.name == primary) {
      response->set_shards_dir(dataset->dir());
      response->set_num_shards(dataset->num_shards());
      response->set_num_samples(dataset->num_samples());
      response->set_num_classes(dataset->num_classes());
      response->set_index_fingerprint(dataset->index_fingerprint());
      response->set_skipped_samples(dataset->skipped_samples());
      response->set_index_state(IndexState(entry.state));
    }
  }
}

void ShardcastServiceImpl::FillJobStatus(absl::Time now, v1::GetStatusResponse* response) const {
  const std::vector<std::shared_ptr<Job>> jobs = jobs_.LiveJobs(now);
  response->set_total_jobs(static_cast<int32_t>(jobs.size()));
  response->set_jobs_truncated(jobs.size() > static_cast<size_t>(kMaxListedJobs));
  response->set_max_listed_jobs(kMaxListedJobs);
  response->set_max_listed_ranks(kMaxListedRanks);
  response->set_max_jobs(options_.max_jobs);
  int32_t total_stalled = 0;
  for (const std::shared_ptr<Job>& job : jobs) {
    const std::vector<RankProgress> ranks = job->Progress();
    int32_t stalled = 0;
    for (const RankProgress& rank : ranks) stalled += rank.stalled ? 1 : 0;
    total_stalled += stalled;
    if (response->jobs_size() >= kMaxListedJobs) continue;
    v1::JobStatus* job_status = response->add_jobs();
    job_status->set_job_id(job->id());
    job_status->set_world_size(job->config().plan.world_size);
    job_status->set_batch_size(job->config().plan.batch_size);
    job_status->set_batches_per_epoch(job->batches_per_epoch());
    job_status->set_job_fingerprint(job->job_fingerprint());
    job_status->set_split(ToProto(job->config().plan.split));
    job_status->set_dataset(job->dataset().name);
    job_status->set_stalled_ranks(stalled);
    job_status->set_total_ranks(static_cast<int32_t>(ranks.size()));
    job_status->set_ranks_truncated(ranks.size() > static_cast<size_t>(kMaxListedRanks));
    const int64_t n = job->batches_per_epoch();
    int64_t most_advanced = 0;
    for (const RankProgress& rank : ranks) {
      most_advanced = std::max(most_advanced, rank.epoch * n + rank.next_batch);
    }
    for (const RankProgress& rank : ranks) {
      if (job_status->ranks_size() >= kMaxListedRanks) break;
      v1::RankStatus* rank_status = job_status->add_ranks();
      rank_status->set_rank(rank.rank);
      rank_status->set_epoch(rank.epoch);
      rank_status->set_next_batch(rank.next_batch);
      rank_status->set_lag_batches(most_advanced - (rank.epoch * n + rank.next_batch));
      rank_status->set_streaming(rank.streaming);
      rank_status->set_batches_sent(rank.batches_sent);
      rank_status->set_window_depth(rank.window_depth);
      rank_status->set_stalled(rank.stalled);
      rank_status->set_seconds_since_last_batch(
          std::max(0.0, absl::ToDoubleSeconds(now - rank.last_batch)));
    }
  }
  response->set_stalled_ranks(total_stalled);
}

void ShardcastServiceImpl::FillTrafficStatus(absl::Time now,
                                             v1::GetStatusResponse* response) const {
  response->set_images_served(stats_.images_served.load());
  response->set_bytes_served(stats_.bytes_served.load());
  double images_per_second = 0, bytes_per_second = 0;
  stats_.rate.Rates(now, &images_per_second, &bytes_per_second);
  response->set_images_per_second(images_per_second);
  response->set_bytes_per_second(bytes_per_second);
  response->set_stream_wait_for_batch_seconds(
      static_cast<double>(stats_.wait_for_batch_nanos.load()) * 1e-9);
  response->set_stream_wait_for_client_seconds(
      static_cast<double>(stats_.wait_for_client_nanos.load()) * 1e-9);
}

void ShardcastServiceImpl::FillDecodeStatus(v1::GetStatusResponse* response) const {
  response->set_decode_errors(stats_.decode_errors.load());
  response->set_substitutions(stats_.substitutions.load());
  response->set_shard_read_retries(stats_.shard_read_retries.load());
  response->set_queue_depth(pool_->queue_depth());
  response->set_decode_tasks_running(pool_->running());
  response->set_decode_threads(pool_->threads());
  response->set_decode_task_exceptions(pool_->task_exceptions());
  response->set_decode_memory_limit_bytes(decode_budget_.limit());
  response->set_decode_memory_in_use_bytes(decode_budget_.in_use());
  response->set_decode_memory_peak_bytes(decode_budget_.peak_in_use());
  response->set_images_over_decode_memory(decode_budget_.refused());
  response->set_decode_memory_waits(decode_budget_.waited());
  response->set_max_member_bytes(options_.max_member_bytes);
  response->set_images_over_member_limit(stats_.images_over_member_limit.load());
}

void ShardcastServiceImpl::FillHostStatus(v1::GetStatusResponse* response) const {
  response->set_memory_in_use_bytes(stats_.buffer_bytes.load());
  response->set_rss_bytes(ResidentSetBytes());
  response->set_max_listed_shard_problems(kMaxListedShardProblems);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    response->set_descriptor_limit(
        limit.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(limit.rlim_cur));
  }
  response->set_open_descriptors(OpenDescriptorCount());
  response->set_max_connections(options_.max_connections);
  response->set_max_connections_per_peer(options_.max_connections_per_peer);
  response->set_connections_open(stats_.connections_open.load());
  response->set_connections_refused(stats_.connections_refused.load());
  response->set_listener_accepting(stats_.listener_accepting.load());
}

}  // namespace shardcast::server
