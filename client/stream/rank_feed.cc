// RankFeed: RankStream's registration and batches as plain C++ (see rank_feed.h).
#include "client/stream/rank_feed.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/stream/rank_stream.h"
#include "proto/job_config_proto.h"

namespace shardcast::client {
namespace {

v1::RegisterRequest ToRequest(const RankJob& job) {
  v1::RegisterRequest request;
  request.set_job_id(job.job_id);
  request.set_rank(job.rank);
  request.set_world_size(job.world_size);
  request.set_dataset(job.dataset);
  SetRequestOverrides(job.overrides, &request);
  SetRequestMixture(job.mix, job.samples_per_epoch, &request);
  return request;
}

absl::StatusOr<Registration> FromResponse(const v1::RegisterResponse& response) {
  absl::StatusOr<JobConfig> config = ResponseConfig(response);
  if (!config.ok()) return config.status();
  Registration r;
  r.batches_per_epoch = response.batches_per_epoch();
  r.num_samples = response.num_samples();
  r.num_classes = response.num_classes();
  r.class_names.assign(response.class_names().begin(), response.class_names().end());
  r.image_shape.assign(response.image_shape().begin(), response.image_shape().end());
  r.job_fingerprint = response.job_fingerprint();
  r.index_fingerprint = response.index_fingerprint();
  r.shards.assign(response.shards().begin(), response.shards().end());
  r.config = *std::move(config);
  r.dataset = response.dataset();
  r.server_version = response.server_version();
  r.mix = ResponseMixture(response);
  r.samples_per_epoch = response.samples_per_epoch();
  for (const v1::MixDataset& d : response.mix_datasets()) r.mix_datasets.push_back(d.name());
  r.mix_data_fingerprint = response.mix_data_fingerprint();
  return r;
}

v1::MixtureResume ToWire(const MixResume& resume) {
  v1::MixtureResume out;
  if (resume.position == 0) return out;
  out.set_position(resume.position);
  for (size_t i = 0; i < resume.segments.size(); ++i) {
    const MixtureSegment& s = resume.segments[i];
    v1::MixSegment* segment = out.add_segments();
    segment->set_start_position(s.start_position);
    segment->set_start_step(s.start_step);
    segment->set_global_batch(s.global_batch);
    if (i < resume.segment_schedules.size()) {
      MixPointsToWire(resume.segment_schedules[i], segment->mutable_schedule());
    }
  }
  MixPointsToWire(resume.schedule, out.mutable_schedule());
  return out;
}

}  // namespace

int64_t FeedBatch::image_bytes() const { return wire_->image_bytes(); }
const std::vector<absl::Span<const uint8_t>>& FeedBatch::image_chunks() const {
  return wire_->image_chunks();
}
void FeedBatch::CopyImagesTo(uint8_t* out) const { wire_->CopyImagesTo(out); }

absl::StatusOr<std::unique_ptr<RankFeed>> RankFeed::Connect(RankFeedOptions options) {
  RankStreamOptions stream_options;
  static_cast<StreamSettings&>(stream_options) = options;
  stream_options.job = ToRequest(options.job);
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(stream_options);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<Registration> registration = FromResponse((*stream)->registration());
  if (!registration.ok()) {
    return absl::Status(registration.status().code(),
                        absl::StrCat("server ", options.server, ": registration of job '",
                                     options.job.job_id, "': ", registration.status().message()));
  }
  return std::unique_ptr<RankFeed>(
      new RankFeed(std::move(options), *std::move(registration), *std::move(stream)));
}

RankFeed::RankFeed(RankFeedOptions options, Registration registration,
                   std::unique_ptr<RankStream> stream)
    : options_(std::move(options)),
      registration_(std::move(registration)),
      stream_(std::move(stream)) {}
RankFeed::~RankFeed() = default;

absl::Status RankFeed::StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset,
                                  const MixResume& mix_resume) {
  return stream_->StartEpoch(epoch, start_batch, sample_offset, ToWire(mix_resume));
}
int64_t RankFeed::batches_in_epoch() const { return stream_->batches_in_epoch(); }
int64_t RankFeed::reconnects() const { return stream_->reconnects(); }
int64_t RankFeed::client_substituted() const { return stream_->client_substituted(); }

absl::StatusOr<std::optional<FeedBatch>> RankFeed::Next() {
  absl::StatusOr<std::optional<ReceivedBatch>> received = stream_->Next();
  if (!received.ok()) return received.status();
  if (!received->has_value()) return std::optional<FeedBatch>();
  ReceivedBatch wire = **std::move(received);
  // RankStream checked the counts: B labels, B samples, a [B,3,C,C] shape.
  const v1::Batch& header = wire->header();
  FeedBatch out;
  out.epoch_ = header.epoch();
  out.index_ = header.index();
  out.shape_.assign(header.shape().begin(), header.shape().end());
  out.labels_.assign(header.labels().begin(), header.labels().end());
  out.samples_.reserve(header.samples_size());
  for (const v1::SampleInfo& info : header.samples()) {
    out.samples_.push_back(SampleMeta{info.key(), info.shard(), info.index_in_shard(), info.valid(),
                                      info.substituted(), info.dataset()});
  }
  out.wire_ = std::move(wire);
  return std::optional<FeedBatch>(std::move(out));
}

}  // namespace shardcast::client
