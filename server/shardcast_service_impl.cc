// The serving core (see shardcast_service_impl.h).
#include "server/shardcast_service_impl.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/utf8.h"
#include "proto/job_config_proto.h"
#include "server/log.h"
#include "server/memory_limit.h"
#include "server/version.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

// ---------------------------------------------------------------------------- StreamSession

StreamSession::StreamSession(ShardcastServiceImpl* service, std::shared_ptr<Job> job, int32_t rank,
                             int64_t count, std::shared_ptr<BatchWindow> window, int64_t stream_id,
                             std::string description, std::shared_ptr<StreamControl> control)
    : service_(service),
      job_(std::move(job)),
      rank_(rank),
      count_(count),
      window_(std::move(window)),
      stream_id_(stream_id),
      description_(std::move(description)),
      control_(std::move(control)) {}

StreamSession::~StreamSession() { Close("closed"); }

absl::StatusOr<BatchWindow::TakeResult> StreamSession::Take(std::shared_ptr<AssembledBatch>* batch,
                                                            std::function<void()> on_ready) {
  absl::StatusOr<BatchWindow::TakeResult> taken = window_->Take(batch, std::move(on_ready));
  if (!taken.ok()) return taken;
  if (*taken == BatchWindow::TakeResult::kPending) {
    if (pending_since_ == absl::InfinitePast()) pending_since_ = absl::Now();
  } else if (pending_since_ != absl::InfinitePast()) {
    service_->stats_.wait_for_batch_nanos.fetch_add(
        absl::ToInt64Nanoseconds(absl::Now() - pending_since_), std::memory_order_relaxed);
    pending_since_ = absl::InfinitePast();
  }
  return taken;
}

void StreamSession::Sent(const AssembledBatch& batch, int64_t message_bytes,
                         absl::Duration write_wait) {
  ++sent_;
  const absl::Time now = absl::Now();
  const int64_t images = batch.header().samples_size();
  ServerStats& stats = service_->stats_;
  stats.images_served.fetch_add(images, std::memory_order_relaxed);
  stats.bytes_served.fetch_add(message_bytes, std::memory_order_relaxed);
  stats.wait_for_client_nanos.fetch_add(absl::ToInt64Nanoseconds(write_wait),
                                        std::memory_order_relaxed);
  stats.rate.Add(images, message_bytes, now);
  if (job_->BatchSent(rank_, stream_id_, batch.header().index(), now)) {
    LogInfo("stall", absl::StrCat("job '", LogSafe(job_->id()), "' rank ", rank_,
                                  " moves again: took epoch ", batch.header().epoch(), " batch ",
                                  batch.header().index()));
  }
}

void StreamSession::Close(const std::string& how) {
  if (closed_) return;
  closed_ = true;
  window_->Cancel();
  job_->CloseStream(rank_, stream_id_);
  service_->open_streams_.fetch_sub(1);
  LogInfo("stream",
          absl::StrCat("closed ", description_, " after ", sent_, "/", count_, " batches: ", how));
}

// ---------------------------------------------------------------------------- service

namespace {

int64_t BatchMemoryLimit(const ServerOptions& options) {
  if (options.max_batch_memory_bytes > 0) return options.max_batch_memory_bytes;
  return DefaultBatchMemoryBytes(AvailableMemory());
}

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
  problem->set_reason(LogSafe(reason, Impl::kMaxShardReasonBytes));
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
      stats_(absl::Now()),
      budget_(BatchMemoryLimit(options)),
      decode_budget_(DecodeMemoryLimit(options)),
      pool_(std::make_unique<DecodePool>(options.decode_threads)),
      options_error_(DatasetsToServe(options).status()),
      datasets_(options_error_.ok() ? *DatasetsToServe(options) : std::vector<DatasetSpec>{}),
      jobs_(options.defaults, JobLimits{options.max_message_bytes}, options.job_ttl,
            options.max_jobs, options.unstreamed_job_ttl, options.max_unstreamed_jobs_per_peer) {
  if (options_.stream_idle_timeout > absl::ZeroDuration() ||
      options_.stall_warn > absl::ZeroDuration()) {
    monitor_ = std::thread([this] { MonitorLoop(); });
  }
}

ShardcastServiceImpl::~ShardcastServiceImpl() {
  stop_monitor_.Notify();
  if (monitor_.joinable()) monitor_.join();
  pool_.reset();
}

void ShardcastServiceImpl::MonitorLoop() {
  // A quarter of the shorter period: a stream is reclaimed (a stall flagged) between
  // 1x and 1.25x of its timeout.
  absl::Duration period = absl::InfiniteDuration();
  for (absl::Duration d : {options_.stream_idle_timeout, options_.stall_warn}) {
    if (d > absl::ZeroDuration()) period = std::min(period, d);
  }
  const absl::Duration interval = std::clamp(period / 4, absl::Milliseconds(10), absl::Seconds(5));
  while (!stop_monitor_.WaitForNotificationWithTimeout(interval)) {
    ReclaimIdleStreams();
    CheckStalls();
    DropExpiredJobs();  // frees expired jobs' memory between Registers
  }
}

int ShardcastServiceImpl::CheckStalls() {
  if (options_.stall_warn <= absl::ZeroDuration()) return 0;
  const absl::Time now = absl::Now();
  int flagged = 0;
  for (const std::shared_ptr<Job>& job : jobs_.Jobs()) {
    const int64_t n = job->batches_per_epoch();
    for (const RankProgress& rank : job->UpdateStalls(options_.stall_warn, now)) {
      ++flagged;
      LogWarning(
          "stall",
          absl::StrCat("job '", LogSafe(job->id()), "' rank ", rank.rank,
                       " has taken no batch for ", absl::FormatDuration(now - rank.last_batch),
                       " (--stall-warn ", absl::FormatDuration(options_.stall_warn),
                       ") while other ranks of its job are ahead; it waits at epoch ", rank.epoch,
                       " batch ", rank.next_batch, " of ", n,
                       ": a stuck rank hangs DDP (its peers block in all-reduce)"));
    }
  }
  return flagged;
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

int ShardcastServiceImpl::ReclaimIdleStreams() {
  if (options_.stream_idle_timeout <= absl::ZeroDuration()) return 0;
  const absl::Time now = absl::Now();
  int reclaimed = 0;
  for (const std::shared_ptr<Job>& job : jobs_.Jobs()) {
    for (const std::shared_ptr<StreamControl>& control : job->OpenStreams()) {
      std::optional<absl::Duration> waiting = control->WriteWaiting(now);
      if (!waiting.has_value() || *waiting < options_.stream_idle_timeout) continue;
      const std::string why = absl::StrCat(
          "idle: the client took no batch for ", absl::FormatDuration(*waiting),
          " (--stream-idle-timeout ", absl::FormatDuration(options_.stream_idle_timeout), ")");
      if (!control->End(absl::CancelledError(why))) continue;
      ++reclaimed;
      stats_.streams_reclaimed_idle.fetch_add(1);
      LogWarning("stream", absl::StrCat("reclaimed ", control->description(), ": ", why));
    }
  }
  return reclaimed;
}

int ShardcastServiceImpl::ShrinkWindows() {
  int given_back = 0;
  for (const std::shared_ptr<Job>& job : jobs_.Jobs()) {
    for (const std::shared_ptr<BatchWindow>& window : job->OpenWindows()) {
      given_back += window->Shrink();
    }
  }
  if (given_back > 0) {
    stats_.batches_given_back.fetch_add(given_back);
    LogInfo("stream",
            absl::StrCat("memory pressure: windows gave back ", given_back, " prefetched batches"));
  }
  return given_back;
}

void ShardcastServiceImpl::EndStream(const std::shared_ptr<StreamControl>& control,
                                     const std::shared_ptr<BatchWindow>& window,
                                     const absl::Status& status) {
  if (control != nullptr && control->End(status)) stats_.streams_replaced.fetch_add(1);
  // The reactor's ender cancels the window too; this frees it even when the reactor
  // is not attached yet or already finishing.
  if (window != nullptr) window->Cancel();
}

absl::StatusOr<std::shared_ptr<StreamMemory>> ShardcastServiceImpl::AdmitStream(
    int64_t batch_bytes, bool ended_another) {
  if (batch_bytes > budget_.limit()) {
    stats_.streams_refused_memory.fetch_add(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch memory: one batch of this job takes ", FormatFlagSize(batch_bytes),
        ", more than the server's whole --max-batch-memory ", FormatFlagSize(budget_.limit()),
        "; lower the batch size or crop, or raise --max-batch-memory"));
  }
  absl::StatusOr<std::shared_ptr<StreamMemory>> memory =
      StreamMemory::Create(&budget_, batch_bytes);
  if (memory.ok()) return memory;
  // Idle streams are reclaimed first, then every window gives back its prefetch beyond
  // the next batch. A stream just ended (replaced or idle) gives its memory back once
  // gRPC drops the batch it was writing, within moments: wait that long, not more
  // (this runs on a gRPC thread).
  if (ReclaimIdleStreams() > 0) ended_another = true;
  if (ShrinkWindows() > 0) memory = StreamMemory::Create(&budget_, batch_bytes);
  if (!memory.ok() && ended_another) {
    const absl::Time deadline = absl::Now() + absl::Seconds(1);
    while (!memory.ok() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
      memory = StreamMemory::Create(&budget_, batch_bytes);
    }
  }
  if (!memory.ok()) stats_.streams_refused_memory.fetch_add(1);
  return memory;
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
  index_options.cancelled = &stop_indexing_;
  const absl::Time start = absl::Now();
  const std::string what = absl::StrCat("dataset '", spec.name, "' (", spec.dir, ")");
  LogInfo("index", absl::StrCat("indexing ", what));
  absl::StatusOr<std::unique_ptr<ServedDataset>> dataset = ServedDataset::Load(
      spec.dir, index_options, static_cast<size_t>(options_.gzip_index_memory_bytes));
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
  named->assembler = std::make_unique<BatchAssembler>(
      named->data.get(), pool_.get(), &stats_,
      DecodeLimits{&decode_budget_, options_.max_member_bytes, options_.shard_read_retry});
  datasets_.Publish(name, std::move(named));
}

void ShardcastServiceImpl::BeginDrain() {
  stop_indexing_.store(true);
  absl::MutexLock lock(&mu_);
  draining_ = true;
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
  for (const JobRegistry::Dropped& job : jobs_.DropExpired(absl::Now())) {
    LogInfo("register",
            job.never_streamed
                ? absl::StrCat("dropped job '", LogSafe(job.job_id), "': registered, no stream in ",
                               absl::FormatDuration(options_.unstreamed_job_ttl),
                               " (--unstreamed-job-ttl)")
                : absl::StrCat("dropped job '", LogSafe(job.job_id), "': no stream open for ",
                               absl::FormatDuration(options_.job_ttl), " (--job-ttl)"));
  }
}

absl::StatusOr<std::unique_ptr<StreamSession>> ShardcastServiceImpl::OpenStream(
    const v1::StreamBatchesRequest& request) {
  absl::StatusOr<std::unique_ptr<StreamSession>> session = StartStream(request);
  if (!session.ok()) {
    LogWarning("stream", absl::StrCat("refused job '", LogSafe(request.job_id()), "' rank ",
                                      request.rank(), " epoch ", request.epoch(), " from batch ",
                                      request.start_batch(), ": ", session.status().ToString()));
  }
  return session;
}

absl::StatusOr<std::unique_ptr<StreamSession>> ShardcastServiceImpl::StartStream(
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
        " (the data or the job config changed since the rank registered)"));
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

  std::string description = absl::StrCat(
      "job '", LogSafe(job->id()), "' rank ", request.rank(), " epoch ", request.epoch(),
      request.sample_offset() != 0 ? absl::StrCat(" from sample ", request.sample_offset()) : "",
      " batches [", request.start_batch(), ", ", *n, ")");
  // One open stream per (job, rank): a reconnect replaces the stream the rank left
  // behind, whose client is gone or no longer reading; ended first, so its memory can
  // go to the new one.
  const absl::Status replaced =
      absl::AbortedError(absl::StrCat("replaced by a newer stream for the same rank (job '",
                                      LogSafe(job->id()), "' rank ", request.rank(), ")"));
  bool ended_another = false;
  {
    auto [old_control, old_window] = job->StreamOf(request.rank());
    if (old_control != nullptr) {
      LogInfo("stream",
              absl::StrCat("replacing ", old_control->description(), " by ", description));
      EndStream(old_control, old_window, replaced);
      ended_another = true;
    }
  }
  const TransformSpec& transform = job->config().transform;
  const int64_t batch_bytes =
      int64_t{job->config().plan.batch_size} * 3 * transform.crop * transform.crop;
  absl::StatusOr<std::shared_ptr<StreamMemory>> memory = AdmitStream(batch_bytes, ended_another);
  if (!memory.ok()) return memory.status();

  BatchWindow::Options window_options;
  window_options.depth = std::max(1, options_.prefetch);
  window_options.count = *n - request.start_batch();
  window_options.transform = transform;
  window_options.resend_first_batch = options_.bench_only_resend_first_batch;
  window_options.memory = *std::move(memory);
  std::shared_ptr<BatchWindow> window =
      BatchWindow::Create(job->dataset().assembler.get(), *std::move(batches), window_options);
  auto control = std::make_shared<StreamControl>(description);
  Job::Opened opened =
      job->OpenStream(request.rank(), request.epoch(), request.start_batch(), window, control);
  // Another stream of this rank that opened meanwhile is replaced as well.
  if (opened.replaced != nullptr) EndStream(opened.replaced, opened.replaced_window, replaced);
  open_streams_.fetch_add(1);
  LogInfo("stream", absl::StrCat("opened ", description));
  window->Start();
  return std::unique_ptr<StreamSession>(new StreamSession(
      this, std::move(job), request.rank(), window_options.count, std::move(window),
      opened.stream_id, std::move(description), std::move(control)));
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

void ShardcastServiceImpl::AddDescriptorFigures(v1::GetStatusResponse* response) const {
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

v1::GetStatusResponse ShardcastServiceImpl::GetStatus() const {
  v1::GetStatusResponse response;
  const absl::Time now = absl::Now();
  response.set_version(kServerVersion);
  response.set_uptime_seconds(absl::ToDoubleSeconds(now - stats_.start_time));
  {
    absl::MutexLock lock(&mu_);
    response.set_serving(!draining_);
  }
  bool all_serving = true;
  const std::vector<DatasetRegistry::Entry> entries = datasets_.Entries();
  std::string primary = entries.empty() ? "" : entries.front().spec.name;
  for (const DatasetRegistry::Entry& entry : entries) {
    if (entry.spec.name == kDefaultDatasetName) primary = entry.spec.name;
  }
  for (const DatasetRegistry::Entry& entry : entries) {
    all_serving &= entry.state == DatasetRegistry::State::kServing;
    v1::DatasetStatus* dataset = response.add_datasets();
    dataset->set_name(entry.spec.name);
    // Operator-given paths and index errors need not be UTF-8; proto3 strings must be.
    dataset->set_dir(EscapeToUtf8(entry.spec.dir));
    dataset->set_state(ToProto(entry.state));
    if (!entry.error.ok()) dataset->set_error(EscapeToUtf8(entry.error.message()));
    if (entry.data != nullptr) {
      const DatasetIndex& index = entry.data->data->index();
      dataset->set_num_shards(static_cast<int32_t>(index.shards.size()));
      dataset->set_num_samples(index.num_samples);
      dataset->set_num_classes(index.num_classes);
      dataset->set_index_fingerprint(index.fingerprint);
      dataset->set_skipped_samples(static_cast<int64_t>(index.skipped.size()));
      AddShardProblems(*entry.data->data, dataset, &response);
    }
    // The single-dataset fields describe "default", else the first dataset.
    if (entry.spec.name == primary) {
      response.set_shards_dir(dataset->dir());
      response.set_num_shards(dataset->num_shards());
      response.set_num_samples(dataset->num_samples());
      response.set_num_classes(dataset->num_classes());
      response.set_index_fingerprint(dataset->index_fingerprint());
      response.set_skipped_samples(dataset->skipped_samples());
      response.set_index_state(IndexState(entry.state));
    }
  }
  response.set_serving(response.serving() && all_serving && response.datasets_size() > 0 &&
                       stats_.listener_accepting.load());
  int32_t total_stalled = 0;
  {
    const std::vector<std::shared_ptr<Job>> jobs = jobs_.LiveJobs(now);
    response.set_total_jobs(static_cast<int32_t>(jobs.size()));
    response.set_jobs_truncated(jobs.size() > static_cast<size_t>(kMaxListedJobs));
    for (const std::shared_ptr<Job>& job : jobs) {
      if (response.jobs_size() >= kMaxListedJobs) break;
      v1::JobStatus* job_status = response.add_jobs();
      job_status->set_job_id(job->id());
      job_status->set_world_size(job->config().plan.world_size);
      job_status->set_batch_size(job->config().plan.batch_size);
      job_status->set_batches_per_epoch(job->batches_per_epoch());
      job_status->set_job_fingerprint(job->job_fingerprint());
      job_status->set_split(ToProto(job->config().plan.split));
      job_status->set_dataset(job->dataset().name);
      const std::vector<RankProgress> ranks = job->Progress();
      const int64_t n = job->batches_per_epoch();
      int64_t most_advanced = 0;
      for (const RankProgress& rank : ranks) {
        most_advanced = std::max(most_advanced, rank.epoch * n + rank.next_batch);
      }
      int32_t stalled = 0;
      for (const RankProgress& rank : ranks) stalled += rank.stalled ? 1 : 0;
      job_status->set_stalled_ranks(stalled);
      total_stalled += stalled;
      job_status->set_total_ranks(static_cast<int32_t>(ranks.size()));
      job_status->set_ranks_truncated(ranks.size() > static_cast<size_t>(kMaxListedRanks));
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
  }
  response.set_open_streams(static_cast<int32_t>(open_streams_.load()));
  response.set_images_served(stats_.images_served.load());
  response.set_bytes_served(stats_.bytes_served.load());
  double images_per_second = 0, bytes_per_second = 0;
  stats_.rate.Rates(now, &images_per_second, &bytes_per_second);
  response.set_images_per_second(images_per_second);
  response.set_bytes_per_second(bytes_per_second);
  response.set_decode_errors(stats_.decode_errors.load());
  response.set_substitutions(stats_.substitutions.load());
  response.set_shard_read_retries(stats_.shard_read_retries.load());
  response.set_queue_depth(pool_->queue_depth());
  response.set_decode_tasks_running(pool_->running());
  AddDescriptorFigures(&response);
  response.set_memory_in_use_bytes(stats_.buffer_bytes.load());
  response.set_rss_bytes(ResidentSetBytes());
  response.set_decode_threads(pool_->threads());
  response.set_max_listed_jobs(kMaxListedJobs);
  response.set_max_listed_shard_problems(kMaxListedShardProblems);
  response.set_max_listed_ranks(kMaxListedRanks);
  response.set_max_jobs(options_.max_jobs);
  response.set_batch_memory_limit_bytes(budget_.limit());
  response.set_batch_memory_reserved_bytes(budget_.reserved());
  response.set_batch_memory_peak_reserved_bytes(budget_.peak_reserved());
  response.set_streams_refused_memory(stats_.streams_refused_memory.load());
  response.set_streams_replaced(stats_.streams_replaced.load());
  response.set_streams_reclaimed_idle(stats_.streams_reclaimed_idle.load());
  response.set_batches_given_back(stats_.batches_given_back.load());
  response.set_decode_memory_limit_bytes(decode_budget_.limit());
  response.set_decode_memory_in_use_bytes(decode_budget_.in_use());
  response.set_decode_memory_peak_bytes(decode_budget_.peak_in_use());
  response.set_images_over_decode_memory(decode_budget_.refused());
  response.set_decode_memory_waits(decode_budget_.waited());
  response.set_max_member_bytes(options_.max_member_bytes);
  response.set_images_over_member_limit(stats_.images_over_member_limit.load());
  response.set_decode_task_exceptions(pool_->task_exceptions());
  response.set_stream_idle_timeout_seconds(absl::ToDoubleSeconds(options_.stream_idle_timeout));
  response.set_stall_warn_seconds(absl::ToDoubleSeconds(options_.stall_warn));
  response.set_stalled_ranks(total_stalled);
  response.set_stream_wait_for_batch_seconds(
      static_cast<double>(stats_.wait_for_batch_nanos.load()) * 1e-9);
  response.set_stream_wait_for_client_seconds(
      static_cast<double>(stats_.wait_for_client_nanos.load()) * 1e-9);
  return response;
}

}  // namespace shardcast::server
