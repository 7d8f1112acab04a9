// A job's selection of samples (assembly/job_samples.h) and the assembler serving its
// fields, on a dataset of text-only tars (a caption and metadata, no image, no label).
// The dataset index keeps every sample of such a dataset, with image_member
// kNoImageMember and label -1.
#include "common/plan/job_samples.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/shards/member_reader.h"
#include "server/assembly/batch_assembler.h"
#include "server/assembly/decode_pool.h"
#include "server/assembly/served_dataset.h"
#include "server/base/server_stats.h"
#include "tests/server/server_test_support.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::server_testing {
namespace {

using server::BatchAssembler;
using server::BatchContent;

// key -> ext -> bytes of what was written.
using Written = std::map<std::string, std::map<std::string, std::string>>;

// Samples of a caption each (none for i % 6 == 5) and a .json unless i % 4 == 0
// (never both missing).
Written WriteTextShards(const std::string& dir, int samples, int per_shard) {
  pack::ShardWriterOptions options;
  options.out_dir = dir;
  options.per_shard = per_shard;
  pack::ShardWriter writer(options);
  Written written;
  for (int i = 0; i < samples; ++i) {
    const std::string key = absl::StrFormat("t%03d", i);
    std::vector<pack::SampleField> fields;
    if (i % 6 != 5) fields.emplace_back("txt", absl::StrCat("caption ", i, " \xe6\x96\x87"));
    if (i % 4 != 0) fields.emplace_back("json", absl::StrCat("{\"i\": ", i, "}"));
    for (const auto& [ext, bytes] : fields) written[key][ext] = bytes;
    EXPECT_TRUE(writer.AddSample(key, fields).ok());
  }
  EXPECT_TRUE(writer.Close().ok());
  return written;
}

// The dataset index of `dir`'s shards: none has an image or a label, so every sample
// is kept (kNoImageMember, label -1).
DatasetIndex TextIndex(const std::string& dir) {
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir, IndexOptions());
  EXPECT_TRUE(index.ok()) << index.status();
  if (!index.ok()) return DatasetIndex();
  EXPECT_FALSE(index->has_images);
  EXPECT_FALSE(index->has_labels);
  EXPECT_TRUE(index->skipped.empty());
  return *std::move(index);
}

JobConfig MembersOnly(const std::vector<std::string>& fields) {
  JobConfig config;
  config.image = false;
  config.plan.batch_size = 4;
  config.plan.split = Split::kSample;
  config.plan.remainder = Remainder::kPad;
  absl::StatusOr<std::vector<FieldSpec>> specs = ParseFieldSpecs(fields);
  EXPECT_TRUE(specs.ok()) << specs.status();
  config.fields = *specs;
  return config;
}

class JobSamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    written_ = WriteTextShards(dir_.path(), 30, 12);
    index_ = TextIndex(dir_.path());
  }

  TempDir dir_;
  Written written_;
  DatasetIndex index_;
};

TEST_F(JobSamplesTest, FieldMembersTakeTheFirstAlternativeAskedFor) {
  SampleEntry sample;
  sample.members = {{"png", 0, 1}, {"jpg", 0, 1}, {"seg.png", 0, 1}};
  auto specs = ParseFieldSpecs({"jpg;png", "webp;png", "seg.png", "txt?"});
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ(FieldMembers(sample, *specs), (std::vector<int32_t>{1, 0, 2, -1}));
}

TEST_F(JobSamplesTest, AnImageJobOnADatasetWithoutImagesIsRefused) {
  JobConfig config = MembersOnly({"txt"});
  config.image = true;
  auto selection = JobSamples::Select(index_, config, 0);
  EXPECT_EQ(selection.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(selection.status().message().find("the dataset has no image in any sample"),
            std::string::npos)
      << selection.status();
  EXPECT_NE(selection.status().message().find("image=False"), std::string::npos);
}

TEST_F(JobSamplesTest, SelectsTheSamplesWithTheRequiredFieldsAndMapsThePlanToTheIndex) {
  auto selection = JobSamples::Select(index_, MembersOnly({"txt", "json?"}), 0);
  ASSERT_TRUE(selection.ok()) << selection.status();
  const JobSamples& samples = **selection;
  EXPECT_EQ(samples.num_samples(), 25);  // 5 of 30 have no caption
  ASSERT_EQ(samples.left_out().size(), 1u);
  EXPECT_EQ(samples.left_out()[0].reason, "missing required field 'txt'");
  EXPECT_EQ(samples.left_out()[0].count, 5);
  EXPECT_EQ(samples.shard_sizes(), (std::vector<uint32_t>{10, 10, 5}));
  for (int32_t shard = 0; shard < 3; ++shard) {
    std::set<std::string> keys;
    for (uint32_t i = 0; i < samples.shard_sizes()[shard]; ++i) {
      const int32_t position = samples.IndexPosition(shard, static_cast<int32_t>(i));
      const SampleEntry& entry = index_.shards[shard].samples[position];
      EXPECT_EQ(written_.at(entry.key).count("txt"), 1u) << entry.key;
      keys.insert(entry.key);
    }
    EXPECT_EQ(keys.size(), samples.shard_sizes()[shard]);
  }
  // No fields: every sample, positions unchanged.
  JobConfig plain = MembersOnly({"json?"});
  auto all = JobSamples::Select(index_, plain, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)->num_samples(), 30);
  EXPECT_TRUE((*all)->left_out().empty());
}

TEST_F(JobSamplesTest, ARequiredFieldNoSampleHasIsRefusedWithTheDatasetsExtensions) {
  auto selection = JobSamples::Select(index_, MembersOnly({"cls"}), 0);
  EXPECT_EQ(selection.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(selection.status().message());
  EXPECT_NE(message.find("'cls'"), std::string::npos) << message;
  EXPECT_NE(message.find("txt (25 samples), json (22 samples)"), std::string::npos) << message;
}

TEST_F(JobSamplesTest, AMembersOnlyBatchCarriesTheMembersAndNoImage) {
  auto selection = JobSamples::Select(index_, MembersOnly({"txt", "json?"}), 0);
  ASSERT_TRUE(selection.ok());
  server::ServedDataset dataset(index_);
  server::ServerStats stats{absl::Now()};
  server::DecodePool pool(2);
  BatchAssembler assembler(&dataset, &pool, &stats);
  const JobConfig config = MembersOnly({"txt", "json?"});
  auto content = std::make_shared<const BatchContent>(BatchContent{false, {}, config.fields});
  auto plan = EpochPlan::Create((*selection)->shard_sizes(), config.plan, /*epoch=*/0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto batches = (*selection)->MapToIndex((*plan)->Iterate(0, 0));
  std::multiset<std::string> served;
  PlannedBatch planned;
  while (batches->Next(&planned)) {
    auto batch = assembler.Prepare(planned, *content);
    ASSERT_TRUE(batch.ok());
    absl::Mutex mu;
    bool done = false;
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    assembler.Launch(*batch, planned, content, cancelled, [&](bool complete) {
      EXPECT_TRUE(complete);
      absl::MutexLock lock(&mu);
      done = true;
    });
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&done));
    }
    const v1::Batch& header = (*batch)->header();
    EXPECT_TRUE((*batch)->failure().ok()) << (*batch)->failure();
    EXPECT_EQ((*batch)->image_bytes(), 0u);
    EXPECT_TRUE(header.shape().empty());
    for (int i = 0; i < header.samples_size(); ++i) {
      const v1::SampleInfo& info = header.samples(i);
      EXPECT_EQ(header.labels(i), -1);
      if (!info.valid()) continue;
      served.insert(info.key());
      const auto& members = written_.at(info.key());
      ASSERT_EQ(info.fields_size(), 2);
      EXPECT_EQ(info.fields(0).data(), members.at("txt"));
      EXPECT_EQ(info.fields(1).present(), members.count("json") == 1) << info.key();
      if (members.count("json") == 1) {
        EXPECT_EQ(info.fields(1).data(), members.at("json"));
      }
    }
  }
  EXPECT_EQ(served.size(), 25u);
  for (const auto& [key, members] : written_) EXPECT_EQ(served.count(key), members.count("txt"));
}

TEST_F(JobSamplesTest, ABatchTakesItsPixelsAndItsMembersInBatchMemory) {
  server::ServedDataset dataset(index_);
  server::ServerStats stats{absl::Now()};
  server::DecodePool pool(1);
  BatchAssembler assembler(&dataset, &pool, &stats);
  const JobConfig config = MembersOnly({"txt?", "json?"});
  PlannedBatch planned;
  planned.samples = {SampleRef{0, 4, 1}, SampleRef{0, 5, 2}, SampleRef{}};  // t004, t005, pad
  const int64_t members = static_cast<int64_t>(written_.at("t004").at("txt").size() +
                                               written_.at("t005").at("json").size());
  std::vector<SampleEntry> entries;
  ASSERT_TRUE(assembler.LookUp(planned, &entries).ok());
  EXPECT_EQ(assembler.BatchBytes(planned, BatchContent{false, {}, config.fields}, entries),
            members);
  TransformSpec transform;
  transform.crop = 10;
  EXPECT_EQ(assembler.BatchBytes(planned, BatchContent{true, transform, config.fields}, entries),
            3 * 300 + members);
  EXPECT_EQ(assembler.BatchBytes(planned, BatchContent{true, transform, {}}, entries), 3 * 300);
  // Encoded delivery: no pixels; the images as stored (these samples have none).
  EXPECT_EQ(
      assembler.BatchBytes(
          planned, BatchContent{true, transform, config.fields, ImageDelivery::kEncoded}, entries),
      members);
}

TEST(SentMemberBytesTest, AnEncodedImageCountsAsStoredUnlessOverTheMemberLimit) {
  SampleEntry sample;
  sample.members = {{"jpg", 0, 5000}, {"txt", 5000, 40}, {"cls", 5040, 1}};
  sample.image_member = 0;
  const absl::StatusOr<std::vector<FieldSpec>> txt = ParseFieldSpecs({"txt"});
  ASSERT_TRUE(txt.ok()) << txt.status();
  EXPECT_EQ(SentMemberBytes(sample, *txt, /*encoded_image=*/false, 0), 40u);
  EXPECT_EQ(SentMemberBytes(sample, *txt, /*encoded_image=*/true, 0), 5040u);
  EXPECT_EQ(SentMemberBytes(sample, {}, /*encoded_image=*/true, 5000), 5000u);
  // Over the limit the image is not read (the sample is substituted): nothing sent.
  EXPECT_EQ(SentMemberBytes(sample, *txt, /*encoded_image=*/true, 4999), 40u);
  sample.image_member = kNoImageMember;
  EXPECT_EQ(SentMemberBytes(sample, {}, /*encoded_image=*/true, 0), 0u);
}

TEST(JobSamplesHostileTest, ASampleOfTenThousandMembersServesTheOnesAskedFor) {
  TempDir dir;
  pack::ShardWriterOptions options;
  options.out_dir = dir.path();
  pack::ShardWriter writer(options);
  std::vector<pack::SampleField> many;
  for (int i = 0; i < 10000; ++i) many.emplace_back(absl::StrCat("m", i), absl::StrCat(i));
  many.emplace_back("txt", "the caption");
  ASSERT_TRUE(writer.AddSample("wide", many).ok());
  ASSERT_TRUE(writer.AddSample("narrow", {{"txt", "short"}}).ok());
  ASSERT_TRUE(writer.Close().ok());
  const DatasetIndex index = TextIndex(dir.path());
  ASSERT_EQ(index.shards[0].samples[0].members.size(), 10001u);

  const JobConfig config = MembersOnly({"m9999?", "txt"});
  auto selection = JobSamples::Select(index, config, 0);
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ((*selection)->num_samples(), 2);
  server::ServedDataset dataset(index);
  server::ServerStats stats{absl::Now()};
  server::DecodePool pool(1);
  BatchAssembler assembler(&dataset, &pool, &stats);
  auto content = std::make_shared<const BatchContent>(BatchContent{false, {}, config.fields});
  PlannedBatch planned;
  planned.samples = {SampleRef{0, 0, 1}, SampleRef{0, 1, 2}};
  auto batch = assembler.Prepare(planned, *content);
  ASSERT_TRUE(batch.ok());
  absl::Mutex mu;
  bool done = false;
  assembler.Launch(*batch, planned, content, std::make_shared<std::atomic<bool>>(false), [&](bool) {
    absl::MutexLock lock(&mu);
    done = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  const v1::Batch& header = (*batch)->header();
  ASSERT_TRUE((*batch)->failure().ok()) << (*batch)->failure();
  EXPECT_EQ(header.samples(0).fields(0).data(), "9999");
  EXPECT_EQ(header.samples(0).fields(1).data(), "the caption");
  EXPECT_FALSE(header.samples(1).fields(0).present());
  EXPECT_EQ(header.samples(1).fields(1).data(), "short");
}

// Records what the assembler announces to the read-ahead; reads nothing.
class AnnouncedMembers : public MemberReader {
 public:
  explicit AnnouncedMembers(std::vector<MemberLocation>* announced) : announced_(announced) {}
  absl::StatusOr<std::string> ReadMember(uint32_t, const MemberRef&) override {
    return absl::UnimplementedError("not read here");
  }
  void Prefetch(absl::Span<const MemberLocation> members) override {
    announced_->insert(announced_->end(), members.begin(), members.end());
  }
  bool reads_ahead() const override { return true; }
  std::vector<ChangedShard> ChangedShards() const override { return {}; }
  std::vector<UnreadableShard> UnreadableShards() const override { return {}; }

 private:
  std::vector<MemberLocation>* const announced_;
};

TEST_F(JobSamplesTest, TheReadAheadIsToldOfTheFieldsMembers) {
  std::vector<MemberLocation> announced;
  server::ServedDataset dataset(index_, [&announced](const DatasetIndex&) {
    return std::make_unique<AnnouncedMembers>(&announced);
  });
  server::ServerStats stats{absl::Now()};
  server::DecodePool pool(1);
  BatchAssembler assembler(&dataset, &pool, &stats);
  const JobConfig config = MembersOnly({"json?", "txt"});
  PlannedBatch planned;
  // t004 has a caption and no .json; t005 the reverse; then padding.
  planned.samples = {SampleRef{0, 4, 1}, SampleRef{0, 5, 2}, SampleRef{}};
  assembler.Prefetch(planned, BatchContent{false, {}, config.fields});
  std::vector<std::string> got;
  for (const MemberLocation& location : announced) {
    const auto& members = index_.shards[location.shard].samples;
    for (const SampleEntry& entry : members) {
      for (const MemberRef& member : entry.members) {
        if (member.offset == location.member.offset) {
          got.push_back(absl::StrCat(entry.key, ".", member.ext, ":", member.size));
        }
      }
    }
  }
  EXPECT_EQ(got, (std::vector<std::string>{
                     absl::StrCat("t004.txt:", written_.at("t004").at("txt").size()),
                     absl::StrCat("t005.json:", written_.at("t005").at("json").size()),
                 }));
}

TEST_F(JobSamplesTest, AMemberTheShardDoesNotHoldFailsTheBatchNamingIt) {
  // The index says the caption of t001 runs past the end of the shard: no caption can
  // stand in for it, so the batch fails (DATA_LOSS) naming the shard, key and field.
  DatasetIndex broken = index_;
  SampleEntry& entry = broken.shards[0].samples[1];
  ASSERT_EQ(entry.members[0].ext, "txt");
  entry.members[0].offset = broken.shards[0].file_size;
  server::ServedDataset dataset(broken);
  server::ServerStats stats{absl::Now()};
  server::DecodePool pool(1);
  BatchAssembler assembler(&dataset, &pool, &stats);
  const JobConfig config = MembersOnly({"txt"});
  auto content = std::make_shared<const BatchContent>(BatchContent{false, {}, config.fields});
  PlannedBatch planned;
  planned.samples = {SampleRef{0, 0, 1}, SampleRef{0, 1, 2}};
  auto batch = assembler.Prepare(planned, *content);
  ASSERT_TRUE(batch.ok());
  absl::Mutex mu;
  bool done = false;
  assembler.Launch(*batch, planned, content, std::make_shared<std::atomic<bool>>(false), [&](bool) {
    absl::MutexLock lock(&mu);
    done = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  const absl::Status& failure = (*batch)->failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kDataLoss) << failure;
  EXPECT_NE(failure.message().find("field 'txt' of sample 't001' in shard shard-000000.tar"),
            std::string::npos)
      << failure;
}

}  // namespace
}  // namespace shardcast::server_testing
