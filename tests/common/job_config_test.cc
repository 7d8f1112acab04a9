// The job config module: names, overrides, every limit, the difference check and
// the job fingerprint (what it covers and what it leaves to be compared apart).
#include "common/plan/job_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/plan/job_fingerprint.h"
namespace shardcast {
namespace {

using ::testing::HasSubstr;

TEST(JobConfigNames, EveryNameParsesBackToItsValue) {
  for (const std::string& name : SplitNames()) EXPECT_EQ(SplitName(*ParseSplit(name)), name);
  for (const std::string& name : RemainderNames()) {
    EXPECT_EQ(RemainderName(*ParseRemainder(name)), name);
  }
  for (const std::string& name : TransformModeNames()) {
    EXPECT_EQ(TransformModeName(*ParseTransformMode(name)), name);
  }
  EXPECT_EQ(SplitNames(), (std::vector<std::string>{"shard", "sample"}));
  EXPECT_EQ(*ParseTransformMode("random"), TransformMode::kRandom);
  absl::StatusOr<Split> bad = ParseSplit("node");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'node': expected shard or sample"));
  EXPECT_FALSE(ParseRemainder("").ok());
  EXPECT_FALSE(ParseTransformMode("Center").ok());
}

// Each enumerator has a name of its own that parses back to it; the lists of names
// follow the enumerators one for one (they come from the same switches).
template <typename Enum>
void ExpectEveryEnumeratorNamed(const std::vector<Enum>& all, const std::vector<std::string>& names,
                                const char* (*name)(Enum),
                                absl::StatusOr<Enum> (*parse)(absl::string_view)) {
  ASSERT_EQ(all.size(), names.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(static_cast<size_t>(all[i]), i);  // in enum order, from 0
    EXPECT_EQ(name(all[i]), names[i]);
    EXPECT_TRUE(seen.insert(names[i]).second) << "two enumerators share a name";
    absl::StatusOr<Enum> parsed = parse(names[i]);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(*parsed == all[i]);
  }
  // Past the last enumerator: no name to parse, and "unknown" in logs.
  EXPECT_STREQ(name(static_cast<Enum>(all.size())), "unknown");
  EXPECT_FALSE(parse("unknown").ok());
}

TEST(JobConfigNames, EveryEnumeratorHasANameThatParsesBack) {
  ExpectEveryEnumeratorNamed(AllSplits(), SplitNames(), &SplitName, &ParseSplit);
  ExpectEveryEnumeratorNamed(AllRemainders(), RemainderNames(), &RemainderName, &ParseRemainder);
  ExpectEveryEnumeratorNamed(AllTransformModes(), TransformModeNames(), &TransformModeName,
                             &ParseTransformMode);
  EXPECT_EQ(AllSplits(), (std::vector<Split>{Split::kShard, Split::kSample}));
  EXPECT_EQ(AllRemainders(), (std::vector<Remainder>{Remainder::kDrop, Remainder::kPad}));
  EXPECT_EQ(AllTransformModes(),
            (std::vector<TransformMode>{TransformMode::kCenter, TransformMode::kRandom}));
}

TEST(JobConfigOverrides, OnlySetFieldsReplaceTheBase) {
  JobConfig base;
  base.plan.batch_size = 32;
  base.transform.resize = 256;
  JobOverrides o;
  EXPECT_EQ(JobConfigString(ApplyOverrides(o, base)), JobConfigString(base));
  o.batch_size = 8;
  o.split = Split::kSample;
  o.seed = 7;
  o.shuffle_shards = false;
  o.transform_mode = TransformMode::kRandom;
  o.crop = 96;
  const JobConfig c = ApplyOverrides(o, base);
  EXPECT_EQ(c.plan.batch_size, 8);
  EXPECT_EQ(c.plan.split, Split::kSample);
  EXPECT_EQ(c.plan.seed, 7u);
  EXPECT_EQ(c.transform.mode, TransformMode::kRandom);
  EXPECT_EQ(c.transform.crop, 96);
  EXPECT_EQ(c.transform.resize, 256);  // not overridden
  EXPECT_EQ(c.plan.remainder, base.plan.remainder);
}

JobConfig Valid() {
  JobConfig c;
  c.plan.world_size = 4;
  c.plan.batch_size = 32;
  return c;  // center 256/224
}

TEST(JobConfigValidate, EveryLimitIsCheckedAndNamed) {
  EXPECT_TRUE(Validate(Valid()).ok());
  struct Case {
    const char* field;
    std::function<void(JobConfig&)> change;
  };
  const std::vector<Case> cases = {
      {"world_size", [](JobConfig& c) { c.plan.world_size = 0; }},
      {"world_size", [](JobConfig& c) { c.plan.world_size = kMaxWorldSize + 1; }},
      {"batch_size", [](JobConfig& c) { c.plan.batch_size = 0; }},
      {"batch_size", [](JobConfig& c) { c.plan.batch_size = kMaxBatchSize + 1; }},
      {"workers", [](JobConfig& c) { c.plan.workers = 0; }},
      {"workers", [](JobConfig& c) { c.plan.workers = kMaxWorkers + 1; }},
      {"shuffle_buffer", [](JobConfig& c) { c.plan.shuffle_buffer = -1; }},
      {"shuffle_buffer", [](JobConfig& c) { c.plan.shuffle_buffer = kMaxShuffleBuffer + 1; }},
      {"block_size", [](JobConfig& c) { c.plan.block_size = -1; }},
      {"transform.crop", [](JobConfig& c) { c.transform.crop = 0; }},
      {"transform.crop",
       [](JobConfig& c) {
         c.transform.crop = kMaxCrop + 1;
         c.transform.resize = kMaxCrop + 1;
       }},
      // The bug this module fixes: a center job with resize 20000 was accepted at
      // Register, then every sample failed the transform and was served grey.
      {"transform.resize", [](JobConfig& c) { c.transform.resize = 20000; }},
      {"transform.resize", [](JobConfig& c) { c.transform.resize = 0; }},
      {"transform.resize",  // center: the short side cannot be below the crop
       [](JobConfig& c) {
         c.transform.resize = 200;
         c.transform.crop = 224;
       }},
      {"max message size",
       [](JobConfig& c) {
         c.plan.batch_size = 4000;
         c.transform.crop = 1024;
         c.transform.resize = 1024;
       }},
  };
  for (const Case& c : cases) {
    JobConfig config = Valid();
    c.change(config);
    absl::Status status = Validate(config);
    SCOPED_TRACE(JobConfigString(config));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(c.field));
  }
  // Random mode takes no resize, but an out-of-range one is still refused; a resize
  // below the crop is fine there.
  JobConfig random = Valid();
  random.transform.mode = TransformMode::kRandom;
  random.transform.resize = 16;
  EXPECT_TRUE(Validate(random).ok());
  // The message limit is the server's.
  JobConfig big = Valid();
  EXPECT_TRUE(Validate(big, JobLimits{BatchMessageBytes(big)}).ok());
  EXPECT_FALSE(Validate(big, JobLimits{BatchMessageBytes(big) - 1}).ok());
}

TEST(JobConfigFingerprint, CoversDataPlanAndTransformButNotWorldOrBatch) {
  const JobConfig base = Valid();
  const std::string fp = JobFingerprint("index-a", base);
  EXPECT_EQ(fp.size(), 32u);
  // Pinned: ranks, replicas and checkpoints compare it across builds and machines.
  EXPECT_EQ(fp, JobFingerprint("index-a", Valid()));
  // kTransformVersion 2, DCT scaling off, kSubstitutionVersion 2, no serve settings.
  EXPECT_EQ(fp, "a407be5d8bd17826347d8ad52b41c644");
  EXPECT_NE(fp, JobFingerprint("index-b", base));

  // World and batch size are compared apart from it.
  JobConfig other_shape = base;
  other_shape.plan.world_size = 3;
  other_shape.plan.batch_size = 7;
  EXPECT_EQ(JobFingerprint("index-a", other_shape), fp);

  // Every setting that changes samples or bytes changes it (the second bug: a server
  // restarted with another default resize resumed trainers onto other pixels).
  const std::vector<std::function<void(JobConfig&)>> changes = {
      [](JobConfig& c) { c.plan.split = Split::kSample; },
      [](JobConfig& c) {
        c.plan.split = Split::kSample;
        c.plan.remainder = Remainder::kPad;
      },
      [](JobConfig& c) { c.plan.workers = 2; },
      [](JobConfig& c) {
        c.plan.shuffle_shards = true;
        c.plan.seed = 1;
      },
      [](JobConfig& c) { c.plan.shuffle_buffer = 100; },
      [](JobConfig& c) { c.transform.mode = TransformMode::kRandom; },
      [](JobConfig& c) { c.transform.resize = 288; },
      [](JobConfig& c) { c.transform.crop = 192; },
      [](JobConfig& c) { c.transform.dct_scaling = true; },
      [](JobConfig& c) { c.fields = *ParseFieldSpecList("txt"); },
      [](JobConfig& c) { c.fields = *ParseFieldSpecList("txt?"); },
      [](JobConfig& c) { c.fields = *ParseFieldSpecList("txt,json"); },
      [](JobConfig& c) { c.fields = *ParseFieldSpecList("json,txt"); },
      [](JobConfig& c) {
        c.image = false;
        c.fields = *ParseFieldSpecList("txt");
      },
      [](JobConfig& c) { c.delivery = ImageDelivery::kEncoded; },
  };
  std::set<std::string> seen = {fp};
  for (size_t i = 0; i < changes.size(); ++i) {
    JobConfig c = base;
    changes[i](c);
    EXPECT_TRUE(seen.insert(JobFingerprint("index-a", c)).second) << "change " << i;
  }

  // Settings that cannot change the batches are normalized away: the seed of an
  // unshuffled shard split, and resize in random mode.
  JobConfig seeded = base;
  seeded.plan.seed = 99;
  EXPECT_EQ(JobFingerprint("index-a", seeded), fp);
  JobConfig random_a = base;
  random_a.transform.mode = TransformMode::kRandom;
  JobConfig random_b = random_a;
  random_b.transform.resize = 512;
  EXPECT_EQ(JobFingerprint("index-a", random_a), JobFingerprint("index-a", random_b));
}

// Issue 35: the server settings that change a batch's bytes outside the job config
// (which images are substituted, the benchmark resend mode) are in the fingerprint, so
// replicas run with other values have other fingerprints.
TEST(JobConfigFingerprint, CoversTheServersByteChangingSettings) {
  const JobConfig base = Valid();
  ServeSettings serve;
  serve.max_pixels = 178956970;
  const std::string fp = JobFingerprint("index-a", base, serve);
  EXPECT_EQ(fp, JobFingerprint("index-a", base, serve));
  const std::vector<std::function<void(ServeSettings&)>> changes = {
      [](ServeSettings& s) { s.max_member_bytes = 100; },
      [](ServeSettings& s) { s.max_member_bytes = 200; },
      [](ServeSettings& s) { s.max_decode_bytes = 1 << 20; },
      [](ServeSettings& s) { s.max_pixels = 1000; },
      [](ServeSettings& s) { s.resend_first_batch = true; },
  };
  std::set<std::string> seen = {fp, JobFingerprint("index-a", base)};
  for (size_t i = 0; i < changes.size(); ++i) {
    ServeSettings changed = serve;
    changes[i](changed);
    EXPECT_TRUE(seen.insert(JobFingerprint("index-a", base, changed)).second) << "change " << i;
  }
  EXPECT_EQ(ServeSettingsString(serve),
            "max_member_bytes=0 max_decode_bytes=0 max_pixels=178956970 resend_first_batch=false");
}

TEST(JobConfigDifference, NamesTheFirstDifferingField) {
  const JobConfig a = Valid();
  EXPECT_FALSE(FirstDifference(a, a).has_value());
  JobConfig b = a;
  b.transform.crop = 160;
  std::optional<ConfigDifference> diff = FirstDifference(a, b);
  ASSERT_TRUE(diff.has_value());
  EXPECT_EQ(diff->field, "transform.crop");
  EXPECT_EQ(diff->a, "224");
  EXPECT_EQ(diff->b, "160");
  b.plan.split = Split::kSample;
  diff = FirstDifference(a, b);
  ASSERT_TRUE(diff.has_value());
  EXPECT_EQ(diff->field, "split");
  EXPECT_EQ(diff->b, "sample");
  EXPECT_EQ(
      JobConfigString(a),
      "world_size=4 batch_size=32 split=shard remainder=drop workers=1 seed=0 "
      "shuffle_shards=false shuffle_buffer=0 block_size=0 transform.mode=center "
      "transform.resize=256 transform.crop=224 transform.dct_scaling=false image=true fields= "
      "delivery=server");
}

}  // namespace
}  // namespace shardcast
