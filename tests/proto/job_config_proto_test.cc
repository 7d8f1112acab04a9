// The wire <-> JobConfig mapping: unset fields take the defaults, set ones survive a
// round trip through request and response, and bad values are refused by name.
#include "proto/job_config_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
