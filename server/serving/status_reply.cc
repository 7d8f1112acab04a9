// The status reply (see status_reply.h).
#include "server/serving/status_reply.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/url_redaction.h"
#include "common/util/utf8.h"
#include "proto/job_config_proto.h"
#include "server/base/log.h"
#include "server/base/memory_limit.h"
#include "server/base/version.h"
#include "server/serving/batch_window.h"
#include "server/serving/stream_table.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

namespace {

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
  if (list->size() >= kMaxListedShardProblems) return;
  v1::ShardProblem* problem = list->Add();
  problem->set_path(LogSafe(path, kMaxShardNameBytes));
  // A store's error quotes its URL: GetStatus needs no token, so no secret of it.
  problem->set_reason(LogSafe(RedactUrlsIn(reason), kMaxShardReasonBytes));
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

// The datasets, with their shard problems; the single-dataset fields.
void FillDatasetStatus(const StatusSources& s, bool draining, v1::GetStatusResponse* response) {
  const std::vector<DatasetRegistry::Entry> entries = s.datasets->Entries();
  std::string primary = entries.empty() ? "" : entries.front().spec.name;
  for (const DatasetRegistry::Entry& entry : entries) {
    if (entry.spec.name == kDefaultDatasetName) primary = entry.spec.name;
  }
  for (const DatasetRegistry::Entry& entry : entries) {
    v1::DatasetStatus* dataset = response->add_datasets();
    dataset->set_name(entry.spec.name);
    // Operator-given paths and index errors need not be UTF-8; proto3 strings must be.
    // GetStatus needs no token: a URL's password or signature is not shown.
    dataset->set_dir(EscapeToUtf8(RedactedUrl(entry.spec.dir)));
    dataset->set_state(ToProto(entry.state));
    if (!entry.error.ok()) {
      dataset->set_error(EscapeToUtf8(RedactUrlsIn(entry.error.message())));
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
      response->set_index_state(IndexStateName(entry.state, draining));
    }
  }
}

// A mixed job's datasets at the start of step `step` (its most advanced rank's next
// batch): weight, samples drawn, pass and position in it, from the planner's state.
void FillMixtureStatus(const Job& job, int64_t step, v1::JobStatus* job_status) {
  const JobMixture& mixture = *job.mixture();
  const MixtureJobPlan& plan = *mixture.plan;
  job_status->set_dataset("");
  job_status->set_samples_per_epoch(plan.spec().samples_per_epoch);
  job_status->clear_left_out();
  const int64_t n = job.batches_per_epoch();
  const int64_t epoch = n > 0 ? step / n : 0;
  const int64_t global_batch = int64_t{job.config().plan.batch_size} * job.config().plan.world_size;
  const int64_t offset = std::min((step - epoch * n) * global_batch, plan.samples_per_epoch());
  absl::StatusOr<MixtureState> state = plan.StateAt(epoch, offset);
  for (size_t d = 0; d < mixture.datasets.size(); ++d) {
    v1::MixDatasetStatus* out = job_status->add_mix();
    const int64_t size = mixture.samples[d]->num_samples();
    out->set_name(mixture.datasets[d]->name);
    out->set_num_samples(size);
    if (!state.ok()) continue;  // past the planner's 2^62 positions: nothing to say
    const int64_t drawn = static_cast<int64_t>(state->datasets[d].draws);
    out->set_samples_drawn(drawn);
    out->set_pass(size > 0 ? drawn / size : 0);
    out->set_pass_position(size > 0 ? drawn % size : 0);
    // The weight in units of 2^-116, as a double: exact enough to show.
    const unsigned __int128 w =
        plan.planner().WeightAt(static_cast<int>(d), plan.planner().StepOf(state->position));
    out->set_weight(static_cast<double>(w) * 0x1p-116);
    for (const LeftOut& reason : mixture.samples[d]->left_out()) {
      v1::ReasonCount* left = job_status->add_left_out();
      left->set_reason(
          EscapeToUtf8(absl::StrCat("dataset '", mixture.datasets[d]->name, "': ", reason.reason)));
      left->set_count(reason.count);
    }
  }
}

// The shard tables of the datasets whose samples were released to the index cache.
void FillIndexTableStatus(const StatusSources& s, v1::GetStatusResponse* response) {
  for (const DatasetRegistry::Entry& entry : s.datasets->Entries()) {
    if (entry.data == nullptr) continue;
    const std::optional<ShardTableCacheStats> t = entry.data->data->index_table_stats();
    if (!t.has_value()) continue;
    response->set_index_memory_limit_bytes(t->limit_bytes);  // the flag's, per dataset
    response->set_index_memory_bytes(response->index_memory_bytes() + t->memory_bytes);
    response->set_index_table_hits(response->index_table_hits() + t->hits);
    response->set_index_table_misses(response->index_table_misses() + t->misses);
    response->set_index_table_loads(response->index_table_loads() + t->loads);
    response->set_index_table_load_failures(response->index_table_load_failures() +
                                            t->load_failures);
  }
}

// The live jobs and their ranks, up to the listing bounds.
void FillJobStatus(const StatusSources& s, absl::Time now, v1::GetStatusResponse* response) {
  const StreamTable& streams = s.streams->table();
  const std::vector<std::shared_ptr<Job>> jobs =
      s.jobs->LiveJobs(now, [&streams](const Job& job) { return streams.AnyOpen(&job); });
  response->set_total_jobs(static_cast<int32_t>(jobs.size()));
  response->set_jobs_truncated(jobs.size() > static_cast<size_t>(kMaxListedJobs));
  response->set_max_listed_jobs(kMaxListedJobs);
  response->set_max_listed_ranks(kMaxListedRanks);
  response->set_max_jobs(s.options->max_jobs);
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
    job_status->set_image(job->config().image);
    job_status->set_delivery(ToProto(job->config().delivery));
    for (const FieldSpec& field : job->config().fields) job_status->add_fields(field.ToString());
    AddLeftOut(job->samples(), job_status->mutable_left_out());
    job_status->set_stalled_ranks(stalled);
    job_status->set_total_ranks(static_cast<int32_t>(ranks.size()));
    job_status->set_ranks_truncated(ranks.size() > static_cast<size_t>(kMaxListedRanks));
    const int64_t n = job->batches_per_epoch();
    int64_t most_advanced = 0;
    for (const RankProgress& rank : ranks) {
      most_advanced = std::max(most_advanced, rank.epoch * n + rank.next_batch);
    }
    if (job->mixture() != nullptr) FillMixtureStatus(*job, most_advanced, job_status);
    for (const RankProgress& rank : ranks) {
      if (job_status->ranks_size() >= kMaxListedRanks) break;
      v1::RankStatus* rank_status = job_status->add_ranks();
      rank_status->set_rank(rank.rank);
      rank_status->set_epoch(rank.epoch);
      rank_status->set_next_batch(rank.next_batch);
      rank_status->set_lag_batches(most_advanced - (rank.epoch * n + rank.next_batch));
      const StreamTable::Stream stream = streams.NewestOf(job.get(), rank.rank);
      rank_status->set_streaming(stream.control != nullptr);
      rank_status->set_batches_sent(rank.batches_sent);
      rank_status->set_window_depth(stream.window != nullptr ? stream.window->depth() : 0);
      rank_status->set_stalled(rank.stalled);
      rank_status->set_seconds_since_last_batch(
          std::max(0.0, absl::ToDoubleSeconds(now - rank.last_batch)));
    }
  }
  response->set_stalled_ranks(total_stalled);
}

// Images and bytes served, rates, time streams waited.
void FillTrafficStatus(const StatusSources& s, absl::Time now, v1::GetStatusResponse* response) {
  response->set_images_served(s.stats->images_served.load());
  response->set_bytes_served(s.stats->bytes_served.load());
  double images_per_second = 0, bytes_per_second = 0;
  s.stats->rate.Rates(now, &images_per_second, &bytes_per_second);
  response->set_images_per_second(images_per_second);
  response->set_bytes_per_second(bytes_per_second);
  response->set_stream_wait_for_batch_seconds(
      static_cast<double>(s.stats->wait_for_batch_nanos.load()) * 1e-9);
  response->set_stream_wait_for_client_seconds(
      static_cast<double>(s.stats->wait_for_client_nanos.load()) * 1e-9);
}

// The decode pool, its memory budget and what decode substituted.
void FillDecodeStatus(const StatusSources& s, v1::GetStatusResponse* response) {
  response->set_decode_errors(s.stats->decode_errors.load());
  response->set_substitutions(s.stats->substitutions.load());
  response->set_images_unsupported_format(s.stats->images_unsupported_format.load());
  response->set_shard_read_retries(s.stats->shard_read_retries.load());
  response->set_queue_depth(s.pool->queue_depth());
  response->set_decode_tasks_running(s.pool->running());
  response->set_decode_threads(s.pool->threads());
  response->set_decode_task_exceptions(s.pool->task_exceptions());
  response->set_decode_memory_limit_bytes(s.decode_budget->limit());
  response->set_decode_memory_in_use_bytes(s.decode_budget->in_use());
  response->set_decode_memory_peak_bytes(s.decode_budget->peak_in_use());
  response->set_images_over_decode_memory(s.decode_budget->refused());
  response->set_decode_memory_waits(s.decode_budget->waited());
  response->set_max_member_bytes(s.options->max_member_bytes);
  response->set_images_over_member_limit(s.stats->images_over_member_limit.load());
}

// Memory, descriptors, connections and the listener's state.
void FillHostStatus(const StatusSources& s, v1::GetStatusResponse* response) {
  response->set_memory_in_use_bytes(s.stats->buffer_bytes.load());
  response->set_rss_bytes(ResidentSetBytes());
  response->set_max_listed_shard_problems(kMaxListedShardProblems);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    response->set_descriptor_limit(
        limit.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(limit.rlim_cur));
  }
  response->set_open_descriptors(OpenDescriptorCount());
  response->set_max_connections(s.options->max_connections);
  response->set_max_connections_per_peer(s.options->max_connections_per_peer);
  response->set_connections_open(s.stats->connections_open.load());
  response->set_connections_refused(s.stats->connections_refused.load());
  response->set_listener_accepting(s.stats->listener_accepting.load());
}

// Remote reads: the fetcher's, the read-ahead's and the disk cache's figures. The
// fetcher's and the cache's stay unset (0) while they were never made.
void FillRemoteStatus(const StatusSources& s, v1::GetStatusResponse* response) {
  const RemoteFigures f = s.remote_storage->Figures();
  if (f.fetching) {
    response->set_remote_requests(f.requests);
    response->set_remote_bytes(f.bytes);
    response->set_remote_retries(f.retries);
    response->set_remote_failures(f.failures);
    response->set_remote_requests_ok(f.requests_ok);
    response->set_remote_fetch_seconds(f.fetch_seconds);
    response->set_remote_connections_in_use(f.connections_in_use);
  }
  response->set_read_ahead_members(f.read_ahead_members);
  response->set_read_ahead_requests(f.read_ahead_requests);
  response->set_read_ahead_hits(f.read_ahead_hits);
  response->set_read_ahead_dropped(f.read_ahead_dropped);
  response->set_remote_direct_reads(f.direct_reads);
  response->set_read_ahead_bytes(f.read_ahead_bytes);
  if (f.caching) {
    response->set_cache_limit_bytes(f.cache_limit_bytes);
    response->set_cache_bytes(f.cache_bytes);
    response->set_cache_hits(f.cache_hits);
    response->set_cache_misses(f.cache_misses);
    response->set_cache_evictions(f.cache_evictions);
    response->set_cache_write_errors(f.cache_write_errors);
  }
}

}  // namespace

std::string IndexStateName(DatasetRegistry::State dataset, bool draining) {
  if (draining) return "draining";
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

v1::GetStatusResponse BuildStatusReply(const StatusSources& sources, absl::Time now,
                                       bool draining) {
  v1::GetStatusResponse response;
  response.set_version(kServerVersion);
  response.set_uptime_seconds(absl::ToDoubleSeconds(now - sources.stats->start_time));
  FillDatasetStatus(sources, draining, &response);
  FillJobStatus(sources, now, &response);
  sources.streams->FillStatus(&response);
  FillTrafficStatus(sources, now, &response);
  FillDecodeStatus(sources, &response);
  FillHostStatus(sources, &response);
  FillRemoteStatus(sources, &response);
  FillIndexTableStatus(sources, &response);
  bool all_serving = true;
  for (const v1::DatasetStatus& dataset : response.datasets()) {
    all_serving &= dataset.state() == v1::DatasetStatus::SERVING;
  }
  response.set_serving(!draining && all_serving && response.datasets_size() > 0 &&
                       response.listener_accepting());
  return response;
}

}  // namespace shardcast::server
