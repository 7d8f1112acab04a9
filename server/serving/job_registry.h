// Jobs by id: registration (validation, defaults, agreement between the ranks of
// a job), the job's epoch plans (a small cache by epoch) and per-rank progress
// for GetStatus.
#ifndef SHARDCAST_SERVER_SERVING_JOB_REGISTRY_H_
#define SHARDCAST_SERVER_SERVING_JOB_REGISTRY_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/job_config.h"
#include "common/plan/job_samples.h"
#include "server/assembly/batch_assembler.h"
#include "server/base/clock.h"
#include "server/serving/dataset_registry.h"
#include "server/serving/job_mixture.h"
#include "server/serving/server_options.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

class Job;

// Whether `job` has a stream open (the stream table's answer: StreamTable::AnyOpen).
// The registry asks through this, and knows nothing of streams, because the stream
// table is above it: it tells each job of its streams (Job::StreamStarted, ...).
using HasOpenStream = absl::FunctionRef<bool(const Job& job)>;

// Progress of one rank, as GetStatus reports it.
struct RankProgress {
  int32_t rank = 0;
  int64_t epoch = 0;
  int64_t next_batch = 0;  // of the open (or last) stream
  int64_t batches_sent = 0;
  absl::Time last_batch = absl::InfinitePast();  // last batch taken (or stream opened)
  bool stalled = false;                          // see Job::UpdateStalls
};

// The server's byte-changing settings (ServeSettings, common/plan/job_config.h) as they
// apply to `index`: --max-member-bytes at or above the largest image member of the
// data, and a decode limit at or above kDecodeNeedBound, substitute nothing and are 0.
// One pass over the index's samples (done once, when the dataset is published).
ServeSettings ServeSettingsFor(const DatasetIndex& index, int64_t max_member_bytes,
                               int64_t max_decode_bytes, bool resend_first_batch);

// The most decode buffer bytes an image the decoder accepts can need
// (DecodeBufferBytes of the worst one: a progressive CMYK JPEG of kMaxPixels, its
// blocks padded to 16x16, or a WebP whose lossless stream names 65,536 entropy groups):
// a decode limit at or above it refuses nothing.
int64_t DecodeNeedBound();

// Appends the samples `samples` leaves out, by reason (RegisterResponse.left_out,
// JobStatus.left_out).
void AddLeftOut(const JobSamples& samples,
                google::protobuf::RepeatedPtrField<shardcast::v1::ReasonCount>* left_out);

class Job {
 public:
  // REQUIRES: `dataset` outlives the job. `samples`: the job's selection of the
  // dataset's samples (JobSamples::Select), planned from; null only for a job that is
  // never planned (tests of the stream table).
  // `peer`: PeerHost of the client whose Register created the job. `clock` (which
  // must outlive the job) times its activity and its ranks' last batches.
  Job(std::string id, JobConfig config, int64_t batches_per_epoch, std::string job_fingerprint,
      const NamedDataset* dataset, std::shared_ptr<const JobSamples> samples, std::string peer,
      const Clock* clock = Clock::Real());
  // A mixed job: it reads `mixture`'s datasets (dataset() and samples() are then its
  // first's, for what needs one; planning, assembly and the sample count are the
  // mixture's).
  Job(std::string id, JobConfig config, int64_t batches_per_epoch,
      std::unique_ptr<JobMixture> mixture, std::string peer, const Clock* clock = Clock::Real());
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return id_; }
  const JobConfig& config() const { return config_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // JobFingerprint(index content, config, the dataset's ServeSettings): what a stream
  // must present.
  const std::string& job_fingerprint() const { return job_fingerprint_; }
  // The dataset the job reads (RegisterRequest.dataset, resolved).
  const NamedDataset& dataset() const { return *dataset_; }
  // Who created the job (PeerHost), for the per-peer limit on jobs that never streamed.
  const std::string& peer() const { return peer_; }
  // The samples the job serves; computed once, at its first registration, so that every
  // rank, every stream and an elastic resume plan over the same selection.
  const JobSamples& samples() const { return *samples_; }
  // A mixed job's parts; null for a job of one dataset.
  const JobMixture* mixture() const { return mixture_.get(); }
  // The samples of an epoch: the dataset's selection, or a mixture's samples_per_epoch.
  int64_t num_samples() const;
  // What assembles the job's batches: its dataset's assembler, or the mixture's.
  BatchAssembler* assembler() const;
  // A plan's batches (in the selection's coordinates) mapped to the index's.
  std::unique_ptr<RankBatchIterator> MapToIndex(std::unique_ptr<RankBatchIterator> batches) const;
  // What each of its batches holds (the image or not, its delivery, the fields), for
  // the assembler.
  const std::shared_ptr<const BatchContent>& content() const { return content_; }
  // The batch memory one batch of the job can take: its pixels and, for each sample,
  // the members the largest selected sample sends (its fields, its encoded image; a
  // bound known at planning).
  int64_t batch_memory_bytes() const;

  // The plan of `epoch`, from a small cache (ranks of a job usually share one or two
  // epochs at a time). Errors come from the planner.
  absl::StatusOr<std::shared_ptr<const EpochPlan>> Plan(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // A mixed job's plan of `epoch` in a run resumed as `resume` asks
  // (StreamBatchesRequest.mix_resume; ResumedPlan), the resumed plans kept by their
  // request (the ranks of a resumed run send the same). INVALID_ARGUMENT for a job of one
  // dataset.
  absl::StatusOr<std::shared_ptr<const EpochPlan>> ResumedPlan(
      int64_t epoch, const shardcast::v1::MixtureResume& resume) ABSL_LOCKS_EXCLUDED(mu_);

  void MarkRegistered(int32_t rank) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsRegistered(int32_t rank) const ABSL_LOCKS_EXCLUDED(mu_);

  // What the stream table (stream_table.h) reports of the ranks' streams: the job
  // keeps their progress, the table the streams.
  //
  // A stream of `rank` from `start_batch` of `epoch` became the rank's newest: the
  // rank moved (its stall flag is lowered) and the job is active.
  void StreamStarted(int32_t rank, int64_t epoch, int64_t start_batch) ABSL_LOCKS_EXCLUDED(mu_);
  // A stream of `rank` sent a batch (replaced streams' included: batches_sent).
  void BatchSent(int32_t rank) ABSL_LOCKS_EXCLUDED(mu_);
  // The rank's newest stream sent `batch_index` at `now`. Returns true when the rank
  // was flagged stalled (the flag is cleared: it moved).
  bool RankTookBatch(int32_t rank, int64_t batch_index, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // A stream of the job ended: the job was active now.
  void StreamEnded() ABSL_LOCKS_EXCLUDED(mu_);

  // Flags the ranks that StalledRanks (stall_watch.h) finds stalled at `now` and
  // returns those newly flagged (a flag stays until the rank takes a batch or opens a
  // stream), so that each stall is logged once.
  std::vector<RankProgress> UpdateStalls(absl::Duration stall_warn, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Registered ranks, in rank order.
  std::vector<RankProgress> Progress() const ABSL_LOCKS_EXCLUDED(mu_);

  // True when no rank has registered, opened or closed a stream for `ttl` before `now`
  // (whether one is still open is the stream table's to say).
  bool QuietFor(absl::Duration ttl, absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether any rank ever opened a stream.
  bool EverStreamed() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kPlanCacheSize = 4;

  const Clock* const clock_;
  const std::string id_;
  const JobConfig config_;
  const int64_t batches_per_epoch_;
  const std::string job_fingerprint_;
  const NamedDataset* const dataset_;
  const std::shared_ptr<const JobSamples> samples_;
  const std::shared_ptr<const BatchContent> content_;
  const std::string peer_;
  std::unique_ptr<const JobMixture> mixture_;  // set by the constructor only

  mutable absl::Mutex mu_;
  std::map<int32_t, RankProgress> ranks_ ABSL_GUARDED_BY(mu_);  // registered ranks
  bool ever_streamed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_active_ ABSL_GUARDED_BY(mu_);
  // Most recently used first: (epoch, plan).
  std::list<std::pair<int64_t, std::shared_ptr<const EpochPlan>>> plans_ ABSL_GUARDED_BY(mu_);
  // A mixed job's resumed runs, by their serialized MixtureResume (a few at most).
  std::map<std::string, std::shared_ptr<const MixtureJobPlan>> resumed_ ABSL_GUARDED_BY(mu_);
};

class JobRegistry {
 public:
  // The registry's rules; the flags of the same names (ServerOptions) say what each does.
  struct Options {
    JobConfig defaults;  // what a Register leaves unset
    JobLimits limits;
    // --max-member-bytes: a sample with a requested member above it is left out of the
    // job (0 = no limit).
    int64_t max_member_bytes = 0;
    absl::Duration job_ttl = absl::ZeroDuration();             // zero: jobs never expire
    int max_jobs = 0;                                          // zero: no limit
    absl::Duration unstreamed_job_ttl = absl::ZeroDuration();  // zero: that rule is off
    int max_unstreamed_jobs_per_peer = 0;                      // zero: no limit
    // Times the jobs' activity and their ranks' last batches; must outlive the registry.
    const Clock* clock = Clock::Real();
  };
  // The registry's options as the server's flags set them.
  static Options OptionsFor(const ServerOptions& options);

  // Jobs of every dataset share one registry: job ids are the server's, and
  // --max-jobs counts them all.
  explicit JobRegistry(Options options);
  JobRegistry(const JobRegistry&) = delete;
  JobRegistry& operator=(const JobRegistry&) = delete;

  // Validates the request, fills defaults, creates the job on its first rank or checks
  // that the rank agrees with it (dataset included), and answers with n, shapes and
  // fingerprints. `dataset` is the one the request names (DatasetRegistry::Resolve);
  // `peer` is the client's PeerHost (a new job counts against its per-peer limit).
  // REQUIRES: `dataset` outlives the registry.
  // A new job's samples are selected then (JobSamples::Select): the response's
  // num_samples counts those it serves, left_out the others by reason.
  // Errors: INVALID_ARGUMENT (bad field), FAILED_PRECONDITION (config differs from the
  // job's, naming the field; or the data cannot serve the job, with the planner's or
  // the selection's reason; or a batch of the largest selected samples' members would
  // exceed --max-message-size, with the numbers), RESOURCE_EXHAUSTED (a new job beyond max_jobs, or
  // beyond the peer's max_unstreamed_jobs_per_peer jobs that never streamed; expired jobs are
  // dropped before, by the caller).
  absl::StatusOr<shardcast::v1::RegisterResponse> Register(
      const shardcast::v1::RegisterRequest& request, const NamedDataset* dataset,
      const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a mixed job (RegisterRequest.mix, parsed: `mixture`) over `datasets`,
  // those `mixture.names` names, in that order. A new job's mixture is built then
  // (BuildMixture: its refusals); a rank of an existing job must ask for the same
  // mixture (FAILED_PRECONDITION otherwise). A mixture is dealt as split sample: a
  // request that leaves split unset gets it.
  absl::StatusOr<shardcast::v1::RegisterResponse> RegisterMixture(
      const shardcast::v1::RegisterRequest& request, const MixtureRequest& mixture,
      const std::vector<const NamedDataset*>& datasets, const std::string& peer)
      ABSL_LOCKS_EXCLUDED(mu_);

  // nullptr when no rank has registered job `id`.
  std::shared_ptr<Job> Find(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::shared_ptr<Job>> Jobs() const ABSL_LOCKS_EXCLUDED(mu_);
  // The jobs not expired at `now` (DropExpired would keep them): what status lists,
  // without dropping anything, so that asking for status changes nothing.
  std::vector<std::shared_ptr<Job>> LiveJobs(absl::Time now, HasOpenStream has_open_stream) const
      ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // Drops the jobs idle for the TTL (or for the unstreamed TTL, when none of their
  // ranks ever streamed) and returns them, for the log; a job with a stream open
  // (`has_open_stream`) never expires. The service calls it before every Register (so an expired
  // job's id is free) and from its monitor thread.
  struct Dropped {
    std::string job_id;
    bool never_streamed = false;
  };
  std::vector<Dropped> DropExpired(absl::Time now, HasOpenStream has_open_stream)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Register and RegisterMixture: `mixture` null for a job of one dataset
  // (datasets[0]).
  absl::StatusOr<shardcast::v1::RegisterResponse> RegisterJob(
      const shardcast::v1::RegisterRequest& request, const MixtureRequest* mixture,
      const std::vector<const NamedDataset*>& datasets, const std::string& peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The job `request` registers a rank of: the existing one, its data and config
  // checked against the request's, or a new one (within the peer's and the server's
  // limits) added to the registry.
  absl::StatusOr<std::shared_ptr<Job>> JoinOrAddJob(
      const shardcast::v1::RegisterRequest& request, const MixtureRequest* mixture,
      const std::vector<const NamedDataset*>& datasets, const JobConfig& config,
      const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `job` has expired at `now`; `*never_streamed` says by which TTL.
  bool Expired(const Job& job, absl::Time now, HasOpenStream has_open_stream,
               bool* never_streamed) const;
  // RESOURCE_EXHAUSTED when `peer` already holds max_unstreamed_jobs_per_peer_ jobs none
  // of whose ranks ever opened a stream, so that one host cannot take the whole job
  // table with registrations that never stream.
  absl::Status CheckPeerLimit(const std::string& job_id, const std::string& peer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_JOB_REGISTRY_H_
