// The wire <-> JobConfig mapping: unset fields take the defaults, set ones survive a
// round trip through request and response, and bad values are refused by name.
#include "proto/job_config_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "google/protobuf/descriptor.h"

namespace shardcast {
namespace {

namespace v1 = ::shardcast::v1;
using ::testing::HasSubstr;

JobConfig Defaults() {
  JobConfig d;
  d.plan.batch_size = 32;
  d.plan.seed = 5;
  return d;
}

TEST(JobConfigProto, UnsetFieldsTakeTheDefaults) {
  v1::RegisterRequest request;
  request.set_world_size(2);
  absl::StatusOr<JobConfig> config = EffectiveJobConfig(request, Defaults(), JobLimits());
  ASSERT_TRUE(config.ok()) << config.status();
  JobConfig want = Defaults();
  want.plan.world_size = 2;
  EXPECT_EQ(JobConfigString(*config), JobConfigString(want));
}

// A server whose default delivery is encoded serves a members-only job that leaves
// delivery unset (it has no image to deliver) and refuses one that asks for encoded.
TEST(JobConfigProto, TheDefaultDeliveryAppliesToJobsWithImagesOnly) {
  JobConfig defaults = Defaults();
  defaults.delivery = ImageDelivery::kEncoded;
  v1::RegisterRequest request;
  request.set_world_size(1);
  absl::StatusOr<JobConfig> config = EffectiveJobConfig(request, defaults, JobLimits());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->delivery, ImageDelivery::kEncoded);
  request.set_image(false);
  request.add_fields("txt");
  config = EffectiveJobConfig(request, defaults, JobLimits());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->delivery, ImageDelivery::kServer);
  request.set_delivery(v1::IMAGE_DELIVERY_ENCODED);
  config = EffectiveJobConfig(request, defaults, JobLimits());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("delivery"), std::string::npos) << config.status();
}

TEST(JobConfigProto, OverridesRoundTripThroughRequestAndResponse) {
  JobOverrides o;
  o.batch_size = 8;
  o.split = Split::kSample;
  o.remainder = Remainder::kPad;
  o.workers = 3;
  o.seed = 0;  // set to zero: explicit, not "unset"
  o.shuffle_shards = true;
  o.shuffle_buffer = 0;
  o.block_size = 4;
  o.transform_mode = TransformMode::kRandom;
  o.resize = 80;
  o.crop = 64;
  v1::RegisterRequest request;
  request.set_world_size(3);
  SetRequestOverrides(o, &request);
  absl::StatusOr<JobOverrides> back = OverridesFromRequest(request);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(JobConfigString(ApplyOverrides(*back, Defaults())),
            JobConfigString(ApplyOverrides(o, Defaults())));

  absl::StatusOr<JobConfig> config = EffectiveJobConfig(request, Defaults(), JobLimits());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->plan.seed, 0u);  // the request's explicit 0 beat the default 5
  v1::RegisterResponse response;
  SetResponseConfig(*config, &response);
  absl::StatusOr<JobConfig> read = ResponseConfig(response);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(JobConfigString(*read), JobConfigString(*config));
}

// Every C++ enumerator (as job_config.cc lists them) goes out as a wire value of its
// own (not UNSPECIFIED, not one another enumerator took: what a ternary does to a third
// value) and comes back as itself; and every value the wire's descriptor names, but
// UNSPECIFIED, comes in as an enumerator that goes out as that value.
template <typename Enum, typename Wire>
void ExpectEveryValueRoundTrips(const std::vector<Enum>& all,
                                const google::protobuf::EnumDescriptor* wire,
                                const std::function<void(Wire, v1::RegisterRequest*)>& set,
                                const std::function<std::optional<Enum>(const JobOverrides&)>& get,
                                const char* (*name)(Enum)) {
  SCOPED_TRACE(wire->full_name());
  std::set<int> sent;
  for (Enum value : all) {
    SCOPED_TRACE(name(value));
    const Wire out = ToProto(value);
    EXPECT_NE(out, 0) << "mapped to UNSPECIFIED";
    EXPECT_NE(wire->FindValueByNumber(out), nullptr) << "mapped to " << out << ", not on the wire";
    EXPECT_TRUE(sent.insert(out).second) << "mapped to " << out << " as another enumerator was";
    v1::RegisterRequest request;
    set(out, &request);
    absl::StatusOr<JobOverrides> back = OverridesFromRequest(request);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(get(*back) == value) << "came back as " << static_cast<int>(*get(*back));
  }
  EXPECT_EQ(static_cast<size_t>(wire->value_count() - 1), all.size())
      << "the wire and the C++ enum have different values";
  for (int i = 0; i < wire->value_count(); ++i) {
    const int number = wire->value(i)->number();
    if (number == 0) continue;
    SCOPED_TRACE(wire->value(i)->name());
    v1::RegisterRequest request;
    set(static_cast<Wire>(number), &request);
    absl::StatusOr<JobOverrides> in = OverridesFromRequest(request);
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_TRUE(get(*in).has_value());
    EXPECT_EQ(ToProto(*get(*in)), number);
  }
}

TEST(JobConfigProto, EveryEnumValueRoundTripsThroughTheWire) {
  ExpectEveryValueRoundTrips<Split, v1::Split>(
      AllSplits(), v1::Split_descriptor(),
      [](v1::Split v, v1::RegisterRequest* r) { r->set_split(v); },
      [](const JobOverrides& o) { return o.split; }, &SplitName);
  ExpectEveryValueRoundTrips<Remainder, v1::Remainder>(
      AllRemainders(), v1::Remainder_descriptor(),
      [](v1::Remainder v, v1::RegisterRequest* r) { r->set_remainder(v); },
      [](const JobOverrides& o) { return o.remainder; }, &RemainderName);
  ExpectEveryValueRoundTrips<TransformMode, v1::TransformMode>(
      AllTransformModes(), v1::TransformMode_descriptor(),
      [](v1::TransformMode v, v1::RegisterRequest* r) { r->mutable_transform()->set_mode(v); },
      [](const JobOverrides& o) { return o.transform_mode; }, &TransformModeName);
}

TEST(JobConfigProto, UnspecifiedIsTheDefaultAndUnknownNumbersAreRefused) {
  v1::RegisterRequest request;  // every enum UNSPECIFIED
  absl::StatusOr<JobOverrides> unset = OverridesFromRequest(request);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->split.has_value());
  EXPECT_FALSE(unset->remainder.has_value());
  EXPECT_FALSE(unset->transform_mode.has_value());
  request.set_remainder(static_cast<v1::Remainder>(3));
  EXPECT_THAT(OverridesFromRequest(request).status().message(),
              HasSubstr("remainder: unknown value 3"));
  request.set_remainder(v1::REMAINDER_UNSPECIFIED);
  request.mutable_transform()->set_mode(static_cast<v1::TransformMode>(-1));
  EXPECT_THAT(OverridesFromRequest(request).status().message(),
              HasSubstr("transform.mode: unknown value -1"));
  request.mutable_transform()->set_mode(v1::TRANSFORM_MODE_UNSPECIFIED);
  request.set_delivery(static_cast<v1::ImageDelivery>(9));
  EXPECT_THAT(OverridesFromRequest(request).status().message(),
              HasSubstr("delivery: unknown value 9"));

  // A server's answer with a delivery this build does not know is no config.
  v1::RegisterResponse response;
  SetResponseConfig(Defaults(), &response);
  ASSERT_TRUE(ResponseConfig(response).ok());
  response.set_delivery(static_cast<v1::ImageDelivery>(9));
  EXPECT_THAT(ResponseConfig(response).status().message(), HasSubstr("delivery: unknown value 9"));
}

TEST(JobConfigProto, BadValuesAreRefusedByName) {
  v1::RegisterRequest request;
  request.set_world_size(1);
  request.set_split(static_cast<v1::Split>(7));
  absl::StatusOr<JobConfig> config = EffectiveJobConfig(request, Defaults(), JobLimits());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("split: unknown value 7"));

  request.set_split(v1::SPLIT_SAMPLE);
  request.mutable_transform()->set_crop(-4);
  config = EffectiveJobConfig(request, Defaults(), JobLimits());
  EXPECT_THAT(config.status().message(), HasSubstr("transform.crop: must be >= 0"));

  // Limits come from Validate: a center resize of 20000 is refused up front.
  request.mutable_transform()->set_crop(0);
  request.mutable_transform()->set_resize(20000);
  config = EffectiveJobConfig(request, Defaults(), JobLimits());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("transform.resize: 20000 is outside"));

  EXPECT_FALSE(ResponseConfig(v1::RegisterResponse()).ok());  // enums unset
}

}  // namespace
}  // namespace shardcast
