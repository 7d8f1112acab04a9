// Wire <-> JobConfig (see job_config_proto.h).
#include "proto/job_config_proto.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

namespace v1 = ::shardcast::v1;

// Wire -> C++. Every value of the wire's enum has its case and there is no default, so
// -Wswitch flags a value added to the proto and not mapped here. Unspecified is "the
// server's default"; protobuf's range sentinels are no values, and a number this build
// does not know (proto3 enums are open) falls out of the switch into the error.
absl::StatusOr<std::optional<Split>> FromProto(v1::Split split) {
  switch (split) {
    case v1::SPLIT_UNSPECIFIED:
      return std::optional<Split>();
    case v1::SPLIT_SHARD:
      return Split::kShard;
    case v1::SPLIT_SAMPLE:
      return Split::kSample;
    case v1::Split_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::Split_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("split: unknown value ", split));
}

absl::StatusOr<std::optional<Remainder>> FromProto(v1::Remainder remainder) {
  switch (remainder) {
    case v1::REMAINDER_UNSPECIFIED:
      return std::optional<Remainder>();
    case v1::REMAINDER_DROP:
      return Remainder::kDrop;
    case v1::REMAINDER_PAD:
      return Remainder::kPad;
    case v1::Remainder_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::Remainder_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("remainder: unknown value ", remainder));
}

absl::StatusOr<std::optional<TransformMode>> FromProto(v1::TransformMode mode) {
  switch (mode) {
    case v1::TRANSFORM_MODE_UNSPECIFIED:
      return std::optional<TransformMode>();
    case v1::TRANSFORM_MODE_CENTER:
      return TransformMode::kCenter;
    case v1::TRANSFORM_MODE_RANDOM:
      return TransformMode::kRandom;
    case v1::TransformMode_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::TransformMode_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("transform.mode: unknown value ", mode));
}

absl::StatusOr<std::optional<ImageDelivery>> FromProto(v1::ImageDelivery delivery) {
  switch (delivery) {
    case v1::IMAGE_DELIVERY_UNSPECIFIED:
      return std::optional<ImageDelivery>();
    case v1::IMAGE_DELIVERY_SERVER:
      return ImageDelivery::kServer;
    case v1::IMAGE_DELIVERY_ENCODED:
      return ImageDelivery::kEncoded;
    case v1::ImageDelivery_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ImageDelivery_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("delivery: unknown value ", delivery));
}

// Zero means "the server's default" for these fields; negative is an error.
absl::Status PositiveOrUnset(const char* field, int32_t value, std::optional<int32_t>* out) {
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be >= 0 (0 = server default), got ", value));
  }
  if (value > 0) *out = value;
  return absl::OkStatus();
}

}  // namespace

// C++ -> wire, exhaustive for -Wswitch as above. Only a value cast from outside the
// C++ enum gets past a switch: it goes out as UNSPECIFIED, which claims nothing (a
// RegisterResponse with it is refused by ResponseConfig).
v1::Split ToProto(Split split) {
  switch (split) {
    case Split::kShard:
      return v1::SPLIT_SHARD;
    case Split::kSample:
      return v1::SPLIT_SAMPLE;
  }
  return v1::SPLIT_UNSPECIFIED;
}
v1::Remainder ToProto(Remainder remainder) {
  switch (remainder) {
    case Remainder::kDrop:
      return v1::REMAINDER_DROP;
    case Remainder::kPad:
      return v1::REMAINDER_PAD;
  }
  return v1::REMAINDER_UNSPECIFIED;
}
v1::TransformMode ToProto(TransformMode mode) {
  switch (mode) {
    case TransformMode::kCenter:
      return v1::TRANSFORM_MODE_CENTER;
    case TransformMode::kRandom:
      return v1::TRANSFORM_MODE_RANDOM;
  }
  return v1::TRANSFORM_MODE_UNSPECIFIED;
}
v1::ImageDelivery ToProto(ImageDelivery delivery) {
  switch (delivery) {
    case ImageDelivery::kServer:
      return v1::IMAGE_DELIVERY_SERVER;
    case ImageDelivery::kEncoded:
      return v1::IMAGE_DELIVERY_ENCODED;
  }
  return v1::IMAGE_DELIVERY_UNSPECIFIED;
}

absl::StatusOr<JobOverrides> OverridesFromRequest(const v1::RegisterRequest& r) {
  JobOverrides o;
  for (absl::Status status : {
           PositiveOrUnset("batch_size", r.batch_size(), &o.batch_size),
           PositiveOrUnset("workers", r.workers(), &o.workers),
           PositiveOrUnset("transform.resize", r.transform().resize(), &o.resize),
           PositiveOrUnset("transform.crop", r.transform().crop(), &o.crop),
       }) {
    if (!status.ok()) return status;
  }
  absl::StatusOr<std::optional<Split>> split = FromProto(r.split());
  if (!split.ok()) return split.status();
  o.split = *split;
  absl::StatusOr<std::optional<Remainder>> remainder = FromProto(r.remainder());
  if (!remainder.ok()) return remainder.status();
  o.remainder = *remainder;
  absl::StatusOr<std::optional<TransformMode>> mode = FromProto(r.transform().mode());
  if (!mode.ok()) return mode.status();
  o.transform_mode = *mode;
  absl::StatusOr<std::optional<ImageDelivery>> delivery = FromProto(r.delivery());
  if (!delivery.ok()) return delivery.status();
  o.delivery = *delivery;
  if (r.has_seed()) o.seed = r.seed();
  if (r.has_shuffle_shards()) o.shuffle_shards = r.shuffle_shards();
  if (r.has_shuffle_buffer()) o.shuffle_buffer = r.shuffle_buffer();
  if (r.has_block_size()) o.block_size = r.block_size();
  if (r.has_image()) o.image = r.image();
  if (r.fields_size() > 0) {
    absl::StatusOr<std::vector<FieldSpec>> fields =
        ParseFieldSpecs({r.fields().begin(), r.fields().end()});
    if (!fields.ok()) return fields.status();
    o.fields = *std::move(fields);
  }
  return o;
}

void SetRequestOverrides(const JobOverrides& o, v1::RegisterRequest* r) {
  if (o.batch_size) r->set_batch_size(*o.batch_size);
  if (o.split) r->set_split(ToProto(*o.split));
  if (o.remainder) r->set_remainder(ToProto(*o.remainder));
  if (o.workers) r->set_workers(*o.workers);
  if (o.seed) r->set_seed(*o.seed);
  if (o.shuffle_shards) r->set_shuffle_shards(*o.shuffle_shards);
  if (o.shuffle_buffer) r->set_shuffle_buffer(*o.shuffle_buffer);
  if (o.block_size) r->set_block_size(*o.block_size);
  if (o.transform_mode) r->mutable_transform()->set_mode(ToProto(*o.transform_mode));
  if (o.resize) r->mutable_transform()->set_resize(*o.resize);
  if (o.crop) r->mutable_transform()->set_crop(*o.crop);
  if (o.image) r->set_image(*o.image);
  if (o.delivery) r->set_delivery(ToProto(*o.delivery));
  if (o.fields) {
    for (const FieldSpec& field : *o.fields) r->add_fields(field.ToString());
  }
}

absl::StatusOr<JobConfig> EffectiveJobConfig(const v1::RegisterRequest& request,
                                             const JobConfig& defaults, const JobLimits& limits) {
  absl::StatusOr<JobOverrides> overrides = OverridesFromRequest(request);
  if (!overrides.ok()) return overrides.status();
  JobConfig config = ApplyOverrides(*overrides, defaults);
  // The server's default delivery is for jobs with images: a members-only job that
  // leaves it unset is not refused for a setting it cannot use.
  if (!config.image && !overrides->delivery) config.delivery = ImageDelivery::kServer;
  config.plan.world_size = request.world_size();
  absl::Status valid = Validate(config, limits);
  if (!valid.ok()) return valid;
  return config;
}

void SetResponseConfig(const JobConfig& config, v1::RegisterResponse* response) {
  const PlanConfig& p = config.plan;
  const TransformSpec& t = config.transform;
  response->set_world_size(p.world_size);
  response->set_batch_size(p.batch_size);
  response->set_split(ToProto(p.split));
  response->set_remainder(ToProto(p.remainder));
  response->set_workers(p.workers);
  response->set_seed(p.seed);
  response->set_shuffle_shards(p.shuffle_shards);
  response->set_shuffle_buffer(p.shuffle_buffer);
  response->set_block_size(p.block_size);
  response->mutable_transform()->set_mode(ToProto(t.mode));
  response->mutable_transform()->set_resize(t.resize);
  response->mutable_transform()->set_crop(t.crop);
  response->mutable_transform()->set_dct_scaling(t.dct_scaling);
  response->set_image(config.image);
  response->set_delivery(ToProto(config.delivery));
  for (const FieldSpec& field : config.fields) response->add_fields(field.ToString());
}

absl::StatusOr<JobConfig> ResponseConfig(const v1::RegisterResponse& response) {
  JobConfig config;
  PlanConfig& p = config.plan;
  TransformSpec& t = config.transform;
  absl::StatusOr<std::optional<Split>> split = FromProto(response.split());
  absl::StatusOr<std::optional<Remainder>> remainder = FromProto(response.remainder());
  absl::StatusOr<std::optional<TransformMode>> mode = FromProto(response.transform().mode());
  absl::StatusOr<std::optional<ImageDelivery>> delivery = FromProto(response.delivery());
  for (const absl::Status& status :
       {split.status(), remainder.status(), mode.status(), delivery.status()}) {
    if (!status.ok()) return status;
  }
  if (!split->has_value() || !remainder->has_value() || !mode->has_value()) {
    return absl::InvalidArgumentError(
        "the server's RegisterResponse leaves split, remainder or transform.mode unset");
  }
  p.world_size = response.world_size();
  p.batch_size = response.batch_size();
  p.split = **split;
  p.remainder = **remainder;
  p.workers = response.workers();
  p.seed = response.seed();
  p.shuffle_shards = response.shuffle_shards();
  p.shuffle_buffer = response.shuffle_buffer();
  p.block_size = response.block_size();
  t.mode = **mode;
  t.resize = response.transform().resize();
  t.crop = response.transform().crop();
  t.dct_scaling = response.transform().dct_scaling();
  config.image = response.image();
  // A server older than delivery modes leaves it unset: it decodes on the server.
  config.delivery = delivery->value_or(ImageDelivery::kServer);
  absl::StatusOr<std::vector<FieldSpec>> fields =
      ParseFieldSpecs({response.fields().begin(), response.fields().end()});
  if (!fields.ok()) return fields.status();
  config.fields = *std::move(fields);
  return config;
}

void MixPointsToWire(const std::vector<MixturePoint>& points,
                     google::protobuf::RepeatedPtrField<v1::MixPoint>* out) {
  for (const MixturePoint& point : points) {
    v1::MixPoint* p = out->Add();
    p->set_step(point.step);
    for (const auto& [name, weight] : point.weights) {
      v1::MixWeight* w = p->add_weights();
      w->set_dataset(name);
      w->set_weight(weight);
    }
  }
}

void SetRequestMixture(const std::vector<MixturePoint>& points, uint64_t samples_per_epoch,
                       v1::RegisterRequest* request) {
  if (points.empty()) return;
  MixPointsToWire(points, request->mutable_mix());
  request->set_samples_per_epoch(samples_per_epoch);
}

std::vector<MixturePoint> ResponseMixture(const v1::RegisterResponse& response) {
  std::vector<MixturePoint> points;
  for (const v1::MixPoint& point : response.mix()) {
    MixturePoint out;
    out.step = point.step();
    for (const v1::MixWeight& w : point.weights())
      out.weights.emplace_back(w.dataset(), w.weight());
    points.push_back(std::move(out));
  }
  return points;
}

}  // namespace shardcast
