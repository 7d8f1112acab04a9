// The serving core (see service_core.h).
#include "server/serving/service_core.h"

#include <sys/resource.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/flags/flags.h"
#include "proto/job_config_proto.h"
#include "server/assembly/decode_budget.h"
#include "server/base/log.h"
#include "server/base/memory_limit.h"
#include "server/serving/status_reply.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

// ---------------------------------------------------------------------------- service

namespace {

int64_t DecodeMemoryLimit(const ServerOptions& options) {
  if (options.max_decode_memory_bytes > 0) return options.max_decode_memory_bytes;
  return DefaultDecodeMemoryBytes(AvailableMemory());
}

// ", fields txt,json? (12 samples left out)" for the register log line; "" without.
std::string FieldsDescription(const v1::RegisterResponse& response) {
  if (response.fields().empty()) return "";
  int64_t left_out = 0;
  for (const v1::ReasonCount& reason : response.left_out()) left_out += reason.count();
  return absl::StrCat(", fields ", absl::StrJoin(response.fields(), ","), " (", left_out,
                      " samples left out)");
}

// "mixture a=0.7,b=0.3" (the first point; "+ N points" for a schedule) for the
// register log line.
std::string MixtureDescription(const v1::RegisterResponse& response) {
  std::vector<std::string> weights;
  for (const v1::MixWeight& w : response.mix(0).weights()) {
    weights.push_back(absl::StrFormat("%s=%.3g", w.dataset(), w.weight()));
  }
  return absl::StrCat("mixture ", absl::StrJoin(weights, ","),
                      response.mix_size() > 1
                          ? absl::StrCat(" (schedule of ", response.mix_size(), " points)")
                          : "",
                      ", ", response.samples_per_epoch(), " samples per epoch");
}

}  // namespace

ServiceCore::ServiceCore(const ServerOptions& options)
    : options_(options),
      stats_(options.clock->Now()),
      decode_budget_(DecodeBudgetOptions(DecodeMemoryLimit(options))),
      pool_(std::make_unique<DecodePool>(options.decode_threads)),
      options_error_(DatasetsToServe(options).status()),
      remote_storage_(options.remote),
      datasets_(options_error_.ok() ? *DatasetsToServe(options) : std::vector<DatasetSpec>{}),
      jobs_(JobRegistry::OptionsFor(options)),
      // Dropping expired jobs between Registers frees their memory.
      streams_(std::make_unique<StreamManager>(options_, &stats_, &jobs_, options.clock,
                                               [this] { DropExpiredJobs(); })) {}

ServiceCore::~ServiceCore() {
  // The threads that act on streams first; then the pool, whose last tasks may still
  // hold batches that give memory back to the streams' budget; then that budget.
  streams_->Stop();
  pool_.reset();
  streams_.reset();
}

std::string ServiceCore::IndexState(DatasetRegistry::State dataset) const {
  return IndexStateName(dataset, draining());
}

bool ServiceCore::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

absl::Status ServiceCore::LoadDatasets(const std::function<void(const std::string&)>& on_ready) {
  if (!options_error_.ok()) return options_error_;
  for (const DatasetRegistry::Entry& entry : datasets_.Entries()) {
    if (entry.state != DatasetRegistry::State::kIndexing) continue;
    if (absl::Status s = LoadDataset(entry.spec); !s.ok()) return s;
    if (on_ready) on_ready(entry.spec.name);
  }
  return absl::OkStatus();
}

namespace {

// The process's CPU time (all threads): what indexing cost, for its log line (other
// datasets' serving counts too, so it is exact for the first dataset of a start).
double ProcessCpuSeconds() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// "12.31 s: 81234 samples/s, 412.5 MB/s of shards, 20.10 s CPU" for a dataset indexed
// (issue 46: indexing throughput, local and remote alike); the time alone from a cache.
std::string IndexingFigures(const DatasetIndex& index, absl::Duration took, double cpu_seconds) {
  const double seconds = absl::ToDoubleSeconds(took);
  if (index.loaded_from_cache || seconds <= 0) return absl::StrFormat("%.2f s", seconds);
  uint64_t bytes = 0;
  for (const ShardInfo& shard : index.shards) bytes += shard.file_size;
  return absl::StrFormat("%.2f s: %.0f samples/s, %.1f MB/s of shards, %.2f s CPU", seconds,
                         index.num_samples / seconds, bytes / 1e6 / seconds, cpu_seconds);
}

}  // namespace

absl::Status ServiceCore::LoadDataset(const DatasetSpec& spec) {
  IndexOptions index_options;
  index_options.label_field = options_.label_field;
  index_options.max_classes = options_.max_classes;
  index_options.cache_dir = options_.index_cache_dir;
  index_options.samples_on_disk = options_.index_memory_bytes > 0;
  // A directory, a URL of a store, or neither (gs://, a typo'd scheme): said once, here.
  const absl::StatusOr<remote::DatasetUrl> where = remote::ParseDatasetUrl(spec.dir);
  const bool remote = where.ok() && where->kind != remote::DatasetUrl::Kind::kLocal;
  // A remote dataset's index (listing, ETags) is cached beside its bytes by default:
  // listing a bucket is cheap, scanning it is not.
  if (index_options.cache_dir.empty() && remote && !options_.remote.cache_dir.empty()) {
    index_options.cache_dir = options_.remote.cache_dir + "/index";
  }
  index_options.cancelled = &stop_indexing_;
  // Real time: how long indexing took, for the log line; it decides nothing.
  const absl::Time start = absl::Now();
  const double cpu_start = ProcessCpuSeconds();
  const std::string what = absl::StrCat("dataset '", spec.name, "' (", RedactedUrl(spec.dir), ")");
  LogInfo("index", absl::StrCat("indexing ", what));
  absl::StatusOr<std::unique_ptr<ServedDataset>> dataset =
      !where.ok() ? where.status()
      : remote    ? remote_storage_.Load(*where, index_options,
                                         static_cast<size_t>(options_.gzip_index_memory_bytes),
                                         options_.index_memory_bytes)
                  : ServedDataset::Load(spec.dir, index_options,
                                        static_cast<size_t>(options_.gzip_index_memory_bytes),
                                        options_.index_memory_bytes);
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
                                   "skipped, fingerprint %s%s (%s)",
                                   what, index.shards.size(), index.skipped_shards.size(),
                                   index.num_samples, index.num_classes, index.skipped.size(),
                                   index.fingerprint, index.loaded_from_cache ? ", from cache" : "",
                                   IndexingFigures(index, absl::Now() - start,
                                                   ProcessCpuSeconds() - cpu_start)));
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

void ServiceCore::SetDataset(std::unique_ptr<ServedDataset> dataset, const std::string& name) {
  auto named = std::make_unique<NamedDataset>();
  named->data = std::move(dataset);
  named->dir = named->data->index().root;
  named->serve = ServeSettingsFor(named->data->index(), options_.max_member_bytes,
                                  decode_budget_.limit(), options_.bench_only_resend_first_batch);
  // Replicas whose job fingerprints differ compare these lines (docs/server.md, replicas).
  LogInfo("index", absl::StrCat("dataset '", name, "': server settings in its job fingerprints: ",
                                ServeSettingsString(named->serve)));
  DecodeLimits limits{&decode_budget_, options_.max_member_bytes, options_.shard_read_retry};
  limits.lossless_cut = options_.lossless_cut;
  named->assembler =
      std::make_unique<BatchAssembler>(named->data.get(), pool_.get(), &stats_, limits);
  datasets_.Publish(name, std::move(named));
}

void ServiceCore::BeginDrain() {
  stop_indexing_.store(true);
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  streams_->BeginDrain();
}

bool ServiceCore::serving() const {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return false;
  }
  return datasets_.AllServing();
}

absl::Status ServiceCore::Available() const {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("draining: the server is shutting down");
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterResponse> ServiceCore::Register(const v1::RegisterRequest& request,
                                                           const std::string& peer) {
  if (absl::Status s = Available(); !s.ok()) return s;
  absl::StatusOr<v1::RegisterResponse> response =
      request.mix_size() > 0 ? RegisterMixture(request, peer) : RegisterOne(request, peer);
  if (!response.ok()) {
    LogWarning("register",
               absl::StrCat("refused job '", LogSafe(request.job_id()), "' rank ", request.rank(),
                            "/", request.world_size(), ": ", response.status().ToString()));
    return response;
  }
  LogInfo(
      "register",
      absl::StrFormat(
          "job '%s' rank %d/%d: %s, batch %d, %s, split %s, "
          "n=%d%s, job %s",
          LogSafe(request.job_id()), request.rank(), request.world_size(),
          response->mix_size() > 0 ? MixtureDescription(*response)
                                   : absl::StrCat("dataset '", response->dataset(), "'"),
          response->batch_size(),
          response->image()
              ? absl::StrCat("crop ", response->transform().crop(),
                             response->delivery() == v1::IMAGE_DELIVERY_ENCODED ? " encoded" : "")
              : "no image",
          response->split() == v1::SPLIT_SHARD ? "shard" : "sample", response->batches_per_epoch(),
          FieldsDescription(*response), response->job_fingerprint()));
  return response;
}

absl::StatusOr<v1::RegisterResponse> ServiceCore::RegisterOne(const v1::RegisterRequest& request,
                                                              const std::string& peer) {
  absl::StatusOr<const NamedDataset*> dataset = datasets_.Resolve(request.dataset());
  if (!dataset.ok()) return dataset.status();
  DropExpiredJobs();
  return jobs_.Register(request, *dataset, peer);
}

absl::StatusOr<v1::RegisterResponse> ServiceCore::RegisterMixture(
    const v1::RegisterRequest& request, const std::string& peer) {
  absl::StatusOr<MixtureRequest> mixture = ParseMixture(request);
  if (!mixture.ok()) return mixture.status();
  std::vector<const NamedDataset*> datasets;
  for (const std::string& name : mixture->names) {
    absl::StatusOr<const NamedDataset*> dataset = datasets_.Resolve(name);
    if (!dataset.ok()) {
      return absl::Status(dataset.status().code(),
                          absl::StrCat("mix: ", dataset.status().message()));
    }
    datasets.push_back(*dataset);
  }
  DropExpiredJobs();
  return jobs_.RegisterMixture(request, *mixture, datasets, peer);
}

void ServiceCore::DropExpiredJobs() {
  const StreamTable& streams = streams_->table();
  for (const JobRegistry::Dropped& job : jobs_.DropExpired(
           options_.clock->Now(),
           [&streams](const Job& candidate) { return streams.AnyOpen(&candidate); })) {
    LogInfo("register",
            job.never_streamed
                ? absl::StrCat("dropped job '", LogSafe(job.job_id), "': registered, no stream in ",
                               absl::FormatDuration(options_.unstreamed_job_ttl),
                               " (--unstreamed-job-ttl)")
                : absl::StrCat("dropped job '", LogSafe(job.job_id), "': no stream open for ",
                               absl::FormatDuration(options_.job_ttl), " (--job-ttl)"));
  }
}

std::shared_ptr<StreamManager::Pending> ServiceCore::OpenStream(
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
  BatchAssembler* assembler = plan->job->assembler();
  return streams_->Open(*std::move(plan), assembler, std::move(log_refusal));
}

absl::StatusOr<StreamPlan> ServiceCore::PlanStream(const v1::StreamBatchesRequest& request) {
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
    n = BatchesFromOffset(job->num_samples(), job->config().plan, request.sample_offset());
    if (!n.ok()) {
      return absl::Status(n.status().code(), absl::StrCat("sample_offset: ", n.status().message()));
    }
  }
  if (request.start_batch() < 0 || request.start_batch() > *n) {
    return absl::OutOfRangeError(absl::StrCat("start_batch: must be in [0, ", *n,
                                              "] (batches of this epoch), got ",
                                              request.start_batch()));
  }
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan =
      request.has_mix_resume() ? job->ResumedPlan(request.epoch(), request.mix_resume())
                               : job->Plan(request.epoch());
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<RankBatchIterator>> batches =
      (*plan)->IterateFrom(request.rank(), request.start_batch(), request.sample_offset());
  if (!batches.ok()) return batches.status();

  StreamPlan stream;
  // The plan deals the job's selected samples; the assembler reads the index's.
  stream.batches = job->MapToIndex(*std::move(batches));
  stream.description = absl::StrCat(
      "job '", LogSafe(job->id()), "' rank ", request.rank(), " epoch ", request.epoch(),
      request.sample_offset() != 0 ? absl::StrCat(" from sample ", request.sample_offset()) : "",
      " batches [", request.start_batch(), ", ", *n, ")");
  stream.job = std::move(job);
  stream.rank = request.rank();
  stream.epoch = request.epoch();
  stream.start_batch = request.start_batch();
  stream.count = *n - request.start_batch();
  return stream;
}

MetricsSnapshot ServiceCore::Metrics() const {
  MetricsSnapshot snapshot;
  snapshot.status = GetStatus();
  snapshot.decode_time = stats_.decode_time.Read();
  // The per-dataset series come from snapshot.status.datasets(); only "draining" (see
  // IndexState) is not in the reply's DatasetStatus.State.
  snapshot.draining = draining();
  return snapshot;
}

v1::GetStatusResponse ServiceCore::GetStatus() const {
  const StatusSources sources{&options_,  &stats_, pool_.get(),    &decode_budget_,
                              &datasets_, &jobs_,  streams_.get(), &remote_storage_};
  return BuildStatusReply(sources, options_.clock->Now(), draining());
}

}  // namespace shardcast::server
